package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// The host agreement's faults of issue 29, one case each, over real
// connections: a deployer reaches the host by a link of its own
// (sshtest.Link), which the test stalls at a step of its deploy.

// through is n reaching its host through link.
func through(n deploy.Target, link *sshtest.Link) deploy.Target {
	n.SSHOpts = []string{"Port=" + strconv.Itoa(link.Port), "IdentitiesOnly=yes"}
	return n
}

// onStep calls f once, when d's node starts step (ended: when it ends).
func onStep(d *deploy.Deployer, step deploy.StepName, ended bool, f func()) {
	var once sync.Once
	log := d.Options.Log
	kind := deploy.EventStepStarted
	if ended {
		kind = deploy.EventStepEnded
	}
	d.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == kind && e.Step == step {
			once.Do(f)
		}
	}
}

// switchedTo lists the times the host was switched to system.
func switchedTo(tg *nixtest.Target, system string) []nixtest.Event {
	var out []nixtest.Event
	for _, e := range tg.Events() {
		if e.Kind == "set-current" && e.System == system {
			out = append(out, e)
		}
	}
	return out
}

// Row 1, a lease without fencing: deployer A's path stalls as its
// activation is sent; the host ends A's lease; B, waiting for the lock
// over another path, takes it; then A's path heals, and what A sent
// arrives. The host refuses it: B's deploy stands, A activated nothing and
// says so. With a short confirm_timeout A has given up on the host by
// then (and asks it); with a long one, A's activation itself arrives late.
func TestDeployAnEndedLeaseIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a lease): make test runs it")
	}
	t.Parallel()
	for _, confirm := range []time.Duration{3 * time.Second, 30 * time.Second} {
		t.Run("confirm_timeout="+confirm.String(), func(t *testing.T) {
			t.Parallel()
			endedLeaseFenced(t, confirm)
		})
	}
}

func endedLeaseFenced(t *testing.T, confirm time.Duration) {
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sysA := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	sysB := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	linkA := sshtest.NewLink(t, tg.Gate.Addr)
	verdict := deploy.VerdictSpec{ConfirmTimeout: confirm, SettleTimeout: 2 * time.Second}
	a := deployer(t, deploy.Options{Holder: "A", Verdict: verdict})
	b := deployer(t, deploy.Options{Holder: "B", LockTimeout: 2 * time.Minute, Verdict: verdict})
	a.Transport.RemoteExecTimeout = 5 * time.Second
	b.Transport.RemoteExecTimeout = 5 * time.Second

	bStarts := make(chan struct{})
	onStep(a, deploy.StepLock, true, func() { close(bStarts) })
	onStep(a, deploy.StepActivate, false, func() { linkA.Set(sshtest.LinkFault{Hold: [2]bool{true, true}}) })
	// A's path heals once B holds the lease: what A sent arrives then.
	onStep(b, deploy.StepLock, true, linkA.Heal)
	t.Cleanup(linkA.Heal)

	var rA, rB deploy.Result
	var wg sync.WaitGroup
	wg.Go(func() {
		rA = a.Deploy(context.Background(), []deploy.Target{through(targetOf(tg, "web1", sysA), linkA)}, nil)[0]
	})
	<-bStarts
	wg.Go(func() { rB = b.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sysB)}, nil)[0] })
	wg.Wait()

	wantPhase(t, rB, deploy.PhaseSucceeded)
	if rA.Phase == deploy.PhaseSucceeded || rA.Phase == deploy.PhaseRolledBack {
		t.Errorf("A, whose lease ended before its activation arrived: %s: %s", rA.Phase, rA.Message)
	}
	if acts := switchedTo(tg, sysA); len(acts) != 0 {
		t.Errorf("the host activated A's system after A's lease ended: %+v", acts)
	}
	if tg.CurrentSystem() != sysB || tg.BootEntry() != sysB {
		t.Errorf("the host runs %s and boots %s; want B's %s", tg.CurrentSystem(), tg.BootEntry(), sysB)
	}
	t.Logf("A: %s: %s", rA.Phase, rA.Message)
}

