package provider_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// runDriftJob runs the drift guide's job, exactly as documented, in the
// session's directory, with the CLI under test as `terraform`.
func runDriftJob(t *testing.T, s *acctest.Session, cli acctest.CLI) (string, int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cli.Path, filepath.Join(bin, "terraform")); err != nil {
		t.Fatal(err)
	}
	job, err := filepath.Abs("../../examples/guides/drift/drift-job.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := s.Command(job)
	cmd.Env = append(cmd.Env, "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("the drift job did not run: %v\n%s", err, out)
	return "", -1
}

// Issue 13: drift jobs mean something. The drift guide's configuration
// (executors, a node health policy over them, a deployment), applied and
// converged, then the guide's job three times with every probe due and
// run between the runs: it exits 0 each time, and a refresh-only apply
// leaves the state file byte for byte as it was. A host that goes down and
// a node switched by hand make it exit 2, naming them.
func TestDriftJobOnAnUnchangedFleet(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			other := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			storage := t.TempDir()
			if err := os.Mkdir(filepath.Join(storage, "data"), 0o755); err != nil {
				t.Fatal(err)
			}
			hosts := map[string]any{}
			var targets []*nixtest.Target
			key := sshtest.NewKey(t)
			keyFile := key.WriteFile(t, t.TempDir())
			for _, name := range []string{"web1", "web2", "web3"} {
				tg := nixtest.NewTarget(t, nixtest.WithSSHDOptions(sshtest.WithAuthorizedKeys(key)))
				tg.Boot(t, sys)
				targets = append(targets, tg)
				hosts[name] = map[string]any{"host": tg.Host, "port": tg.Port, "host_key": tg.HostKey, "system": sys}
			}
			fake := clock.NewFake(time.Now())
			s := acctest.NewSession(t, cli, server(provider.WithClock(fake)))
			if err := os.CopyFS(s.Dir, os.DirFS("../../examples/guides/drift")); err != nil {
				t.Fatal(err)
			}
			vars, _ := json.Marshal(map[string]any{"hosts": hosts, "ssh_key_file": keyFile, "storage_root": storage})
			if err := os.WriteFile(filepath.Join(s.Dir, "terraform.tfvars.json"), vars, 0o600); err != nil {
				t.Fatal(err)
			}
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			s.WantNoChanges()

			state := s.State()
			for run := 1; run <= 3; run++ {
				fake.Advance(10 * time.Minute) // every executor is due a probe
				out, code := runDriftJob(t, s, cli)
				if code != 0 {
					t.Fatalf("drift job run %d on an unchanged fleet exited %d, want 0:\n%s", run, code, out)
				}
			}
			// The exit code the job does not rely on: Terraform before
			// 1.15 compares states with reflect.DeepEqual, and a number
			// read back from a provider never equals one read from the
			// state file (fixed upstream in 1.15.0), so every refresh-only
			// plan of resources that hold numbers exits 2.
			fake.Advance(10 * time.Minute)
			want := 0
			if cli.Name == "terraform" && cli.Before(t, 1, 15) {
				want = 2
			}
			if out, _, code := s.ExitCode("plan", "-refresh-only", "-detailed-exitcode", "-input=false", "-no-color"); code != want || !strings.Contains(out, "No changes") {
				t.Errorf("plan -refresh-only -detailed-exitcode on an unchanged fleet exited %d, want %d, and no changes:\n%s", code, want, out)
			}

			fake.Advance(10 * time.Minute)
			s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
			if after := s.State(); !bytes.Equal(after, state) {
				// Both CLIs encode check_results in map order, so with
				// more than one check result the file may be written
				// again (OpenTofu also with a new serial), the same
				// contents in another order. The resources, private
				// state included, must be byte-identical.
				b, a := stateParts(t, state), stateParts(t, after)
				if !bytes.Equal(b.resources, a.resources) || !b.sameChecks(a) {
					t.Errorf("a refresh that observed nothing new changed the state file:\n%s", firstDifference(state, after))
				}
			}

			// A host goes down; another is switched by hand.
			targets[1].SSHD.Stop()
			targets[2].Boot(t, other)
			fake.Advance(10 * time.Minute)
			out, code := runDriftJob(t, s, cli)
			if code != 2 || !strings.Contains(out, `fleet_executor.host["web2"]`) || !strings.Contains(out, "Node web3 drifted") {
				t.Errorf("drift job after web2 went down and web3 was switched by hand exited %d, want 2 naming both:\n%s", code, out)
			}
		})
	}
}

// stateFile is what a refresh may not change in a state file: the
// resources, byte for byte, and the check results.
type stateFile struct {
	resources []byte
	checkSet  map[string]bool
}

func stateParts(t *testing.T, b []byte) stateFile {
	t.Helper()
	var f struct {
		Resources    json.RawMessage   `json:"resources"`
		CheckResults []json.RawMessage `json:"check_results"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("state file: %v", err)
	}
	// A check result's objects come in map order too: each result is
	// compared with its objects sorted.
	set := map[string]bool{}
	for _, c := range f.CheckResults {
		var r map[string]any
		if err := json.Unmarshal(c, &r); err != nil {
			t.Fatalf("check result: %v", err)
		}
		if objs, ok := r["objects"].([]any); ok {
			keys := make([]string, len(objs))
			for i, o := range objs {
				k, _ := json.Marshal(o)
				keys[i] = string(k)
			}
			sort.Strings(keys)
			r["objects"] = keys
		}
		k, _ := json.Marshal(r)
		set[string(k)] = true
	}
	return stateFile{resources: f.Resources, checkSet: set}
}

// sameChecks is whether two files hold the same check results, in any
// order.
func (f stateFile) sameChecks(o stateFile) bool {
	if len(f.checkSet) != len(o.checkSet) {
		return false
	}
	for c := range f.checkSet {
		if !o.checkSet[c] {
			return false
		}
	}
	return true
}

// firstDifference shows where two files first differ, a few lines either
// side.
func firstDifference(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	i := 0
	for i < len(al) && i < len(bl) && al[i] == bl[i] {
		i++
	}
	from := max(0, i-3)
	return fmt.Sprintf("from line %d:\n--- before\n%s\n+++ after\n%s", from+1,
		strings.Join(al[from:min(len(al), i+4)], "\n"), strings.Join(bl[from:min(len(bl), i+4)], "\n"))
}
