package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// expiring is a context whose deadline the test makes expire at the
// moment it chooses: its Err is context.DeadlineExceeded, as when a
// timeouts block runs out mid-step.
type expiring struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiring() *expiring {
	return &expiring{Context: context.Background(), done: make(chan struct{})}
}

func (c *expiring) Done() <-chan struct{} { return c.done }
func (c *expiring) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
func (c *expiring) expire() { c.once.Do(func() { close(c.done) }) }

// interruptCase stops a two-node rollout while its first node is in one
// step: set up makes that step block (a held lock, a slow copy, a long
// activation, ...) so that the interrupt lands while a command runs.
type interruptCase struct {
	name string // empty: the step's name
	step deploy.StepName
	// stall stops the host answering as the step starts.
	stall bool
	// after is how long after the step starts the interrupt comes.
	after time.Duration
	// setup makes the first node's step block; it returns the system to
	// deploy and options.
	setup func(t *testing.T, tg *nixtest.Target, opts *deploy.Options) (system string)
	// says is what the node's message must say of the host; orSays, when
	// where the event lands decides what is true, the other forms it may
	// take instead (each chosen by its first phrase).
	says   []string
	orSays [][]string
	// check looks at the host right after the deploy returned.
	check func(t *testing.T, tg *nixtest.Target, old, system string)
}

func succeeding(t *testing.T, _ *nixtest.Target, _ *deploy.Options) string {
	return nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
}

// untouched checks that the host still runs old and never activated
// system.
func untouched(t *testing.T, tg *nixtest.Target, old, system string) {
	t.Helper()
	if tg.CurrentSystem() != old || tg.BootEntry() != old || strings.Contains(strings.Join(tg.Calls(), "\n"), system) {
		t.Errorf("the host was changed: current %s, boot %s, calls %v", tg.CurrentSystem(), tg.BootEntry(), tg.Calls())
	}
}

// bootUnchanged checks that the boot entry never moved to system.
func bootUnchanged(t *testing.T, tg *nixtest.Target, old, _ string) {
	t.Helper()
	if tg.BootEntry() != old {
		t.Errorf("the boot entry moved to %s", tg.BootEntry())
	}
}

func interruptCases() []interruptCase {
	return []interruptCase{
		{step: deploy.StepConnect, setup: succeeding, says: []string{"nothing was done on the host"}, check: untouched},
		{step: deploy.StepLock, after: 500 * time.Millisecond,
			setup: func(t *testing.T, tg *nixtest.Target, opts *deploy.Options) string {
				tg.HoldDeployLock(t, "apply A")
				opts.LockTimeout = time.Minute
				return nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			},
			says: []string{"nothing was done on the host"}, check: bootUnchanged},
		{step: deploy.StepRead, setup: succeeding, says: []string{"nothing was changed on the host"}, check: untouched},
		{step: deploy.StepCopy, after: 500 * time.Millisecond,
			setup: func(t *testing.T, _ *nixtest.Target, opts *deploy.Options) string {
				opts.NixCopyClosure = slowCopy(t, 60)
				return nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			},
			says: []string{"only adds paths to the host's store"}, check: untouched},
		{step: deploy.StepActivate, after: 700 * time.Millisecond,
			setup: func(t *testing.T, _ *nixtest.Target, _ *deploy.Options) string {
				return nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 10 * time.Second})
			},
			says: []string{"goes on on the host", "switched back to", "by the host's watchdog once it has ended and confirm_timeout"}, check: bootUnchanged},
		{step: deploy.StepVerdict, after: 700 * time.Millisecond,
			setup: func(t *testing.T, tg *nixtest.Target, opts *deploy.Options) string {
				tg.SetSystemState(t, "starting") // is-system-running --wait waits
				opts.Verdict.SettleTimeout = time.Minute
				return nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			},
			says: []string{"is active and unconfirmed", "the host's watchdog switches it back to"}, check: bootUnchanged},
		{step: deploy.StepConfirm, setup: succeeding,
			says: []string{"the confirmation did not reach the host", "the host's watchdog switches it back to"},
			orSays: [][]string{
				{"the host took the confirmation", "stays active, and its boot entry is not made yet"},
				// The host could not be asked within the interrupt's
				// bound (a busy machine).
				{"whether the confirmation reached the host is not known", "the host's watchdog switches", "the next refresh reads which system it runs"},
			}, check: bootUnchanged},
		{name: "confirm-host-silent", step: deploy.StepConfirm, stall: true, after: 300 * time.Millisecond, setup: succeeding,
			says: []string{"whether the confirmation reached the host is not known", "the host's watchdog switches", "the next refresh reads which system it runs"}, check: bootUnchanged},
		{step: deploy.StepFinalise, after: 700 * time.Millisecond,
			setup: func(t *testing.T, _ *nixtest.Target, opts *deploy.Options) string {
				opts.BootLockInterval = time.Minute // the interrupt comes while it waits for the switch lock
				return nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.LockHeld, LockedCalls: 5, LockedAction: "boot"})
			},
			says: []string{"is active and confirmed", "the boot entry may still point at the old system"},
			check: func(t *testing.T, tg *nixtest.Target, old, system string) {
				if tg.CurrentSystem() != system || tg.BootEntry() != old {
					t.Errorf("current %s, boot %s; want %s active and the boot entry still %s", tg.CurrentSystem(), tg.BootEntry(), system, old)
				}
			}},
	}
}