// Row 2, a confirmation that landed, then silence: the host takes A's
// confirmation, and nothing comes back from it any more (every path
// stalls towards this machine). What the host decided cannot be known
// here: the node is Unknown, never RolledBack; the host keeps the new
// system, and a refresh, once it answers, settles the record.
func TestDeployAConfirmationThatLandedIsNotRecordedRolledBack(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out confirm_timeout and asks): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	link := sshtest.NewLink(t, tg.Gate.Addr)
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 2 * time.Second, SettleTimeout: 2 * time.Second}})
	onStep(d, deploy.StepConfirm, false, func() { link.Set(sshtest.LinkFault{Hold: [2]bool{false, true}}) })
	t.Cleanup(link.Heal)
	n := through(targetOf(tg, "web1", sys), link)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseUnknown, "whether the confirmation reached it")
	if !strings.Contains(r.Hint, "the next refresh") {
		t.Errorf("hint %q does not say the next refresh settles the node", r.Hint)
	}
	link.Heal()
	if tg.CurrentSystem() != sys || tg.BootEntry() != old {
		t.Errorf("the host runs %s and boots %s; want the confirmed %s, its boot entry not made", tg.CurrentSystem(), tg.BootEntry(), sys)
	}
	cur, err := readOnceBack(t, d, n.Settings)
	if err != nil {
		t.Fatal(err)
	}
	if phase, msg := deploy.Settle(deploy.GoalSwitch, sys, old, cur); phase != deploy.PhaseFailed || !strings.Contains(msg, "boot entry was not made") {
		t.Errorf("settled by a refresh: %s: %s; want Failed, the boot entry not made", phase, msg)
	}
}

// Row 3, the spare path: the connections open to the host stall during a
// passing verdict, for longer than confirm_timeout, while new logins
// work. The words go over a new login as soon as the host's answers go
// quiet, not when ssh gives up on the stalled connection: the watchdog
// keeps waiting, the verdict stands, the host keeps the new system.
func TestDeployASpareLoginKeepsAPassingVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a stall longer than confirm_timeout): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	link := sshtest.NewLink(t, tg.Gate.Addr)
	// confirm_timeout leaves a spare login room to start and speak on a
	// busy machine; the stall outlasts it.
	verdict := deploy.VerdictSpec{ConfirmTimeout: 8 * time.Second, SettleTimeout: 2 * time.Second}
	d := deployer(t, deploy.Options{Verdict: verdict})
	stall := verdict.ConfirmTimeout + 3*time.Second
	onStep(d, deploy.StepVerdict, false, func() {
		link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}, OnlyOpen: true})
		time.AfterFunc(stall, link.Heal)
	})
	t.Cleanup(link.Heal)
	r := d.Deploy(context.Background(), []deploy.Target{through(targetOf(tg, "web1", sys), link)}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("the host runs %s and boots %s; want %s", tg.CurrentSystem(), tg.BootEntry(), sys)
	}
	if back := switchedTo(tg, old); len(back) != 0 {
		t.Errorf("the host was switched back while a new login carried the words: %+v", back)
	}
}

// readOnceBack reads a host that was cut off, as a refresh does once it is
// back: its sshd may refuse a login or two at first, while the logins
// held in the stalled path reach it all at once (MaxStartups).
func readOnceBack(t *testing.T, d *deploy.Deployer, s deploy.Settings) (deploy.Current, error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cur, err := d.ReadCurrent(context.Background(), s)
		if err == nil || time.Now().After(deadline) {
			return cur, err
		}
		time.Sleep(time.Second)
	}
}

// The helper trial's stall-open during the verdict: the connections open
// to the host stall (the node's master among them) and stay stalled past
// ssh's keepalive, while new logins work. A verdict command that ran over
// the master lost its session (ssh's exit 255, not the command's): it runs
// again over a new login and passes; the spare carries the words and the
// confirmation; the lease ended with its session, and the deployer takes
// the lock again for the boot entry. The node succeeds.
func TestDeployAVerdictCommandOverAStalledConnectionRunsAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out the keepalive): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	link := sshtest.NewLink(t, tg.Gate.Addr)
	verdict := deploy.VerdictSpec{ConfirmTimeout: 8 * time.Second, SettleTimeout: 2 * time.Second, Command: []string{"true"}}
	d := deployer(t, deploy.Options{Verdict: verdict})
	d.Transport.RemoteExecTimeout = 5 * time.Second
	onStep(d, deploy.StepVerdict, false, func() {
		link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}, OnlyOpen: true})
	})
	t.Cleanup(link.Heal)
	r := d.Deploy(context.Background(), []deploy.Target{through(targetOf(tg, "web1", sys), link)}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("the host runs %s and boots %s; want %s", tg.CurrentSystem(), tg.BootEntry(), sys)
	}
}

