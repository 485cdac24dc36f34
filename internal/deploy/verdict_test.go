package deploy

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
)

// The verdict matrix: each rule, in order, with what decides and its words.
func TestDecide(t *testing.T) {
	t.Parallel()
	const sys = "/nix/store/abc-nixos-system-web1"
	ok := Observed{ActivationExit: 0, Reconnected: true, CurrentSystem: sys, SystemState: "running"}
	with := func(f func(*Observed)) Observed { o := ok; f(&o); return o }
	cases := []struct {
		name   string
		o      Observed
		rules  VerdictRules
		passed bool
		reason string
		words  []string
	}{
		{"clean", ok, VerdictRules{}, true, "VerdictPassed", nil},
		{"exit 4, units not allowed", with(func(o *Observed) { o.ActivationExit = 4; o.FailedUnits = []string{"nginx.service"} }), VerdictRules{}, false, "UnitsFailed", []string{"nginx.service", "allow_failed_units"}},
		{"exit 4, units allowed", with(func(o *Observed) {
			o.ActivationExit = 4
			o.FailedUnits = []string{"nginx.service"}
			o.SystemState = "degraded"
		}),
			VerdictRules{AllowFailedUnits: []string{"nginx.service"}}, true, "VerdictPassed", nil},
		{"exit 4, one allowed one not", with(func(o *Observed) { o.ActivationExit = 4; o.FailedUnits = []string{"a.service", "b.service"} }),
			VerdictRules{AllowFailedUnits: []string{"a.service"}}, false, "UnitsFailed", []string{"b.service"}},
		{"exit 11 throughout", with(func(o *Observed) { o.ActivationExit = 11 }), VerdictRules{}, false, "SwitchLockBusy", []string{"exit 11"}},
		{"reboot required", with(func(o *Observed) { o.ActivationExit = 100 }), VerdictRules{}, false, "RebootRequired", []string{"reboot", "goal boot"}},
		{"reboot required, allowed", with(func(o *Observed) { o.ActivationExit = 100 }), VerdictRules{AllowRebootRequired: true}, true, "VerdictPassed", nil},
		{"other exit", with(func(o *Observed) { o.ActivationExit = 1 }), VerdictRules{}, false, "ActivationFailed", []string{"exited 1"}},
		{"SSH cut off", with(func(o *Observed) { o.Reconnected = false; o.ReconnectError = "Connection refused" }), VerdictRules{}, false, "HostUnreachableAfterActivation", []string{"Connection refused", "rolls itself back"}},
		{"session dropped, host says switched", with(func(o *Observed) { o.ActivationExit = -1 }), VerdictRules{}, true, "VerdictPassed", nil},
		{"session dropped, host says not", with(func(o *Observed) { o.ActivationExit = -1; o.CurrentSystem = "/nix/store/old" }), VerdictRules{}, false, "SystemNotActive", []string{"/nix/store/old"}},
		{"degraded, unit not allowed", with(func(o *Observed) { o.SystemState = "degraded"; o.FailedUnits = []string{"x.service"} }), VerdictRules{}, false, "UnitsFailed", []string{"x.service"}},
		{"not settled", with(func(o *Observed) { o.SystemState = "starting" }), VerdictRules{}, false, "SystemNotSettled", []string{"starting"}},
		{"user checks", with(func(o *Observed) { o.CheckFailures = []string{"http https://web1/: status 502, expected 200"} }), VerdictRules{}, false, "ChecksFailed", []string{"status 502"}},
	}
	for _, c := range cases {
		v := Decide(sys, c.o, c.rules)
		if v.Passed != c.passed || v.Reason != c.reason {
			t.Errorf("%s: %+v, want passed=%v reason=%s", c.name, v, c.passed, c.reason)
		}
		for _, w := range c.words {
			if !strings.Contains(v.Message+" "+v.Hint, w) {
				t.Errorf("%s: %q / %q does not say %q", c.name, v.Message, v.Hint, w)
			}
		}
	}
}

func TestFailedLine(t *testing.T) {
	t.Parallel()
	if got := FailedLine("web1", 4, "the activation failed units: nginx.service"); got != "DEPLOY FAILED for web1 (exit 4): the activation failed units: nginx.service" {
		t.Errorf("FailedLine = %q", got)
	}
}

// The node's phase ladder: each way a deploy ends is recorded as
// conditions, and the phase derived from them is that way, whatever the
// conditions before it said.
func TestNodePhaseLadder(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		r    Result
		want Phase
	}{
		{"succeeded", Result{Phase: PhaseSucceeded, Goal: GoalSwitch}, PhaseSucceeded},
		{"failed", Result{Phase: PhaseFailed, Outcomes: map[Condition]Outcome{CondActivated: {Reason: "ActivationFailed"}}}, PhaseFailed},
		{"interrupted", Result{Phase: PhaseFailed, Interrupted: true}, PhaseFailed},
		{"rolled back", Result{Phase: PhaseRolledBack}, PhaseRolledBack},
		{"outcome not known", Result{Phase: PhaseUnknown}, PhaseUnknown},
		{"held", Result{Phase: PhaseSkipped}, PhaseSkipped},
		{"not started", Result{Phase: PhasePending}, PhasePending},
	} {
		for _, before := range []Phase{PhaseSucceeded, PhaseRolledBack, PhaseUnknown, PhaseSkipped} {
			prev, err := NodeConditions(nil, Result{Name: "web1", Phase: before, Goal: GoalSwitch}, 1, at)
			if err != nil {
				t.Fatal(err)
			}
			c.r.Name = "web1"
			conds, err := NodeConditions(prev, c.r, 2, at.Add(time.Minute))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := NodePhase(conds); got != c.want {
				t.Errorf("%s after %s: phase %s, want %s (%+v)", c.name, before, got, c.want, conds)
			}
		}
	}
}

// A node held after a deploy keeps the steps' conditions that deploy
// recorded; only Ready says it is held. One state has no steps of gets
// them all as skipped.
func TestHeldNodeKeepsItsSteps(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	prev, err := NodeConditions(nil, Result{Name: "web1", Phase: PhaseSucceeded, Goal: GoalSwitch}, 1, at)
	if err != nil {
		t.Fatal(err)
	}
	held, err := NodeConditions(prev, Result{Name: "web1", Phase: PhaseSkipped, Message: "held"}, 2, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range held {
		if c.Type == ConditionReady {
			if c.Status != conditions.Unknown || c.Reason != ReasonSkipped {
				t.Errorf("Ready of a held node: %+v", c)
			}
			continue
		}
		if was, _ := conditions.Find(prev, c.Type); c != was {
			t.Errorf("holding changed %s: %+v -> %+v", c.Type, was, c)
		}
	}
	fresh, err := NodeConditions(nil, Result{Name: "web1", Phase: PhaseSkipped, Message: "held"}, 1, at)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range fresh {
		if c.Reason != ReasonSkipped {
			t.Errorf("a node held from its first apply: %+v", c)
		}
	}
}
