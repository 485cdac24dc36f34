package provider_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Issue 22: an apply whose deployer cannot start (a TMPDIR others can
// write without the sticky bit, which the provider refuses) records what
// happened, through one CLI (acctest.AlternateCLIs), on a create and on an update: the apply
// fails naming the directory, every node is pending (no exit code, the
// reason in its message), an update keeps what the last apply found on
// the hosts, the hosts run what they ran, the next plan switches every
// node, and once TMPDIR is fixed an apply converges and a plan is empty.
// Before, state held the plan's prediction of a success, and no later
// plan switched anything.
func TestDeploymentApplyThatCannotStartRecordsWhatHappened(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
			nodes := []*nixtest.Target{tg1, tg2}
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg1.Boot(t, old)
			tg2.Boot(t, old)
			// The provider's own TMPDIR (the built provider runs in the
			// session's environment; the test process keeps its own).
			// Short enough for ssh's control sockets (a longer one is passed
			// over for /tmp, unchecked), which t.TempDir's are not.
			tmp, err := os.MkdirTemp("", "fleet-tmp") //nolint:usetesting
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(tmp) })
			if len(tmp) > 30 {
				t.Fatalf("TMPDIR %s is too long for the deployer to use: the test needs a short temporary directory", tmp)
			}
			breakTmp := func() {
				t.Helper()
				if err := os.Chmod(tmp, 0o777); err != nil { // others can write, no sticky bit
					t.Fatal(err)
				}
			}
			fixTmp := func() {
				t.Helper()
				if err := os.Chmod(tmp, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			s := acctest.NewBinarySession(t, cli, binary)
			s.Setenv("TMPDIR", tmp)

			// failedApply applies systems with TMPDIR broken and checks what
			// the failed apply recorded: before is what each node's host ran
			// before it, as state should still say.
			failedApply := func(op string, systems []string, before []string) {
				t.Helper()
				breakTmp()
				s.WriteConfig(deploymentConfig(nodes, systems, ""))
				// The plan says so, and the apply goes on to record it.
				if out, errOut := s.Run("plan", "-input=false", "-no-color"); !strings.Contains(out+errOut, "Unusable temporary directory") {
					t.Errorf("%s: a plan with a TMPDIR others can write does not warn:\n%s\n%s", op, out, errOut)
				}
				out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
				flat := strings.Join(strings.Fields(errOut), " ")
				if code != 1 || !strings.Contains(flat, "n1, n2 not started") || !strings.Contains(flat, tmp) ||
					!strings.Contains(flat, "without the sticky bit") {
					t.Errorf("%s with a TMPDIR others can write: exit %d, want 1 and an error naming %s\n%s\n%s", op, code, tmp, out, errOut)
				}
				if strings.Contains(out+errOut, "inconsistent") || strings.Contains(out+errOut, "invalid result object") {
					t.Errorf("%s: Terraform found the result inconsistent:\n%s\n%s", op, out, errOut)
				}
				v := s.Values("fleet_ssh_deployment.prod")
				if got := fmt.Sprint(v["actions"]); got != "map[n1:pending n2:pending]" {
					t.Errorf("%s: actions in state %s, want both pending", op, got)
				}
				if v["phase"] != "Failed" || fmt.Sprint(v["succeeded_nodes"]) != "[]" || fmt.Sprint(v["failed_nodes"]) != "[n1 n2]" {
					t.Errorf("%s: phase %v, succeeded %v, failed %v; want Failed, none, both", op, v["phase"], v["succeeded_nodes"], v["failed_nodes"])
				}
				for i, tg := range nodes {
					rec := nodeRecord(t, v, i)
					msg := strings.Join(strings.Fields(fmt.Sprint(rec["message"])), " ")
					if rec["phase"] != "Pending" || rec["action"] != "pending" || rec["exit_code"] != nil ||
						!strings.HasPrefix(msg, "not started: ") || !strings.Contains(msg, tmp) {
						t.Errorf("%s: n%d's record: phase %v, action %v, exit_code %v, message %q; want Pending, pending, null and the reason",
							op, i+1, rec["phase"], rec["action"], rec["exit_code"], msg)
					}
					if rec["current_system"] != before[i] || rec["verified_system"] != before[i] {
						t.Errorf("%s: n%d's record says its host runs %v (verified %v), want what state said before: %q",
							op, i+1, rec["current_system"], rec["verified_system"], before[i])
					}
					if rec["started_at"] != "" || rec["finished_at"] != "" {
						t.Errorf("%s: n%d, not started, has times: %v, %v", op, i+1, rec["started_at"], rec["finished_at"])
					}
					if tg.CurrentSystem() == systems[i] || tg.BootEntry() == systems[i] {
						t.Errorf("%s: n%d's host was switched: current %s, boot %s", op, i+1, tg.CurrentSystem(), tg.BootEntry())
					}
				}
				plan, errOut, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
				for _, want := range []string{`"n1" = "pending" -> "switch"`, `"n2" = "pending" -> "switch"`} {
					if code != 2 || !strings.Contains(plan, want) {
						t.Errorf("%s: the plan after the failed apply (exit %d) does not show %s:\n%s\n%s", op, code, want, plan, errOut)
					}
				}
			}
			converge := func(op string, systems []string) {
				t.Helper()
				fixTmp()
				s.Run("apply", "-auto-approve", "-input=false")
				for i, tg := range nodes {
					if tg.CurrentSystem() != systems[i] || tg.BootEntry() != systems[i] {
						t.Errorf("%s: once TMPDIR was fixed, n%d runs %s (boot %s), want %s", op, i+1, tg.CurrentSystem(), tg.BootEntry(), systems[i])
					}
				}
				s.WantNoChanges()
			}

			// Create: no prior state, so nothing was known of the hosts.
			sys := []string{nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}), nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})}
			failedApply("create", sys, []string{"", ""})
			for i, tg := range nodes {
				if len(tg.Calls()) != 0 {
					t.Errorf("create: n%d's host ran switch-to-configuration: %v", i+1, tg.Calls())
				}
			}
			converge("create", sys)

			// Update: what the last apply found on the hosts stands.
			next := []string{nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}), nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})}
			calls := []int{len(tg1.Calls()), len(tg2.Calls())}
			failedApply("update", next, sys)
			for i, tg := range nodes {
				if len(tg.Calls()) != calls[i] || tg.CurrentSystem() != sys[i] {
					t.Errorf("update: n%d's host was touched: calls %d -> %d, runs %s", i+1, calls[i], len(tg.Calls()), tg.CurrentSystem())
				}
			}
			converge("update", next)
		})
	}
}
