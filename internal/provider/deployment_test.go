package provider_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

func deploymentConfig(nodes []*nixtest.Target, systems []string, extra string) string {
	var b strings.Builder
	for i, tg := range nodes {
		fmt.Fprintf(&b, `    {
      name             = "n%d"
      host             = %q
      system           = %q
      host_key         = %q
      user             = %q
      private_key_file = %q
      ssh_opts         = ["Port=%d", "IdentitiesOnly=yes"]
    },
`, i+1, tg.Host, systems[i], tg.HostKey, tg.User, tg.ClientKeyFile, tg.Port)
	}
	return fmt.Sprintf(`
resource "fleet_ssh_deployment" "prod" {
  nodes = [
%s  ]
  verdict = {
    confirm_timeout = "3s"
    settle_timeout  = "2s"
  }
%s}
`, b.String(), extra)
}

// Two hosts in order through both CLIs: a failed node does not stop the
// next and fails the apply, with state saved; the next plan retries
// exactly the failed node, saying only that one will switch; a host switched by hand shows as a switch in
// the next plan; a held node is skipped.
func TestDeploymentAppliesInOrderAndRetriesFailures(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
			first := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg1.Boot(t, first)
			tg2.Boot(t, first)
			good1 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			bad2 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})
			nodes := []*nixtest.Target{tg1, tg2}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(nodes, []string{good1, bad2}, "") + outcomeOutputs)
			s.Run("init", "-input=false")

			out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for n2 (exit 4)") || !strings.Contains(errOut, "db.service") {
				t.Fatalf("apply with a failing node: exit %d\n%s\n%s", code, out, errOut)
			}
			// Outputs (issue 31's trial): both CLIs write an output the
			// plan knew before the apply, and evaluate none that reads a
			// resource whose apply failed. The apply says so, and a
			// refresh-only apply brings them in line with state.
			wantOutputsRefreshed(t, s, out+errOut, "failed apply (create)")
			if tg1.CurrentSystem() != good1 || tg1.BootEntry() != good1 {
				t.Errorf("n1, before the failing n2, was not switched")
			}
			if tg2.CurrentSystem() != first || tg2.BootEntry() != first {
				t.Errorf("n2 was not rolled back: current %s", tg2.CurrentSystem())
			}
			v := s.Values("fleet_ssh_deployment.prod")
			if got := fmt.Sprint(v["actions"]); got != "map[n1:switch n2:failed]" {
				t.Errorf("actions in state after the failed apply: %s", got)
			}

			// The next plan retries n2. The failed first apply tainted the
			// deployment: its replacement starts without records, so the
			// plan shows n1 too, and the apply finds n1 done on its host
			// (it runs its system, which passed its verdict there) and
			// activates nothing there.
			plan, _, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			if code != 2 || !strings.Contains(plan, `"n2" = "failed" -> "switch"`) {
				t.Errorf("plan after the failure (exit %d):\n%s", code, plan)
			}
			// A reviewer (and the guide's CI filter) sees one switch, n2's:
			// n1's warning says its host already runs its system.
			if !strings.Contains(plan, "Warning: Node n1 already runs its system") || strings.Contains(plan, "Node n1 will switch") || !strings.Contains(plan, "Warning: Node n2 will switch") {
				t.Errorf("plan after the failure: want n1 already on its system and n2 to switch:\n%s", plan)
			}
			calls1 := len(tg1.Calls())
			good2 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s.WriteConfig(deploymentConfig(nodes, []string{good1, good2}, ""))
			s.Run("apply", "-auto-approve", "-input=false")
			if tg2.CurrentSystem() != good2 || tg2.BootEntry() != good2 || len(tg1.Calls()) != calls1 {
				t.Errorf("retry: n2 current %s boot %s; n1 calls %d -> %d", tg2.CurrentSystem(), tg2.BootEntry(), calls1, len(tg1.Calls()))
			}
			if rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0); !strings.Contains(fmt.Sprint(rec["message"]), "without a new activation") {
				t.Errorf("n1's record after the retry: %v", rec)
			}
			s.WantNoChanges()

			// Drift: n1 switched by hand.
			tg1.Boot(t, first)
			plan, _, code = s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			if code != 2 || !strings.Contains(plan, `"n1" = "drift" -> "switch"`) || !strings.Contains(plan, "Node n1 drifted") {
				t.Errorf("plan after n1 was switched by hand (exit %d):\n%s", code, plan)
			}
			// Acknowledged (apply -refresh-only), then switched back by
			// hand: the next refresh finds the drift over, and nothing is
			// planned (the trial's "drift -> none" updates).
			s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
			// Its record no longer says it runs its system (issue 39's
			// trial: Ready stayed True, "the host runs the node's system").
			v = s.Values("fleet_ssh_deployment.prod")
			if rec, ready := nodeRecord(t, v, 0), readyOf(t, nodeRecord(t, v, 0)); rec["phase"] != "Failed" || ready["status"] != "False" || ready["reason"] != "Drifted" ||
				!strings.Contains(fmt.Sprint(v["failed_nodes"]), "n1") || v["phase"] != "Failed" {
				t.Errorf("n1 drifted, acknowledged: phase %v, Ready %v, failed_nodes %v, the deployment's phase %v", rec["phase"], ready, v["failed_nodes"], v["phase"])
			}
			tg1.Boot(t, good1)
			s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
			s.WantNoChanges()
			if v := s.Values("fleet_ssh_deployment.prod"); nodeRecord(t, v, 0)["phase"] != "Succeeded" || readyOf(t, nodeRecord(t, v, 0))["status"] != "True" || v["phase"] != "Succeeded" {
				t.Errorf("n1 back on its system: phase %v, Ready %v, the deployment's phase %v", nodeRecord(t, v, 0)["phase"], readyOf(t, nodeRecord(t, v, 0)), v["phase"])
			}
			tg1.Boot(t, first)
			s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
			// Applied, the drift is switched back.
			s.Run("apply", "-auto-approve", "-input=false")
			if tg1.CurrentSystem() != good1 {
				t.Errorf("n1 after an apply of its drift: %s, want %s", tg1.CurrentSystem(), good1)
			}
			s.WantNoChanges()
			deployed := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)
			tg1.Boot(t, first)
			// Held, n1 is skipped; its record keeps what its last deploy
			// recorded (the trial's held node whose record was wiped).
			s.WriteConfig(deploymentConfig(nodes, []string{good1, good2}, `  hold = ["n1"]`+"\n"))
			s.Run("apply", "-auto-approve", "-input=false")
			if tg1.CurrentSystem() != first {
				t.Errorf("the held n1 was deployed")
			}
			held := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)
			if held["phase"] != "Skipped" || held["action"] != "skip" || !strings.Contains(fmt.Sprint(held["message"]), "held") {
				t.Errorf("the held n1's record: %v", held)
			}
			for _, k := range []string{"verified_system", "started_at", "finished_at", "exit_code", "host_key_seen"} {
				if fmt.Sprint(held[k]) != fmt.Sprint(deployed[k]) || fmt.Sprint(held[k]) == "" {
					t.Errorf("holding n1 changed its record's %s: %v -> %v", k, deployed[k], held[k])
				}
			}
			if got := conditionOf(held, "Activated"); got["status"] != "True" || got["reason"] == "Skipped" {
				t.Errorf("the held n1's Activated condition: %v (its last deploy activated it)", got)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			s.WriteConfig(deploymentConfig(nodes, []string{good1, good2}, "") + outcomeOutputs)
			s.Run("apply", "-auto-approve", "-input=false")
			if tg1.CurrentSystem() != good1 {
				t.Errorf("n1 after the hold was lifted: %s", tg1.CurrentSystem())
			}
			s.WantNoChanges()
			wantOutcomeOutputs(t, s, "applied", `[]`, `"Succeeded"`, `"Succeeded"`)
			// A failing switch of a deployment that exists (an update).
			s.WriteConfig(deploymentConfig(nodes, []string{good1, bad2}, "") + outcomeOutputs)
			out, errOut, code = s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for n2") {
				t.Fatalf("a failing switch of n2: exit %d\n%s", code, errOut)
			}
			wantOutputsRefreshed(t, s, out+errOut, "failed apply (update)")
		})
	}
}

