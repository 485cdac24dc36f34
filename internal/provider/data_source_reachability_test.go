package provider_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

const dsProbeTimeout = 2 * time.Second

// The data source on a mix of good and bad hosts: each result in input
// order with its reason, and the summaries. (for_each over the names and the
// check block's warning are in plan_test.go: terraform-plugin-testing's
// state shim cannot read for_each instances.)
func TestAccReachabilityDataSource(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		sshd := sshtest.StartSSHD(t)
		bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, sshd.ClientKey)
		blackhole := sshtest.NewServer(t, sshtest.BlackHole)
		impostor := sshtest.NewServerWithKeys(t, sshtest.Healthy, nil, sshd.ClientKey)
		_, closed := sshtest.ClosedPort(t)
		keyFile := sshd.ClientKey.WriteFile(t, t.TempDir())
		pin := sshd.HostKeys[0].Fingerprint()
		target := func(name string, port int, extra string) string {
			return fmt.Sprintf("    {\n      name = %q\n      host = \"127.0.0.1\"\n      port = %d\n      user = %q\n      host_key_fingerprint = %q\n%s    },\n",
				name, port, sshd.User, pin, extra)
		}
		file := fmt.Sprintf("      private_key_file = %q\n", keyFile)
		inline := fmt.Sprintf("      private_key = <<-EOT\n%s\nEOT\n", strings.TrimSpace(string(sshd.ClientKey.PEM())))
		config := providerBlock(filepath.Join(t.TempDir(), "known_hosts")) +
			"data \"fleet_reachability\" \"fleet\" {\n  targets = [\n" +
			target("web", sshd.Port, file) +
			target("inline", sshd.Port, inline) +
			target("blackholed", blackhole.Port, file) +
			target("impostor", impostor.Port, file) +
			target("down", closed, file) +
			target("jumped", sshd.Port, file+fmt.Sprintf("      proxy_jump = \"127.0.0.1:%d\"\n", bastion.Port)) +
			`  ]
}

check "fleet_up" {
  assert {
    condition     = data.fleet_reachability.fleet.all_reachable
    error_message = "unreachable: ${join(", ", data.fleet_reachability.fleet.unreachable_names)}"
  }
}
`
		addr := "data.fleet_reachability.fleet"
		result := func(name string, reachable bool, reason, message string) knownvalue.Check {
			return knownvalue.ObjectPartial(map[string]knownvalue.Check{
				"name": knownvalue.StringExact(name), "host": knownvalue.StringExact("127.0.0.1"),
				"reachable": knownvalue.Bool(reachable), "reason": knownvalue.StringExact(reason),
				"message": knownvalue.StringRegexp(regexp.MustCompile(message)),
			})
		}
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(clock.NewFake(start)), provider.WithProbeTimeout(dsProbeTimeout)),
			Steps: []resource.TestStep{{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("results"), knownvalue.ListExact([]knownvalue.Check{
						result("web", true, "", "^$"),
						result("inline", true, "", "^$"),
						result("blackholed", false, "timeout", fmt.Sprintf(`127\.0\.0\.1:%d.*timed out`, blackhole.Port)),
						result("impostor", false, "host_key", "host key mismatch"),
						result("down", false, "network", fmt.Sprintf(`127\.0\.0\.1:%d.*connection refused`, closed)),
						result("jumped", true, "", "^$"),
					})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("results").AtSliceIndex(0).AtMapKey("server_version"),
						knownvalue.StringRegexp(regexp.MustCompile(`^SSH-2\.0-OpenSSH`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("reachable_names"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("web"), knownvalue.StringExact("inline"), knownvalue.StringExact("jumped")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("unreachable_names"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("blackholed"), knownvalue.StringExact("impostor"), knownvalue.StringExact("down")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("all_reachable"), knownvalue.Bool(false)),
					// The inline key was used for the read and is not kept.
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("targets").AtSliceIndex(1).AtMapKey("private_key"), knownvalue.Null()),
				},
			}},
		}
	})
}

// Duplicate names are refused: dispatch order is by name, a total order.
func TestAccReachabilityDuplicateNames(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(),
			Steps: []resource.TestStep{{
				Config: `data "fleet_reachability" "dup" {
  targets = [
    { name = "a", host = "127.0.0.1", host_key_fingerprint = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU" },
    { name = "a", host = "127.0.0.2", host_key_fingerprint = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU" },
  ]
}`,
				ExpectError: regexp.MustCompile(`target name "a" is given twice, by targets\[0\]\s+and\s+targets\[1\]`),
			}},
		}
	})
}

