package provider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Rollout (issue 14), through one CLI (AlternateCLIs): with parallelism = 2 two nodes
// deploy at once; with max_failures = 0 the first failure stops new nodes
// from starting, the apply fails naming the budget, the nodes not started
// stay pending and untouched, and the next plan retries the failed and the
// pending nodes.
func TestDeploymentRolloutWithParallelismAndAFailureBudget(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			first := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			var nodes []*nixtest.Target
			for range 5 {
				tg := nixtest.NewTarget(t)
				tg.Boot(t, first)
				nodes = append(nodes, tg)
			}
			// n1 activates slowly; n2, beside it, fails meanwhile: n1's
			// activation waits until n2 was switched back and its lease
			// ended (the rollout knows it failed), and 2 s more.
			slow := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Hold: true})
			bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})
			releaseAfterRollback(t, nodes[0], nodes[1], bad, first)
			good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			rollout := "  parallelism  = 2\n  max_failures = 0\n"
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(nodes, []string{slow, bad, good, good, good}, rollout))
			s.Run("init", "-input=false")

			out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for n2 (exit 4)") ||
				!strings.Contains(errOut, "Deployment stopped: n3, n4, n5 not started") ||
				!strings.Contains(strings.Join(strings.Fields(errOut), " "), "More nodes failed than max_failures (0) allows") {
				t.Fatalf("apply over its failure budget: exit %d\n%s\n%s", code, out, errOut)
			}
			v := s.Values("fleet_ssh_deployment.prod")
			if got := fmt.Sprint(v["actions"]); got != "map[n1:switch n2:failed n3:pending n4:pending n5:pending]" {
				t.Errorf("actions after the apply: %s", got)
			}
			if nodes[0].CurrentSystem() != slow || nodes[1].CurrentSystem() != first {
				t.Errorf("n1 runs %s (want the new system), n2 %s (want it rolled back)", nodes[0].CurrentSystem(), nodes[1].CurrentSystem())
			}
			// (The plan logged in to read them; nothing ran on them.)
			for i, tg := range nodes[2:] {
				if len(tg.Calls()) != 0 || tg.CurrentSystem() != first {
					t.Errorf("n%d, not started, was touched: calls %v, system %s", i+3, tg.Calls(), tg.CurrentSystem())
				}
			}
			// A node never started has no exit status: 0 would read as
			// a success.
			for i := 2; i < 5; i++ {
				if rec := nodeRecord(t, v, i); rec["phase"] != "Pending" || rec["exit_code"] != nil {
					t.Errorf("n%d, not started: phase %v, exit_code %v, want Pending and null", i+1, rec["phase"], rec["exit_code"])
				}
			}
			// n2 started before n1 finished: they ran side by side.
			n1, n2 := nodeRecord(t, v, 0), nodeRecord(t, v, 1)
			if n2s, n1f := fmt.Sprint(n2["started_at"]), fmt.Sprint(n1["finished_at"]); n2s == "" || n1f == "" || n2s >= n1f {
				t.Errorf("n2 started at %s, n1 finished at %s: with parallelism 2 they deploy at once", n2s, n1f)
			}

			plan, _, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			for _, want := range []string{`"n2" = "failed" -> "switch"`, `"n3" = "pending" -> "switch"`, `"n5" = "pending" -> "switch"`} {
				if code != 2 || !strings.Contains(plan, want) {
					t.Errorf("plan after the stopped rollout (exit %d) does not show %s:\n%s", code, want, plan)
				}
			}
			s.WriteConfig(deploymentConfig(nodes, []string{slow, good, good, good, good}, rollout))
			s.Run("apply", "-auto-approve", "-input=false")
			for i, tg := range nodes[1:] {
				if tg.CurrentSystem() != good {
					t.Errorf("n%d runs %s after the retry, want %s", i+2, tg.CurrentSystem(), good)
				}
			}
			s.WantNoChanges()
		})
	}
}

// releaseAfterRollback lets held's activation go on once back's host
// switched to bad and then back to first and no process of the deploy is
// left on it (its lease ended), and 2 s more; or after 10 minutes. It
// reads the host's event log itself: nothing on its goroutine may fail
// the test.
func releaseAfterRollback(t *testing.T, held, back *nixtest.Target, bad, first string) {
	t.Helper()
	done := make(chan struct{})
	ended := make(chan struct{})
	t.Cleanup(func() { close(done); <-ended })
	rolledBack := func() bool {
		b, _ := os.ReadFile(filepath.Join(back.StateDir, "events.log"))
		log := string(b)
		i := strings.Index(log, " set-current "+bad+"\n")
		return i >= 0 && strings.Contains(log[i:], " set-current "+first+"\n") && len(back.Leftovers()) == 0
	}
	go func() {
		defer close(ended)
		wait := func(d time.Duration) bool {
			select {
			case <-done:
				return false
			case <-time.After(d):
				return true
			}
		}
		for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline) && !rolledBack(); {
			if !wait(100 * time.Millisecond) {
				return
			}
		}
		if wait(2 * time.Second) {
			_ = os.WriteFile(filepath.Join(held.StateDir, "released"), nil, 0o644)
		}
	}()
}