// outcomeOutputs are outputs of what a deployment's apply did, as a
// module's user reads them.
const outcomeOutputs = `
output "failed" { value = fleet_ssh_deployment.prod.failed_nodes }
output "phase" { value = fleet_ssh_deployment.prod.phase }
output "n2_phase" { value = fleet_ssh_deployment.prod.status["n2"].phase }
`

// wantOutputsRefreshed fails the test unless a failed apply's output
// (what it printed) says that outputs were not updated and how to update them, and
// doing so makes the outputs say that n2 failed.
func wantOutputsRefreshed(t *testing.T, s *acctest.Session, printed, when string) {
	t.Helper()
	if flat := strings.Join(strings.Fields(printed), " "); !strings.Contains(flat, "Outputs that read this deployment were not updated") || !strings.Contains(flat, "terraform apply -refresh-only -auto-approve") {
		t.Errorf("%s: the apply does not say that outputs were not updated:\n%s", when, printed)
	}
	s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
	wantOutcomeOutputs(t, s, when+", then apply -refresh-only", `["n2"]`, `"Failed"`, `"RolledBack"`)
}

// wantOutcomeOutputs fails the test unless terraform output says failed,
// phase and n2's phase (as JSON).
func wantOutcomeOutputs(t *testing.T, s *acctest.Session, when, failed, phase, n2Phase string) {
	t.Helper()
	for name, want := range map[string]string{"failed": failed, "phase": phase, "n2_phase": n2Phase} {
		got, errOut, err := s.Try("output", "-json", name)
		if err != nil || strings.Join(strings.Fields(got), "") != want {
			t.Errorf("%s: output %s = %s (%v %s), want %s", when, name, strings.TrimSpace(got), err, errOut, want)
		}
	}
}

// The ssh_opts pattern the docs publish is the validator's.
func TestDocsPublishTheSSHOptPattern(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/resources/ssh_deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "`"+deploy.SSHOptPattern+"`"); n < 2 {
		t.Errorf("docs/resources/ssh_deployment.md shows the pattern %s %d times, want it in the text and in the schema", deploy.SSHOptPattern, n)
	}
}