// The session that makes the boot entry drops while the host makes it:
// the update goes on to its end on the host, its output kept there, and
// the deployer asks the host how it ended over a new login. Before, the
// update wrote to the dropped session and died of it (exit 141): the
// node was recorded Failed, the boot entry not made, for a fault of the
// link alone.
func TestDeployABootEntryWhoseSessionDropsIsMadeOnTheHost(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a slow boot entry): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, BootDelay: 2 * time.Second})
	link := sshtest.NewLink(t, tg.Gate.Addr)
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	var reset sync.WaitGroup
	reset.Add(1)
	onStep(d, deploy.StepFinalise, false, func() {
		go func() {
			defer reset.Done()
			// Once the update has begun on the host.
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				for _, e := range tg.Events() {
					if e.Kind == "start" && e.Action == "boot" {
						link.ResetOpen()
						return
					}
				}
			}
			t.Error("the boot entry's update never began on the host")
		}()
	})
	r := d.Deploy(context.Background(), []deploy.Target{through(targetOf(tg, "web1", sys), link)}, nil)[0]
	reset.Wait()
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("the host runs %s and boots %s; want %s", tg.CurrentSystem(), tg.BootEntry(), sys)
	}
}

// The link stalls as the boot entry's update is sent, then its
// connections are reset and it heals: the lease ended with the lock
// session, and ssh sends the update again over a new connection once the
// link heals. The host refuses it (the run's lease ended), and the
// deployer takes the lock again as a new run and makes the boot entry:
// Succeeded, not Failed for a link that dropped once.
func TestDeployABootEntrySentWhenTheLinkDropsIsMadeUnderANewLease(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a stall, then a new lease): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	link := sshtest.NewLink(t, tg.Gate.Addr)
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	var reset sync.WaitGroup
	reset.Add(1)
	onStep(d, deploy.StepFinalise, false, func() {
		link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}})
		go func() {
			defer reset.Done()
			time.Sleep(time.Second)
			link.ResetOpen()
			link.Heal()
		}()
	})
	t.Cleanup(link.Heal)
	r := d.Deploy(context.Background(), []deploy.Target{through(targetOf(tg, "web1", sys), link)}, nil)[0]
	reset.Wait()
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("the host runs %s and boots %s; want %s", tg.CurrentSystem(), tg.BootEntry(), sys)
	}
}

// The connections open to the host stall just as the verdict's new login
// has connected, for longer than remote_exec_timeout, while later logins
// work: ssh gives up on that login, which met the path, not the new
// configuration. Another new login is tried before the verdict says the
// configuration cuts off SSH: the verdict passes, the host keeps the new
// system. (The helper trial's stall-open at "judging the new system"
// rolled a good system back, blaming its configuration.)
func TestDeployAVerdictLoginThatMetAStallIsTriedAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out remote_exec_timeout): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	link := sshtest.NewLink(t, tg.Gate.Addr)
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 8 * time.Second, SettleTimeout: 2 * time.Second}})
	d.Transport.RemoteExecTimeout = 3 * time.Second
	var stalled sync.WaitGroup
	stalled.Add(1)
	onStep(d, deploy.StepVerdict, false, func() {
		open := link.Open()
		go func() {
			defer stalled.Done()
			// Once the verdict's new login has connected.
			for deadline := time.Now().Add(time.Minute); link.Open() <= open; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("the verdict's new login never connected")
					return
				}
			}
			link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}, OnlyOpen: true})
		}()
	})
	t.Cleanup(link.Heal)
	r := d.Deploy(context.Background(), []deploy.Target{through(targetOf(tg, "web1", sys), link)}, nil)[0]
	stalled.Wait()
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("the host runs %s and boots %s; want %s", tg.CurrentSystem(), tg.BootEntry(), sys)
	}
}

