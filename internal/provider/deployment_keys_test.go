package provider_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/systemdtest"
)

// secretValue is a secret no other test or file holds.
func secretValue(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "s3cr3t-" + hex.EncodeToString(b)
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// keysConfig is deploymentConfig with keys: db-password (read at
// activation, owned by nobody:nogroup, 0440, restarting postgresql.service
// when it changes alone) on every node, from an ephemeral variable, and
// api-token (after the verdict) on n1 and n2, unless extra says otherwise.
func keysConfig(tgs []*nixtest.Target, systems []string, keys, contents string) string {
	return keysConfigWith(tgs, systems, keys, contents, "")
}

// keysConfigWith is keysConfig with more of the deployment's attributes.
func keysConfigWith(tgs []*nixtest.Target, systems []string, keys, contents, more string) string {
	return `
variable "db_password" {
  type      = string
  sensitive = true
  ephemeral = true
}
variable "api_token" {
  type      = string
  sensitive = true
  ephemeral = true
}
` + deploymentConfig(tgs, systems, "  keys = {\n"+keys+"  }\n  key_contents_wo = {\n"+contents+"  }\n"+more)
}

const (
	dbKey       = `    "db-password" = { user = "nobody", group = "nogroup", permissions = "0440", restart_units = ["postgresql.service"] }` + "\n"
	apiKey      = `    "api-token"   = { upload = "after-verdict", nodes = ["n1", "n2"] }` + "\n"
	dbContent   = `    "db-password" = var.db_password` + "\n"
	apiContent  = `    "api-token"   = var.api_token` + "\n"
	dbKeyPath   = "/run/keys/db-password"
	apiKeyPath  = "/run/keys/api-token"
	restartUnit = "postgresql.service"
)

// keyFile is the content, owner and mode of a target's key file; ok false
// when it is missing.
func keyFile(t *testing.T, tg *nixtest.Target, path string) (content, owner string, mode os.FileMode, ok bool) {
	t.Helper()
	b, err := os.ReadFile(tg.Path(path))
	if os.IsNotExist(err) {
		return "", "", 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(tg.Path(path))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return string(b), fmt.Sprintf("%d:%d", st.Uid, st.Gid), fi.Mode().Perm(), true
}

// sampleArgs reads every process's argument list until stop is closed,
// and says whether any held secret.
func sampleArgs(secret string) (stop func() (seen bool, samples int)) {
	done := make(chan struct{})
	var found atomic.Bool
	var n atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range procs {
				if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), secret) {
					found.Store(true)
				}
			}
			n.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	})
	return func() (bool, int) {
		close(done)
		wg.Wait()
		return found.Load(), int(n.Load())
	}
}

