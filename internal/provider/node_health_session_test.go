package provider_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Plan output is where a reviewer meets a broken node: every node in error
// or missing is one warning with its reason, once per run in every mode,
// and a converged configuration plans nothing.
func TestNodeHealthWarningsOncePerRunInEveryMode(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		for _, served := range []string{"binary", "in-process"} {
			t.Run(cli.Name+"/"+served, func(t *testing.T) {
				t.Parallel()
				root := t.TempDir() // uploads is missing: node st is in error
				for _, d := range []string{"blobs", "instances"} {
					if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				var s *acctest.Session
				if served == "binary" {
					s = acctest.NewBinarySession(t, cli, binary)
				} else {
					s = acctest.NewSession(t, cli, server())
				}
				s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + cloudPolicy(root, ""))
				if served != "binary" {
					s.Run("init", "-input=false")
				}
				count := func(mode string, want int, args ...string) {
					t.Helper()
					out, _ := s.Run(append([]string{args[0], "-json", "-input=false"}, args[1:]...)...)
					var about []string
					for _, w := range warnings(t, out) {
						if strings.HasPrefix(w.Summary, "Node ") {
							about = append(about, w.Summary+": "+w.Detail)
						}
					}
					ok := len(about) == want
					for _, a := range about {
						ok = ok && strings.Contains(a, "Node st is in error") && strings.Contains(a, "uploads: no such file or directory")
					}
					if !ok {
						t.Errorf("%s: want %d warning(s) about st's missing uploads path, got %q", mode, want, about)
					}
				}
				count("apply (create)", 1, "apply", "-auto-approve")
				count("plan", 1, "plan")
				count("plan -refresh=false", 1, "plan", "-refresh=false")
				count("apply -refresh-only", 1, "apply", "-refresh-only", "-auto-approve")
				count("apply (no change)", 1, "apply", "-auto-approve")
				s.WantNoChanges()
				s.WantNoChanges("-refresh=false")
				// An apply that changes the resource evaluates st anew: the
				// same state and reason are not warned about again by the
				// process that warned. The apply walk is a process of its
				// own when the provider runs as a binary, and it plans the
				// change again: once per walk there (see warnings.go).
				s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + cloudPolicy(root, "  auto_clear_after = 0\n"))
				perWalk := 1
				if served == "binary" {
					perWalk = 2
				}
				count("apply (update)", perWalk, "apply", "-auto-approve")
				s.WantNoChanges()

				// st leaves the policy in error (renamed): its record goes, and
				// the plan says so.
				s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) +
					strings.Replace(cloudPolicy(root, "  auto_clear_after = 0\n"), "st = {", "st2 = {", 1))
				out, _ := s.Run("plan", "-json", "-input=false")
				var dropped int
				for _, w := range warnings(t, out) {
					if w.Summary == "Node st leaves the policy in error" && strings.Contains(w.Detail, "its error record is dropped") {
						dropped++
					}
				}
				if dropped != 1 {
					t.Errorf("renaming a node in error: %d warnings about its dropped record, want 1:\n%s", dropped, out)
				}
			})
		}
	}
}

