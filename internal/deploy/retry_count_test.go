package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// lockRun is one node's deploy to a system whose action holds the switch
// lock (exit 11) for its first locked calls: what the host was asked and
// what the deployer logged.
type lockRun struct {
	tg       *nixtest.Target
	old, sys string
	r        deploy.Result
	notes    []string      // the step's notes, in order
	took     time.Duration // how long the step took, as its end event says
	// first is how long the first attempt took: from the step's start to
	// its first note of a held lock.
	first time.Duration
}

// calls is how many times the host was asked to run action on the new
// system.
func (l lockRun) calls(action string) int {
	n := 0
	for _, c := range l.tg.Calls() {
		if c == action+" "+l.sys {
			n++
		}
	}
	return n
}

func deployLocked(t *testing.T, action string, step deploy.StepName, locked int, opts deploy.Options) lockRun {
	t.Helper()
	l := lockRun{tg: nixtest.NewTarget(t), old: nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})}
	l.tg.Boot(t, l.old)
	l.sys = nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.LockHeld, LockedCalls: locked, LockedAction: action})
	opts.Verdict = deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}
	d := deployer(t, opts)
	var mu sync.Mutex
	var started time.Time
	logged := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		logged(e)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Step != step:
		case e.Kind == deploy.EventStepStarted:
			started = time.Now()
		case e.Kind == deploy.EventNote && strings.Contains(e.Message, "exit 11"):
			if len(l.notes) == 0 {
				l.first = time.Since(started)
			}
			l.notes = append(l.notes, e.Message)
		case e.Kind == deploy.EventStepEnded:
			l.took = e.Took
		}
	}
	l.r = d.Deploy(context.Background(), []deploy.Target{targetOf(l.tg, "web1", l.sys)}, nil)[0]
	return l
}

// wantAttemptNotes checks the notes of a step that met the lock on every
// attempt but the last: one per retry, counting up to attempts-1 of
// attempts.
func wantAttemptNotes(t *testing.T, notes []string, retries, attempts int) {
	t.Helper()
	var want []string
	for i := 1; i <= retries; i++ {
		want = append(want, fmt.Sprintf("attempt %d of %d", i, attempts))
	}
	if len(notes) != len(want) {
		t.Errorf("%d notes of a held lock, want %d (%s): %q", len(notes), len(want), strings.Join(want, ", "), notes)
		return
	}
	for i, w := range want {
		if !strings.Contains(notes[i], w) {
			t.Errorf("note %d %q does not say %q", i+1, notes[i], w)
		}
	}
}

// FR-010, US3-1, SC-003, counted: with boot_lock_attempts = N, a switch
// lock held (exit 11) is tried exactly N times, in the activation's loop
// and in the boot default's alike. A lock let go before the Nth attempt
// is taken on it; one held through the Nth fails the node after N
// attempts, no more (the message says how many), and costs the N-1
// intervals between them and the N attempts (SC-003: within N intervals,
// as an attempt is short beside one).
func TestDeploySwitchLockIsTriedExactlyTheAttemptsItIsGiven(t *testing.T) {
	const attempts = 4
	// The interval is long beside one attempt (a command over the node's
	// open master connection, tens of milliseconds), so SC-003's bound
	// holds with room to spare and a fifth attempt would break it.
	const interval = 2 * time.Second
	for _, c := range []struct {
		action string
		step   deploy.StepName
		failed deploy.Phase
		words  []string
	}{
		{"test", deploy.StepActivate, deploy.PhaseRolledBack, []string{"switch lock (exit 11) for every attempt"}},
		{"boot", deploy.StepFinalise, deploy.PhaseFailed, []string{fmt.Sprintf("held for all %d attempts, %s apart", attempts, interval)}},
	} {
		t.Run(c.action, func(t *testing.T) {
			// Let go before the last attempt: taken on it.
			l := deployLocked(t, c.action, c.step, attempts-1, deploy.Options{BootLockAttempts: attempts, BootLockInterval: 100 * time.Millisecond})
			wantPhase(t, l.r, deploy.PhaseSucceeded)
			if n := l.calls(c.action); n != attempts {
				t.Errorf("%s %s was called %d times, want %d (%d held, then taken)", c.action, l.sys, n, attempts, attempts-1)
			}
			wantAttemptNotes(t, l.notes, attempts-1, attempts)
			if l.tg.CurrentSystem() != l.sys || l.tg.BootEntry() != l.sys {
				t.Errorf("after the lock was taken: current %s, boot %s; want %s", l.tg.CurrentSystem(), l.tg.BootEntry(), l.sys)
			}

			// Held through the last attempt: the node fails after it.
			l = deployLocked(t, c.action, c.step, attempts, deploy.Options{BootLockAttempts: attempts, BootLockInterval: interval})
			wantPhase(t, l.r, c.failed, c.words...)
			if n := l.calls(c.action); n != attempts {
				t.Errorf("%s %s was called %d times with the lock held throughout, want boot_lock_attempts = %d", c.action, l.sys, n, attempts)
			}
			wantAttemptNotes(t, l.notes, attempts-1, attempts)
			if l.r.ExitCode != deploy.ExitSwitchLocked {
				t.Errorf("exit %d, want %d", l.r.ExitCode, deploy.ExitSwitchLocked)
			}
			// SC-003: the intervals between the attempts, and the attempts
			// themselves (each about as long as the first, measured: a busy
			// machine makes them longer), with half an interval to spare:
			// less than one more interval, which a fifth attempt would add.
			bound := (attempts-1)*interval + attempts*l.first + interval/2
			if l.took < (attempts-1)*interval || l.took > bound {
				t.Errorf("the %s step took %s with the lock held: want at least the %d intervals between %d attempts (%s) and at most those and %d attempts of %s each (%s, SC-003)",
					c.step, l.took, attempts-1, attempts, (attempts-1)*interval, attempts, l.first, bound)
			}
			if l.tg.BootEntry() != l.old || c.action == "test" && l.tg.CurrentSystem() != l.old {
				t.Errorf("after the lock held: current %s, boot %s; want the boot entry (and, when the activation never ran, the current system) still %s",
					l.tg.CurrentSystem(), l.tg.BootEntry(), l.old)
			}
		})
	}
}
