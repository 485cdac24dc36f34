package deploy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// The exit-4 rule end to end, where the degraded-state rule would pass: an
// activation that exits 4 ("some units failed") passes only when every
// unit systemd lists failed is in verdict.allow_failed_units, even when
// systemd says the system is running (a unit restarted since, say), which
// alone would pass the verdict. The node is rolled back naming the units
// not allowed, and only those.
func TestDeployExitFourPassesOnlyWithEveryFailedUnitAllowed(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (three deploys with rollbacks): make test runs it")
	}
	t.Parallel()
	for _, c := range []struct {
		name         string
		failed       []string
		allowed      []string
		phase        deploy.Phase
		names, omits []string
	}{
		{"one failed, none allowed", []string{"db.service"}, nil, deploy.PhaseRolledBack, []string{"the activation failed units: db.service"}, nil},
		{"two failed, one allowed", []string{"cups.service", "db.service"}, []string{"cups.service"}, deploy.PhaseRolledBack,
			[]string{"the activation failed units: db.service"}, []string{"cups.service"}},
		{"every one allowed", []string{"cups.service", "db.service"}, []string{"db.service", "cups.service"}, deploy.PhaseSucceeded, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			tg.SetSystemState(t, "running") // whatever units failed
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: c.failed})
			d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second,
				Rules: deploy.VerdictRules{AllowFailedUnits: c.allowed}}})
			r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
			wantPhase(t, r, c.phase, c.names...)
			for _, u := range c.omits {
				if strings.Contains(r.Message, u) {
					t.Errorf("the message names %s, which is allowed: %s", u, r.Message)
				}
			}
			verdict := r.Outcomes[deploy.CondVerdict]
			want := old
			if c.phase == deploy.PhaseSucceeded {
				want = sys
				if !verdict.Passed {
					t.Errorf("verdict %+v, want passed", verdict)
				}
			} else if verdict.Passed || verdict.Reason != "UnitsFailed" || r.ExitCode != deploy.ExitUnitsFailed {
				t.Errorf("verdict %+v, exit %d; want failed for UnitsFailed, exit 4", verdict, r.ExitCode)
			}
			if tg.CurrentSystem() != want || tg.BootEntry() != want {
				t.Errorf("host: current %s, boot %s; want both %s", tg.CurrentSystem(), tg.BootEntry(), want)
			}
		})
	}
}