// Keys through both CLIs (issue 38), on 6 NixOS-like hosts switched to a
// new system: a before-activation key is in place, as configured, when
// the activation begins; an after-verdict key only after it, on its nodes
// alone; a converged fleet plans nothing; a key deleted on one host (as a
// reboot does) plans that host's keys alone, and the apply puts it back
// and restarts its unit without a switch; a rotated content plans every
// node that holds the key and nothing else; a key removed from the
// configuration is removed from its hosts; destroying the deployment
// removes the rest. The secrets are found in no state, saved plan, TRACE
// log, output or process argument list.
func TestDeploymentKeysReachTheHosts(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			var tgs []*nixtest.Target
			var systems []string
			for range 6 {
				tg := nixtest.NewTarget(t)
				tg.Boot(t, old)
				tgs = append(tgs, tg)
				systems = append(systems, sys)
			}
			db, api := secretValue(t), secretValue(t)
			s := acctest.NewBinarySession(t, cli, binary)
			s.Setenv("TF_VAR_db_password", db)
			s.Setenv("TF_VAR_api_token", api)
			logPath := filepath.Join(t.TempDir(), "trace.log")
			s.Setenv("TF_LOG", "TRACE")
			s.Setenv("TF_LOG_PATH", logPath)
			s.WriteConfig(keysConfig(tgs, systems, dbKey+apiKey, dbContent+apiContent))
			var outputs strings.Builder
			run := func(args ...string) string {
				t.Helper()
				out, errOut := s.Run(args...)
				outputs.WriteString(out + errOut)
				return out + errOut
			}
			planFile := filepath.Join(s.Dir, "keys.tfplan")
			run("plan", "-input=false", "-out="+planFile)
			stop := sampleArgs(db)
			run("apply", "-input=false", planFile)
			if seen, samples := stop(); seen || samples < 3 {
				t.Errorf("the secret was in a process's argument list during the apply: %v (%d samples)", seen, samples)
			}
			for i, tg := range tgs {
				name := fmt.Sprintf("n%d", i+1)
				if tg.CurrentSystem() != sys {
					t.Fatalf("%s runs %s, want %s", name, tg.CurrentSystem(), sys)
				}
				content, owner, mode, ok := keyFile(t, tg, dbKeyPath)
				if !ok || content != db || owner != "65534:65534" || mode != 0o440 {
					t.Errorf("%s: %s ok=%v owner %s mode %o (content right: %v), want nobody:nogroup (65534) 0440", name, dbKeyPath, ok, owner, mode, content == db)
				}
				seen := strings.Join(tg.KeysSeen(), "\n")
				if !strings.Contains(seen, dbKeyPath+" "+digest(db)) {
					t.Errorf("%s: the activation did not find db-password in place as it began: %q", name, seen)
				}
				if strings.Contains(seen, apiKeyPath) {
					t.Errorf("%s: the activation found the after-verdict key already: %q", name, seen)
				}
				content, _, mode, ok = keyFile(t, tg, apiKeyPath)
				if wantAPI := i < 2; ok != wantAPI || ok && (content != api || mode != 0o400) {
					t.Errorf("%s: %s present %v (want %v), mode %o", name, apiKeyPath, ok, wantAPI, mode)
				}
				rec := nodeRecordOf(t, s.Values("fleet_ssh_deployment.prod"), name)
				if c := conditionOf(rec, "KeysUploaded"); c != nil {
					t.Errorf("%s: KeysUploaded %v, want none (its keys are in place)", name, c)
				}
			}
			if c := conditionOf(s.Values("fleet_ssh_deployment.prod"), "KeysUploaded"); c == nil || c["status"] != "True" {
				t.Errorf("the deployment's KeysUploaded %v, want True", c)
			}
			s.WantNoChanges()

			// A key put in place with a switch restarts its units once the
			// new system runs (before the verdict), as a key alone does.
			for i, tg := range tgs {
				if got := tg.Restarts(); len(got) != 1 || got[0] != restartUnit {
					t.Errorf("n%d restarted %q after the switch, want %s once", i+1, got, restartUnit)
				}
			}
			// A reboot empties /run/keys: here one host's key goes.
			calls := len(tgs[1].Calls())
			if err := os.Remove(tgs[1].Path(dbKeyPath)); err != nil {
				t.Fatal(err)
			}
			s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
			v := s.Values("fleet_ssh_deployment.prod")
			if c := conditionOf(nodeRecordOf(t, v, "n2"), "KeysUploaded"); c == nil || c["status"] != "False" || c["reason"] != "NotInPlace" {
				t.Errorf("after a refresh, n2's KeysUploaded is %v, want False NotInPlace", c)
			}
			if c := conditionOf(v, "KeysUploaded"); c == nil || c["status"] != "False" || !strings.Contains(fmt.Sprint(c["message"]), ": n2") {
				t.Errorf("after a refresh, the deployment's KeysUploaded is %v, want False naming n2", c)
			}
			plan := run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, `"n2" = "switch" -> "keys"`) || strings.Count(plan, `-> "keys"`) != 2 {
				t.Errorf("the plan after n2 lost its key does not plan n2's keys alone:\n%s", plan)
			}
			if !strings.Contains(plan, "Key db-password will be put on node n2") || !strings.Contains(plan, "n2: missing on the host") {
				t.Errorf("the plan does not say why:\n%s", plan)
			}
			run("apply", "-auto-approve", "-input=false")
			if content, _, _, ok := keyFile(t, tgs[1], dbKeyPath); !ok || content != db {
				t.Errorf("n2's key not put back")
			}
			if got := tgs[1].Calls()[calls:]; len(got) != 0 {
				t.Errorf("n2 was switched again for its key: %q", got)
			}
			if got := tgs[1].Restarts(); len(got) != 2 || got[1] != restartUnit {
				t.Errorf("n2 restarted %q, want %s once more, for the key put back", got, restartUnit)
			}
			s.WantNoChanges()

			// A rotated content: every node that holds the key, nothing
			// else.
			db2 := secretValue(t)
			s.Setenv("TF_VAR_db_password", db2)
			plan = run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, "n1, n2, n3, n4, n5, n6: another content on the host") || strings.Contains(plan, "will switch") {
				t.Errorf("a rotated key does not plan the keys of every node alone:\n%s", plan)
			}
			run("apply", "-auto-approve", "-input=false")
			for i, tg := range tgs {
				if content, _, _, _ := keyFile(t, tg, dbKeyPath); content != db2 {
					t.Errorf("n%d: the rotated key is not on the host", i+1)
				}
			}
			s.WantNoChanges()

			// A key removed from the configuration goes from its hosts.
			s.WriteConfig(keysConfig(tgs, systems, dbKey, dbContent))
			plan = run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, "Key "+apiKeyPath+" will be removed from 2 nodes") || !strings.Contains(plan, `~ "n2" = {`) || strings.Contains(plan, `~ "n3" = {`) {
				t.Errorf("the plan does not remove api-token from n1 and n2:\n%s", plan)
			}
			run("apply", "-auto-approve", "-input=false")
			for i, tg := range tgs[:2] {
				if _, _, _, ok := keyFile(t, tg, apiKeyPath); ok {
					t.Errorf("n%d still has %s", i+1, apiKeyPath)
				}
			}
			s.WantNoChanges()

			// A node that leaves the deployment takes its keys with it.
			s.WriteConfig(keysConfig(tgs[:5], systems[:5], dbKey, dbContent))
			plan = run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, "Keys will be removed from the nodes that leave") || !strings.Contains(plan, "n6: "+dbKeyPath) {
				t.Errorf("the plan does not remove n6's key:\n%s", plan)
			}
			run("apply", "-auto-approve", "-input=false")
			if _, _, _, ok := keyFile(t, tgs[5], dbKeyPath); ok || tgs[5].CurrentSystem() != sys {
				t.Errorf("n6 keeps its key after it left the deployment (or was switched: it runs %s)", tgs[5].CurrentSystem())
			}
			s.WantNoChanges()

			state := string(s.State())
			destroy := run("destroy", "-auto-approve", "-input=false")
			if !strings.Contains(destroy, "Deployment destroyed: its keys will be removed from the hosts") {
				t.Errorf("the destroy does not say it removes the keys:\n%s", destroy)
			}
			for i, tg := range tgs {
				if _, _, _, ok := keyFile(t, tg, dbKeyPath); ok {
					t.Errorf("n%d keeps %s after the destroy", i+1, dbKeyPath)
				}
			}
			plans, _ := os.ReadFile(planFile)
			trace, _ := os.ReadFile(logPath)
			if len(trace) < 1000 {
				t.Fatalf("the TRACE log is %d bytes: not a log to search", len(trace))
			}
			for what, text := range map[string]string{"the state": state, "the saved plan": string(plans), "the TRACE log": string(trace), "the CLI's output": outputs.String()} {
				for _, secret := range []string{db, db2, api, digest(db), digest(db2)} {
					if strings.Contains(text, secret) {
						t.Errorf("%s holds a secret or its digest", what)
					}
				}
			}
		})
	}
}

