package agreement_test

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sshHost reaches a nixtest target with the system ssh client: every
// command a login of its own, through port (a Link, or the target's own).
type sshHost struct {
	tg   *nixtest.Target
	opts []string
}

func newHost(t *testing.T, tg *nixtest.Target, port int) sshHost {
	t.Helper()
	opts := append([]string{"-o", "Port=" + strconv.Itoa(port), "-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=30"}, tg.SSHOptions(t)...)
	return sshHost{tg: tg, opts: opts}
}

func (h sshHost) Command(ctx context.Context, script string, _ bool) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ssh", append(h.opts, h.tg.Destination(), script)...)
	cmd.WaitDelay = time.Second
	return cmd
}

func (h sshHost) Output(ctx context.Context, script string, fresh bool) (string, error) {
	var stdout, stderr strings.Builder
	cmd := h.Command(ctx, script, fresh)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func exitOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

var timing = agreement.Timing{Confirm: 2 * time.Second, Lease: 2 * time.Second, Activation: time.Minute}

// A lease is one run's: a second take waits for it and is told who holds
// it; the lease's holder, its run's actions pass the host's fence; once it
// has let go, whatever of it arrives late is refused, and so is an action
// its deployer cancelled. The host's answers say which.
func TestFencing(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	h := newHost(t, tg, tg.Port)
	copyTo(t, tg, sys)
	ctx := context.Background()

	run := agreement.NewRun()
	l, lines, err := agreement.Take(ctx, h, run, "first", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 6 || lines[0] != old || lines[2] != "systemd" || lines[4] != old || lines[5] != "keys" {
		t.Errorf("what the take read: %q, want the current system %s first, then bare, systemd, the last verified system, what it boots (%[2]s), and no deployment's keys", lines, old)
	}
	// A second run finds the lock held, and by whom.
	_, _, err = agreement.Take(ctx, h, agreement.NewRun(), "second", 0, timing, nil)
	var busy *agreement.Busy
	if !errors.As(err, &busy) || busy.Holder != "first" {
		t.Fatalf("a second take while the first holds the lease: %v, want busy, held by first", err)
	}

	boot := func(run string, attempt int) (string, int) {
		out, err := h.Output(ctx, agreement.BootScript(run, sys, attempt, 30, true), false)
		return out, exitOf(err)
	}
	// Another run, which holds no lease: refused, nothing changed.
	if out, exit := boot(agreement.NewRun(), 1); exit != agreement.FencedExit || !strings.Contains(out, agreement.FencedMarker+"another deployment's lease") {
		t.Errorf("a boot entry of a run that holds no lease: exit %d, %q; want %d and the fence's word", exit, out, agreement.FencedExit)
	}
	// The lease's own run: done, once; the same attempt again is refused.
	if out, exit := boot(run, 1); exit != 0 {
		t.Fatalf("the holder's boot entry: exit %d: %s", exit, out)
	}
	if tg.BootEntry() != sys {
		t.Errorf("boot entry %s, want %s", tg.BootEntry(), sys)
	}
	if out, exit := boot(run, 1); exit != agreement.FencedExit || !strings.Contains(out, "ran already") {
		t.Errorf("the same boot attempt again: exit %d, %q; want refused", exit, out)
	}
	// Cancelled before it arrived: refused when it does.
	v, err := agreement.Ask(ctx, h, run, "boot.2")
	if err != nil || v.Fate("boot.2") != agreement.FateCancelled || v.Fate("boot.1") != agreement.FateStarted || v.Booted[1] != 0 || !v.Leased || v.Current != old {
		t.Errorf("asked, cancelling boot.2: %+v, %v", v, err)
	}
	if _, exit := boot(run, 2); exit != agreement.FencedExit {
		t.Errorf("a cancelled boot attempt arrived: exit %d, want refused", exit)
	}

	// Let go: what arrives late is refused, and the lock is free.
	l.Release()
	if out, exit := boot(run, 3); exit != agreement.FencedExit || !strings.Contains(out, "no deployment holds the host's deploy lock") {
		t.Errorf("a boot entry after the lease ended: exit %d, %q; want refused", exit, out)
	}
	if tg.Exists(agreement.LeaseFile) || tg.Exists(agreement.HolderFile) {
		t.Errorf("the lease's files are left after it ended")
	}
	l2, _, err := agreement.Take(ctx, h, agreement.NewRun(), "second", 0, timing, nil)
	if err != nil {
		t.Fatalf("a take after the release: %v", err)
	}
	l2.Release()
}

// A host that rebooted since a run's lease began lost its records: Ask
// says so (Lost), and what it runs, and cancels nothing (it makes no
// directory for the run: nothing of the run can start there any more, its
// lease gone too). Before the reboot, the same ask finds the run's
// records.
func TestAskAfterAReboot(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	h := newHost(t, tg, tg.Port)
	ctx := context.Background()
	run := agreement.NewRun()
	l, _, err := agreement.Take(ctx, h, run, "first", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if v, err := agreement.Ask(ctx, h, run, "act.1"); err != nil || v.Lost || !v.Leased || v.Fate("act.1") != agreement.FateCancelled {
		t.Fatalf("asked before the reboot: %+v, %v; want the run's records, act.1 cancelled", v, err)
	}
	tg.Reboot(500 * time.Millisecond)
	if !tg.WaitUp(30 * time.Second) {
		t.Fatal("the target did not come back")
	}
	v, err := agreement.Ask(ctx, h, run, "act.2")
	if err != nil || !v.Lost || v.Leased || v.Current != old || len(v.Fates) != 0 || v.Settled("act.2") != agreement.Lost {
		t.Errorf("asked after the reboot: %+v, %v; want lost, not leased, running %s, no fates", v, err, old)
	}
	if tg.Exists(agreement.StateDir + "/" + run) {
		t.Error("the ask made the run's directory again after the reboot")
	}
	// Await stops at once: a lost run says nothing more.
	start := time.Now()
	v, answered := agreement.Await(ctx, h, run, 10*time.Second, 20*time.Second, func(agreement.View) bool { return false })
	if !answered || !v.Lost || time.Since(start) > 8*time.Second {
		t.Errorf("Await on a lost run: %+v, answered %v, after %s; want it to return the lost view at once", v, answered, time.Since(start))
	}
}

// copyTo puts system into the target's store, as a deploy's copy does.
func copyTo(t *testing.T, tg *nixtest.Target, system string) {
	t.Helper()
	cmd := exec.Command("nix-copy-closure", "--to", tg.Destination(), system)
	cmd.Env = append(nixtest.DeployerEnv(), "NIX_SSHOPTS="+strings.Join(append([]string{"-o", "Port=" + strconv.Itoa(tg.Port)}, tg.SSHOptions(t)...), " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nix-copy-closure: %v\n%s", err, out)
	}
}

// While the deployer judges an activation, its words keep the watchdog
// waiting: when the lock session's path stalls for longer than
// confirm_timeout, a spare session over a new login carries them, and the
// confirmation too. A lock session silent for remote_exec_timeout ends the
// lease, on the host as here: the lock is free for another.
func TestSpareKeepsTheWatchdogWaitingAndSilenceEndsTheLease(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out confirm_timeout and a lease): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	copyTo(t, tg, sys)
	link := sshtest.NewLink(t, tg.Gate.Addr)
	h := newHost(t, tg, link.Port)
	ctx := context.Background()
	// confirm_timeout leaves a spare login room to start and speak on a
	// busy machine; the lease outlasts the stall below.
	timing := agreement.Timing{Confirm: 6 * time.Second, Lease: 12 * time.Second, Activation: time.Minute}
	run := agreement.NewRun()
	l, _, err := agreement.Take(ctx, h, run, "first", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	l.Watch(true)
	a := agreement.Activation{Run: run, System: sys, Previous: old, Attempt: 1, SetProfile: true, Watch: true, Systemd: true, Timing: timing}
	if out, err := h.Output(ctx, a.Script(), false); err != nil {
		t.Fatalf("the activation: %v\n%s", err, out)
	}

	// The lock session stalls for longer than confirm_timeout; new logins
	// flow.
	link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}, OnlyOpen: true})
	time.Sleep(timing.HostGivesUp() + 2*time.Second)
	if l.Spares() == 0 || l.Quiet() > timing.HostGivesUp() {
		t.Errorf("with the lock session stalled: %d spares, quiet for %s; want a spare carrying the words", l.Spares(), l.Quiet())
	}
	v, err := agreement.Ask(ctx, h, run)
	if err != nil || v.Decision != "" || v.Current != sys {
		t.Fatalf("the watchdog did not wait while the spare spoke: %+v (%v)", v, err)
	}
	if d, err := l.Decide(ctx, agreement.DecisionConfirm); d != agreement.DecisionConfirm {
		t.Fatalf("the confirmation over the spare: %q, %v", d, err)
	}
	if tg.CurrentSystem() != sys || l.Lost() {
		t.Errorf("after the confirmation: the host runs %s (want %s), lease lost %v", tg.CurrentSystem(), sys, l.Lost())
	}

	// Every path stalls: the host ends the lease.
	link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}})
	deadline := time.Now().Add(timing.Lease*2 + 5*time.Second)
	for tg.Exists(agreement.LeaseFile) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if tg.Exists(agreement.LeaseFile) {
		t.Fatalf("the lease did not end %s after its words stopped", timing.Lease*2+5*time.Second)
	}
	direct := newHost(t, tg, tg.Port)
	l2, _, err := agreement.Take(ctx, direct, agreement.NewRun(), "second", 0, timing, nil)
	if err != nil {
		t.Fatalf("another deployer, once the silent lease ended: %v", err)
	}
	l2.Release()
	link.Heal()
}