// Remote nodes over a real sshd: connection from an executor's export, one
// node pinned to the wrong key is missing (never error) with the
// reachability reason, and a node whose host is known only at apply gets
// its status then, with nothing planned that apply contradicts.
func TestNodeHealthRemoteNodes(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			keyFile := sshd.ClientKey.WriteFile(t, t.TempDir())
			other := sshtest.NewKey(t)
			dir := t.TempDir()
			s := acctest.NewSession(t, cli, server())
			config := func(hostTrigger string) string {
				return providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
resource "fleet_executor" "n1" {
  name                 = "n1"
  host                 = "127.0.0.1"
  port                 = %[1]d
  user                 = %[2]q
  private_key_file     = %[3]q
  host_key_fingerprint = %[4]q
}

resource "terraform_data" "host" {
  input            = "127.0.0.1"
  triggers_replace = [%[7]q]
}

resource "fleet_node_health_policy" "remote" {
  name          = "remote"
  probe_timeout = "10s"
  checks = {
    data = { path = %[6]q, description = "data storage" }
    sh   = { command = "test -d /", description = "a shell" }
  }
  object_types = { volume = { checks = ["data", "sh"] } }
  roles        = { storage = { hosts = ["volume"] } }
  nodes = {
    n1 = { roles = ["storage"], connection = fleet_executor.n1.ssh_connection }
    n2 = { roles = ["storage"], connection = {
      host                 = terraform_data.host.output
      port                 = %[1]d
      user                 = %[2]q
      private_key_file     = %[3]q
      host_key_fingerprint = %[4]q
    } }
    wrong = { roles = ["storage"], connection = merge(fleet_executor.n1.ssh_connection, { host_key_fingerprint = %[5]q }) }
  }
}
`, sshd.Port, sshd.User, keyFile, sshd.HostKeys[0].AuthorizedLine(), other.AuthorizedLine(), dir, hostTrigger)
			}
			s.WriteConfig(config("a"))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			v := s.Values("fleet_node_health_policy.remote")
			status := v["status"].(map[string]any)
			for _, n := range []string{"n1", "n2"} {
				if st := status[n].(map[string]any)["state"]; st != "healthy" {
					t.Errorf("%s: state %v, want healthy: %v", n, st, status[n].(map[string]any)["reason"])
				}
			}
			wrong := status["wrong"].(map[string]any)
			if wrong["state"] != "missing" || !regexp.MustCompile(`^node wrong is missing: .*host key.*\(host_key\)$`).MatchString(wrong["reason"].(string)) {
				t.Errorf("wrong pin: state %v, reason %q; want missing with the host key mismatch", wrong["state"], wrong["reason"])
			}
			if got := fmt.Sprint(v["missing_nodes"]); got != "[wrong]" {
				t.Errorf("missing_nodes = %s, want [wrong]", got)
			}
			if got := fmt.Sprint(v["error_nodes"]); got != "[]" {
				t.Errorf("error_nodes = %s, want []: a node that cannot be reached is never in error", got)
			}
			s.WantNoChanges()
			// n2's host comes from a replaced resource: unknown at plan.
			s.WriteConfig(config("b"))
			s.Run("apply", "-auto-approve", "-input=false")
			v = s.Values("fleet_node_health_policy.remote")
			if st := v["status"].(map[string]any)["n2"].(map[string]any)["state"]; st != "healthy" {
				t.Errorf("n2 after its host was replaced: %v", st)
			}
			if v["generation"].(float64) != 1 {
				t.Errorf("generation = %v, want 1: the host came back the same", v["generation"])
			}
			s.WantNoChanges()
		})
	}
}

// The wiring the guide recommends: the policy's parts in locals, the
// resource and the data source both fed from them, and a consumer doing
// for_each over schedulable_nodes, applied from an empty state in one go.
func TestNodeHealthDataSourceFeedsForEachOnFirstApply(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "blobs"), 0o755); err != nil {
				t.Fatal(err)
			}
			s := acctest.NewSession(t, cli, server(provider.WithLocalShell("/bin/sh", "-s")))
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
locals {
  checks       = { blobs = { path = "blobs" }, uploads = { path = "uploads" } }
  object_types = { blob = { checks = ["blobs"] }, upload = { checks = ["uploads"] } }
  roles        = { hv = { hosts = ["blob"] }, st = { hosts = ["upload"] } }
  nodes        = { a = { roles = ["hv"], local = true }, b = { roles = ["st"], local = true } }
}

resource "fleet_node_health_policy" "p" {
  name         = "p"
  storage_root = %[1]q
  checks       = local.checks
  object_types = local.object_types
  roles        = local.roles
  nodes        = local.nodes
}

data "fleet_node_health" "now" {
  storage_root = %[1]q
  checks       = local.checks
  object_types = local.object_types
  roles        = local.roles
  nodes        = local.nodes
}

resource "terraform_data" "placement" {
  for_each = toset(data.fleet_node_health.now.schedulable_nodes)
  input    = each.key
}

output "placed" { value = sort(keys(terraform_data.placement)) }
`, root))
			s.Run("init", "-input=false")
			out, _ := s.Run("apply", "-auto-approve", "-input=false", "-no-color")
			if !regexp.MustCompile(`placed = (tolist\()?\[\s*"a",\s*\]`).MatchString(out) {
				t.Errorf("first apply did not place on exactly a:\n%s", out)
			}
			s.WantNoChanges()
		})
	}
}

// One fault, one error: a check with two kinds is refused once (not also as
// a dangling reference from the types that list it), and a node given as a
// whole object from another resource validates.
func TestNodeHealthValidateErrorsOncePerFault(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + strings.Replace(cloudPolicy("/srv/cloud", ""),
				`blobs     = { path = "blobs", description = "blob storage" }`, `blobs     = { path = "blobs", command = "true" }`, 1))
			valid, diags := s.Validate()
			if valid || len(diags) != 1 || !strings.Contains(diags[0].Detail, `checks["blobs"]: set exactly one of path, command, tcp, http, systemd_unit (2 set)`) {
				t.Errorf("a check with two kinds: valid=%v, diagnostics %+v; want exactly one error naming checks[\"blobs\"]", valid, diags)
			}
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + `
resource "terraform_data" "node" {
  input = { roles = ["storage"], local = true }
}

resource "fleet_node_health_policy" "p" {
  name         = "p"
  checks       = { sh = { command = "true" } }
  object_types = { volume = { checks = ["sh"] } }
  roles        = { storage = { hosts = ["volume"] } }
  nodes        = { me = terraform_data.node.output }
}
`)
			if valid, diags := s.Validate(); !valid {
				t.Fatalf("a node from another resource: %+v", diags)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			if st := s.Values("fleet_node_health_policy.p")["status"].(map[string]any)["me"].(map[string]any)["state"]; st != "healthy" {
				t.Errorf("node me: %v", st)
			}
			s.WantNoChanges()
		})
	}
}