// A key that cannot be put in place fails its node alone, before the
// node activates, naming the path and why (a user the host lacks, a
// directory that cannot be written); the other nodes switch. Through both
// CLIs.
func TestDeploymentKeyThatCannotBeWrittenFailsItsNodeBeforeActivation(t *testing.T) {
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
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(tgs, []string{sys, sys, sys}, `  keys = {
    "db"    = {}
    "odd"   = { user = "no-such-user-fleet", nodes = ["n2"] }
    "proc"  = { destination = "/proc/fleet-keys/proc", nodes = ["n3"] }
  }
  key_contents_wo = { "db" = "a", "odd" = "b", "proc" = "c" }
`))
			s.Run("init", "-input=false")
			_, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 {
				t.Fatal("the apply succeeded")
			}
			errs := strings.Join(strings.Fields(errOut), " ")
			for _, want := range []string{"DEPLOY FAILED for n2", "no-such-user-fleet", "DEPLOY FAILED for n3", "/proc/fleet-keys/proc"} {
				if !strings.Contains(errs, want) {
					t.Errorf("the apply's errors do not say %q:\n%s", want, errs)
				}
			}
			if strings.Contains(errs, "DEPLOY FAILED for n1") || tgs[0].CurrentSystem() != sys {
				t.Errorf("n1 did not switch: it runs %s\n%s", tgs[0].CurrentSystem(), errs)
			}
			v := s.Values("fleet_ssh_deployment.prod")
			for i, tg := range tgs[1:] {
				name := fmt.Sprintf("n%d", i+2)
				if tg.CurrentSystem() != old || len(tg.Calls()) != 0 {
					t.Errorf("%s activated: runs %s, switch-to-configuration calls %q", name, tg.CurrentSystem(), tg.Calls())
				}
				rec := nodeRecordOf(t, v, name)
				if c := conditionOf(rec, "KeysUploaded"); c == nil || c["status"] != "False" || c["reason"] != "KeyUploadFailed" {
					t.Errorf("%s: KeysUploaded %v, want False KeyUploadFailed", name, c)
				}
				if rec["phase"] != "Failed" {
					t.Errorf("%s: phase %v", name, rec["phase"])
				}
			}
			if _, _, _, ok := keyFile(t, tgs[1], "/run/keys/db"); !ok {
				t.Errorf("n2's good key is not in place (its keys are written in order, db first)")
			}

			// Fixed: the next apply switches n2 and n3 with their keys.
			good := `  keys = {
    "db"    = {}
    "odd"   = { user = "nobody", nodes = ["n2"] }
    "proc"  = { destination = "/run/keys/proc", nodes = ["n3"] }
  }
  key_contents_wo = { "db" = "a", "odd" = "b", "proc" = "c" }
`
			s.WriteConfig(deploymentConfig(tgs, []string{sys, sys, sys}, good))
			s.Run("apply", "-auto-approve", "-input=false")
			wantConverged := func(when string) {
				t.Helper()
				v := s.Values("fleet_ssh_deployment.prod")
				if v["phase"] != "Succeeded" || fmt.Sprint(v["failed_nodes"]) != "[]" {
					t.Errorf("%s: the deployment is %v, failed_nodes %v", when, v["phase"], v["failed_nodes"])
				}
				for i := range tgs {
					rec := nodeRecordOf(t, v, fmt.Sprintf("n%d", i+1))
					if rec["phase"] != "Succeeded" || conditionOf(rec, "KeysUploaded") != nil {
						t.Errorf("%s: n%d is %v, KeysUploaded %v", when, i+1, rec["phase"], conditionOf(rec, "KeysUploaded"))
					}
					for _, c := range []string{"ClosureCopied", "Activated", "VerdictPassed", "BootloaderFinalized", "Ready"} {
						if cond := conditionOf(rec, c); cond == nil || cond["status"] != "True" {
							t.Errorf("%s: n%d's %s is %v", when, i+1, c, cond)
						}
					}
				}
				s.WantNoChanges()
			}
			wantConverged("after the fix")

			// A key that fails alone (the system stands) fails its node
			// without touching its system's conditions; fixed, the node
			// is Succeeded again.
			s.WriteConfig(deploymentConfig(tgs, []string{sys, sys, sys}, strings.Replace(good, `user = "nobody"`, `user = "no-such-user-fleet"`, 1)))
			if _, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color"); code == 0 || !strings.Contains(errOut, "the host has no user no-such-user-fleet") {
				t.Fatalf("a key with a user the host lacks: exit %d\n%s", code, errOut)
			}
			v = s.Values("fleet_ssh_deployment.prod")
			rec := nodeRecordOf(t, v, "n2")
			if rec["phase"] != "Failed" || rec["action"] != "keys" || conditionOf(rec, "VerdictPassed")["status"] != "True" {
				t.Errorf("n2 after its key failed alone: phase %v, action %v, VerdictPassed %v", rec["phase"], rec["action"], conditionOf(rec, "VerdictPassed"))
			}
			s.WriteConfig(deploymentConfig(tgs, []string{sys, sys, sys}, good))
			s.Run("apply", "-auto-approve", "-input=false")
			wantConverged("after the key that failed alone was fixed")
		})
	}
}

