package deploy_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// FR-010: switch-to-configuration boot runs under timeout 120. The bound
// is 120 s unless a test scales it; scaled to 3 s, a bootloader step that
// hangs (after a passing verdict) ends at the bound, not at the caller's
// deadline: the node fails in the finalise step with timeout(1)'s exit
// 124, saying so, and the boot entry is left alone.
func TestDeployBootHangEndsAtTheBound(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out the boot bound): make test runs it")
	}
	t.Parallel()
	if got := deploy.BootTimeout(&deploy.Deployer{}); got != 120*time.Second {
		t.Errorf("the bound on switch-to-configuration boot is %s, want 120s (FR-010)", got)
	}
	const bound = 3 * time.Second
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.BootHangs})
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	deploy.SetBootTimeout(d, bound)
	var (
		mu      sync.Mutex
		started time.Time
	)
	logged := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		logged(e)
		if e.Kind == deploy.EventStepStarted && e.Step == deploy.StepFinalise {
			mu.Lock()
			started = time.Now()
			mu.Unlock()
		}
	}
	// Without the bound the hang lasts an hour: this deadline ends it, and
	// the node is then interrupted, not failed with exit 124.
	ctx, cancel := context.WithTimeout(context.Background(), bound+30*time.Second)
	defer cancel()
	r := d.Deploy(ctx, []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
	ended := time.Now()
	wantPhase(t, r, deploy.PhaseFailed, "switch-to-configuration boot failed", "did not finish within 3s")
	if r.ExitCode != 124 || r.Step != deploy.StepFinalise || r.Interrupted {
		t.Errorf("exit %d in step %q (interrupted %v); want 124 in %q", r.ExitCode, r.Step, r.Interrupted, deploy.StepFinalise)
	}
	mu.Lock()
	took := ended.Sub(started)
	mu.Unlock()
	if started.IsZero() || took < bound || took > bound+15*time.Second {
		t.Errorf("the finalise step took %s; want the bound (%s), give or take the round trip", took, bound)
	}
	if tg.BootEntry() != old || tg.CurrentSystem() != sys {
		t.Errorf("host: boot entry %s (want still %s), current %s (want %s)", tg.BootEntry(), old, tg.CurrentSystem(), sys)
	}
}