// Issue 12: Ctrl-C and an expiring deadline are one event. In every step
// of a node, the deploy ends within about a second of it (2 s and three
// times its login, on a busy machine), the node is recorded with
// exit 130, the step, and what the host is doing now; the next node is
// never started, and nothing is recorded as switched.
func TestDeployInterruptedInEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (eighteen interrupted deploys): make test runs it")
	}
	t.Parallel()
	// The systems every case boots and gives n2, made once.
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	second := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	for _, event := range []string{"interrupt", "deadline"} {
		for _, c := range interruptCases() {
			name := c.name
			if name == "" {
				name = string(c.step)
			}
			t.Run(event+"/"+name, func(t *testing.T) {
				t.Parallel()
				// n2 is never started: its host boots nothing, and its
				// logins and calls say whether it was touched.
				tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
				tg1.Boot(t, old)
				opts := deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}}
				system := c.setup(t, tg1, &opts)
				d := deployer(t, opts)

				var ctx context.Context
				var stop func()
				if event == "interrupt" {
					cctx, cancel := context.WithCancel(context.Background())
					ctx, stop = cctx, cancel
					defer cancel()
				} else {
					e := newExpiring()
					ctx, stop = e, e.expire
					defer e.expire()
				}
				var stopped time.Time
				var loginTook time.Duration
				var once sync.Once
				interrupt := func() { once.Do(func() { stopped = time.Now(); stop() }) }
				log := d.Options.Log
				d.Options.Log = func(e deploy.Event) {
					log(e)
					if e.Kind == deploy.EventStepEnded && e.Node == "n1" && e.Step == deploy.StepConnect {
						loginTook = e.Took
					}
					if e.Kind == deploy.EventStepStarted && e.Node == "n1" && e.Step == c.step {
						if c.stall {
							tg1.Gate.Stall(true)
							t.Cleanup(func() { tg1.Gate.Stall(false) })
						}
						if c.after == 0 {
							interrupt()
						} else {
							time.AfterFunc(c.after, interrupt)
						}
					}
				}
				res := d.Deploy(ctx, []deploy.Target{targetOf(tg1, "n1", system), targetOf(tg2, "n2", second)}, nil)
				took := time.Since(stopped)
				if stopped.IsZero() {
					t.Fatalf("the %s step was never reached: %+v", c.step, res[0])
				}
				// An interrupted node asks the host what it is doing (at most
				// askTimeout), lets its lease go and closes its master: a few
				// of the machine's SSH round trips, as long as its login took.
				bound := 2*time.Second + 3*loginTook
				t.Logf("the deploy ended %s after the %s (bound %s: its login took %s)", took, event, bound, loginTook)
				if took > bound {
					t.Errorf("the deploy ended %s after the %s, want within %s", took, event, bound)
				}
				r := res[0]
				what := map[string]string{"interrupt": "interrupted", "deadline": "the deadline expired"}[event]
				words := append([]string{fmt.Sprintf("%s during the %s step", what, c.step)}, c.says...)
				for _, form := range c.orSays {
					if !strings.Contains(r.Message, c.says[0]) && strings.Contains(r.Message, form[0]) {
						words = append([]string{fmt.Sprintf("%s during the %s step", what, c.step)}, form...)
					}
				}
				wantPhase(t, r, deploy.PhaseFailed, words...)
				if r.ExitCode != deploy.ExitInterrupted || !r.Interrupted || r.Step != c.step {
					t.Errorf("exit %d, interrupted %v, step %q; want 130, true, %q", r.ExitCode, r.Interrupted, r.Step, c.step)
				}
				if res[1].Phase != deploy.PhasePending || len(tg2.Calls()) != 0 || tg2.AcceptedConnections() != 0 || !strings.Contains(res[1].Message, what+" before this node started") {
					t.Errorf("n2 after the %s: %s %q, calls %v, %d logins", event, res[1].Phase, res[1].Message, tg2.Calls(), tg2.AcceptedConnections())
				}
				c.check(t, tg1, old, system)
			})
		}
	}
}

