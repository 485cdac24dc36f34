package provider_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Issue 16: a plan says, per switching node, what the switch will do to
// the host: what is copied (and the apply then copies exactly that), how
// the packages change, which units change, whether a reboot is needed;
// plan -json carries it for CI tools. Both CLIs.
func TestDeploymentPlanSaysWhatTheSwitchWillDo(t *testing.T) {
	t.Parallel()
	ok := nixtest.Behaviour{Kind: nixtest.Succeed}
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok,
				Units:    map[string]string{"nginx.service": "[Service]\nExecStart=/bin/nginx-1.26.1\n", "old-cron.service": "[Service]\nExecStart=/bin/cron\n", "sshd.service": "[Service]\nExecStart=/bin/sshd\n"},
				Packages: map[string]int{"nginx-1.26.1": 64 << 10, "openssl-3.0.13": 1 << 20, "oldtool-2.0": 4 << 10}})
			tg.Boot(t, old)
			sys := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok,
				Units:    map[string]string{"nginx.service": "[Service]\nExecStart=/bin/nginx-1.26.2\n", "fleet-app.service": "[Service]\nExecStart=/bin/app\n", "sshd.service": "[Service]\nExecStart=/bin/sshd\n"},
				Packages: map[string]int{"nginx-1.26.2": 3 << 20, "openssl-3.0.13": 1 << 20, "newtool-1.0": 2 << 20}})
			// What the host lacks, as the test sees it: the apply must copy
			// exactly these.
			closure := storeLines(t, "--query", "--requisites", sys)
			var missing []string
			var missingBytes, closureBytes int64
			sizes := storeLines(t, append([]string{"--query", "--size"}, closure...)...)
			for i, p := range closure {
				n, _ := strconv.ParseInt(sizes[i], 10, 64)
				closureBytes += n
				if !tg.HasPath(t, p) {
					missing = append(missing, p)
					missingBytes += n
				}
			}
			if len(missing) != 5 { // the system, two units, two packages
				t.Fatalf("the host lacks %d paths of the new system, want 5: %v", len(missing), missing)
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{old}, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")

			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, ""))
			out, _ := s.Run("plan", "-input=false", "-no-color", "-out=tfplan")
			want := []string{
				"Node n1 will switch",
				fmt.Sprintf("Node n1 will switch:\n  to   %s\n  from %s\n", sys, old),
				fmt.Sprintf("copy 5 store paths, %s (of a %s closure; the rest is already on the host)", deploy.Bytes(missingBytes), deploy.Bytes(closureBytes)),
				"packages: 1 changed, 1 added, 1 removed; closure +",
				"1 removed; closure +4.9 MiB: nginx 1.26.1 → 1.26.2; +newtool 1.0; -oldtool 2.0\n",
				"units (advisory, from the unit files; plan_dry_activate asks the new system itself): restart nginx.service; start fleet-app.service; stop old-cron.service",
				"reboot required: no (kernel and initrd unchanged)",
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("the plan does not say %q:\n%s", w, out)
				}
			}
			for _, p := range missing {
				if tg.HasPath(t, p) {
					t.Errorf("the plan copied %s to the host", p)
				}
			}
			// plan -json carries the same text, as a warning diagnostic.
			js, _ := s.Run("plan", "-input=false", "-json")
			found := false
			for _, line := range strings.Split(js, "\n") {
				var msg struct {
					Level      string `json:"@level"`
					Diagnostic struct {
						Severity, Summary, Detail string
					} `json:"diagnostic"`
				}
				if json.Unmarshal([]byte(line), &msg) == nil && msg.Diagnostic.Summary == "Node n1 will switch" {
					found = msg.Diagnostic.Severity == "warning" && strings.Contains(msg.Diagnostic.Detail, want[2]) && strings.Contains(msg.Diagnostic.Detail, want[5])
				}
			}
			if !found {
				t.Errorf("plan -json carries no warning \"Node n1 will switch\" with the summary:\n%s", js)
			}

			// The apply copies what the plan said: every path the host
			// lacked, and only those were new to it.
			s.Run("apply", "-input=false", "tfplan")
			if tg.CurrentSystem() != sys {
				t.Fatalf("the host runs %s after the apply, want %s", tg.CurrentSystem(), sys)
			}
			for _, p := range missing {
				if !tg.HasPath(t, p) {
					t.Errorf("the apply did not copy %s", p)
				}
			}
			s.WantNoChanges()
		})
	}
}
func storeLines(t testing.TB, args ...string) []string {
	t.Helper()
	cmd := exec.Command("nix-store", args...)
	cmd.Env = nixtest.DeployerEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nix-store %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// Issue 24 point 7: with plan_dry_activate, an apply (its plan, then its
// own plan of the resource just before the switch, each walk a provider
// process of its own, as the CLIs start the installed binary)
// dry-activates each node once, not twice: the apply's plan finds the
// plan's answer kept, and says the same. Both CLIs, four nodes.
func TestDeploymentApplyDoesNotDryActivateTwice(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	ok := nixtest.Behaviour{Kind: nixtest.Succeed}
	old := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok, Units: map[string]string{"nginx.service": "1", "cron.service": "c"}})
	next := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok, Units: map[string]string{"nginx.service": "2"}})
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			var tgs []*nixtest.Target
			systems := []string{}
			for range 4 {
				tg := nixtest.NewTarget(t)
				tg.Boot(t, old)
				tgs, systems = append(tgs, tg), append(systems, old)
			}
			// The binary is a development override: no init.
			s := acctest.NewBinarySession(t, cli, binary)
			s.Setenv("XDG_STATE_HOME", t.TempDir()) // where the dry activations are kept: none yet
			s.WriteConfig(deploymentConfig(tgs, systems, "  plan_dry_activate = true\n"))
			s.Run("apply", "-auto-approve", "-input=false")
			for i := range systems {
				systems[i] = next
			}
			s.WriteConfig(deploymentConfig(tgs, systems, "  plan_dry_activate = true\n"))
			start := time.Now()
			out, _ := s.Run("apply", "-auto-approve", "-input=false", "-no-color")
			t.Logf("%s: the apply of 4 switches with plan_dry_activate took %s", cli.Name, time.Since(start).Round(time.Millisecond))
			if !strings.Contains(out, "units (advisory, from the new system's dry activation): restart nginx.service; stop cron.service") {
				t.Errorf("the apply's plan does not say the dry activation's units:\n%s", out)
			}
			for i, tg := range tgs {
				n := 0
				for _, c := range tg.Calls() {
					if c == "dry-activate "+next {
						n++
					}
				}
				if n != 1 || tg.CurrentSystem() != next {
					t.Errorf("n%d: dry-activated %d times, runs %s; want once, and %s: calls %q", i+1, n, tg.CurrentSystem(), next, tg.Calls())
				}
			}
		})
	}
}
