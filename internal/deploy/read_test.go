package deploy_test

import (
	"context"
	"os"
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
