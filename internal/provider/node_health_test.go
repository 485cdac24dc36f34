package provider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// cloudPolicy is a policy of two local nodes under root: "hv" (hypervisor:
// instance and blob storage) and "st" (storage: blob and upload storage).
// extra is added inside the resource block.
// Nothing in it hangs, so its probe timeout is the provider's default:
// every evaluation writes a heartbeat with fsync, which a busy machine's
// disk can keep for seconds (2 s was seen to time out).
func cloudPolicy(root, extra string) string {
	return fmt.Sprintf(`
resource "fleet_node_health_policy" "cloud" {
  name                 = "cloud"
  storage_root         = %q
  probe_timeout        = "10s"
  write_probe_interval = "0s"
  checks = {
    blobs     = { path = "blobs", description = "blob storage" }
    instances = { path = "instances", description = "instance storage" }
    uploads   = { path = "uploads", description = "upload storage" }
  }
  object_types = {
    instance = { checks = ["blobs", "instances"] }
    blob     = { checks = ["blobs"] }
    upload   = { checks = ["uploads"] }
  }
  roles = {
    hypervisor = { hosts = ["instance", "blob"], description = "a hypervisor node" }
    storage    = { hosts = ["blob", "upload"], description = "a storage node" }
  }
  nodes = {
    hv = { roles = ["hypervisor"], local = true }
    st = { roles = ["storage"], local = true }
  }
%s}
`, root, extra)
}

// storageRoot makes root/{blobs,instances,uploads}, with uploads on a tmpfs
// of its own inside a mount namespace that the local nodes' checks run in.
func storageRoot(t *testing.T) (root string, ns *sshtest.MountNamespace) {
	t.Helper()
	root = t.TempDir()
	for _, d := range []string{"blobs", "instances"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ns = sshtest.NewMountNamespace(t)
	ns.MountTmpfs(t, filepath.Join(root, "uploads"))
	return root, ns
}

func nodeState(addr, node, state string) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey(node).AtMapKey("state"), knownvalue.StringExact(state))
}

func nodeReason(addr, node, pattern string) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey(node).AtMapKey("reason"), knownvalue.StringRegexp(regexp.MustCompile(pattern)))
}

func names(addr, attr string, want ...string) statecheck.StateCheck {
	checks := make([]knownvalue.Check, len(want))
	for i, w := range want {
		checks[i] = knownvalue.StringExact(w)
	}
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New(attr), knownvalue.ListExact(checks))
}

// The sticky error, end to end through both CLIs: a storage mount goes
// read-only; the storage node is in error and only uploads' type is
// unhealthy; repaired, it stays in error awaiting a clear; a clear while the
// fault is back does not clear; a clear once it passes does.
func TestAccNodeHealthStickyErrorAndClear(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		root, ns := storageRoot(t)
		uploads := filepath.Join(root, "uploads")
		addr := "fleet_node_health_policy.cloud"
		base := providerBlock(filepath.Join(t.TempDir(), "kh"))
		config := base + cloudPolicy(root, "")
		clearWith := func(note string) string {
			return base + cloudPolicy(root, fmt.Sprintf("  clear_errors = { st = %q }\n", note))
		}
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithLocalShell(ns.Command("/bin/sh", "-s")...)),
			Steps: []resource.TestStep{
				{
					Config: config,
					ConfigStateChecks: []statecheck.StateCheck{
						nodeState(addr, "hv", "healthy"), nodeState(addr, "st", "healthy"),
						names(addr, "healthy_nodes", "hv", "st"), names(addr, "error_nodes"), names(addr, "missing_nodes"),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.Int64Exact(1)),
						// blobs is listed by two types of hv and probed once.
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("hv").AtMapKey("checks"), knownvalue.ListSizeExact(2)),
					},
				},
				{
					PreConfig: func() { ns.RemountReadOnly(t, uploads) },
					Config:    config,
					ConfigStateChecks: []statecheck.StateCheck{
						nodeState(addr, "st", "error"), nodeState(addr, "hv", "healthy"),
						nodeReason(addr, "st", `^node st is unhealthy because it is a storage node and upload storage \(needed by upload\) is unhealthy: .*/uploads: mounted read-only$`),
						names(addr, "error_nodes", "st"), names(addr, "schedulable_nodes", "hv"),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("st").AtMapKey("object_types"), knownvalue.ListExact([]knownvalue.Check{
							knownvalue.ObjectExact(map[string]knownvalue.Check{"name": knownvalue.StringExact("blob"), "healthy": knownvalue.Bool(true), "failed_checks": knownvalue.ListExact(nil)}),
							knownvalue.ObjectExact(map[string]knownvalue.Check{"name": knownvalue.StringExact("upload"), "healthy": knownvalue.Bool(false),
								"failed_checks": knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("uploads")})}),
						})),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("st").AtMapKey("error_since"), knownvalue.NotNull()),
					},
				},
				{
					PreConfig: func() { ns.RemountReadWrite(t, uploads) },
					Config:    config,
					ConfigStateChecks: []statecheck.StateCheck{
						nodeState(addr, "st", "error"),
						nodeReason(addr, "st", `checks pass again; awaiting operator clear`),
						names(addr, "error_nodes", "st"),
					},
				},
				{
					// The fault is back when the clear is applied: no clear.
					PreConfig: func() { ns.RemountReadOnly(t, uploads) },
					Config:    clearWith("first try"),
					ConfigStateChecks: []statecheck.StateCheck{
						nodeState(addr, "st", "error"), nodeReason(addr, "st", `mounted read-only`),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("st").AtMapKey("last_clear"), knownvalue.Null()),
					},
				},
				{
					PreConfig: func() { ns.RemountReadWrite(t, uploads) },
					Config:    clearWith("remounted rw, ticket 4711"),
					// Known at plan, decided from the refresh that found the
					// checks passing: what a deployment's hold reads.
					ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("error_nodes"), knownvalue.ListExact([]knownvalue.Check{})),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("st").AtMapKey("state"), knownvalue.StringExact("healthy")),
					}},
					ConfigStateChecks: []statecheck.StateCheck{
						nodeState(addr, "st", "healthy"), names(addr, "error_nodes"), names(addr, "healthy_nodes", "hv", "st"),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("st").AtMapKey("last_clear").AtMapKey("note"),
							knownvalue.StringExact("remounted rw, ticket 4711")),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("st").AtMapKey("error_since"), knownvalue.Null()),
						// clear_errors is not the policy: the generation stays.
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.Int64Exact(1)),
					},
				},
			},
		}
	})
}