// One dropped connection at one refresh does not drop a node from
// schedulable_nodes: the node keeps its last state with a warning that says
// it could not be reached and will be missing if the next evaluation fails
// too; the second refresh in a row makes it missing; reached again, it is
// healthy. The data source, which has no memory, says missing at once.
func TestNodeHealthUnreachableOnceKeepsLastState(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			gate := sshtest.NewGate(t, net.JoinHostPort(sshd.Host, strconv.Itoa(sshd.Port)))
			keyFile := sshd.ClientKey.WriteFile(t, t.TempDir())
			s := acctest.NewSession(t, cli, server(provider.WithLocalShell("/bin/sh", "-s")))
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
locals {
  checks       = { sh = { command = "true", description = "a shell" } }
  object_types = { volume = { checks = ["sh"] } }
  roles        = { storage = { hosts = ["volume"] } }
  nodes = {
    gated = { roles = ["storage"], connection = {
      host                 = "127.0.0.1"
      port                 = %d
      user                 = %q
      private_key_file     = %q
      host_key_fingerprint = %q
    } }
    here = { roles = ["storage"], local = true }
  }
}

resource "fleet_node_health_policy" "p" {
  name          = "p"
  probe_timeout = "3s"
  checks        = local.checks
  object_types  = local.object_types
  roles         = local.roles
  nodes         = local.nodes
}

data "fleet_node_health" "now" {
  probe_timeout = "3s"
  checks        = local.checks
  object_types  = local.object_types
  roles         = local.roles
  nodes         = local.nodes
}
`, gate.Port, sshd.User, keyFile, sshd.HostKeys[0].AuthorizedLine()))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")

			type want struct {
				state       string
				streak      float64
				schedulable string
				missing     string
				nowMissing  string // the data source's missing_nodes
				summary     string // the resource's warning about gated
				detail      []string
			}
			refresh := func(step string, w want) {
				t.Helper()
				out, _ := s.Run("apply", "-refresh-only", "-auto-approve", "-input=false", "-json")
				// The resource's warnings about gated, once each; the data
				// source warns on its own account.
				var about []acctest.Diagnostic
				for _, d := range warnings(t, out) {
					if d.Address == "fleet_node_health_policy.p" && strings.HasPrefix(d.Summary, "Node gated") {
						about = append(about, d)
					}
				}
				switch {
				case w.summary == "" && len(about) > 0:
					t.Errorf("%s: warnings about gated %+v, want none", step, about)
				case w.summary != "" && (len(about) != 1 || about[0].Summary != w.summary):
					t.Errorf("%s: warnings about gated %+v, want one: %q", step, about, w.summary)
				case w.summary != "":
					for _, part := range w.detail {
						if !strings.Contains(about[0].Detail, part) {
							t.Errorf("%s: warning detail %q lacks %q", step, about[0].Detail, part)
						}
					}
				}
				v := s.Values("fleet_node_health_policy.p")
				gated := v["status"].(map[string]any)["gated"].(map[string]any)
				if gated["state"] != w.state || gated["unreachable_streak"] != w.streak {
					t.Errorf("%s: gated state %v, unreachable_streak %v; want %s, %v (reason %q)", step, gated["state"], gated["unreachable_streak"], w.state, w.streak, gated["reason"])
				}
				if got := fmt.Sprint(v["schedulable_nodes"]); got != w.schedulable {
					t.Errorf("%s: schedulable_nodes %s, want %s", step, got, w.schedulable)
				}
				if got := fmt.Sprint(v["missing_nodes"]); got != w.missing {
					t.Errorf("%s: missing_nodes %s, want %s", step, got, w.missing)
				}
				if got := fmt.Sprint(s.Values("data.fleet_node_health.now")["missing_nodes"]); got != w.nowMissing {
					t.Errorf("%s: the data source's missing_nodes %s, want %s", step, got, w.nowMissing)
				}
			}

			gate.SetMode(sshtest.GateReset) // sshd stops answering
			refresh("first refresh without the node", want{state: "healthy", streak: 1, schedulable: "[gated here]", missing: "[]", nowMissing: "[gated]",
				summary: "Node gated could not be reached", detail: []string{"node gated could not be reached", "(network)", "keeps its last state (healthy)", "will be marked missing if the next evaluation fails too"}})
			refresh("second refresh without the node", want{state: "missing", streak: 2, schedulable: "[here]", missing: "[gated]", nowMissing: "[gated]",
				summary: "Node gated is missing", detail: []string{"node gated is missing", "(network)"}})
			gate.SetMode(sshtest.GateOpen)
			refresh("the node answers again", want{state: "healthy", streak: 0, schedulable: "[gated here]", missing: "[]", nowMissing: "[]"})
		})
	}
}