// The deployment guide's keys configuration (examples/guides/keys),
// applied from an empty state in one go through both CLIs on two hosts,
// its secrets from the environment: each key where, whose and as the
// guide says, and a plan after it is empty.
func TestDeploymentKeysGuideAppliesInOneGo(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tgs := []*nixtest.Target{nixtest.NewTarget(t), nixtest.NewTarget(t)}
			var nodes []map[string]any
			for i, tg := range tgs {
				tg.Boot(t, old)
				nodes = append(nodes, map[string]any{"name": fmt.Sprintf("web%d", i+1), "host": tg.Host, "host_key": tg.HostKey, "system": sys,
					"user": tg.User, "private_key_file": tg.ClientKeyFile, "ssh_opts": []string{fmt.Sprintf("Port=%d", tg.Port), "IdentitiesOnly=yes"}})
			}
			s := acctest.NewBinarySession(t, cli, binary)
			if err := os.CopyFS(s.Dir, os.DirFS("../../examples/guides/keys")); err != nil {
				t.Fatal(err)
			}
			vars, err := json.Marshal(map[string]any{"nodes": nodes})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.Dir, "terraform.tfvars.json"), vars, 0o600); err != nil {
				t.Fatal(err)
			}
			db, api := secretValue(t), secretValue(t)
			s.Setenv("TF_VAR_db_password", db)
			s.Setenv("TF_VAR_api_token", api)
			s.Run("apply", "-auto-approve", "-input=false")
			pg, err := user.Lookup("postgres")
			if err != nil {
				t.Fatalf("the guide's key is owned by postgres, which this machine lacks (scripts/setup.sh installs postgresql): %v", err)
			}
			for i, tg := range tgs {
				content, owner, mode, ok := keyFile(t, tg, "/run/keys/db-password")
				if !ok || content != db || owner != pg.Uid+":"+pg.Gid || mode != 0o440 {
					t.Errorf("web%d: db-password present %v, owner %s (want %s:%s), mode %o", i+1, ok, owner, pg.Uid, pg.Gid, mode)
				}
				content, _, _, ok = keyFile(t, tg, "/run/api/token")
				if want := i == 0; ok != want || ok && content != api {
					t.Errorf("web%d: api-token present %v, want %v", i+1, ok, want)
				}
			}
			s.WantNoChanges()
		})
	}
}