// Dangling references and malformed checks are refused at validate, naming
// the key at fault.
func TestAccNodeHealthRejectsDanglingReferences(t *testing.T) {
	cases := []struct{ name, from, to, want string }{
		{"check", `instance = { checks = ["blobs", "instances"] }`, `instance = { checks = ["blobs", "instancez"] }`,
			`object_types\["instance"\]\.checks[\s\S]*check "instancez" is not declared in checks`},
		{"type", `hosts = ["instance", "blob"]`, `hosts = ["instance", "blobz"]`, `roles\["hypervisor"\]\.hosts[\s\S]*object type "blobz" is not declared in object_types`},
		{"role", `roles = ["storage"], local = true`, `roles = ["storagez"], local = true`, `nodes\["st"\]\.roles[\s\S]*role "storagez" is not declared in roles`},
		{"kind", `blobs     = { path = "blobs", description = "blob storage" }`, `blobs     = { path = "blobs", command = "true" }`, `checks\["blobs"\][\s\S]*set exactly one of path, command`},
	}
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		var steps []resource.TestStep
		for _, c := range cases {
			cfg := cloudPolicy("/srv/cloud", "")
			if !strings.Contains(cfg, c.from) {
				t.Fatalf("%s: %q not in the configuration", c.name, c.from)
			}
			steps = append(steps, resource.TestStep{
				Config:      providerBlock(filepath.Join(t.TempDir(), "kh")) + strings.Replace(cfg, c.from, c.to, 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(strings.ReplaceAll(c.want, " ", `\s+`)), // the CLIs wrap lines
			})
		}
		return resource.TestCase{ProtoV6ProviderFactories: factories(), Steps: steps}
	})
}

