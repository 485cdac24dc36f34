package deploy_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// What a read of a host claims passed its verdict there is what did, and
// only while the host is not settling a run on its own (issue 37's trial:
// after goal boot of a system, then an interrupted switch to it, an apply
// in the watchdog's window took the host for converged, without its lock,
// and recorded Succeeded on a system the host was about to leave). Goal
// boot judges nothing: the host records its system as the boot default,
// not as verified. A host whose watchdog has not finished claims nothing
// verified until it has; a watchdog's state left by a killed one does not
// count.
func TestReadCurrentClaimsOnlyWhatPassed(t *testing.T) {
	t.Parallel()
	tg, old, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{Goal: deploy.GoalBoot})
	wantPhase(t, r, deploy.PhaseSucceeded, "is the boot default from the next boot")
	if r.VerifiedSystem == sys {
		t.Errorf("goal boot recorded %s as verified: no verdict judged it", sys)
	}
	d := deployer(t, deploy.Options{})
	s := targetOf(tg, "web1", sys).Settings
	read := func() deploy.Current {
		t.Helper()
		cur, err := d.ReadCurrent(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}
	cur := read()
	if cur.System != old || cur.Succeeded == sys || cur.BootDefault != sys || cur.Settling {
		t.Errorf("after goal boot: %+v; want running %s, %s the boot default and not verified, not settling", cur, old, sys)
	}
	if phase, msg := deploy.Settle(deploy.GoalBoot, sys, old, cur); phase != deploy.PhaseSucceeded {
		t.Errorf("a refresh settles an unknown goal boot deploy as %s (%s), want Succeeded: the boot entry was made", phase, msg)
	}

	// A run's watchdog waits for its decision, alive: it holds the guard.
	if err := os.WriteFile(tg.Path(agreement.SucceededFile), []byte(old+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kill := tg.SettleRun(t)
	if cur := read(); !cur.Settling || cur.Succeeded != "" || cur.System != old {
		t.Errorf("while a watchdog settles a run: %+v; want settling, nothing verified", cur)
	}
	// Killed: its state stays behind, the guard is free.
	kill()
	if cur := read(); cur.Settling || cur.Succeeded != old {
		t.Errorf("after the watchdog was killed: %+v; want not settling, %s verified", cur, old)
	}
}

// What a refresh settles an unknown record as, case by case: a host that
// runs the node's system that no finished deploy judged says that no
// verdict judged it or its boot entry was not made (a deploy that rebooted
// the host and did not see it back made the entry: it once said only that
// the boot entry was not made).
func TestSettleSaysWhatTheHostRunsAndBoots(t *testing.T) {
	t.Parallel()
	const sys, old, other = "/nix/store/s-new", "/nix/store/s-old", "/nix/store/s-other"
	for _, c := range []struct {
		name  string
		cur   deploy.Current
		phase deploy.Phase
		says  string
	}{
		{"verified", deploy.Current{System: sys, Succeeded: sys, Boots: sys}, deploy.PhaseSucceeded, "passed its verdict"},
		{"back on the one before", deploy.Current{System: old, Boots: old}, deploy.PhaseRolledBack, "rolled back"},
		{"runs it, not judged", deploy.Current{System: sys, Boots: sys}, deploy.PhaseFailed, "no verdict judged it there, or its boot entry was not made"},
		{"something else", deploy.Current{System: other, Boots: other}, deploy.PhaseFailed, "neither"},
	} {
		phase, msg := deploy.Settle(deploy.GoalSwitch, sys, old, c.cur)
		if phase != c.phase || !strings.Contains(msg, c.says) {
			t.Errorf("%s: settled as %s (%s), want %s saying %q", c.name, phase, msg, c.phase, c.says)
		}
	}
}
