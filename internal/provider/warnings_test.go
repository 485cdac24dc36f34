package provider_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// A reviewer reads warnings in whatever mode the pipeline runs: plan, apply,
// the drift jobs' -refresh-only, and -refresh=false. Each run shows every
// failing executor's warning exactly once, and none for a healthy one. The
// provider tells runs apart by the process that started it, so the test
// runs the built binary as operators do, and the provider in-process too.
func TestWarningsOncePerRunInEveryMode(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		for _, served := range []string{"binary", "in-process"} {
			t.Run(cli.Name+"/"+served, func(t *testing.T) {
				t.Parallel()
				warningsOncePerRun(t, cli, served, binary)
			})
		}
	}
}

func warningsOncePerRun(t *testing.T, cli acctest.CLI, served, binary string) {
	{
		{
			good := sshtest.NewServer(t, sshtest.Healthy)
			_, closed := sshtest.ClosedPort(t)
			keyFile := good.ClientKey.WriteFile(t, t.TempDir())
			var s *acctest.Session
			if served == "binary" {
				s = acctest.NewBinarySession(t, cli, binary)
			} else {
				s = acctest.NewSession(t, cli, server(provider.WithClock(clock.NewFake(start))))
			}
			kh := filepath.Join(t.TempDir(), "kh")
			config := func(downName string) {
				s.WriteConfig(providerBlock(kh) + fmt.Sprintf(`
resource "fleet_executor" "good" {
  name                 = "good"
  host                 = "127.0.0.1"
  port                 = %[1]d
  private_key_file     = %[2]q
  host_key_fingerprint = %[3]q
}

resource "fleet_executor" "down" {
  name                 = %[5]q
  host                 = "127.0.0.1"
  port                 = %[4]d
  private_key_file     = %[2]q
  host_key_fingerprint = %[3]q
}
`, good.Port, keyFile, good.HostKey.Fingerprint(), closed, downName))
			}
			config("down")
			if served != "binary" { // dev_overrides need no init
				s.Run("init", "-input=false")
			}

			count := func(mode string, want int, args ...string) {
				t.Helper()
				out, _ := s.Run(append([]string{args[0], "-json", "-input=false"}, args[1:]...)...)
				var about []acctest.Diagnostic
				for _, w := range warnings(t, out) {
					if strings.HasPrefix(w.Summary, "Executor ") {
						about = append(about, w)
					}
				}
				if len(about) != want {
					t.Errorf("%s: want %d warning(s) about down, got %+v", mode, want, about)
					return
				}
				for _, w := range about {
					if !regexp.MustCompile(`^Executor "down(-renamed)?" failed its last probe \(network\)$`).MatchString(w.Summary) {
						t.Errorf("%s: warning %q is not about down", mode, w.Summary)
					}
					wantDetail(t, w, fmt.Sprintf("127.0.0.1:%d", closed), "Last checked: ", "Last successful probe: never.")
				}
			}
			once := func(mode string, args ...string) { t.Helper(); count(mode, 1, args...) }
			once("apply that creates", "apply", "-auto-approve")
			once("plan", "plan")
			once("plan -refresh-only", "plan", "-refresh-only")
			once("apply -refresh-only", "apply", "-refresh-only", "-auto-approve")
			once("plan -refresh=false", "plan", "-refresh=false")
			once("apply -refresh=false", "apply", "-refresh=false", "-auto-approve")
			config("down-renamed")
			once("plan that renames", "plan")
			once("plan -refresh=false that renames", "plan", "-refresh=false")
			// An apply that changes the resource plans it again in the
			// apply walk, a process of its own when the provider runs as
			// a binary: one warning per walk there (see warnings.go).
			perWalk := 1
			if served == "binary" {
				perWalk = 2
			}
			count("apply that renames", perWalk, "apply", "-auto-approve")
			// A saved plan is applied by a command of its own: it shows the
			// warning of the record it leaves, as its plan did.
			config("down")
			s.Run("plan", "-out=rename.tfplan", "-input=false")
			once("apply of a saved plan", "apply", "rename.tfplan")
			// The one case Terraform gives no way to tell apart: without a
			// refresh, the plan and the final plan of a change both warn
			// (Terraform's own output folds them into one).
			config("down-renamed")
			count("apply -refresh=false that renames", 2, "apply", "-refresh=false", "-auto-approve")
		}
	}
}

// A record that stands on probes that could not authenticate (write-only
// credentials) is not silent for long: after three intervals without a
// check of its credentials the warnings say so, and a record behind a
// bastion, which such probes cannot reach at all, turns stale with the
// reason given.
func TestWarningsForRecordsNotRechecked(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, sshd.ClientKey)
			fake := clock.NewFake(start)
			s := acctest.NewSession(t, cli, server(provider.WithClock(fake)))
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
variable "key" {
  type      = string
  sensitive = true
}

resource "fleet_executor" "direct" {
  name                 = "direct"
  host                 = "127.0.0.1"
  port                 = %[1]d
  user                 = %[2]q
  private_key          = var.key
  host_key_fingerprint = %[3]q
}

resource "fleet_executor" "jumped" {
  name                 = "jumped"
  host                 = "127.0.0.1"
  port                 = %[1]d
  user                 = %[2]q
  private_key          = var.key
  host_key_fingerprint = %[3]q
  proxy_jump           = "%[2]s@127.0.0.1:%[4]d"
}
`, sshd.Port, sshd.User, sshd.HostKeys[0].Fingerprint(), bastion.Port))
			s.Setenv("TF_VAR_key", string(sshd.ClientKey.PEM()))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			for range 3 {
				fake.Advance(interval)
				out, _ := s.Run("apply", "-refresh-only", "-auto-approve", "-json", "-input=false")
				for _, w := range warnings(t, out) {
					if strings.HasPrefix(w.Summary, "Executor ") {
						t.Fatalf("within three intervals of its last check of the credentials, a warning: %+v", w)
					}
				}
			}
			fake.Advance(interval + time.Second)
			out, _ := s.Run("plan", "-json", "-input=false")
			ws := warnings(t, out)
			// direct: counted from the first probe that ran without its
			// credentials, one interval after the apply that checked them.
			w := findWarning(t, ws, `^Executor "direct" has not authenticated for 3m1s$`)
			wantDetail(t, w, "answered with its pinned host key", "when the probes began to run without them", "provider block", "Last successful probe: 4m1s ago.")
			w = findWarning(t, ws, `^Executor "jumped" has a stale record$`)
			wantDetail(t, w, "this run did not probe it, and it last changed 4m1s ago", "Last checked: not by this run",
				"was not re-checked: its bastion needs credentials this probe did not have (the inline private_key is write-only")
		})
	}
}
