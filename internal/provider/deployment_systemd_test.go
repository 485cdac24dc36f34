package provider_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/systemdtest"
)

// systemdDeploymentConfig deploys system to the real systemd host tg.
func systemdDeploymentConfig(tg *systemdtest.Target, system string, extra ...string) string {
	return fmt.Sprintf(`
resource "fleet_ssh_deployment" "prod" {
  nodes = [{
    name             = "ct1"
    host             = %q
    system           = %q
    host_key         = %q
    user             = %q
    private_key_file = %q
    ssh_opts         = ["Port=%d", "IdentitiesOnly=yes"]
  }]
  verdict = {
    confirm_timeout = "10s"
    settle_timeout  = "20s"
  }
%s}
`, tg.Host, system, tg.HostKey, tg.User, tg.ClientKeyFile, tg.Port, strings.Join(extra, "\n"))
}

// Issue 12: the deployment through one CLI (AlternateCLIs) against a real systemd host
// (a Debian container booted with systemd-nspawn): a switch judged by real
// systemctl succeeds and moves the boot entry; a system whose unit fails
// (exit 4, degraded) is rolled back by the host and the boot entry never
// moves; a switch by hand on the host shows as drift and is switched back.
func TestDeploymentOnARealSystemdHost(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := systemdtest.NewTarget(t)
			old := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
			tg.Boot(t, old)
			good := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(systemdDeploymentConfig(tg, old))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			// Issue 16: the plan's opt-in dry activation copies the closure
			// and asks the new system which units its switch changes,
			// changing nothing that runs; the switch then restarts those.
			s.WriteConfig(systemdDeploymentConfig(tg, good, "  plan_dry_activate = true\n"))
			plan, _ := s.Run("plan", "-input=false", "-no-color", "-out=tfplan")
			if !strings.Contains(plan, "units (advisory, from the new system's dry activation): restart "+systemdtest.DefaultUnit+"\n") {
				t.Errorf("the plan does not name the unit the dry activation restarts:\n%s", plan)
			}
			if calls := tg.Calls(); !slices.Contains(calls, "dry-activate "+good) || tg.CurrentSystem() != old || !tg.HasPath(t, good) {
				t.Errorf("after the plan: calls %q, current %s, closure copied %v; want a dry activation of the copied closure and %s still running", calls, tg.CurrentSystem(), tg.HasPath(t, good), old)
			}
			s.Run("apply", "-input=false", "tfplan")
			if calls := tg.Calls(); !slices.Contains(calls, "test "+good) {
				t.Errorf("the apply's calls: %q", calls)
			}
			// Below: the unit runs from the new system, restarted by the switch.
			if tg.CurrentSystem() != good || tg.BootEntry() != good || tg.SystemState(t) != "running" {
				t.Fatalf("after the switch: current %s, boot %s, state %s", tg.CurrentSystem(), tg.BootEntry(), tg.SystemState(t))
			}
			if svc := tg.Service(t, systemdtest.DefaultUnit); svc.ActiveState != "active" || svc.System != good {
				t.Errorf("%s after the switch: %+v", systemdtest.DefaultUnit, svc)
			}
			s.WantNoChanges()

			bad := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.FailUnit})
			s.WriteConfig(systemdDeploymentConfig(tg, bad))
			_, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for ct1 (exit 4)") {
				t.Errorf("a system whose unit fails: exit %d\n%s", code, errOut)
			}
			rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)
			if rec["phase"] != "RolledBack" || !strings.Contains(fmt.Sprint(rec["message"]), "rolled back to "+good) {
				t.Errorf("the failed node's record: %v", rec)
			}
			if tg.CurrentSystem() != good || tg.BootEntry() != good || tg.SystemState(t) != "running" {
				t.Errorf("after the rollback: current %s, boot %s, state %s", tg.CurrentSystem(), tg.BootEntry(), tg.SystemState(t))
			}

			// Back to the good system: nothing to do. Then a switch by hand.
			s.WriteConfig(systemdDeploymentConfig(tg, good))
			s.Run("apply", "-auto-approve", "-input=false")
			if _, code := tg.Switch(t, old); code != 0 {
				t.Fatalf("switching the host by hand failed")
			}
			plan, _, code = s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			if code != 2 || !strings.Contains(plan, `"ct1" = "drift" -> "switch"`) || !strings.Contains(plan, "Node ct1 drifted") {
				t.Errorf("the plan after a switch by hand (exit %d):\n%s", code, plan)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			if tg.CurrentSystem() != good {
				t.Errorf("the drift was not switched back: %s", tg.CurrentSystem())
			}
			s.WantNoChanges()
		})
	}
}