// No targets is a valid pass with nothing in it: no results, both name
// lists empty (not null, so for_each and length() work on them), and
// all_reachable true. A module that builds its targets from an empty
// variable gets the same, whether the variable is typed or not.
func TestAccReachabilityEmptyTargets(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		empty := []statecheck.StateCheck{}
		for _, name := range []string{"literal", "typed", "untyped"} {
			addr := "data.fleet_reachability." + name
			empty = append(empty,
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("results"), knownvalue.ListExact([]knownvalue.Check{})),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("reachable_names"), knownvalue.ListExact([]knownvalue.Check{})),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("unreachable_names"), knownvalue.ListExact([]knownvalue.Check{})),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("all_reachable"), knownvalue.Bool(true)),
			)
		}
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(clock.NewFake(start))),
			Steps: []resource.TestStep{{
				Config: `
variable "hosts" {
  type = list(object({
    name                 = string
    host                 = string
    host_key_fingerprint = string
  }))
  default = []
}

variable "untyped_hosts" {
  default = []
}

data "fleet_reachability" "literal" {
  targets = []
}

data "fleet_reachability" "typed" {
  targets = [for h in var.hosts : h]
}

data "fleet_reachability" "untyped" {
  targets = [for h in var.untyped_hosts : h]
}

output "count" {
  value = length(data.fleet_reachability.typed.reachable_names) + length(data.fleet_reachability.untyped.unreachable_names)
}
`,
				ConfigStateChecks: append(empty, statecheck.ExpectKnownOutputValue("count", knownvalue.Int64Exact(0))),
			}},
		}
	})
}

// executorTargetConfig is the data source fed from an executor's
// ssh_connection merged with a name: the README's pattern until 96f0af3,
// and docs/guides/wiring.md still says it is accepted as a target.
func executorTargetConfig(t *testing.T, sshd *sshtest.SSHD) string {
	return providerBlock(filepath.Join(t.TempDir(), "known_hosts")) + executor("web1", map[string]string{
		"host": q("127.0.0.1"), "port": fmt.Sprint(sshd.Port), "user": q(sshd.User),
		"private_key_file":     q(sshd.ClientKey.WriteFile(t, t.TempDir())),
		"host_key_fingerprint": q(sshd.HostKeys[0].Fingerprint()),
	}) + `
data "fleet_reachability" "now" {
  targets = [merge(fleet_executor.web1.ssh_connection, { name = "web1" })]
}
`
}

// A target built with merge() from an executor that does not exist yet is
// unknown at validate: its required attributes are not reported missing
// before they are known, so the configuration validates.
func TestReachabilityExecutorConnectionTargetValidates(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(executorTargetConfig(t, sshd))
			s.Run("init", "-input=false")
			valid, diags := s.Validate()
			if !valid || len(diags) != 0 {
				t.Fatalf("merge(fleet_executor.web1.ssh_connection, { name = \"web1\" }) does not validate cleanly: valid=%v %+v", valid, diags)
			}
		})
	}
}

// ...and applies from an empty state: the read waits for the executor, then
// probes the host it describes.
func TestAccReachabilityExecutorConnectionTargetApplies(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		sshd := sshtest.StartSSHD(t)
		addr := "data.fleet_reachability.now"
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(clock.NewFake(start))),
			Steps: []resource.TestStep{{
				Config: executorTargetConfig(t, sshd),
				ConfigStateChecks: []statecheck.StateCheck{
					record("fleet_executor.web1", "reachable", "", 0, start, start),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("results"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"name": knownvalue.StringExact("web1"), "host": knownvalue.StringExact("127.0.0.1"),
							"reachable": knownvalue.Bool(true), "reason": knownvalue.StringExact(""),
							"server_version": knownvalue.StringRegexp(regexp.MustCompile(`^SSH-2\.0-OpenSSH`)),
						}),
					})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("reachable_names"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("web1")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("all_reachable"), knownvalue.Bool(true)),
				},
			}},
		}
	})
}