// An interrupt between two nodes: the first is recorded as it ended, the
// second is never started.
func TestDeployInterruptedBetweenNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two hosts): make test runs it")
	}
	t.Parallel()
	tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg1.Boot(t, old)
	tg2.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == deploy.EventNodeEnded && e.Node == "n1" {
			cancel()
		}
	}
	res := d.Deploy(ctx, []deploy.Target{targetOf(tg1, "n1", sys), targetOf(tg2, "n2", sys)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	wantPhase(t, res[1], deploy.PhasePending, "interrupted before this node started")
	if len(tg2.Calls()) != 0 || tg2.CurrentSystem() != old {
		t.Errorf("n2 was touched: %v", tg2.Calls())
	}
}

// slowCopy is a nix-copy-closure that waits seconds before copying, and
// whose child processes an interrupt must end with it.
func slowCopy(t *testing.T, seconds int) string {
	t.Helper()
	return copyWrapper(t, "sleep "+strconv.Itoa(seconds))
}

// interruptedActivation is how long the activation an interrupted deploy
// leaves running on the host takes: long beside the next deploy's login
// and lock on a busy machine, which must find it, or its watchdog, there.
const interruptedActivation = 10 * time.Second

// interruptActivation deploys system (whose activation takes
// interruptedActivation) to tg as node n1 and interrupts the deploy once
// the host has begun the activation, which runs on there, with its
// watchdog. (An interrupt at a fixed time into the step may come, on a
// busy machine, before the activation reached the host, which then never
// starts it.)
func interruptActivation(t *testing.T, tg *nixtest.Target, system string, opts deploy.Options) {
	t.Helper()
	d := deployer(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var begun sync.WaitGroup
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == deploy.EventStepStarted && e.Step == deploy.StepActivate {
			begun.Go(func() {
				for ctx.Err() == nil && !strings.Contains(tg.Journal(), "activating the configuration") {
					time.Sleep(20 * time.Millisecond)
				}
				cancel()
			})
		}
	}
	r := d.Deploy(ctx, []deploy.Target{targetOf(tg, "n1", system)}, nil)[0]
	cancel()
	begun.Wait()
	if !r.Interrupted || r.Step != deploy.StepActivate {
		t.Fatalf("the first deploy was not interrupted in its activation: %+v", r)
	}
}

// Issue 12 (trial): an interrupted activation runs on on the host, and
// its watchdog switches the host back once it ends unconfirmed. A deploy
// of the host started at once (the operator re-runs apply) waits for both
// before it looks at the host: it switches the host to the new system
// from the system the watchdog restored, and the host stays there.
func TestDeployRightAfterAnInterruptedActivationWaitsForItsWatchdog(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a watchdog): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	slow := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: interruptedActivation})
	next := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	opts := deploy.Options{LockTimeout: time.Minute, Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}}

	interruptActivation(t, tg, slow, opts)

	// One that does not wait long enough is told what holds the host,
	// and where to look.
	impatient := deployer(t, deploy.Options{LockTimeout: time.Second, Verdict: opts.Verdict})
	wantPhase(t, impatient.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", next)}, nil)[0], deploy.PhaseFailed,
		"no deployment holds the host's deploy lock, but an earlier deployment's activation or its rollback watchdog", "did not end within lock_timeout (1s)", "/run/fleet-deploy")

	second := deployer(t, opts)
	var waited []string
	log := second.Options.Log
	second.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == deploy.EventNote && e.Step == deploy.StepLock {
			waited = append(waited, e.Message)
		}
	}
	r := second.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", next)}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if len(waited) == 0 || !strings.Contains(waited[0], "an earlier deployment's activation or its rollback watchdog") {
		t.Errorf("the second deploy did not say it waited for the first one's watchdog: %q", waited)
	}
	if r.PreviousSystem != old {
		t.Errorf("the second deploy switched from %s, want %s (what the watchdog restored)", r.PreviousSystem, old)
	}
	// Past every deadline of the first deploy's watchdog.
	time.Sleep(opts.Verdict.ConfirmTimeout + 2*time.Second)
	if tg.CurrentSystem() != next || tg.BootEntry() != next {
		t.Errorf("after both deploys the host runs %s and boots %s, want %s; calls %v", tg.CurrentSystem(), tg.BootEntry(), next, tg.Calls())
	}
}