// Plan probes every node it would switch and warns about those it cannot
// reach; the apply then fails that node and switches the others.
func TestDeploymentPlanWarnsAboutUnreachableNodes(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			up, down := nixtest.NewTarget(t), nixtest.NewTarget(t)
			first := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			up.Boot(t, first)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			down.CutSSH(t, nixtest.CutReset)
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{up, down}, []string{sys, sys}, ""))
			s.Run("init", "-input=false")
			out, _ := s.Run("plan", "-json", "-input=false")
			var about []string
			for _, w := range warnings(t, out) {
				if strings.HasSuffix(w.Summary, "is unreachable") {
					about = append(about, w.Summary)
				}
			}
			if strings.Join(about, ",") != "Node n2 is unreachable" {
				t.Errorf("plan warnings about unreachable nodes: %q, want n2 only", about)
			}
			_, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for n2") || up.CurrentSystem() != sys {
				t.Errorf("apply: exit %d, n1 current %s\n%s", code, up.CurrentSystem(), errOut)
			}
		})
	}
}

// Goals boot and test converge: a plan after their apply is empty (the
// running system differs from the deployed one with boot, by design).
func TestDeploymentGoalsConverge(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		for _, goal := range []string{"boot", "test"} {
			t.Run(cli.Name+"/"+goal, func(t *testing.T) {
				t.Parallel()
				tg := nixtest.NewTarget(t)
				old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
				tg.Boot(t, old)
				sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
				s := acctest.NewSession(t, cli, server())
				s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, fmt.Sprintf("  goal = %q\n", goal)))
				s.Run("init", "-input=false")
				s.Run("apply", "-auto-approve", "-input=false")
				s.WantNoChanges()
				s.WantNoChanges("-refresh=false")
				// A change that switches nothing applies cleanly too.
				s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, fmt.Sprintf("  goal = %q\n  remote_exec_timeout = 90\n", goal)))
				s.Run("apply", "-auto-approve", "-input=false")
				s.WantNoChanges()
				if goal == "boot" {
					// A boot entry changed by hand since: goal boot makes it
					// again (issue 39).
					tg.BootByHand(t, old)
					if _, _, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false"); code != 2 {
						t.Errorf("plan after the boot entry was changed by hand exits %d, want 2 (a change)", code)
					}
					s.Run("apply", "-auto-approve", "-input=false")
					if tg.BootEntry() != sys || tg.ProfileSystem() != sys {
						t.Errorf("after the apply the host boots %s (profile %s), want %s", tg.BootEntry(), tg.ProfileSystem(), sys)
					}
					s.WantNoChanges()
				}
			})
		}
	}
}

// Issue 39: goal test, then goal switch of the same systems, plans a
// boot-entry step for every node (a plan without refresh too, from
// boot_system in state) and activates nothing: after the apply every host
// boots its system, and the plan after it is empty. A boot entry changed
// by hand on one host (nixos-rebuild boot) plans that node's boot entry
// alone, named in a warning, its BootloaderFinalized False until then.
func TestDeploymentGoalTestThenSwitchMakesTheBootEntry(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tgs := []*nixtest.Target{nixtest.NewTarget(t), nixtest.NewTarget(t), nixtest.NewTarget(t)}
			for _, tg := range tgs {
				tg.Boot(t, old)
			}
			systems := []string{sys, sys, sys}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(tgs, systems, "  goal = \"test\"\n"))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			for i, tg := range tgs {
				if tg.CurrentSystem() != sys || tg.BootEntry() != old {
					t.Fatalf("n%d after goal test: runs %s, boots %s", i+1, tg.CurrentSystem(), tg.BootEntry())
				}
			}
			s.WantNoChanges()

			s.WriteConfig(deploymentConfig(tgs, systems, ""))
			for _, args := range [][]string{{}, {"-refresh=false"}} {
				plan, _ := s.Run(append([]string{"plan", "-input=false", "-no-color"}, args...)...)
				for _, name := range []string{"n1", "n2", "n3"} {
					if !strings.Contains(plan, `"`+name+`" = "switch" -> "boot-entry"`) {
						t.Errorf("plan %v does not name %s's boot entry:\n%s", args, name, plan)
					}
				}
				if strings.Contains(plan, "switch-to-configuration test") {
					t.Errorf("plan %v previews an activation:\n%s", args, plan)
				}
			}
			out, _ := s.Run("plan", "-input=false", "-json")
			var named []string
			for _, w := range warnings(t, out) {
				if ciFilter.MatchString(w.Summary) {
					named = append(named, w.Summary)
				}
			}
			slices.Sort(named)
			if want := []string{"Node n1 will make its boot entry", "Node n2 will make its boot entry", "Node n3 will make its boot entry"}; !slices.Equal(named, want) {
				t.Errorf("the guide's CI filter names %q, want %q", named, want)
			}
			calls := make([]int, len(tgs))
			for i, tg := range tgs {
				calls[i] = len(tg.Calls())
			}
			s.Run("apply", "-auto-approve", "-input=false")
			v := s.Values("fleet_ssh_deployment.prod")
			for i, tg := range tgs {
				name := fmt.Sprintf("n%d", i+1)
				if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
					t.Errorf("%s after goal switch: runs %s, boots %s; want %s", name, tg.CurrentSystem(), tg.BootEntry(), sys)
				}
				if got := tg.Calls()[calls[i]:]; len(got) != 1 || !strings.Contains(got[0], "boot") {
					t.Errorf("%s: switch-to-configuration calls %q, want the boot entry alone", name, got)
				}
				rec := nodeRecordOf(t, v, name)
				if rec["boot_system"] != sys || rec["phase"] != "Succeeded" || !strings.Contains(fmt.Sprint(rec["message"]), "boot entry now") {
					t.Errorf("%s's record: boot_system %v, phase %v, message %v", name, rec["boot_system"], rec["phase"], rec["message"])
				}
			}
			s.WantNoChanges()

			// By hand, n2 is made to boot the old system again.
			tgs[1].BootByHand(t, old)
			plan, stderr := s.Run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, `"n2" = "drift" -> "boot-entry"`) || strings.Count(plan, `-> "boot-entry"`) != 1 || !strings.Contains(plan, `reason               = "BootsAnother" -> "BootDefault"`) {
				t.Errorf("after n2's boot entry changed by hand, the plan does not name n2's boot entry alone (its action, BootloaderFinalized False until then):\n%s", plan)
			}
			if all := plan + stderr; !strings.Contains(all, "Node n2 boots another system") || strings.Contains(all, "Node n1 boots") {
				t.Errorf("the plan's warnings do not name n2 alone:\n%s", all)
			}
			s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
			if rec := nodeRecordOf(t, s.Values("fleet_ssh_deployment.prod"), "n2"); rec["phase"] != "Failed" || readyOf(t, rec)["reason"] != "BootsAnother" {
				t.Errorf("n2 booting another system, acknowledged: phase %v, Ready %v", rec["phase"], readyOf(t, rec))
			}
			s.Run("apply", "-auto-approve", "-input=false")
			if tgs[1].BootEntry() != sys {
				t.Errorf("n2 boots %s after the apply, want %s", tgs[1].BootEntry(), sys)
			}
			s.WantNoChanges()
		})
	}
}

