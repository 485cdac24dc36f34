package provider_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// US1-1 (deployment seed: "the script prints DEPLOYING <name> for each
// node in list order and switches each host to its closure"; spec: each
// node's start and outcome are logged at INFO, and the apply ends with a
// summary of every node and its outcome), through the built provider and
// one CLI (AlternateCLIs), read from the provider's INFO log. The list order (zeta, then
// alpha) is not the order of names, so a rollout by name fails this too.
func TestDeploymentLogsEachNodeInListOrderAndTheSummary(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg1.Boot(t, old)
			tg2.Boot(t, old)
			sys1 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			sys2 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			config := deploymentConfig([]*nixtest.Target{tg1, tg2}, []string{sys1, sys2}, "")
			config = strings.Replace(config, `name             = "n1"`, `name             = "zeta"`, 1)
			config = strings.Replace(config, `name             = "n2"`, `name             = "alpha"`, 1)
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(config)
			path := filepath.Join(t.TempDir(), "provider.log")
			s.Setenv("TF_LOG_PROVIDER", "INFO")
			s.Setenv("TF_LOG_PATH", path)
			s.Run("apply", "-auto-approve", "-input=false")
			if tg1.CurrentSystem() != sys1 || tg2.CurrentSystem() != sys2 {
				t.Fatalf("not switched: zeta runs %s, alpha %s", tg1.CurrentSystem(), tg2.CurrentSystem())
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			log := string(b)

			// Each node's start, once, at INFO, and its outcome before the
			// next node starts: one after the other, in list order.
			at := func(what string, re *regexp.Regexp) int {
				t.Helper()
				found := re.FindAllStringIndex(log, -1)
				if len(found) != 1 {
					t.Fatalf("the provider log holds %s %d times, want once:\n%s", what, len(found), log)
				}
				return found[0][0]
			}
			zeta := at("DEPLOYING zeta", regexp.MustCompile(`\[INFO\] +provider\.terraform-provider-fleet: DEPLOYING zeta[:\s]`))
			zetaDone := at("zeta's outcome", regexp.MustCompile(`\[INFO\] +provider\.terraform-provider-fleet: zeta Succeeded: switched to `+regexp.QuoteMeta(sys1)))
			alpha := at("DEPLOYING alpha", regexp.MustCompile(`\[INFO\] +provider\.terraform-provider-fleet: DEPLOYING alpha[:\s]`))
			alphaDone := at("alpha's outcome", regexp.MustCompile(`\[INFO\] +provider\.terraform-provider-fleet: alpha Succeeded: switched to `+regexp.QuoteMeta(sys2)))
			if zeta >= zetaDone || zetaDone >= alpha || alpha >= alphaDone {
				t.Errorf("log order: DEPLOYING zeta at %d, its outcome at %d, DEPLOYING alpha at %d, its outcome at %d; want them in that order", zeta, zetaDone, alpha, alphaDone)
			}

			// The summary, once the rollout is over: one line per node, in
			// list order, with its outcome.
			summary := at("the deployment summary", regexp.MustCompile(`\[INFO\] +provider\.terraform-provider-fleet: deployment summary`))
			if summary < alphaDone {
				t.Errorf("the summary (at %d) comes before the last node's outcome (at %d)", summary, alphaDone)
			}
			rest := log[summary:]
			zetaLine := regexp.MustCompile(`zeta +Succeeded +switched to ` + regexp.QuoteMeta(sys1)).FindStringIndex(rest)
			alphaLine := regexp.MustCompile(`alpha +Succeeded +switched to ` + regexp.QuoteMeta(sys2)).FindStringIndex(rest)
			if zetaLine == nil || alphaLine == nil || zetaLine[0] > alphaLine[0] {
				t.Errorf("the summary does not list zeta then alpha, each Succeeded:\n%s", rest)
			}
		})
	}
}

// Issue 14: the logins a refresh kept for nodes the plan will not ask
// about (n1, converged) end as soon as the configuration shows it, when
// Terraform validates it again just before planning, instead of all at
// once after the plan: the hosts take a few hundred milliseconds to end
// two dozen of them. The node that switches (n2) keeps its login for the
// plan's question; each host is still logged in to once, and no login
// is left open after the plan.
func TestDeploymentPlanEndsUnaskedLoginsBeforePlanning(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg1.Boot(t, sys)
			tg2.Boot(t, sys)
			tgs := []*nixtest.Target{tg1, tg2}
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(deploymentConfig(tgs, []string{sys, sys}, ""))
			s.Run("apply", "-auto-approve", "-input=false")
			s.WriteConfig(deploymentConfig(tgs, []string{sys, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})}, ""))
			path := filepath.Join(t.TempDir(), "provider.log")
			s.Setenv("TF_LOG_PROVIDER", "TRACE")
			s.Setenv("TF_LOG_PATH", path)
			before := []int{tg1.AcceptedConnections(), tg2.AcceptedConnections()}
			out, _ := s.Run("plan", "-input=false", "-no-color")
			for i, tg := range tgs {
				if got := tg.AcceptedConnections() - before[i]; got != 1 {
					t.Errorf("the plan logged in to n%d %d times, want 1", i+1, got)
				}
			}
			if !strings.Contains(out, "Node n2 will switch:") || strings.Contains(out, "Node n1 will switch") {
				t.Errorf("the plan does not ask exactly n2 what its switch will do:\n%s", out)
			}
			if n := sessionsOpen(t, tgs...); n != 0 {
				t.Errorf("the plan left %d logins open", n)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			log := string(b)
			ending := regexp.MustCompile(`ending the refresh's logins the plan will not use: .*nodes="?n1"?`).FindAllStringIndex(log, -1)
			planning := strings.LastIndex(log, "Calling provider defined Resource ModifyPlan")
			switch {
			case len(ending) != 1:
				t.Errorf("the provider log says %d times that it ends n1's login before the plan, want once", len(ending))
			case planning < 0:
				t.Errorf("the provider log does not show the plan's ModifyPlan")
			case ending[0][0] > planning:
				t.Errorf("n1's login was ended after the plan began, not before")
			}
		})
	}
}
