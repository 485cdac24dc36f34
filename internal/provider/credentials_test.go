package provider_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Issue 13 §4, one credential model: a provider block that gives the user
// and the key serves every connection of every resource that sets none.
// Each host lets only that user in (AllowUsers) with only that key, and no
// agent runs: a resource that ignored the provider block would log in as
// root, or with no key, and be refused. The user is not root: the
// deployment runs through sudo (§5), and its key, given inline, reaches
// OpenSSH through the provider's own agent.
func TestEveryResourceTakesItsCredentialsFromTheProviderBlock(t *testing.T) {
	// No agent: TestMain unsets SSH_AUTH_SOCK for the provider served in
	// this process.
	t.Parallel()
	login := sshtest.SudoUser(t)
	key := sshtest.NewKey(t)
	only := []sshtest.SSHDOption{sshtest.WithAuthorizedKeys(key), sshtest.WithConfigLines("AllowUsers " + login)}
	sshd := sshtest.StartSSHD(t, only...)
	node := nixtest.NewTarget(t, nixtest.WithSSHDOptions(only...))
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	node.Boot(t, sys)
	next := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})

	for _, cli := range acctest.AlternateCLIs(t) {
		for _, keyForm := range []string{"private_key_file", "private_key"} {
			t.Run(cli.Name+"/"+keyForm, func(t *testing.T) {
				keyLine := fmt.Sprintf("private_key_file = %q", key.WriteFile(t, t.TempDir()))
				if keyForm == "private_key" {
					keyLine = fmt.Sprintf("private_key = %q", key.PEM())
				}
				s := acctest.NewSession(t, cli, server())
				config := fmt.Sprintf(`
provider "fleet" {
  default_user = %[1]q
  %[2]s
}

resource "fleet_executor" "web" {
  name                 = "web"
  host                 = %[3]q
  port                 = %[4]d
  host_key_fingerprint = %[5]q
}

data "fleet_reachability" "web" {
  targets = [{ name = "web", host = %[3]q, port = %[4]d, host_key_fingerprint = %[5]q }]
}

locals {
  nodes = { web = { roles = ["r"], connection = { host = %[3]q, port = %[4]d, host_key_fingerprint = %[5]q } } }
  # Healthy only where the check runs as the provider's user.
  checks = { login = { command = "test \"$(id -un)\" = %[1]s" } }
}

resource "fleet_node_health_policy" "p" {
  name         = "p"
  checks       = local.checks
  object_types = { t = { checks = ["login"] } }
  roles        = { r = { hosts = ["t"] } }
  nodes        = local.nodes
}

data "fleet_node_health" "p" {
  checks       = local.checks
  object_types = { t = { checks = ["login"] } }
  roles        = { r = { hosts = ["t"] } }
  nodes        = local.nodes
}

output "executor" { value = fleet_executor.web.reachability.state }
output "data_source" { value = data.fleet_reachability.web.all_reachable }
output "policy" { value = fleet_node_health_policy.p.healthy_nodes }
output "health" { value = data.fleet_node_health.p.healthy_nodes }
`, login, keyLine, sshd.Host, sshd.Port, sshd.HostKeys[0].Fingerprint())
				s.WriteConfig(config + fmt.Sprintf(`
resource "fleet_ssh_deployment" "d" {
  defaults = { use_sudo = true }
  nodes    = [{ name = "n1", host = %q, host_key = %q, system = %q, ssh_opts = ["Port=%d"] }]
}

output "deployment" { value = fleet_ssh_deployment.d.status["n1"].phase }
`, node.Host, node.HostKey, next, node.Port))
				s.Run("init", "-input=false")
				// The deployment's plan logs in to the node it switches.
				plan, _ := s.Run("plan", "-input=false", "-no-color")
				// Its one warning says what the switch will do (issue 16).
				if strings.Count(plan, "Warning") != 1 || !strings.Contains(plan, "Warning: Node n1 will switch") || !strings.Contains(plan, "  copy ") || !strings.Contains(plan, `"n1" = "switch"`) {
					t.Errorf("the plan warns, or does not switch n1:\n%s", plan)
				}
				s.Run("apply", "-auto-approve", "-input=false")
				out, _ := s.Run("output", "-json")
				var got map[string]struct {
					Value any `json:"value"`
				}
				if err := json.Unmarshal([]byte(out), &got); err != nil {
					t.Fatal(err)
				}
				want := map[string]string{"executor": "reachable", "data_source": "true", "policy": "[web]", "health": "[web]", "deployment": "Succeeded"}
				for name, w := range want {
					if v := fmt.Sprint(got[name].Value); v != w {
						t.Errorf("%s: %s, want %s (outputs %s)", name, v, w, out)
					}
				}
				if node.CurrentSystem() != next {
					t.Errorf("n1 runs %s, want %s", node.CurrentSystem(), next)
				}
				s.WantNoChanges()
				node.Boot(t, sys) // the next CLI's deployment starts from the same host
			})
		}
	}
}

// Issue 13 §5: a login without root's rights fails its node before
// anything changes, naming the right: with use_sudo, a user sudo asks a
// password of; without it, a user who is not root.
func TestDeploymentWithoutRootsRightsFailsNamingThem(t *testing.T) {
	t.Parallel()
	noSudo := nixtest.NewTarget(t, nixtest.WithLoginUser(sshtest.LoginUser(t)))
	notRoot := nixtest.NewTarget(t, nixtest.WithLoginUser(sshtest.SudoUser(t)))
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	noSudo.Boot(t, old)
	notRoot.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			s := acctest.NewSession(t, cli, server())
			// n1 asks sudo, which asks a password; n2 does not ask.
			config := strings.Replace(deploymentConfig([]*nixtest.Target{noSudo, notRoot}, []string{sys, sys}, ""),
				`ssh_opts         = ["Port=`+fmt.Sprint(noSudo.Port), `use_sudo         = true
      ssh_opts         = ["Port=`+fmt.Sprint(noSudo.Port), 1)
			s.WriteConfig(config)
			s.Run("init", "-input=false")
			out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			all := strings.Join(strings.Fields(out+errOut), " ")
			if code == 0 {
				t.Fatalf("the apply succeeded:\n%s", out+errOut)
			}
			for _, want := range []string{
				"the login user " + sshtest.LoginUserName + " cannot run commands as root with sudo -n", sshtest.LoginUserName + " ALL=(ALL) NOPASSWD: ALL",
				"the login user " + sshtest.SudoUserName + " cannot take the host's deploy lock", "set use_sudo = true",
			} {
				if !strings.Contains(all, want) {
					t.Errorf("the apply does not say %q:\n%s", want, out+errOut)
				}
			}
			for _, tg := range []*nixtest.Target{noSudo, notRoot} {
				if tg.CurrentSystem() != old || tg.BootEntry() != old {
					t.Errorf("a host was changed: runs %s, boots %s", tg.CurrentSystem(), tg.BootEntry())
				}
			}
		})
	}
}