// A system that comes from another resource is unknown at plan: the
// node's action is unknown until apply, which switches it; nothing
// planned is contradicted, and the plan after it is empty.
func TestDeploymentSystemFromAnotherResource(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s := acctest.NewSession(t, cli, server())
			config := strings.Replace(deploymentConfig([]*nixtest.Target{tg}, []string{"SYSTEM"}, ""), `"SYSTEM"`, "terraform_data.build.output", 1)
			s.WriteConfig(fmt.Sprintf("resource \"terraform_data\" \"build\" {\n  input = %q\n}\n", sys) + config)
			s.Run("init", "-input=false")
			appliesWhatWasUnknown(t, s, tg, sys)
		})
	}
}

// A whole node that comes from another resource (or a module's variable,
// which validate sees unknown) is unknown at plan: the plan says so rather
// than failing to read it (issue 39's trial: "Value Conversion Error"),
// and the apply deploys it.
func TestDeploymentWholeNodeFromAnotherResource(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(fmt.Sprintf(`
resource "terraform_data" "node" {
  input = {
    name             = "n1"
    host             = %q
    system           = %q
    host_key         = %q
    user             = %q
    private_key_file = %q
    ssh_opts         = ["Port=%d", "IdentitiesOnly=yes"]
  }
}

resource "fleet_ssh_deployment" "prod" {
  nodes = [terraform_data.node.output]
  verdict = {
    confirm_timeout = "3s"
    settle_timeout  = "2s"
  }
}
`, tg.Host, sys, tg.HostKey, tg.User, tg.ClientKeyFile, tg.Port))
			s.Run("init", "-input=false")
			appliesWhatWasUnknown(t, s, tg, sys)
		})
	}
}

// Beyond the seed: the key a node showed on first use is kept in state
// (host_key_seen), and a runner whose known_hosts file is new still
// refuses another key at that node, in the plan's probe, the refresh and
// the apply, naming both keys; the fix the message gives (set host_key)
// records the new key.
func TestDeploymentHoldsNodesToTheKeySeenFirst(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg, imposter := nixtest.NewTarget(t), nixtest.NewTarget(t)
			first := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, first)
			imposter.Boot(t, first)
			knownHosts := t.TempDir() + "/known_hosts"
			config := func(at *nixtest.Target, system, hostKey string) string {
				return fmt.Sprintf(`
resource "fleet_ssh_deployment" "prod" {
  known_hosts_file = %q
  nodes = [{
    name             = "web1"
    host             = %q
    system           = %q
    host_key         = %s
    user             = %q
    private_key_file = %q
    ssh_opts         = ["Port=%d", "IdentitiesOnly=yes"]
  }]
  verdict = {
    confirm_timeout = "3s"
    settle_timeout  = "2s"
  }
}
`, knownHosts, at.Host, system, hostKey, at.User, at.ClientKeyFile, at.Port)
			}
			s := acctest.NewSession(t, cli, server())
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s.WriteConfig(config(tg, sys, "null"))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			keySeen := func() string {
				k, _ := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)["host_key_seen"].(string)
				return k
			}
			want := strings.Join(strings.Fields(tg.HostKey)[:2], " ")
			if got := keySeen(); got != want {
				t.Fatalf("host_key_seen %q, want %q", got, want)
			}
			s.WantNoChanges()

			// A fresh runner (no known_hosts file), and another host
			// answering for web1.
			if err := os.Remove(knownHosts); err != nil {
				t.Fatal(err)
			}
			offered := strings.Join(strings.Fields(imposter.HostKey)[:2], " ")
			s.WriteConfig(config(imposter, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}), "null"))
			out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			all := out + errOut
			if code == 0 || !strings.Contains(all, "DEPLOY FAILED for web1") || !strings.Contains(all, "offered "+offered) ||
				!strings.Contains(all, "host_key_seen in this node's status: "+want) {
				t.Errorf("apply against another key (exit %d):\n%s", code, all)
			}
			if !strings.Contains(all, "is unreachable") {
				t.Errorf("the plan's probe did not warn about the refused key:\n%s", all)
			}
			if len(imposter.Calls()) != 0 || imposter.CurrentSystem() != first {
				t.Errorf("the other host was deployed to: %v", imposter.Calls())
			}
			if got := keySeen(); got != want {
				t.Errorf("host_key_seen after the refusal %q, want still %q", got, want)
			}
			if rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0); rec["current_system"] != sys || rec["previous_system"] != first {
				t.Errorf("a node refused before it was read lost what was known: current_system %v, previous_system %v; want %s, %s",
					rec["current_system"], rec["previous_system"], sys, first)
			}

			// The fix the hint gives: pin the new key; its apply records it.
			s.WriteConfig(config(imposter, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}), fmt.Sprintf("%q", imposter.HostKey)))
			s.Run("apply", "-auto-approve", "-input=false")
			if got := keySeen(); got != offered {
				t.Errorf("host_key_seen after pinning the new key %q, want %q", got, offered)
			}
			s.WantNoChanges()
		})
	}
}

