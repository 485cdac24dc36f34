package provider_test

import (
	"encoding/json"
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

// Warnings are a product surface: terraform-plugin-testing cannot assert
// them, so these tests run the CLIs with -json and read the diagnostics.

func warnings(t *testing.T, out string) []acctest.Diagnostic {
	t.Helper()
	var ws []acctest.Diagnostic
	for _, d := range acctest.Diagnostics(t, out) {
		if d.Severity == "warning" {
			ws = append(ws, d)
		}
	}
	return ws
}

// findWarning returns the one warning whose summary matches, failing when
// there is none or more than one.
func findWarning(t *testing.T, ws []acctest.Diagnostic, summary string) acctest.Diagnostic {
	t.Helper()
	var found []acctest.Diagnostic
	for _, w := range ws {
		if regexp.MustCompile(summary).MatchString(w.Summary) {
			found = append(found, w)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one warning matching %q, got %d among %+v", summary, len(found), ws)
	}
	return found[0]
}

func wantDetail(t *testing.T, d acctest.Diagnostic, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(d.Detail, p) {
			t.Errorf("warning %q: detail %q does not contain %q", d.Summary, d.Detail, p)
		}
	}
}

func TestPlanWarnsAboutExecutors(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			gate := sshtest.NewGate(t, sshd.Addr)
			keyFile := sshd.ClientKey.WriteFile(t, t.TempDir())
			fake := clock.NewFake(start)
			s := acctest.NewSession(t, cli, server(provider.WithClock(fake)))
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) +
				executor("web", map[string]string{
					"host": q("127.0.0.1"), "port": fmt.Sprint(gate.Port), "user": q(sshd.User),
					"private_key_file": q(keyFile), "host_key_fingerprint": q(sshd.HostKeys[0].Fingerprint()),
				}) +
				executor("impostor", map[string]string{
					"host": q("127.0.0.1"), "port": fmt.Sprint(sshd.Port), "user": q(sshd.User),
					"private_key_file": q(keyFile), "host_key_fingerprint": q(sshtest.NewKey(t).Fingerprint()),
				}))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			gateAddr := fmt.Sprintf("127.0.0.1:%d", gate.Port)

			// A healthy host gets no warning; a host-key mismatch is
			// unreachable at once and has never succeeded.
			out, _ := s.Run("plan", "-json", "-input=false")
			ws := warnings(t, out)
			w := findWarning(t, ws, `Executor "impostor" is unreachable \(host_key\)`)
			wantDetail(t, w, fmt.Sprintf("127.0.0.1:%d", sshd.Port), "host key mismatch", "Last successful probe: never.")
			if w.Address != "fleet_executor.impostor" {
				t.Errorf("warning address %q, want fleet_executor.impostor", w.Address)
			}
			if len(ws) != 1 {
				t.Errorf("want only the impostor's warning, got %+v", ws)
			}

			// One failed refresh probe: a warning below the threshold.
			gate.SetMode(sshtest.GateReset)
			fake.Set(start.Add(3*time.Hour + 12*time.Minute))
			out, _ = s.Run("plan", "-json", "-input=false")
			w = findWarning(t, warnings(t, out), `Executor "web" failed its last probe \(network\)`)
			wantDetail(t, w, gateAddr, "1 of the 2 probes", "Last successful probe: 3h12m ago.")
			// A plan does not save what its refresh saw; this does.
			s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")

			// The second: unreachable.
			fake.Advance(interval)
			out, _ = s.Run("plan", "-json", "-input=false")
			w = findWarning(t, warnings(t, out), `Executor "web" is unreachable \(network\)`)
			wantDetail(t, w, gateAddr, "127.0.0.1 is unreachable: ", "Last checked: now, by this run", "Last successful probe: 3h13m ago.")

			// Without a refresh the saved record (from the refresh-only
			// apply, since plans save nothing) is not renewed and, more
			// than three intervals after it last changed, this run calls
			// it stale.
			fake.Advance(4 * interval)
			out, _ = s.Run("plan", "-refresh=false", "-json", "-input=false")
			w = findWarning(t, warnings(t, out), `Executor "web" failed its last probe \(network\)`)
			wantDetail(t, w, "The record of 127.0.0.1 is stale: this run did not probe it, and it last changed 5m0s ago, more than three probe intervals (1m0s).", "Last checked: not by this run", "Last successful probe: 3h17m ago.")
		})
	}
}