// The plan of one key added to a deployment of 12 nodes (issue 38), to
// all of them and to 3: at most maxKeyPlanLines lines plus
// maxKeyPlanLinesPerNode a node that gets it, the whole plan output as a
// reviewer reads it.
func TestDeploymentKeyPlanIsShort(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			var tgs []*nixtest.Target
			var systems []string
			for range 12 {
				tg := nixtest.NewTarget(t)
				tg.Boot(t, sys)
				tgs = append(tgs, tg)
				systems = append(systems, sys)
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(tgs, systems, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			for _, n := range []int{12, 3} {
				nodes := ""
				if n < 12 {
					nodes = `, nodes = ["n1", "n2", "n3"]`
				}
				s.WriteConfig(deploymentConfig(tgs, systems, `  keys = { "db-password" = { user = "nobody"`+nodes+` } }
  key_contents_wo = { "db-password" = "x" }
`))
				out, errOut := s.Run("plan", "-input=false", "-no-color")
				lines := len(strings.Split(strings.TrimSpace(out+errOut), "\n"))
				t.Logf("one key added to %d of 12 nodes: %d lines (%.1f a node over %d)", n, lines, float64(lines-maxKeyPlanLines)/float64(n), maxKeyPlanLines)
				if lines > maxKeyPlanLines+maxKeyPlanLinesPerNode*n {
					t.Errorf("one key added to %d nodes plans %d lines, want at most %d + %d a node:\n%s", n, lines, maxKeyPlanLines, maxKeyPlanLinesPerNode, out+errOut)
				}
			}
		})
	}
}