// Issue 12: a misspelt key anywhere in the policy's maps is refused at
// plan time, naming it and the nearest valid key; as nested attributes,
// Terraform dropped it without a word (a check with `pth` had no kind, a
// role with `host` hosted nothing, a connection with `prot` used port 22).
func TestAccNodeHealthRefusesUnknownKeys(t *testing.T) {
	cases := []struct{ name, from, to, want string }{
		{"check", `blobs     = { path = "blobs", description = "blob storage" }`, `blobs     = { path = "blobs", desription = "blob storage" }`,
			`An object key named "desription" is not expected in checks["blobs"]. Did you mean "description"?`},
		{"object type", `blob     = { checks = ["blobs"] }`, `blob     = { check = ["blobs"] }`,
			`An object key named "check" is not expected in object_types["blob"]. Did you mean "checks"?`},
		{"role", `storage    = { hosts = ["blob", "upload"], description = "a storage node" }`, `storage    = { host = ["blob", "upload"], description = "a storage node" }`,
			`An object key named "host" is not expected in roles["storage"]. Did you mean "hosts"?`},
		{"node connection", `st = { roles = ["storage"], local = true }`, `st = { roles = ["storage"], connection = { host = "127.0.0.1", prot = 2222, host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s" } }`,
			`An object key named "prot" is not expected in nodes["st"].connection. Did you mean "port"?`},
	}
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		var steps []resource.TestStep
		for _, c := range cases {
			cfg := cloudPolicy("/srv/cloud", "")
			if !strings.Contains(cfg, c.from) {
				t.Fatalf("%s: %q not in the configuration", c.name, c.from)
			}
			steps = append(steps, resource.TestStep{
				Config:      providerBlock(filepath.Join(t.TempDir(), "kh")) + strings.Replace(cfg, c.from, c.to, 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(c.want), " ", `\s+`)),
			})
		}
		return resource.TestCase{ProtoV6ProviderFactories: factories(), Steps: steps}
	})
}

// A change of the policy plans known (issue 30 point 1), through both
// CLIs: a node added is pending in the plan and after the apply, in no
// summary, and the next refresh evaluates it; a check added to every node
// leaves every record as it was in the plan and after the apply (the
// records' generation below the policy's), and the next refresh observes
// it; in both plans the summaries a deployment holds are known.
func TestAccNodeHealthPolicyChangePlansKnown(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		root, ns := storageRoot(t)
		addr := "fleet_node_health_policy.cloud"
		base := providerBlock(filepath.Join(t.TempDir(), "kh"))
		config := base + cloudPolicy(root, "")
		added := strings.Replace(config, `    st = { roles = ["storage"], local = true }`,
			`    st = { roles = ["storage"], local = true }
    nw = { roles = ["storage"], local = true }`, 1)
		checked := strings.Replace(added, `    blob     = { checks = ["blobs"] }`, `    blob     = { checks = ["blobs", "shell"] }`, 1)
		checked = strings.Replace(checked, `    uploads   = { path = "uploads", description = "upload storage" }`,
			`    uploads   = { path = "uploads", description = "upload storage" }
    shell     = { command = "true", description = "a shell" }`, 1)
		known := func(attrs ...string) []plancheck.PlanCheck {
			var out []plancheck.PlanCheck
			for _, a := range attrs {
				out = append(out, plancheck.ExpectKnownValue(addr, tfjsonpath.New(a), knownvalue.NotNull()))
			}
			return out
		}
		checks := func(node string, n int) statecheck.StateCheck {
			return statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey(node).AtMapKey("checks"), knownvalue.ListSizeExact(n))
		}
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithLocalShell(ns.Command("/bin/sh", "-s")...)),
			Steps: []resource.TestStep{
				{Config: config, ConfigStateChecks: []statecheck.StateCheck{nodeState(addr, "st", "healthy")}},
				{
					Config: added,
					ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(known("error_nodes", "healthy_nodes", "schedulable_nodes", "missing_nodes"),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("nw").AtMapKey("state"), knownvalue.StringExact("pending")))},
					ConfigStateChecks: []statecheck.StateCheck{
						nodeState(addr, "nw", "pending"), nodeReason(addr, "nw", `^node nw is not evaluated yet`),
						names(addr, "healthy_nodes", "hv", "st"), names(addr, "schedulable_nodes", "hv", "st"),
					},
				},
				{
					// The refresh evaluates it.
					Config: added,
					ConfigStateChecks: []statecheck.StateCheck{
						nodeState(addr, "nw", "healthy"), names(addr, "healthy_nodes", "hv", "nw", "st"), checks("nw", 2),
					},
				},
				{
					Config: checked,
					ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: append(known("error_nodes", "healthy_nodes", "schedulable_nodes", "missing_nodes", "status"),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.Int64Exact(3)))},
					ConfigStateChecks: []statecheck.StateCheck{
						checks("st", 2), checks("hv", 2),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("st").AtMapKey("conditions").AtSliceIndex(0).AtMapKey("observed_generation"), knownvalue.Int64Exact(1)),
					},
				},
				{
					// The refresh observes the check: a record it changes
					// takes the policy's generation.
					Config: checked,
					ConfigStateChecks: []statecheck.StateCheck{
						checks("st", 3), checks("hv", 3), nodeState(addr, "st", "healthy"),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("st").AtMapKey("conditions").AtSliceIndex(0).AtMapKey("observed_generation"), knownvalue.Int64Exact(3)),
					},
				},
			},
		}
	})
}