// The connections open to the host are reset as the activation is sent (a
// VPN that drops), at moments around the one where the command has
// started the watchdog and not yet the activation; new logins work (at
// that moment, after two seconds and a half). The
// deployer asks the host over a new login how the activation went: one
// the host cancelled (its watchdog does, when the command that was to
// start it ended first) ends the node at once, nothing activated, never
// waiting for activation_timeout; the host is free for the next deploy.
func TestDeployAResetAsTheActivationIsSentEndsPromptly(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (slow activations, refused logins): make test runs it")
	}
	t.Parallel()
	for _, after := range []time.Duration{-1, 0, 50 * time.Millisecond, 300 * time.Millisecond} {
		name := "when the watchdog holds the guard"
		if after >= 0 {
			name = after.String() + " into the step"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: time.Second})
			link := sshtest.NewLink(t, tg.Gate.Addr)
			// confirm_timeout well beyond the refusal below: the host
			// is not given up on as silent while new logins are refused.
			d := deployer(t, deploy.Options{ActivationTimeout: 2 * time.Minute, Verdict: deploy.VerdictSpec{ConfirmTimeout: 8 * time.Second, SettleTimeout: 2 * time.Second}})
			var reset sync.WaitGroup
			reset.Add(1)
			onStep(d, deploy.StepActivate, false, func() {
				go func() {
					defer reset.Done()
					if after >= 0 {
						time.Sleep(after)
						link.ResetOpen()
						return
					}
					for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
						if m, _ := filepath.Glob(tg.Path(agreement.StateDir + "/*/guarded")); len(m) > 0 {
							// New logins are refused for a moment,
							// so that the watchdog, not the
							// deployer's ask, cancels the
							// activation the dropped command had
							// not started.
							link.Set(sshtest.LinkFault{New: sshtest.NewRefuse})
							link.ResetOpen()
							time.Sleep(2500 * time.Millisecond)
							link.Heal()
							return
						}
					}
					t.Error("the watchdog never held the guard")
				}()
			})
			start := time.Now()
			r := d.Deploy(context.Background(), []deploy.Target{through(targetOf(tg, "web1", sys), link)}, nil)[0]
			took := time.Since(start)
			reset.Wait()
			t.Logf("%s after %s: %s (hint %q)", r.Phase, took, r.Message, r.Hint)
			if took > d.Options.ActivationTimeout/2 {
				t.Errorf("the deploy took %s: it waited for an activation that the reset ended (activation_timeout %s)", took, d.Options.ActivationTimeout)
			}
			succeeded, failed := r.Phase == deploy.PhaseSucceeded, r.Phase == deploy.PhaseFailed
			switch {
			case succeeded:
				if tg.CurrentSystem() != sys {
					t.Errorf("recorded Succeeded, the host runs %s", tg.CurrentSystem())
				}
			case failed:
				// "nothing was activated", "nothing was changed", or
				// (a host given up on as silent on a busy machine) its
				// watchdog "switched nothing".
				if !strings.Contains(r.Message, "nothing was") && !strings.Contains(r.Message, "switched nothing") {
					t.Errorf("Failed, but the message does not say that nothing was activated: %s", r.Message)
				}
				if tg.CurrentSystem() != old {
					t.Errorf("recorded Failed, nothing activated; the host runs %s, not %s", tg.CurrentSystem(), old)
				}
			default:
				t.Errorf("phase %s, want Succeeded or Failed (nothing activated): %s", r.Phase, r.Message)
			}
			// Nothing of this deploy holds the host: the next one goes
			// through at once.
			again := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
			wantPhase(t, again, deploy.PhaseSucceeded)
		})
	}
}

// Issue 37 (a review's reproduction): the activation's first attempt
// meets a held switch lock (exit 11), and every path to the host stalls
// while the retry runs, for longer than confirm_timeout. The watchdog
// counts from the retry's end, not from the first attempt's, and its
// switch back is the run's last: the record and the host agree, the host
// never left on the unconfirmed new system with its watchdog gone.
func TestDeployAStallDuringARetriedActivationLeavesTheRecordTrue(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a stall longer than confirm_timeout during a long retry): make test runs it")
	}
	t.Parallel()
	tg, old, sys, opts := retriedActivation(t)
	link := sshtest.NewLink(t, tg.Gate.Addr)
	verdict := opts.Verdict
	d := deployer(t, opts)
	var stalled sync.WaitGroup
	var stallAt time.Time
	onStep(d, deploy.StepActivate, false, func() {
		stalled.Go(func() {
			deadline := time.Now().Add(time.Minute)
			for !strings.Contains(tg.Journal(), "activating the configuration") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			// The retry runs: every path stalls until well past
			// confirm_timeout from here.
			stallAt = time.Now()
			link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}})
			time.Sleep(verdict.ConfirmTimeout + 3*time.Second)
			link.Heal()
		})
	})
	t.Cleanup(link.Heal)
	r := d.Deploy(context.Background(), []deploy.Target{through(targetOf(tg, "web1", sys), link)}, nil)[0]
	stalled.Wait()
	// Past the retry's end and a watchdog's confirm_timeout after it.
	time.Sleep(time.Until(stallAt.Add(retriedActivationTakes + verdict.ConfirmTimeout + 3*time.Second)))
	want := old
	if r.Phase == deploy.PhaseSucceeded {
		want = sys
	}
	for deadline := time.Now().Add(20 * time.Second); tg.CurrentSystem() != want && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	if tg.CurrentSystem() != want {
		t.Errorf("recorded %s (%s), and the host runs %s; want %s; events %+v", r.Phase, r.Message, tg.CurrentSystem(), want, tg.Events())
	}
	if r.Phase == deploy.PhaseRolledBack && len(switchedTo(tg, sys)) > 0 {
		if sw, back := switchedTo(tg, sys), switchedTo(tg, old); len(back) == 0 || back[len(back)-1].Time.Before(sw[len(sw)-1].Time) {
			t.Errorf("recorded RolledBack, but the retry switched the host to the new system after the watchdog switched it back: %+v", tg.Events())
		}
	}
}