// The issue asked for 40 lines and 4 a node. A node that gets the key
// plans 6: its action in actions, and in its record the action, the
// message (unknown until the apply: it says which keys were written, and
// it is how the apply tells a node to do from a record that stands, as
// after a rotation, whose nodes' action is keys already), and Terraform's
// three lines around a changed map element. The rest is the keys block as
// written, the deployment's new KeysUploaded condition and the warning
// that names the key, why and the nodes: about 55 lines.
const (
	maxKeyPlanLines        = 60
	maxKeyPlanLinesPerNode = 6
)

// Keys on a real systemd host (a Debian container booted with
// systemd-nspawn), through one CLI (AlternateCLIs): the new system's unit
// reads its key each time it starts, so the switch succeeds only with the
// key in place before the activation; the key's file is as configured;
// once it is deleted (as a reboot empties /run/keys), the plan names it
// and the apply puts it back and restarts the unit, which reads it again,
// with real systemctl.
func TestDeploymentKeysOnARealSystemdHost(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := systemdtest.NewTarget(t)
			old := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
			tg.Boot(t, old)
			const keyPath = "/run/keys/app-token"
			sys := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed, ReadsKey: keyPath})
			token := secretValue(t)
			keys := fmt.Sprintf(`  keys = { "app-token" = { restart_units = [%q] } }
  key_contents_wo = { "app-token" = %q }
`, systemdtest.DefaultUnit, token)
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(systemdDeploymentConfig(tg, sys, keys))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			read := func() string {
				out, code := tg.Exec(t, "cat", systemdtest.KeyReadPath)
				if code != 0 {
					return ""
				}
				return strings.Fields(out + " ")[0]
			}
			if tg.CurrentSystem() != sys || read() != digest(token) {
				t.Fatalf("after the switch: runs %s, the unit read %q (want the key's digest %s)", tg.CurrentSystem(), read(), digest(token))
			}
			if out, _ := tg.Exec(t, "stat", "-c", "%U:%G %a", keyPath); strings.TrimSpace(out) != "root:root 400" {
				t.Errorf("%s is %q, want root:root 400", keyPath, out)
			}
			s.WantNoChanges()

			if _, code := tg.Exec(t, "rm", "-f", keyPath, systemdtest.KeyReadPath); code != 0 {
				t.Fatal("rm failed")
			}
			plan, _ := s.Run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, `"ct1" = "switch" -> "keys"`) || !strings.Contains(plan, "Key app-token will be put on node ct1") {
				t.Errorf("the plan does not put the key back:\n%s", plan)
			}
			calls := len(tg.Calls())
			s.Run("apply", "-auto-approve", "-input=false")
			if read() != digest(token) || len(tg.Calls()) != calls {
				t.Errorf("after the apply: the unit read %q, switch-to-configuration calls %q (want none new)", read(), tg.Calls()[calls:])
			}
			if svc := tg.Service(t, systemdtest.DefaultUnit); svc.ActiveState != "active" {
				t.Errorf("%s after its key came back: %+v", systemdtest.DefaultUnit, svc)
			}
			s.WantNoChanges()
		})
	}
}

