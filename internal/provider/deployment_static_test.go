package provider_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Issue 12: the deployment refuses static faults before anything runs,
// naming the attribute, the place inside it and the fix: at validate what
// the configuration alone shows (a misspelt or missing key, a bad URL,
// duration or host), at plan what needs this machine's files or values
// known only then. Misspelt keys were dropped without a word by both CLIs
// when the inputs were nested attributes: a verdict check vanished, and a
// node deployed to the host named after it.
func TestDeploymentRefusesStaticFaults(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	pkgDir := filepath.Join(t.TempDir(), "nginx-1.26.2")
	if err := os.MkdirAll(filepath.Join(pkgDir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkgDir, "bin", "nginx"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pkg := nixtest.AddToStore(t, pkgDir)
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	node := func(extra string) string {
		return fmt.Sprintf(`{ name = "n1", host = "127.0.0.1", system = %q, host_key = %q%s }`, sys, key, extra)
	}
	resource := func(body string) string {
		return "resource \"fleet_ssh_deployment\" \"prod\" {\n" + body + "\n}\n"
	}
	cases := []struct {
		name   string
		config string
		at     string   // "validate" or "plan"; "warn": accepted by validate, with a warning
		want   []string // in the error (the warning)
	}{
		{"a misspelt key in a node", resource(`nodes = [{ name = "n1", hots = "10.0.0.1", system = "` + sys + `" }]`), "validate",
			[]string{"Unsupported key", `An object key named "hots" is not expected in nodes[0]. Did you mean "host"?`}},
		{"a misspelt verdict check", resource("nodes = [" + node("") + "]\nverdict = { commnd = [{ run = \"false\" }] }"), "validate",
			[]string{`An object key named "commnd" is not expected in verdict. Did you mean "command"?`}},
		{"a misspelt key in a verdict check", resource("nodes = [" + node("") + "]\nverdict = { command = [{ rn = \"false\" }] }"), "validate",
			[]string{`"rn" is not expected in verdict.command[0]. Did you mean "run"?`, `verdict.command[0]: "run" is required`}},
		{"a misspelt key in defaults", resource("defaults = { privat_key_file = \"/k\" }\nnodes = [" + node("") + "]"), "validate",
			[]string{`"privat_key_file" is not expected in defaults. Did you mean "private_key_file"?`}},
		{"the same typo in two nodes, once", resource("nodes = [" + node(`, usr = "a"`) + ", " + strings.Replace(node(`, usr = "b"`), `"n1"`, `"n2"`, 1) + "]"), "validate",
			[]string{`An object key named "usr" is not expected in nodes[0], nodes[1]. Did you mean "user"?`}},
		{"a missing system", resource(`nodes = [{ name = "n1" }]`), "validate", []string{"Missing required key", `nodes[0]: "system" is required`}},
		{"a number for a name", resource(`nodes = [{ name = ["n1"], system = "` + sys + `" }]`), "validate", []string{"nodes[0].name: a string is expected, not a list"}},
		{"not a url", resource("nodes = [" + node("") + "]\nverdict = { http = [{ url = \"not a url\" }] }"), "validate",
			[]string{"Invalid URL", `verdict.http[0].url: "not a url" is not an http:// or https:// URL`}},
		{"an empty host", resource("nodes = [" + strings.Replace(node(""), `host = "127.0.0.1"`, `host = ""`, 1) + "]"), "validate",
			[]string{"nodes[0].host", "empty host name: give a host name or an address"}},
		{"a host that is an option", resource("nodes = [" + strings.Replace(node(""), `host = "127.0.0.1"`, `host = "-oProxyCommand=x"`, 1) + "]"), "validate",
			[]string{"nodes[0].host", "starts with '-'"}},
		{"a name that cannot be the host", resource(`nodes = [{ name = "web 1", system = "` + sys + `" }]`), "validate",
			[]string{"nodes[0]: with no host, the name is the host", "set host"}},
		{"a duration in words", resource("nodes = [" + node("") + "]\nactivation_timeout = \"five minutes\""), "validate",
			[]string{"Invalid duration", `activation_timeout: "five minutes" is not a Go duration`}},
		{"a verdict duration without a unit", resource("nodes = [" + node("") + "]\nverdict = { confirm_timeout = \"30\" }"), "validate",
			[]string{`verdict.confirm_timeout: "30" is not a Go duration of at least 1s`}},
		{"a status out of range", resource("nodes = [" + node("") + "]\nverdict = { http = [{ url = \"https://x/\", expect_status = 20 }] }"), "validate",
			[]string{"verdict.http[0].expect_status", "between 100 and 599"}},
		{"a typo from a variable", "variable \"hosts\" {\n  default = { n1 = \"127.0.0.1\" }\n}\n" +
			resource("nodes = [for k, v in var.hosts : { name = k, hots = v, system = \""+sys+"\" }]"), "plan",
			[]string{`"hots" is not expected in nodes[0]. Did you mean "host"?`}},
		{"a missing ssh_config_file", resource("nodes = [" + node("") + "]\nssh_config_file = \"/nonexistent/ssh_config\""), "plan",
			[]string{"Missing ssh_config_file", "/nonexistent/ssh_config cannot be read"}},
		{"known_hosts_file in a missing directory", resource("nodes = [" + node("") + "]\nknown_hosts_file = \"/nonexistent/known_hosts\""), "plan",
			[]string{"Unusable known_hosts file", "the directory /nonexistent does not exist"}},
		{"known_hosts_file in /tmp", resource("nodes = [" + node("") + "]\nknown_hosts_file = \"/tmp/fleet-test-known-hosts\""), "plan",
			[]string{"Unusable known_hosts file", "/tmp is a directory every user can make files in (mode 1777)", "name a file in a directory only you can write"}},
		// Issue 16's trial: a system the host's /run/current-system can
		// never equal, and a store path that is not a system.
		{"a system with a trailing slash", resource("nodes = [" + strings.Replace(node(""), sys, sys+"/", 1) + "]"), "plan",
			[]string{"Not a system closure", "nodes[0].system: node n1: " + sys + "/ ends with a slash", "remove it"}},
		{"a package as the system", resource("nodes = [" + strings.Replace(node(""), sys, pkg, 1) + "]"), "plan",
			[]string{"Not a system closure", "nodes[0].system: node n1: " + pkg + " has no bin/switch-to-configuration", "config.system.build.toplevel"}},
		{"a port key", resource("nodes = [" + node(`, port = 2222`) + "]"), "validate",
			[]string{`"port" is not expected in nodes[0]. The SSH port goes in ssh_opts: ssh_opts = ["Port=2222"].`}},
		// FR-018: an ssh_opts item that is not a bare Key=Value, named
		// down to the node and the item.
		{"a bad ssh_opts item in a node", resource("nodes = [" + node("") + ", " + strings.Replace(node(`, ssh_opts = ["Port=2222", "-o IdentitiesOnly=yes"]`), `"n1"`, `"n2"`, 1) + "]"), "validate",
			[]string{"Invalid ssh_opts item", `nodes[1].ssh_opts[1]: ssh_opts item "-o IdentitiesOnly=yes" is not a bare OpenSSH option Key=Value`, `Drop the -o: write "IdentitiesOnly=yes".`}},
		{"a bad ssh_opts item in defaults", resource("defaults = { ssh_opts = [\"Port 2222\"] }\nnodes = [" + node("") + "]"), "validate",
			[]string{"Invalid ssh_opts item", `defaults.ssh_opts[0]: ssh_opts item "Port 2222" is not a bare OpenSSH option Key=Value`, `Join key and value with =: write "Port=2222".`}},
		// Issue 38: keys refused at validate, naming the attribute.
		{"a relative key destination", resource("nodes = [" + node("") + "]\nkeys = { db = { destination = \"keys/db\" } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{"Invalid key destination", `keys["db"].destination: "keys/db" is not an absolute path`}},
		{"a key in the store", resource("nodes = [" + node("") + "]\nkeys = { db = { destination = \"/nix/store/db\" } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{"Invalid key destination", "lies under /nix/store, which every user of the host can read"}},
		{"a key name with a slash", resource("nodes = [" + node("") + "]\nkeys = { \"db/pw\" = {} }\nkey_contents_wo = { \"db/pw\" = \"x\" }"), "validate",
			[]string{"Invalid key name", `keys["db/pw"]: a key's name cannot hold a slash`}},
		{"permissions in words", resource("nodes = [" + node("") + "]\nkeys = { db = { permissions = \"rw-r-----\" } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{"Invalid permissions", `keys["db"].permissions: "rw-r-----" is not a file mode in octal`}},
		{"a misspelt key setting", resource("nodes = [" + node("") + "]\nkeys = { db = { owner = \"postgres\" } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{`"owner" is not expected in keys["db"]`}},
		{"a key without content", resource("nodes = [" + node("") + "]\nkeys = { db = {} }"), "validate",
			[]string{"Key without content", `keys["db"] has no content: key_contents_wo needs an entry "db"`}},
		{"a content for no key", resource("nodes = [" + node("") + "]\nkeys = { db = {} }\nkey_contents_wo = { db = \"x\", dv = \"y\" }"), "validate",
			[]string{"Content for no key", `key_contents_wo has a content for "dv", which keys does not name (keys has db)`}},
		{"a key for a node not in nodes", resource("nodes = [" + node("") + "]\nkeys = { db = { nodes = [\"n9\"] } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{"Unknown node in a key's nodes", `keys["db"].nodes names "n9", which is not in nodes (n1)`}},
		{"a unit that is not a unit name", resource("nodes = [" + node("") + "]\nkeys = { db = { restart_units = [\"x.service; reboot\"] } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{`keys["db"].restart_units`, "a systemd unit name"}},
		// Issue 47: a pattern restarts every unit it matches; goal boot
		// judges nothing for an after-verdict key to wait for.
		{"a unit pattern", resource("nodes = [" + node("") + "]\nkeys = { db = { restart_units = [\"*\"] } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{`keys["db"].restart_units`, "a systemd unit name"}},
		{"an after-verdict key with goal boot", resource("nodes = [" + node("") + "]\ngoal = \"boot\"\nkeys = { db = { upload = \"after-verdict\" } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{"After-verdict key without a verdict", `keys["db"].upload = "after-verdict"`, `goal "boot" judges nothing`}},
		{"a colmena key setting", resource("nodes = [" + node("") + "]\nkeys = { db = { destDir = \"/run/keys\" } }\nkey_contents_wo = { db = \"x\" }"), "validate",
			[]string{`"destDir" is not expected in keys["db"]`, "destination takes the file's whole path"}},
		{"a null content", resource("nodes = [" + node("") + "]\nkeys = { db = {} }\nkey_contents_wo = { db = null }"), "validate",
			[]string{"Key without content", `key_contents_wo["db"] is null`}},
		{"a key name with a slash, nodes from a variable", "variable \"nodes\" {}\n" + resource("nodes = var.nodes\nkeys = { \"a/b\" = {} }\nkey_contents_wo = { \"a/b\" = \"x\" }"), "validate",
			[]string{"Invalid key name"}},
		{"a reboot_timeout with no reboots", resource("nodes = [" + node("") + "]\nreboot_timeout = \"5m\""), "warn",
			[]string{"reboot_timeout without reboots", `reboot is "never" (or unset): no host is rebooted`}},
		{"two keys at one destination", resource("nodes = [" + node("") + "]\nkeys = { a = { destination = \"/run/keys/x\" }, b = { destination = \"/run/keys/x\" } }\nkey_contents_wo = { a = \"x\", b = \"y\" }"), "validate",
			[]string{"Two keys at one destination", `keys["a"] and keys["b"] are both written to /run/keys/x`}},
	}
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					s := acctest.NewSession(t, cli, server())
					s.WriteConfig(c.config)
					s.Run("init", "-input=false")
					valid, diags := s.Validate()
					var errs []string
					for _, d := range diags {
						if d.Severity == "error" || c.at == "warn" && d.Severity == "warning" {
							errs = append(errs, d.Summary+": "+d.Detail)
						}
					}
					switch c.at {
					case "warn":
						if !valid {
							t.Fatalf("validate refused it, want a warning: %v", errs)
						}
					case "validate":
						if valid {
							t.Fatalf("validate accepted it")
						}
					default:
						if !valid {
							t.Fatalf("validate refused it, want it refused at plan: %v", errs)
						}
						out, errOut, code := s.ExitCode("plan", "-input=false", "-no-color")
						if code == 0 {
							t.Fatalf("plan accepted it:\n%s", out)
						}
						errs = []string{strings.Join(strings.Fields(errOut), " ")}
					}
					all := strings.Join(errs, "\n")
					for _, w := range c.want {
						if !strings.Contains(all, w) {
							t.Errorf("the error does not say %q:\n%s", w, all)
						}
					}
				})
			}
		})
	}
}

// A state written by schema version 0, whose nested inputs were typed
// (every key present, null when unset; the verdict's default written), by
// version 1, by version 2, by version 3 (which kept only_nodes) or by
// version 4 (whose records had no boot_system) is upgraded: the generation
// each node condition of versions 0 and 1 held is its record's
// observed_generation, the records listed in node order (versions 0 to 2)
// are keyed by node name, version 3's only_nodes goes (write-only since),
// boot_system comes (read by the refresh), the same configuration plans no
// change, and applies.
func TestDeploymentStateUpgradesFromVersions0To4(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		for _, version := range []int{0, 1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s/version=%d", cli.Name, version), func(t *testing.T) {
				t.Parallel()
				tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
				sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
				tg1.Boot(t, sys)
				tg2.Boot(t, sys)
				s := acctest.NewSession(t, cli, server())
				s.WriteConfig(deploymentConfig([]*nixtest.Target{tg1, tg2}, []string{sys, sys}, ""))
				s.Run("init", "-input=false")
				s.Run("apply", "-auto-approve", "-input=false")
				s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")

				var state map[string]any
				if err := json.Unmarshal(s.State(), &state); err != nil {
					t.Fatal(err)
				}
				inst := state["resources"].([]any)[0].(map[string]any)["instances"].([]any)[0].(map[string]any)
				attrs := inst["attributes"].(map[string]any)
				typed := func(v any, keys ...string) any {
					o, _ := v.(map[string]any)
					out := map[string]any{}
					for _, k := range keys {
						out[k] = o[k]
					}
					return out
				}
				if version == 3 {
					// Kept by an apply that used it, as version 3 did.
					attrs["only_nodes"] = []any{"n1"}
				}
				var nodes, records []any
				for _, n := range attrs["nodes"].(map[string]any)["value"].([]any) {
					nodes = append(nodes, typed(n, "name", "system", "host", "host_key", "user", "private_key_file", "ssh_opts"))
					// Versions 0 to 2: the records in a list, in node order,
					// each holding its node's name.
					name := n.(map[string]any)["name"].(string)
					rec := attrs["status"].(map[string]any)[name].(map[string]any)
					delete(rec, "boot_system") // added in version 5
					if version < 3 {
						rec["name"] = name
					}
					records = append(records, rec)
				}
				if version < 3 {
					attrs["status"] = records
				}
				for _, rec := range records {
					rec := rec.(map[string]any)
					if rec["observed_generation"] == nil {
						t.Fatalf("a node record without observed_generation: %v", rec)
					}
					if version >= 2 {
						rec["observed_generation"] = 7
						continue
					}
					// Versions 0 and 1: each node condition held the
					// generation (here 7, which no apply of this test
					// writes), the record none.
					delete(rec, "observed_generation")
					for _, c := range rec["conditions"].([]any) {
						c.(map[string]any)["observed_generation"] = 7
					}
				}
				if version == 0 {
					verdict := typed(attrs["verdict"].(map[string]any)["value"], "confirm_timeout", "settle_timeout", "allow_failed_units", "allow_reboot_required", "http", "tcp", "command")
					verdict.(map[string]any)["allow_reboot_required"] = false
					attrs["nodes"], attrs["verdict"], attrs["defaults"] = nodes, verdict, nil
				}
				inst["schema_version"] = version
				b, err := json.MarshalIndent(state, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(s.Dir, "terraform.tfstate"), b, 0o600); err != nil {
					t.Fatal(err)
				}
				s.WantNoChanges()
				s.Run("apply", "-auto-approve", "-input=false")
				v := s.Values("fleet_ssh_deployment.prod")
				if fmt.Sprint(v["actions"]) != "map[n1:switch n2:switch]" || fmt.Sprint(v["generation"]) != "1" {
					t.Errorf("actions after the upgrade: %v, generation %v", v["actions"], v["generation"])
				}
				for _, name := range []string{"n1", "n2"} {
					rec := nodeRecordOf(t, v, name)
					if rec["boot_system"] != sys {
						t.Errorf("%s's record after the upgrade boots %v, want %s", name, rec["boot_system"], sys)
					}
					if fmt.Sprint(rec["observed_generation"]) != "7" || rec["host"] != "127.0.0.1" || rec["phase"] != "Succeeded" {
						t.Errorf("%s's record after the upgrade: observed_generation %v (want the 7 it held), host %v, phase %v", name, rec["observed_generation"], rec["host"], rec["phase"])
					}
					if _, has := rec["conditions"].([]any)[0].(map[string]any)["observed_generation"]; has {
						t.Errorf("a node condition still holds a generation: %v", rec["conditions"])
					}
					if _, has := rec["name"]; has {
						t.Errorf("%s's record still holds its name: %v", name, rec)
					}
				}
			})
		}
	}
}

// A node health policy's state written by schema version 0, whose maps
// were typed (every key present, null when unset), is upgraded: the same
// configuration plans no change.
func TestNodeHealthStateUpgradesFromVersion0(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for _, d := range []string{"blobs", "instances", "uploads"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(cloudPolicy(root, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")

			var state map[string]any
			if err := json.Unmarshal(s.State(), &state); err != nil {
				t.Fatal(err)
			}
			inst := state["resources"].([]any)[0].(map[string]any)["instances"].([]any)[0].(map[string]any)
			attrs := inst["attributes"].(map[string]any)
			typed := func(name string, keys ...string) {
				out := map[string]any{}
				for k, v := range attrs[name].(map[string]any)["value"].(map[string]any) {
					o, _ := v.(map[string]any)
					full := map[string]any{}
					for _, key := range keys {
						full[key] = o[key]
					}
					out[k] = full
				}
				attrs[name] = out
			}
			typed("checks", "path", "command", "tcp", "systemd_unit", "http", "description", "severity")
			typed("object_types", "checks")
			typed("roles", "hosts", "description")
			typed("nodes", "roles", "local", "connection")
			inst["schema_version"] = 0
			b, err := json.MarshalIndent(state, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.Dir, "terraform.tfstate"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			s.WantNoChanges()
		})
	}
}

// A refresh that finds a host settling a run on its own (issue 37's
// trial: its watchdog not finished with an interrupted apply's run) warns
// so, and claims no system verified there (so that a node whose last
// apply failed is switched, which waits for the host's deploy lock,
// rather than taken for converged); once the host has settled, what it
// verified is read again and the plan is empty. Through one CLI: the
// provider's reading of a host.
func TestDeploymentRefreshSeesSettlingHost(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			s.WantNoChanges()

			// A run's watchdog waits for its decision, alive: it holds
			// the guard.
			kill := tg.SettleRun(t)
			out, errOut := s.Run("apply", "-refresh-only", "-auto-approve", "-input=false", "-no-color")
			if flat := strings.Join(strings.Fields(out+errOut), " "); !strings.Contains(flat, "Warning: Node n1 is settling") {
				t.Errorf("a refresh while the host settles does not warn:\n%s\n%s", out, errOut)
			}
			if rec := nodeRecordOf(t, s.Values("fleet_ssh_deployment.prod"), "n1"); rec["verified_system"] != "" || rec["current_system"] != sys {
				t.Errorf("while the host settles: verified_system %v, current_system %v; want none verified, %s current", rec["verified_system"], rec["current_system"], sys)
			}
			kill()
			s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
			if rec := nodeRecordOf(t, s.Values("fleet_ssh_deployment.prod"), "n1"); rec["verified_system"] != sys {
				t.Errorf("once the host has settled: verified_system %v, want %s", rec["verified_system"], sys)
			}
			s.WantNoChanges()
		})
	}
}