// A host rebuilt with a new key at the same address, already running the
// configured system: the apply that pins its new key records that key as
// host_key_seen, not a run later (issue 24 point 8), and the plan after it
// is empty.
func TestDeploymentRecordsARePinnedKeyInTheApplyThatPinsIt(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg, rebuilt := nixtest.NewTarget(t), nixtest.NewTarget(t)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			rebuilt.Boot(t, sys)
			if tg.Host != rebuilt.Host {
				t.Fatalf("the two targets listen at %s and %s: the test needs one address", tg.Host, rebuilt.Host)
			}
			config := func(at *nixtest.Target, hostKey string) string {
				return fmt.Sprintf(`
resource "fleet_ssh_deployment" "prod" {
  known_hosts_file = %q
  nodes = [{
    name             = "web1"
    host             = %q
    system           = %q
    host_key         = %s
    user             = %q
    private_key_file = %q
    ssh_opts         = ["Port=%d"]
  }]
  verdict = {
    confirm_timeout = "3s"
    settle_timeout  = "2s"
  }
}
`, t.TempDir()+"/known_hosts", at.Host, sys, hostKey, at.User, at.ClientKeyFile, at.Port)
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(config(tg, "null"))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			keySeen := func() string {
				k, _ := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)["host_key_seen"].(string)
				return k
			}
			if got, want := keySeen(), strings.Join(strings.Fields(tg.HostKey)[:2], " "); got != want {
				t.Fatalf("host_key_seen %q, want %q", got, want)
			}

			// The rebuilt host, pinned by its new key; it runs sys already.
			s.WriteConfig(config(rebuilt, fmt.Sprintf("%q", rebuilt.HostKey)))
			s.Run("apply", "-auto-approve", "-input=false")
			if len(rebuilt.Calls()) != 0 {
				t.Errorf("the rebuilt host, already on its system, was switched: %v", rebuilt.Calls())
			}
			if got, want := keySeen(), strings.Join(strings.Fields(rebuilt.HostKey)[:2], " "); got != want {
				t.Errorf("host_key_seen after the apply that pins the new key %q, want %q", got, want)
			}
			s.WantNoChanges()
		})
	}
}

// A plan logs in to a node it will switch once: the refresh reads it, and
// the plan's probe then leaves it alone; without a refresh, the probe is
// the one login. A node whose connection changed since is probed anew.
func TestDeploymentPlanLogsInOncePerNode(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			nodes := []*nixtest.Target{tg}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(nodes, []string{nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})}, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			s.WriteConfig(deploymentConfig(nodes, []string{nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})}, ""))
			for _, args := range [][]string{{"plan", "-input=false", "-no-color"}, {"plan", "-refresh=false", "-input=false", "-no-color"}} {
				before := tg.AcceptedConnections()
				out, _ := s.Run(args...)
				if !strings.Contains(out, "1 to change") {
					t.Errorf("%v does not switch n1:\n%s", args, out)
				}
				if got := tg.AcceptedConnections() - before; got != 1 {
					t.Errorf("%v logged in to the node %d times, want 1", args, got)
				}
				// Issue 16: what the switch will do is asked over that login,
				// which ends with the plan.
				if !strings.Contains(out, "Node n1 will switch:") || !strings.Contains(out, "copy 1 store path,") {
					t.Errorf("%v does not say what the switch will do:\n%s", args, out)
				}
				if n := sessionsOpen(t, tg); n != 0 {
					t.Errorf("%v left %d sessions open", args, n)
				}
			}
			// Converged, a plan without refresh has nothing to switch and
			// logs in to no node (issue 14: it logged in to every node
			// whose last switch stands, one fleet-wide round of logins).
			s.Run("apply", "-auto-approve", "-input=false")
			before := tg.AcceptedConnections()
			s.WantNoChanges("-refresh=false")
			if got := tg.AcceptedConnections() - before; got != 0 {
				t.Errorf("plan -refresh=false of a converged deployment logged in to the node %d times, want 0", got)
			}
		})
	}
}