// Issue 37 (a review's finding): an action whose outcome the host cannot
// record (the activation's exit status; the boot entry's, or the system
// that passed its verdict) is not taken as done: no later read would know
// it. The node does not succeed, and says why.
func TestDeployAnActionWhoseRecordCannotBeWrittenFails(t *testing.T) {
	if testing.Short() {
		t.Skip("deploys to a nixtest host: make test runs it")
	}
	t.Parallel()
	for _, c := range []struct {
		step   deploy.StepName
		record string
	}{{deploy.StepActivate, "activated.1"}, {deploy.StepFinalise, "booted.1"}} {
		t.Run(string(c.step), func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
			onStep(d, c.step, false, func() {
				// Where the record goes, a directory: writing it fails.
				runs, err := os.ReadDir(tg.Path(agreement.StateDir))
				if err != nil {
					t.Error(err)
					return
				}
				for _, e := range runs {
					if e.IsDir() {
						if err := os.Mkdir(filepath.Join(tg.Path(agreement.StateDir), e.Name(), c.record), 0o755); err != nil {
							t.Error(err)
						}
					}
				}
			})
			r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
			if r.Phase == deploy.PhaseSucceeded || !strings.Contains(r.Message, "could not record how its action went") {
				t.Errorf("recorded %s: %s; want a failure that says the host could not record how its %s went", r.Phase, r.Message, c.step)
			}
		})
	}
}

// The host reboots during a deploy (issue 39, found by the explorer): as
// the activation runs, after it has switched the host; or as the boot
// entry is made. A reboot empties /run, where the host kept the run's
// records: the deployer must not read their absence as "never started"
// (it once recorded "the activation never started on the host: nothing
// was activated" for an activation that had switched the host before the
// reboot undid it). The record says the host rebooted and what it runs.
func TestDeployAHostThatRebootsDuringItsDeployIsRecordedAsIs(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a reboot): make test runs it")
	}
	t.Parallel()
	for _, c := range []struct {
		name  string
		b     nixtest.Behaviour
		step  deploy.StepName
		until func(tg *nixtest.Target, sys string) bool // the moment of the reboot
	}{
		{"during the activation", nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 4 * time.Second}, deploy.StepActivate,
			func(tg *nixtest.Target, sys string) bool { return tg.CurrentSystem() == sys }},
		{"during the boot entry", nixtest.Behaviour{Kind: nixtest.Succeed, BootDelay: 3 * time.Second}, deploy.StepFinalise,
			func(tg *nixtest.Target, sys string) bool {
				for _, e := range tg.Events() {
					if e.Kind == "start" && e.Action == "boot" {
						return true
					}
				}
				return false
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, c.b)
			d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
			var rebooted sync.WaitGroup
			rebooted.Add(1)
			onStep(d, c.step, false, func() {
				go func() {
					defer rebooted.Done()
					for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
						if c.until(tg, sys) {
							tg.Reboot(time.Second)
							return
						}
					}
					t.Error("the moment of the reboot never came")
				}()
			})
			r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
			rebooted.Wait()
			if !tg.WaitUp(time.Minute) {
				t.Fatal("the host did not come back")
			}
			wantPhase(t, r, deploy.PhaseFailed)
			reason := ""
			for _, o := range r.Outcomes {
				if o.Reason == "HostRebooted" {
					reason = o.Reason
				}
			}
			if reason == "" || !strings.Contains(r.Message, "the host rebooted during the deploy") || strings.Contains(r.Message, "nothing was") {
				t.Errorf("recorded %+v: %s; want a condition with reason HostRebooted, the message saying the host rebooted, and not that nothing was activated", r.Outcomes, r.Message)
			}
			if tg.CurrentSystem() != old || r.CurrentSystem != old {
				t.Errorf("the host runs %s, the record says %s; want %s (its boot entry)", tg.CurrentSystem(), r.CurrentSystem, old)
			}
			// The reboot killed the watchdog, which would have pointed the
			// system profile back: the deployer does (the new-user trial
			// found it left on the new system), and says so.
			t.Logf("recorded: %s", r.Message)
			if tg.ProfileSystem() != old {
				t.Errorf("the system profile points at %s; want %s, which the host runs (record: %s)", tg.ProfileSystem(), old, r.Message)
			}
			if o := r.Outcomes[deploy.CondActivated]; o.Passed {
				t.Errorf("Activated %+v after the host rebooted into %s", o, old)
			}
		})
	}
}
