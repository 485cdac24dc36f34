package deploy

import (
	"strings"
	"testing"
)

// The verdict matrix: each rule, in order, with what decides and its words.
func TestDecide(t *testing.T) {
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
	if got := FailedLine("web1", 4, "the activation failed units: nginx.service"); got != "DEPLOY FAILED for web1 (exit 4): the activation failed units: nginx.service" {
		t.Errorf("FailedLine = %q", got)
	}
}