// The clocks, written once.
func TestTiming(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		confirm                      time.Duration
		word, spare, givesUp, askFor time.Duration
	}{
		{30 * time.Second, time.Second, 10 * time.Second, 31 * time.Second, 30 * time.Second},
		{2 * time.Second, 500 * time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second},
		{200 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 1200 * time.Millisecond, 10 * time.Second},
	} {
		tm := agreement.Timing{Confirm: c.confirm}
		if tm.WordEvery() != c.word || tm.SpareAfter() != c.spare || tm.HostGivesUp() != c.givesUp || tm.AskFor() != c.askFor {
			t.Errorf("confirm_timeout %s: words every %s, spare after %s, the host gives up after %s, asked for %s; want %s, %s, %s, %s",
				c.confirm, tm.WordEvery(), tm.SpareAfter(), tm.HostGivesUp(), tm.AskFor(), c.word, c.spare, c.givesUp, c.askFor)
		}
		if tm.SpareAfter()+tm.WordEvery() >= tm.HostGivesUp() {
			t.Errorf("confirm_timeout %s: a spare (after %s) leaves no word before the host gives up (%s)", c.confirm, tm.SpareAfter(), tm.HostGivesUp())
		}
	}
}

// The activation's script reaches systemd-run as one argument, which
// systemd writes into the transient unit's file: a line of its own would
// be read as the file's (one that starts with "[" as a section header,
// and the unit, failed to load, is never collected: the host stays
// degraded). It is one line, and a shell reads it, dash as bash; the
// watchdog's is a file its unit runs, and no line of the command that
// starts it spans lines. The act command parses too.
func TestActivationUnitIsOneLine(t *testing.T) {
	t.Parallel()
	for attempt := 1; attempt <= 2; attempt++ {
		a := agreement.Activation{Run: "0123456789ab", System: "/nix/store/x-new", Previous: "/nix/store/x-old", Attempt: attempt, SetProfile: true, Watch: true, Systemd: true, Container: true,
			Timing: agreement.Timing{Confirm: 30 * time.Second, Lease: time.Minute, Activation: time.Minute}}
		script := a.Script()
		_, unit, ok := strings.Cut(script, " --unit="+agreement.ActivationUnit(a.Run))
		if !ok {
			t.Fatalf("attempt %d: no systemd-run --unit in %q", attempt, script)
		}
		_, arg, ok := strings.Cut(unit, " sh -c ")
		if !ok {
			t.Fatalf("attempt %d: no sh -c after systemd-run in %q", attempt, unit)
		}
		if strings.Contains(arg, "\n") {
			t.Errorf("attempt %d: the activation's unit script spans lines: %q", attempt, arg)
		}
		watchdog := "--unit=" + agreement.WatchdogUnit(a.Run) + " sh " + agreement.StateDir + "/" + a.Run + "/watchdog.sh || exit 1\n"
		if started := strings.Contains(script, "--unit="+agreement.WatchdogUnit(a.Run)); started != (attempt == 1) || started && !strings.Contains(script, watchdog) {
			t.Errorf("attempt %d: the watchdog is not started (by the first attempt alone) as %q: %q", attempt, watchdog, script)
		}
		for _, sh := range []string{"dash", "bash"} {
			if out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput(); err != nil {
				t.Errorf("attempt %d: %s -n: %v: %s", attempt, sh, err, out)
			}
			unquoted := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(arg, "'"), "'"), `'\''`, "'")
			if out, err := exec.Command(sh, "-n", "-c", unquoted).CombinedOutput(); err != nil {
				t.Errorf("attempt %d: %s -n of the unit script: %v: %s", attempt, sh, err, out)
			}
		}
	}
}

