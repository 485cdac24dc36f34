package provider_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Terraform holds a provider to its plan. These tests wire executors the
// way real configurations do and check that both CLIs accept every plan and
// apply, and that a plan after convergence is empty.

// record is the reachability record of an executor in `show -json` output.
func recordOf(t *testing.T, values map[string]any) map[string]any {
	t.Helper()
	rec, ok := values["reachability"].(map[string]any)
	if !ok {
		t.Fatalf("no reachability record in %v", values)
	}
	return rec
}

func wantValue(t *testing.T, what string, got, want any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// Connection inputs and enabled that come from other resources are unknown
// at plan time whenever those resources are replaced: whatever depends on
// them is planned unknown and apply fills it in, whether the value turns out
// the same (generation kept) or different (generation raised, record reset
// and probed).
func TestPlanContractUnknownInputs(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			fake := clock.NewFake(start)
			s := acctest.NewSession(t, cli, server(provider.WithClock(fake)))
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
variable "bump" {
  type = number
}
variable "pin" {
  type = string
}
variable "on" {
  type = bool
}
variable "key" {
  type      = string
  sensitive = true
}

# Each output is unknown at plan time whenever bump changes (replacement).
resource "terraform_data" "pin" {
  input            = var.pin
  triggers_replace = var.bump
}
resource "terraform_data" "on" {
  input            = var.on
  triggers_replace = var.bump
}
resource "terraform_data" "key" {
  input            = var.key
  triggers_replace = var.bump
}

resource "fleet_executor" "web" {
  name                 = "web"
  host                 = "127.0.0.1"
  port                 = %d
  user                 = %q
  private_key          = terraform_data.key.output
  host_key_fingerprint = terraform_data.pin.output
  enabled              = terraform_data.on.output
}
`, sshd.Port, sshd.User))
			s.Setenv("TF_VAR_key", string(sshd.ClientKey.PEM()))
			apply := func(bump int, pin string, on bool) {
				t.Helper()
				s.Run("apply", "-auto-approve", "-input=false", "-var", fmt.Sprintf("bump=%d", bump), "-var", "pin="+pin, "-var", fmt.Sprintf("on=%v", on))
				s.WantNoChanges("-var", fmt.Sprintf("bump=%d", bump), "-var", "pin="+pin, "-var", fmt.Sprintf("on=%v", on))
			}
			fingerprint, keyLine := sshd.HostKeys[0].Fingerprint(), strings.TrimSpace(sshd.HostKeys[0].AuthorizedLine())
			s.Run("init", "-input=false")

			apply(1, fingerprint, true)
			web := s.Values("fleet_executor.web")
			wantValue(t, "generation", web["generation"], 1)
			wantValue(t, "state", recordOf(t, web)["state"], "reachable")

			// Every input unknown at plan, all the same at apply: nothing
			// changed, nothing is reset.
			fake.Advance(time.Second)
			apply(2, fingerprint, true)
			web = s.Values("fleet_executor.web")
			wantValue(t, "generation after the same values", web["generation"], 1)
			wantValue(t, "checked_at after the same values", recordOf(t, web)["checked_at"], ts(start))

			// The pin turns out different at apply (another form of the same
			// key): a new generation, reset and probed.
			fake.Advance(time.Second)
			apply(3, keyLine, true)
			web = s.Values("fleet_executor.web")
			wantValue(t, "generation after a new pin", web["generation"], 2)
			wantValue(t, "observed_generation after a new pin", web["observed_generation"], 2)
			wantValue(t, "checked_at after a new pin", recordOf(t, web)["checked_at"], ts(start.Add(2*time.Second)))
			wantValue(t, "state after a new pin", recordOf(t, web)["state"], "reachable")

			// enabled unknown at plan and false at apply: nothing probed.
			fake.Advance(time.Second)
			apply(4, keyLine, false)
			web = s.Values("fleet_executor.web")
			wantValue(t, "enabled", web["enabled"], false)
			wantValue(t, "checked_at while disabling", recordOf(t, web)["checked_at"], ts(start.Add(2*time.Second)))

			// enabled unknown at plan and true at apply: probed again, and
			// the probe confirms the record, which keeps its times.
			fake.Advance(time.Second)
			apply(5, keyLine, true)
			web = s.Values("fleet_executor.web")
			wantValue(t, "checked_at when enabled again", recordOf(t, web)["checked_at"], ts(start.Add(2*time.Second)))
			wantValue(t, "state when enabled again", recordOf(t, web)["state"], "reachable")
		})
	}
}

// Nothing stored depends on the clock alone: checked_at is written when the
// record changes and kept as written, and staleness is told by the run that
// reads the record (the stored stale is always false). So a plan made at
// one moment and applied at another (a saved plan, -refresh=false, a
// disabled executor renamed much later) is applied as planned, and a plan
// afterwards is empty.
func TestPlanContractTimeDependentValues(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			srv := sshtest.NewServer(t, sshtest.Healthy)
			keyFile := srv.ClientKey.WriteFile(t, t.TempDir())
			fake := clock.NewFake(start)
			s := acctest.NewSession(t, cli, server(provider.WithClock(fake)))
			kh := filepath.Join(t.TempDir(), "kh")
			config := func(name string, enabled bool) {
				s.WriteConfig(providerBlock(kh) + fmt.Sprintf("resource \"fleet_executor\" \"web\" {\n%s}\n", hcl(map[string]string{
					"name": q(name), "host": q("127.0.0.1"), "port": fmt.Sprint(srv.Port), "private_key_file": q(keyFile),
					"host_key_fingerprint": q(srv.HostKey.Fingerprint()), "enabled": fmt.Sprint(enabled),
				})))
			}
			config("web", true)
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")

			// A rename ten minutes later, without a refresh: the record is
			// not renewed, and the update keeps it as planned.
			fake.Advance(10 * time.Minute)
			config("web-1", true)
			s.Run("apply", "-refresh=false", "-auto-approve", "-input=false")
			s.WantNoChanges("-refresh=false")
			wantValue(t, "checked_at after a rename without refresh", recordOf(t, s.Values("fleet_executor.web"))["checked_at"], ts(start))

			// A saved plan applied ten minutes after it was made.
			config("web-2", true)
			s.Run("plan", "-refresh=false", "-out=rename.tfplan", "-input=false")
			fake.Advance(10 * time.Minute)
			s.Run("apply", "-auto-approve", "-input=false", "rename.tfplan")
			s.WantNoChanges("-refresh=false")

			// A disabled executor renamed much later: its refresh leaves the
			// record alone; the probe of the apply that disabled it
			// confirmed the record and wrote nothing. Staleness is told by
			// the run that reads the record, in its warnings: the stored
			// attribute stays false.
			config("web-2", false)
			s.Run("apply", "-auto-approve", "-input=false")
			fake.Advance(time.Hour)
			config("web-3", false)
			s.Run("apply", "-auto-approve", "-input=false")
			s.WantNoChanges()
			rec := recordOf(t, s.Values("fleet_executor.web"))
			wantValue(t, "stale of the disabled executor", rec["stale"], false)
			wantValue(t, "checked_at of the disabled executor", rec["checked_at"], ts(start))
			if n := srv.Accepted(); n != 2 {
				t.Errorf("the host was dialled %d times, want 2 (create, and the refresh of the apply that disabled it)", n)
			}
		})
	}
}
