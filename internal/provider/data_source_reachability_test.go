package provider_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
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
				ExpectError: regexp.MustCompile(`target name "a" is given twice`),
			}},
		}
	})
}