// The clocks keep their order (Timing.Check) for every confirm_timeout
// and remote_exec_timeout a deployment may set, the smallest and the
// largest included.
func TestTimingKeepsItsOrder(t *testing.T) {
	t.Parallel()
	for _, confirm := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second, 8 * time.Second, 30 * time.Second, 5 * time.Minute, time.Hour} {
		for _, lease := range []time.Duration{time.Second, 5 * time.Second, time.Minute, time.Hour} {
			if err := (agreement.Timing{Confirm: confirm, Lease: lease, Activation: time.Minute}).Check(); err != nil {
				t.Errorf("confirm_timeout %s, remote_exec_timeout %s: %v", confirm, lease, err)
			}
		}
	}
}

// What a host's answer settles, read in one place: the record's outcome
// follows from it.
func TestViewSettled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		v    agreement.View
		want agreement.Settlement
	}{
		{"nothing decided", agreement.View{Watchdog: "waiting"}, agreement.Unsettled},
		{"decided rollback, not switched back yet", agreement.View{Decision: agreement.DecisionRollback, Watchdog: "rolling-back"}, agreement.Unsettled},
		{"act cancelled", agreement.View{Fates: map[string]agreement.Fate{"act.2": agreement.FateCancelled}}, agreement.NeverStarted},
		{"watchdog refused", agreement.View{Watchdog: "refused"}, agreement.NeverStarted},
		{"another attempt's act cancelled", agreement.View{Fates: map[string]agreement.Fate{"act.1": agreement.FateCancelled}, Decision: agreement.DecisionConfirm}, agreement.Confirmed},
		{"confirmed", agreement.View{Decision: agreement.DecisionConfirm, Watchdog: "confirmed"}, agreement.Confirmed},
		{"switched back", agreement.View{Decision: agreement.DecisionRollback, RolledBack: "0"}, agreement.SwitchedBack},
		{"left alone", agreement.View{Decision: agreement.DecisionRollback, RolledBack: "kept /nix/store/x"}, agreement.LeftAlone},
		{"switch back failed", agreement.View{Decision: agreement.DecisionRollback, RolledBack: "4"}, agreement.SwitchBackFailed},
		{"records lost", agreement.View{Lost: true, Fates: map[string]agreement.Fate{}}, agreement.Lost},
	} {
		if got := c.v.Settled("act.2"); got != c.want {
			t.Errorf("%s: Settled = %d, want %d", c.name, got, c.want)
		}
	}
	if got := (agreement.View{RolledBack: "kept /nix/store/x"}).Kept(); got != "/nix/store/x" {
		t.Errorf("Kept() = %q", got)
	}
}

