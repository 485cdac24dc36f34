package provider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// No private key or passphrase reaches state, plans or logs: the provider
// binary is run as an operator runs it, with TF_LOG=TRACE, through both CLIs,
// and every file and stream is searched for the secrets.
func TestSecretsStayOutOfStateAndLogs(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			const passphrase = "pass-phrase-7f3a9c1e"
			pem := strings.TrimSpace(string(sshd.ClientKey.EncryptedPEM(t, passphrase)))
			lines := strings.Split(pem, "\n")
			// Distinctive pieces of the key body: any one of them in a file
			// or stream is a leak.
			secrets := []string{passphrase, lines[1], lines[len(lines)/2], lines[len(lines)-2]}

			s := acctest.NewBinarySession(t, cli, binary)
			logPath := filepath.Join(t.TempDir(), "trace.log")
			s.Setenv("TF_LOG", "TRACE")
			s.Setenv("TF_LOG_PATH", logPath)
			s.Setenv("FLEET_KNOWN_HOSTS_FILE", filepath.Join(t.TempDir(), "kh"))
			s.WriteConfig(fmt.Sprintf(`
variable "key" {
  type      = string
  sensitive = true
}
variable "passphrase" {
  type      = string
  sensitive = true
}

resource "fleet_executor" "web" {
  name                   = "web"
  host                   = "127.0.0.1"
  port                   = %[1]d
  user                   = %[2]q
  private_key            = var.key
  private_key_passphrase = var.passphrase
  host_key_fingerprint   = %[3]q
}

data "fleet_reachability" "now" {
  targets = [{
    name                   = "web"
    host                   = "127.0.0.1"
    port                   = %[1]d
    user                   = %[2]q
    private_key            = var.key
    private_key_passphrase = var.passphrase
    host_key_fingerprint   = %[3]q
  }]
}

output "reachable" {
  value = data.fleet_reachability.now.all_reachable && fleet_executor.web.reachability.state == "reachable"
}
`, sshd.Port, sshd.User, sshd.HostKeys[0].Fingerprint()))
			s.Setenv("TF_VAR_key", pem)
			s.Setenv("TF_VAR_passphrase", passphrase)

			var streams []string
			run := func(args ...string) {
				stdout, stderr := s.Run(args...)
				streams = append(streams, stdout, stderr)
			}
			run("apply", "-auto-approve", "-input=false")
			run("plan", "-input=false")
			run("apply", "-refresh-only", "-auto-approve", "-input=false")
			run("show", "-json")
			run("output", "-json")
			if out, _ := s.Run("output", "-raw", "reachable"); out != "true" {
				t.Fatalf("the executor and data source did not reach the host with the inline key: reachable = %q", out)
			}

			haystacks := map[string]string{"stdout/stderr": strings.Join(streams, "\n")}
			for _, name := range []string{"terraform.tfstate", "terraform.tfstate.backup"} {
				if b, err := os.ReadFile(filepath.Join(s.Dir, name)); err == nil {
					haystacks[name] = string(b)
				}
			}
			log, err := os.ReadFile(logPath)
			if err != nil || len(log) < 10000 {
				t.Fatalf("TF_LOG=TRACE wrote %d bytes (%v): the log under test is missing", len(log), err)
			}
			haystacks["TF_LOG=TRACE log"] = string(log)
			if !strings.Contains(string(log), "probing executor") {
				t.Fatalf("the trace log holds no provider log lines; it cannot prove the provider logs no secret")
			}
			for where, text := range haystacks {
				for _, secret := range secrets {
					if strings.Contains(text, secret) {
						t.Errorf("%s contains a secret (%q...)", where, secret[:8])
					}
				}
			}
		})
	}
}
