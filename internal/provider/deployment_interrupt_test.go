package provider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg1.Boot(t, old)
			tg2.Boot(t, old)
			nodes := []*nixtest.Target{tg1, tg2}
			slow := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 6 * time.Second})
			sys2 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(deploymentConfig(nodes, []string{slow, sys2}, ""))
			stdout, stderr, after := s.InterruptWhen(func() bool {
				return strings.Contains(tg1.Journal(), "activating the configuration")
			}, "apply", "-auto-approve", "-input=false", "-no-color")
			if after > 5*time.Second {
				t.Errorf("the apply ended %s after the interrupt (the activation had 6 s to go)", after)
			}
			t.Logf("the apply ended %s after the interrupt:\n%s\n%s", after, stdout, stderr)

			v := s.Values("fleet_ssh_deployment.prod")
			if got := fmt.Sprint(v["actions"]); got != "map[n1:failed n2:pending]" {
				t.Errorf("actions after the interrupt: %s", got)
			}
			if st, _ := v["status"].(map[string]any); len(st) != 2 {
				t.Fatalf("status after the interrupt: %v", v["status"])
			}
			n1, n2 := nodeRecordOf(t, v, "n1"), nodeRecordOf(t, v, "n2")
			// What the host runs is asked for at most the deploy's ask
			// timeout (the interrupted apply ends at once): a busy machine
			// may not answer within it, and the record then says so
			// (TestDeployInterrupted holds the answer's
			// words where the host answers in time).
			if msg := fmt.Sprint(n1["message"]); n1["phase"] != "Failed" || !strings.Contains(msg, "interrupted during the activate step") ||
				!strings.Contains(msg, "it runs "+old) && !strings.Contains(msg, "what it runs now could not be read") {
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

// providerLog makes the session's provider log at INFO to a file, and
// returns a function that reports whether the log holds text: the steps
// of a node are logged as they start.
func providerLog(t *testing.T, s *acctest.Session) func(text string) bool {
	t.Helper()
	path := filepath.Join(t.TempDir(), "provider.log")
	s.Setenv("TF_LOG_PROVIDER", "INFO")
	s.Setenv("TF_LOG_PATH", path)
	return func(text string) bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), text)
	}
}

// nodeRecord is the status record of the node at index i of nodes.
func nodeRecord(t *testing.T, v map[string]any, i int) map[string]any {
	t.Helper()
	nodes, _ := v["nodes"].([]any)
	if dyn, ok := v["nodes"].(map[string]any); ok {
		nodes, _ = dyn["value"].([]any) // a dynamic value, with its type
	}
	if len(nodes) <= i {
		t.Fatalf("nodes has no node %d: %v", i, v["nodes"])
	}
	name, _ := nodes[i].(map[string]any)["name"].(string)
	return nodeRecordOf(t, v, name)
}

// nodeRecordOf is the status record of node name.
func nodeRecordOf(t *testing.T, v map[string]any, name string) map[string]any {
	t.Helper()
	st, _ := v["status"].(map[string]any)
	rec, ok := st[name].(map[string]any)
	if !ok {
		t.Fatalf("status has no record of node %s: %v", name, v["status"])
	}
	return rec
}

// interruptWhenLogged interrupts args once the provider has logged text
// and a moment has passed (the step's command runs then), and returns the
// output and how long the command took after the interrupt.
func interruptWhenLogged(t *testing.T, s *acctest.Session, logged func(string) bool, text string, args ...string) (string, time.Duration) {
	t.Helper()
	var seen time.Time
	stdout, stderr, after := s.InterruptWhen(func() bool {
		if seen.IsZero() && logged(text) {
			seen = time.Now()
		}
		return !seen.IsZero() && time.Since(seen) > 700*time.Millisecond
	}, args...)
	return stdout + stderr, after
}

// Issue 12: Ctrl-C while the apply waits for another deployment's lock on
// the host ends the apply at once (not when the holder lets go), and the
// node is recorded as interrupted in the lock step, with nothing done.
func TestDeploymentCtrlCWhileWaitingForTheLock(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			tg.HoldDeployLock(t, "apply A")
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, `  lock_timeout = "60s"`+"\n"))
			logged := providerLog(t, s)
			out, after := interruptWhenLogged(t, s, logged, "taking the host's deploy lock", "apply", "-auto-approve", "-input=false", "-no-color")
			t.Logf("the apply ended %s after the interrupt:\n%s", after, out)
			if after > 5*time.Second {
				t.Errorf("the apply ended %s after the interrupt, want at once (lock_timeout was 60s)", after)
			}
			if strings.Contains(out, "inconsistent") {
				t.Errorf("Terraform found the result inconsistent:\n%s", out)
			}
			rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)
			if rec["phase"] != "Failed" || fmt.Sprint(rec["exit_code"]) != "130" || rec["action"] != "failed" ||
				!strings.Contains(fmt.Sprint(rec["message"]), "interrupted during the lock step") || !strings.Contains(fmt.Sprint(rec["message"]), "nothing was done on the host") {
				t.Errorf("the node's record: %v", rec)
			}
			if tg.CurrentSystem() != old || len(tg.Calls()) != 0 {
				t.Errorf("the host was changed: current %s, calls %v", tg.CurrentSystem(), tg.Calls())
			}
		})
	}
}

