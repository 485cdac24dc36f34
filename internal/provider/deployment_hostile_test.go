package provider_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Trust at the edges (issue 22) through one CLI (AlternateCLIs): the provider block's
// key is never forwarded to a host whatever the ssh_config_file says, an
// ssh_opts item asking for forwarding is refused at plan, files whose
// paths hold spaces and % are used where they are (TMPDIR included), and
// the loop after the apply is quiet.
func TestDeploymentForwardsNothingAndTakesPathsAsTheyAre(t *testing.T) { // serial: the provider served in-process reads TMPDIR from the process
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			base := t.TempDir()
			tmp, dir := filepath.Join(base, "tmp dir"), filepath.Join(base, "files 100% $x")
			for _, d := range []string{tmp, dir} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("TMPDIR", tmp)
			tg := nixtest.NewTarget(t)
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			knownHosts, sshConfig := filepath.Join(dir, "known hosts"), filepath.Join(dir, "ssh config")
			if err := os.WriteFile(sshConfig, []byte("Host *\n  ForwardAgent yes\n  ForwardX11 yes\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			config := func(opts string) string {
				return fmt.Sprintf(`
provider "fleet" {
  private_key = %q
}

resource "fleet_ssh_deployment" "prod" {
  known_hosts_file = %q
  ssh_config_file  = %q
  nodes = [{
    name     = "web1"
    host     = %q
    system   = %q
    user     = %q
    ssh_opts = [%s]
  }]
  verdict = {
    confirm_timeout = "3s"
    settle_timeout  = "2s"
    command         = [{ run = "{ echo \"SSH_AUTH_SOCK=$${SSH_AUTH_SOCK:-}\"; ssh-add -l; } > /run/nixtest/agent-seen 2>&1; true" }]
  }
}
`, tg.SSHD.ClientKey.PEM(), knownHosts, sshConfig, tg.Host, sys, tg.User, opts)
			}
			port := fmt.Sprintf(`"Port=%d"`, tg.Port)
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(config(port + `, "ForwardAgent=yes"`))
			s.Run("init", "-input=false")
			out, errOut, code := s.ExitCode("plan", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(out+errOut, "Forwarding refused") || !strings.Contains(out+errOut, `"ForwardAgent=yes"`) {
				t.Errorf("a plan with ForwardAgent=yes in ssh_opts (exit %d):\n%s%s", code, out, errOut)
			}
			s.WriteConfig(config(port))
			s.Run("apply", "-auto-approve", "-input=false")
			if tg.CurrentSystem() != sys {
				t.Fatalf("the host runs %s, want %s", tg.CurrentSystem(), sys)
			}
			seen, err := os.ReadFile(filepath.Join(tg.StateDir, "agent-seen"))
			if err != nil {
				t.Fatalf("the verdict command did not run: %v", err)
			}
			if got := string(seen); !strings.HasPrefix(got, "SSH_AUTH_SOCK=\n") || strings.Contains(got, "fleet provider key") {
				t.Errorf("the host found an agent: %q", got)
			}
			kh, err := os.ReadFile(knownHosts)
			if err != nil || !strings.Contains(string(kh), strings.Fields(tg.HostKey)[1]) {
				t.Errorf("the host's key is not in %q: %q, %v", knownHosts, kh, err)
			}
			entries, _ := os.ReadDir(tmp)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "fssh") {
					t.Errorf("the deployment made its control directory %s in a TMPDIR ssh would split", e.Name())
				}
			}
			s.WantNoChanges()
			// Terraform before 1.15 exits 2 on every refresh-only plan of
			// resources holding numbers (see TestDriftJobOnAnUnchangedFleet).
			want := 0
			if cli.Name == "terraform" && cli.Before(t, 1, 15) {
				want = 2
			}
			if out, errOut, code := s.ExitCode("plan", "-refresh-only", "-detailed-exitcode", "-input=false", "-no-color"); code != want || !strings.Contains(out, "No changes") {
				t.Errorf("plan -refresh-only -detailed-exitcode exited %d, want %d, and no changes:\n%s%s", code, want, out, errOut)
			}
		})
	}
}

// A refresh has a deadline of its own: a host that takes the login and
// then hangs (its readlink never returns) is warned about as unreachable
// after about ConnectTimeout and remote_exec_timeout, and the plan goes
// on, through one CLI (AlternateCLIs).
func TestDeploymentRefreshOfAHungHostEnds(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})}, "  remote_exec_timeout = 5\n"))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			hang := filepath.Join(tg.StateDir, "bin", "readlink")
			if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 3602\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			out, errOut, code := s.ExitCode("plan", "-refresh-only", "-input=false", "-no-color")
			took := time.Since(start)
			if code != 0 || !strings.Contains(out+errOut, "Node n1 is unreachable") || !strings.Contains(out+errOut, "did not answer within") {
				t.Errorf("a refresh of a hung host (exit %d, %s):\n%s%s", code, took, out, errOut)
			}
			if took > 60*time.Second {
				t.Errorf("the refresh of a hung host took %s, want about 15 s (ConnectTimeout 10 s, remote_exec_timeout 5 s)", took)
			}
			if err := os.Remove(hang); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Issue 29: a host that stops answering mid-activation, and cannot be