// The data source feeds for_each, and a check block over it turns an
// unreachable host into a warning, not an error.
func TestReachabilityFeedsForEachAndChecks(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			good := sshtest.NewServer(t, sshtest.Healthy)
			_, closed := sshtest.ClosedPort(t)
			s := acctest.NewSession(t, cli, server(provider.WithClock(clock.NewFake(start))))
			target := func(name string, port int) string {
				return fmt.Sprintf(`{ name = %q, host = "127.0.0.1", port = %d, user = "root", private_key = %q, host_key_fingerprint = %q }`,
					name, port, good.ClientKey.PEM(), good.HostKey.Fingerprint())
			}
			s.WriteConfig(fmt.Sprintf(`
data "fleet_reachability" "fleet" {
  targets = [%s, %s]
}

resource "terraform_data" "pool" {
  for_each = toset(data.fleet_reachability.fleet.reachable_names)
  input    = each.key
}

check "fleet_up" {
  assert {
    condition     = data.fleet_reachability.fleet.all_reachable
    error_message = "unreachable: ${join(", ", data.fleet_reachability.fleet.unreachable_names)}"
  }
}

output "pool" {
  value = keys(terraform_data.pool)
}
`, target("good", good.Port), target("down", closed)))
			s.Run("init", "-input=false")
			out, _ := s.Run("apply", "-auto-approve", "-json", "-input=false")
			w := findWarning(t, warnings(t, out), `Check block assertion failed`)
			if !strings.Contains(w.Detail, "unreachable: down") {
				t.Errorf("check warning detail %q does not name the unreachable host", w.Detail)
			}
			stdout, _ := s.Run("output", "-json", "pool")
			var pool []string
			if err := json.Unmarshal([]byte(stdout), &pool); err != nil {
				t.Fatalf("output pool: %q: %v", stdout, err)
			}
			if len(pool) != 1 || pool[0] != "good" {
				t.Errorf("pool = %v, want [good]", pool)
			}
		})
	}
}

// Normalised provider settings produce one warning naming the value given
// and the value used, whichever source they came from.
func TestProviderSettingsWarnings(t *testing.T) { // serial: the provider served in-process reads its settings' environment variables from the process
	cases := []struct {
		name, block string
		env         map[string]string
		summary     string
		detail      []string
	}{
		{"interval from configuration", "probe_interval = 5", nil, "Probe interval normalised", []string{"probe_interval = 5", "using 15"}},
		{"interval from environment", "", map[string]string{"FLEET_PROBE_INTERVAL": "abc"}, "Probe interval normalised", []string{`FLEET_PROBE_INTERVAL = "abc"`, "using 60"}},
		{"configuration wins over environment", "probe_interval = 7200", map[string]string{"FLEET_PROBE_INTERVAL": "30"}, "Probe interval normalised", []string{"probe_interval = 7200", "using 3600"}},
		{"concurrency from environment", "", map[string]string{"FLEET_PROBE_CONCURRENCY": "-3"}, "Probe concurrency normalised", []string{"FLEET_PROBE_CONCURRENCY = -3", "using 10"}},
	}
	for _, cli := range acctest.CLIs(t) {
		for _, c := range cases {
			t.Run(cli.Name+"/"+c.name, func(t *testing.T) {
				good := sshtest.NewServer(t, sshtest.Healthy)
				// The provider runs in this process and reads its environment.
				for k, v := range c.env {
					t.Setenv(k, v)
				}
				s := acctest.NewSession(t, cli, server())
				s.WriteConfig(fmt.Sprintf(`
provider "fleet" {
  %s
}
data "fleet_reachability" "one" {
  targets = [{ name = "one", host = "127.0.0.1", port = %d, user = "root", private_key = %q, host_key_fingerprint = %q }]
}
`, c.block, good.Port, good.ClientKey.PEM(), good.HostKey.Fingerprint()))
				s.Run("init", "-input=false")
				out, _ := s.Run("plan", "-json", "-input=false")
				w := findWarning(t, warnings(t, out), c.summary)
				wantDetail(t, w, c.detail...)
			})
		}
	}
}

// One probe semaphore serves every probe of the provider process: with one
// slot, the refresh probes of two executors and the two probes of a data
// source, which Terraform runs at the same time, take one probe timeout
// each, one after the other. Separate limits would let them overlap.
func TestProbeSlotsAreSharedByEveryProbe(t *testing.T) {
	t.Parallel()
	const timeout = 700 * time.Millisecond
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			fake := clock.NewFake(start)
			s := acctest.NewSession(t, cli, server(provider.WithClock(fake), provider.WithProbeTimeout(timeout)))
			var body strings.Builder
			fmt.Fprintf(&body, "provider \"fleet\" {\n  probe_concurrency = 1\n  probe_interval = 60\n}\n")
			var targets []string
			keyFile := sshtest.NewKey(t).WriteFile(t, t.TempDir())
			for i := range 4 {
				hole := sshtest.NewServer(t, sshtest.BlackHole)
				pin := sshtest.NewKey(t).Fingerprint()
				if i < 2 {
					fmt.Fprintf(&body, "resource \"fleet_executor\" \"e%d\" {\n  name = \"e%d\"\n  host = \"127.0.0.1\"\n  port = %d\n  private_key_file = %q\n  host_key_fingerprint = %q\n}\n", i, i, hole.Port, keyFile, pin)
					continue
				}
				targets = append(targets, fmt.Sprintf(`{ name = "d%d", host = "127.0.0.1", port = %d, private_key = %q, host_key_fingerprint = %q }`,
					i, hole.Port, sshtest.NewKey(t).PEM(), pin))
			}
			fmt.Fprintf(&body, "data \"fleet_reachability\" \"d\" {\n  targets = [%s]\n}\n", strings.Join(targets, ", "))
			s.WriteConfig(body.String())
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")

			fake.Advance(2 * interval) // the executors' records are due
			begin := time.Now()
			s.Run("plan", "-input=false")
			if took := time.Since(begin); took < 4*timeout {
				t.Fatalf("plan took %s: four probes sharing one slot take at least %s", took, 4*timeout)
			}
		})
	}
}