// Keys removed while their node is not deployed (held) go from its host
// the next time it is (issue 47): the host's record of the keys the
// deployment wrote there says which, though state no longer names them;
// the plan says so, with the node's action keys; the deployment's last
// keys, removed at once, too. A converged fleet then plans nothing.
func TestDeploymentKeysRemovedWhileANodeWasHeldGoLater(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tgs := []*nixtest.Target{nixtest.NewTarget(t), nixtest.NewTarget(t)}
			systems := []string{sys, sys}
			for _, tg := range tgs {
				tg.Boot(t, sys)
			}
			s := acctest.NewBinarySession(t, cli, binary)
			s.Setenv("TF_VAR_db_password", secretValue(t))
			s.Setenv("TF_VAR_api_token", secretValue(t))
			api := `    "api-token"   = {}` + "\n"
			s.WriteConfig(keysConfig(tgs, systems, dbKey+api, dbContent+apiContent))
			s.Run("apply", "-auto-approve", "-input=false")
			for i, tg := range tgs {
				if _, _, _, ok := keyFile(t, tg, apiKeyPath); !ok {
					t.Fatalf("n%d lacks %s", i+1, apiKeyPath)
				}
			}
			// api-token goes while n2 is held: n1 loses it, n2 keeps it.
			s.WriteConfig(keysConfigWith(tgs, systems, dbKey, dbContent, holdN2))
			s.Run("apply", "-auto-approve", "-input=false")
			if _, _, _, ok := keyFile(t, tgs[0], apiKeyPath); ok {
				t.Errorf("n1 keeps %s", apiKeyPath)
			}
			if _, _, _, ok := keyFile(t, tgs[1], apiKeyPath); !ok {
				t.Errorf("the held n2 lost %s", apiKeyPath)
			}
			// n2 is deployed again: its host's record names api-token.
			s.WriteConfig(keysConfig(tgs, systems, dbKey, dbContent))
			plan, _ := s.Run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, "Key "+apiKeyPath+" will be removed from node n2") || !strings.Contains(plan, `"n2" = "skip" -> "keys"`) {
				t.Errorf("the plan does not remove n2's stale key:\n%s", plan)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			if _, _, _, ok := keyFile(t, tgs[1], apiKeyPath); ok {
				t.Errorf("n2 keeps %s once deployed again", apiKeyPath)
			}
			s.WantNoChanges()
			// Every key goes while n2 is held; then n2 is deployed again.
			s.WriteConfig(keysConfigWith(tgs, systems, "", "", holdN2))
			s.Run("apply", "-auto-approve", "-input=false")
			if _, _, _, ok := keyFile(t, tgs[1], dbKeyPath); !ok {
				t.Errorf("the held n2 lost %s", dbKeyPath)
			}
			s.WriteConfig(keysConfigWith(tgs, systems, "", "", ""))
			plan, _ = s.Run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, "Key "+dbKeyPath+" will be removed from node n2") {
				t.Errorf("the plan does not remove the held node's last key:\n%s", plan)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			if _, _, _, ok := keyFile(t, tgs[1], dbKeyPath); ok {
				t.Errorf("n2 keeps %s once deployed again", dbKeyPath)
			}
			s.WantNoChanges()
		})
	}
}

const holdN2 = `  hold = ["n2"]` + "\n"

// A key removed from the configuration while its node was held stays on
// that node's host until the node is next deployed; destroying the
// deployment before then removes it all the same (the host's record of
// the keys the deployment wrote says so), though the configuration has
// no key left (from the independent review of issue 47).
func TestDeploymentDestroyRemovesKeysLeftWhileANodeWasHeld(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tgs := []*nixtest.Target{nixtest.NewTarget(t), nixtest.NewTarget(t)}
			systems := []string{sys, sys}
			for _, tg := range tgs {
				tg.Boot(t, sys)
			}
			s := acctest.NewBinarySession(t, cli, binary)
			s.Setenv("TF_VAR_db_password", secretValue(t))
			s.Setenv("TF_VAR_api_token", secretValue(t))
			s.WriteConfig(keysConfig(tgs, systems, dbKey, dbContent))
			s.Run("apply", "-auto-approve", "-input=false")
			if _, _, _, ok := keyFile(t, tgs[1], dbKeyPath); !ok {
				t.Fatalf("n2 lacks %s", dbKeyPath)
			}
			s.WriteConfig(keysConfigWith(tgs, systems, "", "", holdN2))
			s.Run("apply", "-auto-approve", "-input=false")
			if _, _, _, ok := keyFile(t, tgs[1], dbKeyPath); !ok {
				t.Fatalf("the held n2 lost %s", dbKeyPath)
			}
			out, _ := s.Run("destroy", "-auto-approve", "-input=false")
			if _, _, _, ok := keyFile(t, tgs[1], dbKeyPath); ok {
				t.Errorf("n2 keeps %s (its secret) after the deployment was destroyed, and the destroy said:\n%s", dbKeyPath, out)
			}
		})
	}
}