// Issue 12: Ctrl-C during the verdict is an interrupt, not a verdict: the
// node is recorded interrupted in the verdict step (not as a host that
// cut off SSH), and the host's watchdog switches the unconfirmed system
// back by itself.
func TestDeploymentCtrlCDuringVerdict(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			tg.SetSystemState(t, "starting") // the verdict waits for systemd to settle
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(strings.Replace(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, ""), `settle_timeout  = "2s"`, `settle_timeout  = "60s"`, 1))
			logged := providerLog(t, s)
			out, after := interruptWhenLogged(t, s, logged, "judging the new system", "apply", "-auto-approve", "-input=false", "-no-color")
			t.Logf("the apply ended %s after the interrupt:\n%s", after, out)
			if after > 5*time.Second {
				t.Errorf("the apply ended %s after the interrupt", after)
			}
			rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)
			msg := fmt.Sprint(rec["message"])
			if rec["phase"] != "Failed" || fmt.Sprint(rec["exit_code"]) != "130" || !strings.Contains(msg, "interrupted during the verdict step") ||
				!strings.Contains(msg, "the host's watchdog switches it back to "+old) || strings.Contains(msg, "cuts off SSH") {
				t.Errorf("the node's record: %v", rec)
			}
			deadline := time.Now().Add(30 * time.Second)
			for tg.CurrentSystem() != old && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			if tg.CurrentSystem() != old || tg.BootEntry() != old {
				t.Errorf("the watchdog did not switch back: current %s, boot %s", tg.CurrentSystem(), tg.BootEntry())
			}
		})
	}
}

// Issue 12: a timeouts block that expires mid-rollout is an interrupt with
// its cause named: the nodes done stay done, the node in flight is
// recorded with exit 130 and the step, the later ones are not started,
// nothing Terraform checks is inconsistent, and the next plan switches
// exactly the nodes not done.
func TestDeploymentTimeoutsExpireMidRollout(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			var nodes []*nixtest.Target
			var systems []string
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			for range 4 {
				tg := nixtest.NewTarget(t)
				tg.Boot(t, old)
				nodes = append(nodes, tg)
				systems = append(systems, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 2 * time.Second}))
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(nodes, systems, `  timeouts = { create = "5s" }`+"\n"))
			s.Run("init", "-input=false")
			start := time.Now()
			out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			took := time.Since(start)
			t.Logf("apply took %s (exit %d):\n%s\n%s", took, code, out, errOut)
			if code == 0 || strings.Contains(out+errOut, "inconsistent") || !strings.Contains(errOut, "not started") {
				t.Errorf("apply with an expiring timeouts block: exit %d\n%s\n%s", code, out, errOut)
			}
			v := s.Values("fleet_ssh_deployment.prod")
			expired := regexp.MustCompile(`the timeouts block's create limit \(5s\) expired during the (\w+) step`)
			var phases []string
			for i := range nodes {
				rec := nodeRecord(t, v, i)
				phase := fmt.Sprint(rec["phase"])
				if phase == "Failed" {
					if m := expired.FindString(fmt.Sprint(rec["message"])); m == "" || fmt.Sprint(rec["exit_code"]) != "130" {
						t.Errorf("node %d failed without naming the expired timeouts block (exit %v): %v", i, rec["exit_code"], rec["message"])
					}
				}
				if phase == "Pending" && len(nodes[i].Calls()) != 0 {
					t.Errorf("node %d was not started but its host was changed: %v", i, nodes[i].Calls())
				}
				phases = append(phases, phase)
			}
			// Done, then the one in flight (none when the limit came between
			// two nodes), then not started: where the limit lands among the
			// nodes depends on the machine's speed, the ladder does not.
			if got := strings.Join(phases, " "); !regexp.MustCompile(`^(Succeeded )*(Failed )?Pending( Pending)*$`).MatchString(got) {
				t.Errorf("phases after the timeouts block expired: %s", got)
			}
			// The apply stopped soon after the limit: the last node to
			// start ended within a few seconds of 5 s after the first did.
			var first, last time.Time
			for i, p := range phases {
				rec := nodeRecord(t, v, i)
				if p == "Pending" {
					continue
				}
				started, err1 := time.Parse(time.RFC3339, fmt.Sprint(rec["started_at"]))
				finished, err2 := time.Parse(time.RFC3339, fmt.Sprint(rec["finished_at"]))
				if err1 != nil || err2 != nil {
					t.Fatalf("node %d's times: %v, %v", i, rec["started_at"], rec["finished_at"])
				}
				if first.IsZero() {
					first = started
				}
				last = finished
			}
			if stopped := last.Sub(first); stopped > 5*time.Second+4*time.Second {
				t.Errorf("the last node to start ended %s after the first started, with a 5s timeouts block", stopped)
			}
			plan, _, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			for i, p := range phases {
				want := fmt.Sprintf(`"n%d" = "%s" -> "switch"`, i+1, map[string]string{"Failed": "failed", "Pending": "pending"}[p])
				if p != "Succeeded" && !strings.Contains(plan, want) {
					t.Errorf("the plan after the timeout does not switch n%d (%s): exit %d\n%s", i+1, p, code, plan)
				}
			}
		})
	}
}

// conditionOf is the condition of type typ in record rec (nil when it has
// none).
func conditionOf(rec map[string]any, typ string) map[string]any {
	cs, _ := rec["conditions"].([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}