// Issue 14 (trial): a deploy of the host right after an interrupted
// activation, with no lock_timeout, fails at once on the interrupted
// deploy's watchdog, and its hint says so and what to do, not that
// another deployment is running.
func TestDeployRightAfterAnInterruptedActivationSaysItsWatchdogHoldsTheLock(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a watchdog): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	slow := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: interruptedActivation})
	opts := deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}}
	interruptActivation(t, tg, slow, opts)
	r := deployer(t, opts).Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed)
	// The host cannot tell an interrupted deploy from a vanished one: the
	// hint says what ends the hold, and names no interrupt.
	if r.ExitCode != 3 || !strings.Contains(r.Message, "watchdog") || !strings.Contains(r.Hint, "that activation has ended") ||
		!strings.Contains(r.Hint, "confirm_timeout") || strings.Contains(r.Hint, "another deployment") || strings.Contains(r.Message+r.Hint, "interrupt") {
		t.Errorf("exit %d, message %q, hint %q: want exit 3 naming the watchdog, and a hint to wait for it or set lock_timeout", r.ExitCode, r.Message, r.Hint)
	}
	// Let the activation and its watchdog end before the host goes.
	for end := time.Now().Add(interruptedActivation + opts.Verdict.ConfirmTimeout + 30*time.Second); len(tg.Leftovers()) > 0 && time.Now().Before(end); {
		time.Sleep(200 * time.Millisecond)
	}
}

// Issue 12 (trial): a deploy interrupted while it waits for the host's
// deploy lock leaves nothing waiting on the host.
func TestDeployInterruptedInTheLockWaitLeavesNoWaiter(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	tg.HoldDeployLock(t, "apply A")
	d := deployer(t, deploy.Options{LockTimeout: 5 * time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == deploy.EventNote && e.Step == deploy.StepLock {
			cancel() // it is waiting, and said for whom
		}
	}
	r := d.Deploy(ctx, []deploy.Target{targetOf(tg, "n1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))}, nil)[0]
	if !r.Interrupted || r.Step != deploy.StepLock {
		t.Fatalf("not interrupted in the lock step: %+v", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		waiters := lockWaiters(t)
		if len(waiters) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the interrupt, processes still wait for the deploy lock: %v", waiters)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lockWaiters are the processes of this machine running a lock wait of
// this test's deployments.
func lockWaiters(t *testing.T) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "until flock -n 9") && strings.Contains(string(b), t.Name()) {
			found = append(found, filepath.Base(filepath.Dir(p)))
		}
	}
	return found
}

// Issue 37 (a review's reproduction): the activation's first attempt
// meets a held switch lock (exit 11) and the retry is interrupted while it
// runs. The watchdog's clock starts when the retry has ended, not when
// the first attempt did, and its switch back is the run's last switch:
// the host ends on the old system, never on the unconfirmed new one with
// no watchdog left.
func TestDeployInterruptedRetryOfAnActivationIsSwitchedBackAfterItEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a retried activation and its watchdog): make test runs it")
	}
	t.Parallel()
	tg, old, sys, opts := retriedActivation(t)

	interruptActivation(t, tg, sys, opts) // once the retry logs "activating the configuration"

	// The retry's switch to sys, then the watchdog's back to old.
	deadline := time.Now().Add(retriedActivationTakes + opts.Verdict.ConfirmTimeout + 30*time.Second)
	for {
		events := tg.Events()
		last, switched := "", false
		for _, e := range events {
			if e.Kind == "set-current" {
				last = e.System
				switched = switched || e.System == sys
			}
		}
		if switched && last == old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host runs %s (switched to the new system: %v); want the retry's switch to the new system, then the watchdog's back to %s; events %+v",
				tg.CurrentSystem(), switched, old, events)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Nothing switches it again.
	time.Sleep(2 * time.Second)
	if tg.CurrentSystem() != old {
		t.Errorf("after the watchdog switched it back, the host runs %s; want %s", tg.CurrentSystem(), old)
	}
}

// retriedActivationTakes is how long the retry of retriedActivation's
// system takes: longer than its confirm_timeout, so that a watchdog that
// counted from the first attempt's end decides while it runs.
const retriedActivationTakes = 8 * time.Second

// retriedActivation boots a host on old, and makes the system sys whose
// first activation meets the switch lock held (exit 11) and whose retry
// takes retriedActivationTakes, with the options that retry it at once.
func retriedActivation(t *testing.T) (tg *nixtest.Target, old, sys string, opts deploy.Options) {
	t.Helper()
	tg = nixtest.NewTarget(t)
	old = nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys = nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.LockHeld, LockedCalls: 1, LockedAction: "test", Delay: retriedActivationTakes})
	opts = deploy.Options{BootLockAttempts: 3, BootLockInterval: 100 * time.Millisecond,
		Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}}
	return tg, old, sys, opts
}