// asked what its watchdog did, is recorded as not known (the apply fails
// saying so, state holds the Unknown phase), and the next refresh, once
// the host answers, reads it and settles the record: its watchdog rolled
// it back.
func TestDeploymentOutcomeNotKnownIsSettledByTheNextRefresh(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 3 * time.Second})
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, ""))
			s.Run("init", "-input=false")
			// Once the activation has begun, every path to the host stalls
			// and new connections go nowhere, until the test heals them.
			stop := make(chan struct{})
			frozen := make(chan struct{})
			go func() {
				defer close(frozen)
				for {
					for _, e := range tg.Events() {
						if e.Kind == "start" && e.System == sys {
							tg.CutSSH(t, nixtest.CutBlackHole)
							tg.Gate.Stall(true)
							return
						}
					}
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}()
			t.Cleanup(func() { tg.Gate.Stall(false) })
			out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			close(stop)
			<-frozen
			if code == 0 || !strings.Contains(errOut, "DEPLOY OUTCOME UNKNOWN for n1") || !strings.Contains(errOut, "could not be asked") {
				t.Fatalf("apply with a host that stopped answering: exit %d\n%s\n%s", code, out, errOut)
			}
			if rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0); rec["phase"] != "Unknown" {
				t.Fatalf("n1's record after the apply: %v", rec)
			}
			tg.Gate.Stall(false)
			tg.RestoreSSH(t)
			deadline := time.Now().Add(30 * time.Second)
			for tg.CurrentSystem() != old && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			if tg.CurrentSystem() != old {
				t.Fatalf("the host did not switch itself back: it runs %s", tg.CurrentSystem())
			}
			out, _ = s.Run("apply", "-refresh-only", "-auto-approve", "-input=false", "-no-color")
			if !strings.Contains(out, "Node n1 settled") {
				t.Errorf("the refresh did not say it settled n1:\n%s", out)
			}
			rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)
			if rec["phase"] != "RolledBack" || !strings.Contains(fmt.Sprint(rec["message"]), "settled by a refresh") || rec["current_system"] != old {
				t.Errorf("n1's record after the refresh: %v", rec)
			}
			// The next apply deploys it again, and succeeds.
			tg2sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{tg2sys}, ""))
			s.Run("apply", "-auto-approve", "-input=false")
			if tg.CurrentSystem() != tg2sys || tg.BootEntry() != tg2sys {
				t.Errorf("after the next apply: current %s, boot %s", tg.CurrentSystem(), tg.BootEntry())
			}
			s.WantNoChanges()
		})
	}
}

// A node whose outcome was not known and whose deploy did finish on the
// host (its confirmation landed, its boot entry made) is settled
// Succeeded by the next refresh, and its whole record and the
// deployment's with it: action, exit code, the node lists, the
// deployment's phase and Ready. The next plan has nothing to do (the
// helper trial found a settled node still "failed", exit 1, in
// failed_nodes, and a plan that changed it). The state is what an apply
// that lost the host's answer writes, made from a successful one.
func TestDeploymentOutcomeSettledSucceededSettlesTheDeployment(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")

			var state map[string]any
			if err := json.Unmarshal(s.State(), &state); err != nil {
				t.Fatal(err)
			}
			inst := state["resources"].([]any)[0].(map[string]any)["instances"].([]any)[0].(map[string]any)
			attrs := inst["attributes"].(map[string]any)
			unknown := func(conds []any, reason string) {
				for _, c := range conds {
					if c := c.(map[string]any); c["type"] == "Ready" {
						c["status"], c["reason"], c["message"] = "Unknown", reason, "not known"
					}
				}
			}
			rec := attrs["status"].(map[string]any)["n1"].(map[string]any)
			rec["phase"], rec["action"], rec["exit_code"], rec["message"] = "Unknown", "failed", 1, "the host could not be asked"
			unknown(rec["conditions"].([]any), "OutcomeUnknown")
			attrs["phase"], attrs["failed_nodes"], attrs["succeeded_nodes"] = "Failed", []any{"n1"}, []any{}
			attrs["actions"].(map[string]any)["n1"] = "failed"
			unknown(attrs["conditions"].([]any), "NodesFailed")
			state["serial"] = state["serial"].(float64) + 1
			b, err := json.MarshalIndent(state, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.Dir, "terraform.tfstate"), b, 0o600); err != nil {
				t.Fatal(err)
			}

			out, _ := s.Run("apply", "-refresh-only", "-auto-approve", "-input=false", "-no-color")
			if !strings.Contains(out, "Node n1 settled") {
				t.Errorf("the refresh did not say it settled n1:\n%s", out)
			}
			v := s.Values("fleet_ssh_deployment.prod")
			rec = nodeRecord(t, v, 0)
			if rec["phase"] != "Succeeded" || rec["action"] != "switch" || rec["exit_code"] != float64(0) || !strings.Contains(fmt.Sprint(rec["message"]), "settled by a refresh") {
				t.Errorf("n1's record after the refresh: %v", rec)
			}
			if v["phase"] != "Succeeded" || fmt.Sprint(v["failed_nodes"]) != "[]" || fmt.Sprint(v["succeeded_nodes"]) != "[n1]" || fmt.Sprint(v["actions"]) != "map[n1:switch]" {
				t.Errorf("the deployment after the refresh: phase %v, failed %v, succeeded %v, actions %v", v["phase"], v["failed_nodes"], v["succeeded_nodes"], v["actions"])
			}
			for _, c := range v["conditions"].([]any) {
				if c := c.(map[string]any); c["type"] == "Ready" && c["status"] != "True" {
					t.Errorf("the deployment's Ready after the refresh: %v", c)
				}
			}
			s.WantNoChanges()
		})
	}
}