// What ssh could never use is refused at plan, naming the attribute: a
// key file missing on a node, in defaults or in the provider's
// FLEET_PRIVATE_KEY_FILE (or its deprecated name); an encrypted one unless the ssh-agent at
// SSH_AUTH_SOCK holds it (BatchMode never asks for a passphrase); a
// fingerprint as host_key, which OpenSSH cannot pin.
func TestDeploymentRefusesUnusableKeysAtPlan(t *testing.T) { // serial: the provider served in-process reads FLEET_PRIVATE_KEY_FILE and SSH_AUTH_SOCK from the process
	tg := nixtest.NewTarget(t)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	dir := t.TempDir()
	encrypted := dir + "/id_encrypted"
	key := sshtest.NewKey(t)
	if err := os.WriteFile(encrypted, key.EncryptedPEM(t, "secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	holding, other := sshtest.StartAgent(t, key), sshtest.StartAgent(t, sshtest.NewKey(t))
	config := func(defaultsKey, nodeKey, hostKey string) string {
		return fmt.Sprintf(`
resource "fleet_ssh_deployment" "prod" {
  defaults = { private_key_file = %s }
  nodes = [{
    name             = "web1"
    host             = %q
    system           = %q
    host_key         = %q
    private_key_file = %s
    ssh_opts         = ["Port=%d"]
  }]
}
`, defaultsKey, tg.Host, sys, hostKey, nodeKey, tg.Port)
	}
	usable := fmt.Sprintf("%q", tg.ClientKeyFile)
	cases := []struct {
		name, defaultsKey, nodeKey, hostKey, env, agent string
		want                                            []string // empty: accepted
		oldEnv                                          string   // FLEET_SSH_PRIVATE_KEY_FILE
	}{
		{"missing on the node", "null", fmt.Sprintf("%q", dir+"/nope"), "", "", "", []string{"Unusable private key", "nodes[0].private_key_file (node web1): cannot read " + dir + "/nope", "no such file"}, ""},
		{"missing in defaults", fmt.Sprintf("%q", dir+"/nope"), "null", "", "", "", []string{"Unusable private key", "defaults.private_key_file: cannot read"}, ""},
		{"missing in the environment", "null", "null", "", dir + "/nope", "", []string{"Unusable private key", "the provider's key, from FLEET_PRIVATE_KEY_FILE (nodes without a key of their own use it): cannot read"}, ""},
		{"missing under the deprecated name", "null", "null", "", "", "", []string{"Deprecated environment variable FLEET_SSH_PRIVATE_KEY_FILE", "rename it",
			"the provider's key, from FLEET_SSH_PRIVATE_KEY_FILE (nodes without a key of their own use it): cannot read"}, dir + "/nope"},
		{"encrypted, no agent", "null", fmt.Sprintf("%q", encrypted), "", "", "", []string{"Unusable private key", "is encrypted", "ssh-add " + encrypted}, ""},
		{"encrypted, an agent holding it", "null", fmt.Sprintf("%q", encrypted), "", "", holding, nil, ""},
		{"encrypted, an agent without it", "null", fmt.Sprintf("%q", encrypted), "", "", other, []string{"Unusable private key", "does not hold it", "ssh-add " + encrypted}, ""},
		{"encrypted, no agent at SSH_AUTH_SOCK", "null", fmt.Sprintf("%q", encrypted), "", "", dir + "/nosock", []string{"Unusable private key", "cannot be asked for it"}, ""},
		{"a fingerprint as host_key", "null", usable, key.Fingerprint(), "", "", []string{"Invalid host_key", "is a fingerprint"}, ""},
		{"not a key as host_key", "null", usable, "ssh-ed25519 notbase64!!", "", "", []string{"Invalid host_key", "not a public key line"}, ""},
		{"ssh-keygen -lf output as host_key", "null", usable, "256 " + key.Fingerprint() + " root@web1 (ED25519)", "", "", []string{"Invalid host_key", "is a fingerprint"}, ""},
		{"two keys as host_key", "null", usable, tg.HostKey + "\n" + key.AuthorizedLine(), "", "", []string{"Invalid host_key", "more than one line"}, ""},
		{"usable", "null", usable, "", "", "", nil, ""},
	}
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					// The provider runs in this process: its environment is the test's.
					t.Setenv("FLEET_PRIVATE_KEY_FILE", c.env)
					t.Setenv("FLEET_SSH_PRIVATE_KEY_FILE", c.oldEnv)
					t.Setenv("SSH_AUTH_SOCK", c.agent)
					s := acctest.NewSession(t, cli, server())
					s.WriteConfig(config(c.defaultsKey, c.nodeKey, orDefault(c.hostKey, tg.HostKey)))
					s.Run("init", "-input=false")
					out, errOut, code := s.ExitCode("plan", "-input=false", "-no-color")
					all := strings.Join(strings.Fields(out+errOut), " ")
					if len(c.want) == 0 {
						if code != 0 || strings.Contains(all, "Error:") {
							t.Errorf("plan refused (exit %d):\n%s", code, out+errOut)
						}
						return
					}
					if code == 0 {
						t.Errorf("plan accepted:\n%s", out+errOut)
					}
					for _, w := range c.want {
						if !strings.Contains(all, w) {
							t.Errorf("the error does not say %q:\n%s", w, out+errOut)
						}
					}
				})
			}
		})
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// A failed first apply taints the deployment, and its replacement starts
// with no record: the refresh before it writes each recorded key into
// known_hosts_file, so the replacement still refuses another host at a
// node's address, also on a runner whose file was new.
func TestDeploymentReplacementKeepsTheKeysSeen(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg1, tg2, imposter := nixtest.NewTarget(t), nixtest.NewTarget(t), nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			for _, tg := range []*nixtest.Target{tg1, tg2, imposter} {
				tg.Boot(t, old)
			}
			knownHosts := t.TempDir() + "/known_hosts"
			config := func(sys1, sys2 string) string {
				var b strings.Builder
				for i, c := range []struct {
					tg  *nixtest.Target
					sys string
				}{{tg1, sys1}, {tg2, sys2}} {
					fmt.Fprintf(&b, `{ name = "n%d", host = %q, system = %q, user = %q, private_key_file = %q, ssh_opts = ["Port=%d", "IdentitiesOnly=yes"] },`+"\n",
						i+1, c.tg.Host, c.sys, c.tg.User, c.tg.ClientKeyFile, c.tg.Port)
				}
				return fmt.Sprintf(`
resource "fleet_ssh_deployment" "prod" {
  known_hosts_file = %q
  nodes            = [
%s  ]
  verdict = {
    confirm_timeout = "3s"
    settle_timeout  = "2s"
  }
}
`, knownHosts, b.String())
			}
			s := acctest.NewSession(t, cli, server())
			sys1 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s.WriteConfig(config(sys1, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})))
			s.Run("init", "-input=false")
			if _, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color"); code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for n2") {
				t.Fatalf("the first apply (exit %d) did not fail n2:\n%s", code, errOut)
			}

			// A fresh runner, and another host answering at n1's address.
			if err := os.Remove(knownHosts); err != nil {
				t.Fatal(err)
			}
			tg1.Gate.SetBackend(imposter.SSHD.Addr)
			s.WriteConfig(config(sys1, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})))
			out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			all := strings.Join(strings.Fields(out+errOut), " ")
			offered := strings.Join(strings.Fields(imposter.HostKey)[:2], " ")
			if code == 0 || !strings.Contains(all, "must be replaced") || !strings.Contains(all, "DEPLOY FAILED for n1") ||
				!strings.Contains(all, "offered "+offered) || !strings.Contains(all, knownHosts) {
				t.Errorf("the replacement (exit %d) did not refuse the other host at n1's address:\n%s", code, out+errOut)
			}
			if len(imposter.Calls()) != 0 || imposter.CurrentSystem() != old {
				t.Errorf("the other host was deployed to: %v", imposter.Calls())
			}
			kh, _ := os.ReadFile(knownHosts)
			if !strings.Contains(string(kh), strings.Join(strings.Fields(tg1.HostKey)[:2], " ")) {
				t.Errorf("known_hosts_file does not hold n1's recorded key:\n%s", kh)
			}
			if tg2.CurrentSystem() == old {
				t.Errorf("n2 was not deployed by the replacement")
			}
			// The refused node keeps the key it was held to, so yet another
			// fresh runner refuses the other host too.
			if rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0); rec["host_key_seen"] != strings.Join(strings.Fields(tg1.HostKey)[:2], " ") {
				t.Errorf("n1's host_key_seen after the refusal: %v", rec["host_key_seen"])
			}
			if err := os.Remove(knownHosts); err != nil {
				t.Fatal(err)
			}
			out, errOut, code = s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			all = strings.Join(strings.Fields(out+errOut), " ")
			if code == 0 || !strings.Contains(all, "DEPLOY FAILED for n1") || !strings.Contains(all, "host_key_seen in this node's status") || len(imposter.Calls()) != 0 {
				t.Errorf("the next apply from a fresh runner (exit %d) did not refuse the other host:\n%s", code, out+errOut)
			}

			// What the guide says to do after a failed first apply when the
			// apply may run without a refresh (a saved plan applied
			// elsewhere, -refresh=false): untaint it, so that the next
			// apply is an update that holds every node to its record.
			s.Run("untaint", "fleet_ssh_deployment.prod")
			if err := os.Remove(knownHosts); err != nil {
				t.Fatal(err)
			}
			out, errOut, code = s.ExitCode("apply", "-auto-approve", "-refresh=false", "-input=false", "-no-color")
			all = strings.Join(strings.Fields(out+errOut), " ")
			if code == 0 || strings.Contains(all, "must be replaced") || !strings.Contains(all, "DEPLOY FAILED for n1") ||
				!strings.Contains(all, "host_key_seen in this node's status") || len(imposter.Calls()) != 0 {
				t.Errorf("the untainted deployment's apply without a refresh (exit %d) did not refuse the other host:\n%s", code, out+errOut)
			}
		})
	}
}