// Every action of the keys and reboots is fenced as the activation is
// (issue 47): a key written, a unit restarted, a system recorded as
// verified, the profile pointed back, a reboot asked: each is refused for
// a run that does not hold the lease, and changes nothing; the holder's
// pass. What another run did since a lease ended is named by SinceScript.
func TestKeysAndRebootActionsAreFenced(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	h := newHost(t, tg, tg.Port)
	ctx := context.Background()
	run := agreement.NewRun()
	l, _, err := agreement.Take(ctx, h, run, "first", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := agreement.KeyFile{Path: "/run/keys/k", User: "root", Group: "root", Mode: "0400", Units: []string{"k.service"}}
	actions := func(run string) map[string]string {
		return map[string]string{
			"keys":         agreement.KeysScript(run, "keys", "d", []agreement.KeyFile{key}, nil, nil),
			"restart":      agreement.RestartScript(run, "restart", "d", []string{"k.service"}),
			"mark":         agreement.FencedMarkScript(run, "/nix/store/x-verified"),
			"profile-back": agreement.ProfileBackScript(run, old),
			"reboot":       agreement.RebootScript(run),
		}
	}
	do := func(script string) (string, int) {
		cmd := h.Command(ctx, script, false)
		cmd.Stdin = strings.NewReader("c2VjcmV0\n")
		out, err := cmd.CombinedOutput()
		return string(out), exitOf(err)
	}
	for name, script := range actions(agreement.NewRun()) {
		if out, exit := do(script); exit != agreement.FencedExit || !strings.Contains(out, agreement.FencedMarker) {
			t.Errorf("%s of a run that holds no lease: exit %d, %q; want refused", name, exit, out)
		}
	}
	if tg.Exists("/run/keys/k") || len(tg.Restarts()) != 0 || tg.Exists(agreement.SucceededFile) || len(tg.Events()) != 0 {
		t.Errorf("a refused action changed the host: key %v, restarts %q, record %v, events %+v", tg.Exists("/run/keys/k"), tg.Restarts(), tg.Exists(agreement.SucceededFile), tg.Events())
	}
	mine := actions(run)
	for _, name := range []string{"keys", "restart", "mark"} {
		if out, exit := do(mine[name]); exit != 0 {
			t.Errorf("%s of the lease's run: exit %d, %q", name, exit, out)
		}
	}
	if !tg.Exists("/run/keys/k") || len(tg.Restarts()) != 1 || !tg.Exists(agreement.SucceededFile) {
		t.Errorf("the holder's actions: key %v, restarts %q, record %v", tg.Exists("/run/keys/k"), tg.Restarts(), tg.Exists(agreement.SucceededFile))
	}
	// Another run takes the lease once this one ends, and acts: named
	// by SinceScript, the ended run's own actions not.
	l.Release()
	other := agreement.NewRun()
	l2, _, err := agreement.Take(ctx, h, other, "second", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, exit := do(agreement.FencedMarkScript(other, old)); exit != 0 {
		t.Fatalf("the other run's mark: exit %d, %q", exit, out)
	}
	l2.Release()
	third := agreement.NewRun()
	l3, _, err := agreement.Take(ctx, h, third, "third", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Release()
	out, err := h.Output(ctx, agreement.SinceScript(run, []string{run, third}), false)
	if err != nil || !strings.Contains(out, "other "+other+" mark\n") || strings.Contains(out, "other "+run) || !strings.Contains(out, "booted "+old) {
		t.Errorf("since run's lease: %q (%v); want the other run's mark alone, and what the host booted", out, err)
	}
}