// A known target without its name or host is still refused, naming the
// target and the attribute.
func TestAccReachabilityTargetNeedsNameAndHost(t *testing.T) {
	const pin = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU"
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		config := func(second string) string {
			return fmt.Sprintf(`data "fleet_reachability" "d" {
  targets = [
    { name = "a", host = "127.0.0.1", host_key_fingerprint = %q },
    %s,
  ]
}`, pin, second)
		}
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(),
			Steps: []resource.TestStep{
				{
					Config:      config(fmt.Sprintf(`{ host = "127.0.0.1", host_key_fingerprint = %q }`, pin)),
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(`(?s)Missing name.*targets\[1\]:\s+name\s+is\s+required`),
				},
				{
					Config:      config(fmt.Sprintf(`{ name = "b", host_key_fingerprint = %q }`, pin)),
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(`(?s)Missing host.*targets\[1\]:\s+host\s+is\s+required`),
				},
			},
		}
	})
}

// Each result's checked_at is when its own probe finished, not when the
// pass did: with both probes running at once, the healthy host's is about
// a probe timeout earlier than the black-holed host's.
func TestAccReachabilityCheckedAtPerTarget(t *testing.T) {
	const timeout = time.Second
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		good := sshtest.NewServer(t, sshtest.Healthy)
		hole := sshtest.NewServer(t, sshtest.BlackHole)
		keyFile := good.ClientKey.WriteFile(t, t.TempDir())
		// "a-good" sorts first and is dispatched first; with the default
		// four slots both probes run at once. The black hole comes first in
		// input order, so results are matched by position, not by name order.
		config := fmt.Sprintf(`data "fleet_reachability" "d" {
  targets = [
    { name = "b-hole", host = "127.0.0.1", port = %d, private_key_file = %q, host_key_fingerprint = %q },
    { name = "a-good", host = "127.0.0.1", port = %d, private_key_file = %q, host_key_fingerprint = %q },
  ]
}`, hole.Port, keyFile, good.HostKey.Fingerprint(), good.Port, keyFile, good.HostKey.Fingerprint())
		checkedAt := func(s *terraform.State, i int) (time.Time, error) {
			rs, ok := s.RootModule().Resources["data.fleet_reachability.d"]
			if !ok {
				return time.Time{}, fmt.Errorf("data.fleet_reachability.d not in state")
			}
			v := rs.Primary.Attributes[fmt.Sprintf("results.%d.checked_at", i)]
			return time.Parse(time.RFC3339Nano, v)
		}
		var begin time.Time
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithProbeTimeout(timeout)),
			Steps: []resource.TestStep{{
				PreConfig: func() { begin = time.Now() },
				Config:    config,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("data.fleet_reachability.d", "results.0.reason", "timeout"),
					resource.TestCheckResourceAttr("data.fleet_reachability.d", "results.1.reachable", "true"),
					func(s *terraform.State) error {
						holeAt, err := checkedAt(s, 0)
						if err != nil {
							return err
						}
						goodAt, err := checkedAt(s, 1)
						if err != nil {
							return err
						}
						// The black hole's probe started no earlier than the
						// healthy one and ran a whole timeout; the healthy one
						// ended after its own latency. Stamped at the end of
						// the pass, both would be equal.
						latency, err := strconv.Atoi(s.RootModule().Resources["data.fleet_reachability.d"].Primary.Attributes["results.1.latency_ms"])
						if err != nil {
							return fmt.Errorf("results.1.latency_ms: %v", err)
						}
						want := timeout - 150*time.Millisecond - time.Duration(latency)*time.Millisecond
						if want < timeout/2 {
							return fmt.Errorf("the healthy probe took %dms: too slow for this test to tell anything", latency)
						}
						if gap := holeAt.Sub(goodAt); gap < want {
							return fmt.Errorf("checked_at: a-good %s, b-hole %s: %s apart, want at least %s (the black hole's probe times out after %s, the healthy one took %dms)",
								goodAt.Format(time.RFC3339Nano), holeAt.Format(time.RFC3339Nano), gap, want, timeout, latency)
						}
						// Both are real times of this run, not of some clock.
						for _, at := range []time.Time{goodAt, holeAt} {
							if at.Before(begin.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
								return fmt.Errorf("checked_at %s is outside the run (%s to now)", at, begin)
							}
						}
						return nil
					},
				),
			}},
		}
	})
}