// Issue 12: a plan depends on configuration, prior state and this run's
// refresh, never on a live look that the apply's own plan could see
// differently. A second state that has no record of a host already
// running its system plans a switch; applying that saved plan finds the
// host done and activates nothing, and with the host cut off it fails the
// node, never "inconsistent final plan".
func TestDeploymentSavedPlanAppliesAsPlanned(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg1.Boot(t, old)
			tg2.Boot(t, old)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			nodes := []*nixtest.Target{tg1, tg2}
			first := acctest.NewSession(t, cli, server())
			first.WriteConfig(deploymentConfig(nodes, []string{sys, sys}, ""))
			first.Run("init", "-input=false")
			first.Run("apply", "-auto-approve", "-input=false")
			calls1, calls2 := len(tg1.Calls()), len(tg2.Calls())

			second := acctest.NewSession(t, cli, server())
			second.WriteConfig(deploymentConfig(nodes, []string{sys, sys}, ""))
			second.Run("init", "-input=false")
			second.Run("plan", "-out=tfplan", "-input=false")
			tg2.CutSSH(t, nixtest.CutReset)
			out, errOut, code := second.ExitCode("apply", "-input=false", "-no-color", "tfplan")
			if code == 0 || strings.Contains(out+errOut, "inconsistent") || !strings.Contains(errOut, "DEPLOY FAILED for n2") {
				t.Errorf("the saved plan with n2 cut off: exit %d\n%s\n%s", code, out, errOut)
			}
			rec := nodeRecord(t, second.Values("fleet_ssh_deployment.prod"), 0)
			if rec["phase"] != "Succeeded" || rec["action"] != "switch" || !strings.Contains(fmt.Sprint(rec["message"]), "recorded as switched without a new activation") {
				t.Errorf("n1, which already ran its system: %v", rec)
			}
			if len(tg1.Calls()) != calls1 || len(tg2.Calls()) != calls2 {
				t.Errorf("a host already running its system was activated again: %v / %v", tg1.Calls()[calls1:], tg2.Calls()[calls2:])
			}
		})
	}
}

