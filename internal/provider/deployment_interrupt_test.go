package provider_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Ctrl-C during the first node's activation, through the built provider
// and both CLIs: the apply stops after that step and saves a truthful
// state. The first node is recorded failed (interrupted, naming the step
// and what the host runs), never switched; the second, not reached, is
// pending and untouched; the host rolls the unconfirmed activation back by
// itself; the next apply retries both and converges.
func TestDeploymentCtrlCDuringActivation(t *testing.T) {
	t.Setenv("NIX_CONFIG", nixtest.NixConfig)
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg1.Boot(t, old)
			tg2.Boot(t, old)
			nodes := []*nixtest.Target{tg1, tg2}
			slow := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 6 * time.Second})
			sys2 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(deploymentConfig(nodes, []string{slow, sys2}, ""))
			var at time.Time
			stdout, stderr, took := s.InterruptWhen(func() bool {
				if strings.Contains(tg1.Journal(), "activating the configuration") {
					at = time.Now()
					return true
				}
				return false
			}, "apply", "-auto-approve", "-input=false", "-no-color")
			if since := time.Since(at); since > 5*time.Second {
				t.Errorf("the apply ended %s after the interrupt (the activation had 6 s to go)", since)
			}
			t.Logf("interrupted apply took %s:\n%s\n%s", took, stdout, stderr)

			v := s.Values("fleet_ssh_deployment.prod")
			if got := fmt.Sprint(v["actions"]); got != "map[n1:failed n2:pending]" {
				t.Errorf("actions after the interrupt: %s", got)
			}
			st, _ := v["status"].([]any)
			if len(st) != 2 {
				t.Fatalf("status after the interrupt: %v", v["status"])
			}
			n1, _ := st[0].(map[string]any)
			n2, _ := st[1].(map[string]any)
			if n1["phase"] != "Failed" || !strings.Contains(fmt.Sprint(n1["message"]), "interrupted during activation") ||
				!strings.Contains(fmt.Sprint(n1["message"]), "it runs "+old) {
				t.Errorf("n1's record: phase %v, message %v", n1["phase"], n1["message"])
			}
			if n2["phase"] != "Pending" || len(tg2.Calls()) != 0 || tg2.CurrentSystem() != old {
				t.Errorf("n2: phase %v, calls %v, current %s", n2["phase"], tg2.Calls(), tg2.CurrentSystem())
			}

			// The activation ends on the host; unconfirmed, the host's
			// watchdog rolls it back (confirm_timeout is 3 s).
			deadline := time.Now().Add(30 * time.Second)
			for (tg1.CurrentSystem() != old || !strings.Contains(strings.Join(tg1.Calls(), "\n"), "test "+old)) && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			if tg1.CurrentSystem() != old || tg1.BootEntry() != old {
				t.Errorf("n1 after its watchdog: current %s, boot %s; want %s (calls %v)", tg1.CurrentSystem(), tg1.BootEntry(), old, tg1.Calls())
			}

			plan, _, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			if code != 2 || !strings.Contains(plan, `"n1" = "failed" -> "switch"`) || !strings.Contains(plan, `"n2" = "pending" -> "switch"`) {
				t.Errorf("plan after the interrupt (exit %d):\n%s", code, plan)
			}
			sys1 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s.WriteConfig(deploymentConfig(nodes, []string{sys1, sys2}, ""))
			s.Run("apply", "-auto-approve", "-input=false")
			if tg1.CurrentSystem() != sys1 || tg2.CurrentSystem() != sys2 || tg1.BootEntry() != sys1 || tg2.BootEntry() != sys2 {
				t.Errorf("after the retry: n1 %s, n2 %s", tg1.CurrentSystem(), tg2.CurrentSystem())
			}
			s.WantNoChanges()
		})
	}
}