// Issue 12: reverting a failed rollout. n1 runs v2; a switch to v3 fails
// and is rolled back to v2; the configuration is set back to v2. The plan
// has nothing to switch (the host runs v2, which it records as having
// passed its verdict), the apply records that, and nothing is activated.
func TestDeploymentRevertToTheSystemTheHostRuns(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			v2 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			v3 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"app.service"}})
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{v2}, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{v3}, ""))
			if _, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color"); code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for n1 (exit 4)") {
				t.Fatalf("the switch to v3: exit %d\n%s", code, errOut)
			}
			if tg.CurrentSystem() != v2 {
				t.Fatalf("v3 was not rolled back: %s", tg.CurrentSystem())
			}
			calls := len(tg.Calls())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{v2}, ""))
			plan, _, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			if code != 2 || !strings.Contains(plan, `"n1" = "failed" -> "none"`) {
				t.Errorf("the plan back to v2 (exit %d):\n%s", code, plan)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)
			if rec["phase"] != "Succeeded" || !strings.Contains(fmt.Sprint(rec["message"]), "nothing to do: the host runs "+v2+", which passed its verdict there") {
				t.Errorf("n1 after setting v2 back: %v", rec)
			}
			if len(tg.Calls()) != calls {
				t.Errorf("v2 was activated again: %v", tg.Calls()[calls:])
			}
			s.WantNoChanges()
		})
	}
}

// sessionsOpen counts the ssh processes of this machine holding a read
// login of one of tgs open for a plan (deploy.Session), by their remote
// command and the port they log in to.
func sessionsOpen(t *testing.T, tgs ...*nixtest.Target) int {
	t.Helper()
	if len(tgs) == 0 {
		t.Fatal("sessionsOpen of no host counts nothing")
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if !bytes.HasPrefix(b, []byte("ssh\x00")) || !bytes.Contains(b, []byte("fleet-session-read")) {
			continue
		}
		// Only this test's hosts: other runs on the machine have theirs.
		for _, tg := range tgs {
			if bytes.Contains(b, []byte(fmt.Sprintf("Port=%d\x00", tg.Port))) {
				n++
				break
			}
		}
	}
	return n
}

// readyOf is a node record's Ready condition.
func readyOf(t *testing.T, rec map[string]any) map[string]any {
	t.Helper()
	conds, _ := rec["conditions"].([]any)
	for _, c := range conds {
		if c, ok := c.(map[string]any); ok && c["type"] == "Ready" {
			return c
		}
	}
	t.Fatalf("no Ready condition in %v", rec)
	return nil
}

// appliesWhatWasUnknown checks a deployment (in s, initialised) whose node
// tg's system sys, or whole node, comes from another resource: validate
// accepts it, the plan leaves its action to the apply, which switches tg,
// and the plan after it is empty.
func appliesWhatWasUnknown(t *testing.T, s *acctest.Session, tg *nixtest.Target, sys string) {
	t.Helper()
	if _, diags := s.Validate(); len(diags) != 0 {
		t.Errorf("validate: %v", diags)
	}
	plan, _ := s.Run("plan", "-input=false", "-no-color")
	if !strings.Contains(plan, "actions") || !strings.Contains(plan, "(known after apply)") {
		t.Errorf("plan:\n%s", plan)
	}
	s.Run("apply", "-auto-approve", "-input=false")
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("current %s, boot %s", tg.CurrentSystem(), tg.BootEntry())
	}
	s.WantNoChanges()
}
