package provider_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// configuration is a NixOS-like configuration whose system switches
// cleanly.
func configuration() nixtest.Configuration {
	return nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}}
}

// repository writes a repository of NixOS-like configurations (flake.nix
// and hosts.nix) in a directory of its own.
func repository(t *testing.T, configs map[string]nixtest.Configuration) *nixtest.Repository {
	t.Helper()
	r := &nixtest.Repository{Dir: t.TempDir(), Configurations: configs}
	r.Write(t)
	return r
}

// nixEval is what the nix command line itself makes of an expression of
// the repository's flake: the tests' oracle, independent of the provider.
func nixEval(t *testing.T, r *nixtest.Repository, attribute string) string {
	t.Helper()
	cmd := exec.Command("nix", "--extra-experimental-features", "nix-command flakes", "eval", "--raw", "path:"+r.Dir+"#"+attribute)
	cmd.Env = nixtest.DeployerEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nix eval %s: %v", attribute, err)
	}
	return string(out)
}

// systemOf is the system (store path, derivation) the nix command line
// evaluates configuration name of r to.
func systemOf(t *testing.T, r *nixtest.Repository, name string) (system, derivation string) {
	t.Helper()
	at := "nixosConfigurations." + name + ".config.system.build.toplevel"
	return nixEval(t, r, at+".outPath"), nixEval(t, r, at+".drvPath")
}

// wrapped matches text as the CLIs print it: any space may be a line
// break, with OpenTofu's and Terraform's margin.
func wrapped(text string) *regexp.Regexp {
	return regexp.MustCompile("(?s)" + strings.ReplaceAll(regexp.QuoteMeta(text), " ", `[\s│]+`))
}

func entry(system, derivation string, built bool) knownvalue.Check {
	return knownvalue.ObjectExact(map[string]knownvalue.Check{
		"system": knownvalue.StringExact(system), "derivation": knownvalue.StringExact(derivation),
		"built": knownvalue.Bool(built), "error": knownvalue.Null(),
	})
}

func stringsExact(values ...string) knownvalue.Check {
	checks := make([]knownvalue.Check, len(values))
	for i, v := range values {
		checks[i] = knownvalue.StringExact(v)
	}
	return knownvalue.ListExact(checks)
}

// A flake of several configurations, all of them, and the same
// repository's hosts.nix, some of them: each configuration's system and
// derivation are those the nix command line evaluates it to, nothing is
// built, names are sorted when not given and as given otherwise (an
// empty list reads none), and the outputs feed a for expression of a
// terraform_data and an output. The
// test framework's plan after the apply proves the plan empty.
func TestAccNixOSSystemsFromAFlakeAndAFile(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		r := repository(t, map[string]nixtest.Configuration{"web1": configuration(), "web2": configuration(), "db1": configuration()})
		want := map[string][2]string{}
		for _, name := range []string{"web1", "web2", "db1"} {
			s, d := systemOf(t, r, name)
			want[name] = [2]string{s, d}
		}
		config := fmt.Sprintf(`
data "fleet_nixos_systems" "flake" {
  flake = "path:%[1]s"
}

data "fleet_nixos_systems" "file" {
  file      = "%[1]s/hosts.nix"
  attribute = "nixosConfigurations"
  names     = ["web2", "db1"]
}

resource "terraform_data" "nodes" {
  input = [for name in data.fleet_nixos_systems.flake.names : {
    name   = name
    system = data.fleet_nixos_systems.flake.systems[name].system
  }]
}

data "fleet_nixos_systems" "none" {
  flake = "path:%[1]s"
  names = []
}

output "file_systems" {
  value = { for name, s in data.fleet_nixos_systems.file.systems : name => s.system }
}
`, r.Dir)
		node := func(name string) knownvalue.Check {
			return knownvalue.ObjectExact(map[string]knownvalue.Check{"name": knownvalue.StringExact(name), "system": knownvalue.StringExact(want[name][0])})
		}
		inStore := func(attr string) resource.TestCheckFunc {
			return resource.TestCheckResourceAttrWith("data.fleet_nixos_systems.flake", attr, func(v string) error {
				_, err := os.Stat(v)
				return err
			})
		}
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(),
			Steps: []resource.TestStep{{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.fleet_nixos_systems.flake", tfjsonpath.New("names"), stringsExact("db1", "web1", "web2")),
					statecheck.ExpectKnownValue("data.fleet_nixos_systems.flake", tfjsonpath.New("systems"), knownvalue.MapExact(map[string]knownvalue.Check{
						"db1":  entry(want["db1"][0], want["db1"][1], false),
						"web1": entry(want["web1"][0], want["web1"][1], false),
						"web2": entry(want["web2"][0], want["web2"][1], false),
					})),
					statecheck.ExpectKnownValue("data.fleet_nixos_systems.file", tfjsonpath.New("names"), stringsExact("web2", "db1")),
					statecheck.ExpectKnownValue("data.fleet_nixos_systems.file", tfjsonpath.New("systems"), knownvalue.MapExact(map[string]knownvalue.Check{
						"db1":  entry(want["db1"][0], want["db1"][1], false),
						"web2": entry(want["web2"][0], want["web2"][1], false),
					})),
					statecheck.ExpectKnownValue("data.fleet_nixos_systems.none", tfjsonpath.New("systems"), knownvalue.MapExact(map[string]knownvalue.Check{})),
					statecheck.ExpectKnownValue("data.fleet_nixos_systems.none", tfjsonpath.New("names"), knownvalue.ListExact([]knownvalue.Check{})),
					statecheck.ExpectKnownValue("terraform_data.nodes", tfjsonpath.New("output"), knownvalue.ListExact([]knownvalue.Check{node("db1"), node("web1"), node("web2")})),
					statecheck.ExpectKnownOutputValue("file_systems", knownvalue.MapExact(map[string]knownvalue.Check{
						"db1": knownvalue.StringExact(want["db1"][0]), "web2": knownvalue.StringExact(want["web2"][0]),
					})),
				},
				// The derivations were instantiated: they are in the store.
				Check: resource.ComposeTestCheckFunc(inStore("systems.web1.derivation"), inStore("systems.db1.derivation")),
			}},
		}
	})
}

// Without keep_going, a configuration that does not evaluate fails the
// read, each one named with the head of Nix's error (its error line, and
// the position when Nix gives one); a source that is not there, and a
// name the source lacks, fail it even with keep_going, the latter naming
// those the source has, from a flake and from a file.
func TestAccNixOSSystemsNameTheFailingConfiguration(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		configs := map[string]nixtest.Configuration{"web1": configuration(), "web2": configuration(),
			"webc": {EvalError: "webc's module is broken on purpose"}, "webe": {EvalExpression: `1 + "a"`}}
		r := repository(t, configs)
		flake := fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  flake = \"path:%s\"\n%%s}\n", r.Dir)
		file := fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  file      = \"%s/hosts.nix\"\n  attribute = \"nixosConfigurations\"\n%%s}\n", r.Dir)
		steps := []resource.TestStep{
			{Config: fmt.Sprintf(flake, ""), ExpectError: wrapped("NixOS configuration webc does not evaluate")},
			{Config: fmt.Sprintf(flake, ""), ExpectError: wrapped("Configuration webc of flake path:" + r.Dir + "#nixosConfigurations: error: webc's module is broken on purpose")},
			{Config: fmt.Sprintf(flake, ""), ExpectError: regexp.MustCompile(`(?s)NixOS configuration webe does not evaluate.*error: cannot add a string to an integer.*at[\s│]+` + regexp.QuoteMeta(r.Dir) + `/configurations\.nix:\d+:\d+`)},
			{Config: fmt.Sprintf(flake, ""), ExpectError: wrapped("keep_going = true")},
			{Config: fmt.Sprintf(file, "  names = [\"webc\"]\n"), ExpectError: wrapped("NixOS configuration webc does not evaluate")},
		}
		// A source that is not there is its own error, even with
		// keep_going: no configuration is blamed for it.
		absent := fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  file       = \"%s/absent.nix\"\n  names      = [\"web1\"]\n  keep_going = true\n}\n", r.Dir)
		steps = append(steps, resource.TestStep{Config: absent,
			ExpectError: wrapped("NixOS configurations not read")}, resource.TestStep{Config: absent,
			ExpectError: wrapped("file " + r.Dir + "/absent.nix: error: getting status of '" + r.Dir + "/absent.nix': No such file or directory")})
		// A source Nix cannot parse is pointed at, not looked for elsewhere.
		broken := t.TempDir()
		if err := os.WriteFile(filepath.Join(broken, "flake.nix"), []byte("{ outputs = { self }: {\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, resource.TestStep{Config: fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  flake = \"path:%s\"\n}\n", broken),
			ExpectError: regexp.MustCompile(`(?s)error:[\s│]+syntax[\s│]+error.*Fix[\s│]+what[\s│]+Nix[\s│]+names[\s│]+above`)},
			resource.TestStep{Config: fmt.Sprintf(flake, "  names = [\"web1\", \"db9\", \"db8\"]\n"),
				ExpectError: wrapped(`has no configurations "db9", "db8"; it has "web1", "web2", "webc", "webe". Remove them from names, or add the configurations.`)})
		for _, source := range []string{flake, file} {
			steps = append(steps,
				resource.TestStep{Config: fmt.Sprintf(source, "  names = [\"web1\", \"db9\"]\n"), ExpectError: wrapped(`No such NixOS configuration`)},
				resource.TestStep{Config: fmt.Sprintf(source, "  names      = [\"web1\", \"db9\"]\n  keep_going = true\n"),
					ExpectError: wrapped(`has no configuration "db9"; it has "web1", "web2", "webc", "webe". Remove it from names, or add the configuration.`)},
			)
		}
		return resource.TestCase{ProtoV6ProviderFactories: factories(), Steps: steps}
	})
}

// Faults no evaluation is needed to see fail validate, naming the
// attribute and the fix: no source, two sources, an attribute given to a
// flake, a name given twice or empty.
func TestAccNixOSSystemsStaticFaults(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		cases := []struct{ body, want string }{
			{``, `No NixOS configurations named`},
			{``, `set flake to a flake reference`},
			{`flake = "path:/srv/infra"` + "\n" + `file = "/srv/infra/hosts.nix"`, `Both flake and file are set`},
			{`flake = "path:/srv/infra"` + "\n" + `attribute = "hosts"`, `remove attribute and set flake = "path:/srv/infra#hosts"`},
			{`flake = "path:/srv/infra#nixosConfigurations"` + "\n" + `attribute = "hosts"`, `set flake = "path:/srv/infra#hosts"`},
			{`flake = "path:/srv/infra"` + "\n" + `names = ["web1", "web1"]`, `This attribute contains duplicate values of: "web1"`},
			{`flake = ""`, `Attribute flake string length must be at least 1`},
		}
		var steps []resource.TestStep
		for _, c := range cases {
			steps = append(steps, resource.TestStep{
				Config: "data \"fleet_nixos_systems\" \"x\" {\n" + c.body + "\n}\n", PlanOnly: true, ExpectError: wrapped(c.want),
			})
		}
		return resource.TestCase{ProtoV6ProviderFactories: factories(), Steps: steps}
	})
}

// build = true builds the systems during the read, in one Nix
// invocation: built is true after it and the systems are in the store;
// a configuration that does not build fails the read, named with Nix's
// words, while the others are still built.
func TestAccNixOSSystemsBuild(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		good := repository(t, map[string]nixtest.Configuration{"web1": configuration(), "web2": configuration()})
		broken := configuration()
		broken.BuildFails = true
		bad := repository(t, map[string]nixtest.Configuration{"web3": configuration(), "broken": broken})
		web1, web1drv := systemOf(t, good, "web1")
		web2, web2drv := systemOf(t, good, "web2")
		web3, _ := systemOf(t, bad, "web3")
		built := func(paths ...string) resource.TestCheckFunc {
			return func(*terraform.State) error {
				for _, p := range paths {
					if _, err := os.Stat(p); err != nil {
						return fmt.Errorf("not built: %w", err)
					}
				}
				return nil
			}
		}
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(),
			Steps: []resource.TestStep{{
				Config: fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  flake = \"path:%s\"\n  build = true\n}\n", good.Dir),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.fleet_nixos_systems.all", tfjsonpath.New("systems"), knownvalue.MapExact(map[string]knownvalue.Check{
						"web1": entry(web1, web1drv, true), "web2": entry(web2, web2drv, true),
					})),
				},
				Check: built(web1, web2),
			}, {
				Config:      fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  flake = \"path:%s\"\n  build = true\n}\n", bad.Dir),
				ExpectError: regexp.MustCompile(`(?s)NixOS configuration broken does not build.*Configuration broken of flake.*nixos-system-broken\.drv.*fails[\s│]+to[\s│]+build,[\s│]+on[\s│]+purpose`),
			}, {
				// The failed read still built the other configuration.
				Config: fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  flake = \"path:%s\"\n  names = [\"web3\"]\n}\n", bad.Dir),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.fleet_nixos_systems.all", tfjsonpath.New("systems").AtMapKey("web3").AtMapKey("built"), knownvalue.Bool(true)),
				},
				Check: built(web3),
			}},
		}
	})
}

// With keep_going, a configuration that does not evaluate and one that
// does not build are recorded in their entries' error, each with one
// warning in the plan naming it; the others come back (and are built),
// and a for expression over the entries without an error feeds the
// good ones on. A second plan of the unchanged repository is empty.
func TestNixOSSystemsKeepGoing(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			broken := configuration()
			broken.BuildFails = true
			r := repository(t, map[string]nixtest.Configuration{"web1": configuration(), "web2": configuration(), "broken": broken,
				"webc": {EvalError: "webc's module is broken on purpose"}})
			web1, web1drv := systemOf(t, r, "web1")
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(fmt.Sprintf(`
data "fleet_nixos_systems" "all" {
  flake      = "path:%s"
  build      = true
  keep_going = true
}

output "deployable" {
  value = [for name, s in data.fleet_nixos_systems.all.systems : name if s.error == null]
}
`, r.Dir))
			s.Run("init", "-input=false")
			stdout, _ := s.Run("plan", "-json", "-input=false")
			warnings := map[string]int{}
			for _, d := range acctest.Diagnostics(t, stdout) {
				if d.Severity == "error" {
					t.Errorf("plan error: %+v", d)
				}
				if d.Severity == "warning" {
					warnings[d.Summary]++
					if d.Summary == "NixOS configuration webc does not evaluate" && !strings.Contains(d.Detail, "error: webc's module is broken on purpose") {
						t.Errorf("webc's warning does not hold Nix's error: %q", d.Detail)
					}
					if d.Summary == "NixOS configuration broken does not build" && !strings.Contains(d.Detail, "fails to build, on purpose") {
						t.Errorf("broken's warning does not hold Nix's words: %q", d.Detail)
					}
				}
			}
			want := map[string]int{"NixOS configuration webc does not evaluate": 1, "NixOS configuration broken does not build": 1}
			if fmt.Sprint(warnings) != fmt.Sprint(want) {
				t.Errorf("plan warnings %v, want %v", warnings, want)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			values := s.Values("data.fleet_nixos_systems.all")
			systems := values["systems"].(map[string]any)
			entryOf := func(name string) map[string]any { return systems[name].(map[string]any) }
			if e := entryOf("webc"); e["system"] != nil || e["derivation"] != nil || e["built"] != false || !strings.HasPrefix(fmt.Sprint(e["error"]), "error: webc's module is broken on purpose") {
				t.Errorf("webc's entry: %v", e)
			}
			if e := entryOf("broken"); !strings.HasSuffix(fmt.Sprint(e["system"]), "-nixos-system-broken") || e["built"] != false || !strings.Contains(fmt.Sprint(e["error"]), "fails to build, on purpose") {
				t.Errorf("broken's entry: %v", e)
			}
			if e := entryOf("web1"); e["system"] != web1 || e["derivation"] != web1drv || e["built"] != true || e["error"] != nil {
				t.Errorf("web1's entry: %v", e)
			}
			out, _ := s.Run("output", "-json", "deployable")
			if got := strings.Join(strings.Fields(out), ""); got != `["web1","web2"]` {
				t.Errorf("deployable = %s, want web1 and web2", out)
			}
			if names := fmt.Sprint(values["names"]); names != "[broken web1 web2 webc]" {
				t.Errorf("names = %s", names)
			}
			s.WantNoChanges()
		})
	}
}

// takeLog reads the provider's log of a session's last command and
// removes it, so the next command's log is its own.
func takeLog(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	readLine   = regexp.MustCompile(`\[INFO\] +provider\.terraform-provider-fleet: read NixOS configurations: (.*)`)
	nixCommand = regexp.MustCompile(`\[DEBUG\] +provider\.terraform-provider-fleet: running Nix: .*?command="([^"]*)"`)
	durationMS = regexp.MustCompile(`duration_ms=(\d+)`)
)

// read is what the provider's log says of one command's read: its one
// INFO line's fields and duration, and the Nix command lines that
// evaluated.
func read(t *testing.T, log string) (fields string, ms int, evaluations []string) {
	fields, ms, evaluations, _ = readLog(t, log)
	return fields, ms, evaluations
}

// readLog is read, and every command line of a Nix tool the provider ran
// (nix, nix-store, nix-instantiate, nix-copy-closure, …).
func readLog(t *testing.T, log string) (fields string, ms int, evaluations, commands []string) {
	t.Helper()
	lines := readLine.FindAllStringSubmatch(log, -1)
	if len(lines) != 1 {
		t.Fatalf("the provider log holds %d read lines, want 1:\n%s", len(lines), log)
	}
	fields = lines[0][1]
	m := durationMS.FindStringSubmatch(fields)
	if m == nil {
		t.Fatalf("no duration in %q", fields)
	}
	_, _ = fmt.Sscan(m[1], &ms)
	for _, c := range nixCommand.FindAllStringSubmatch(log, -1) {
		commands = append(commands, c[1])
		listing := strings.Contains(c[1], "builtins.attrNames")
		if strings.HasPrefix(c[1], "nix ") && (strings.Contains(c[1], " eval ") && !listing || strings.Contains(c[1], " build ")) {
			evaluations = append(evaluations, c[1])
		}
	}
	return fields, ms, evaluations, commands
}

// Through the built provider, as operators run it: N configurations that
// share an expensive import (a stand-in for nixpkgs, about half a second
// to evaluate) are evaluated by one Nix process per worker, whatever N,
// and built; a second plan
// of the unchanged repository is empty (exit 0, and so is a refresh-only
// plan), evaluates nothing (the evaluation kept for the flake's locked
// content answers) and costs a fraction of the first; an edited
// configuration is evaluated again and the plan shows it. Each read is one INFO line (source, count, duration) and
// each Nix command line is logged at DEBUG; none, the build's included,
// adds a substituter or an option of its own.
func TestNixOSSystemsUnchangedRepositoryIsCheap(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	const n = 12
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			configs := map[string]nixtest.Configuration{}
			for i := range n {
				configs[fmt.Sprintf("host%02d", i)] = configuration()
			}
			r := &nixtest.Repository{Dir: t.TempDir(), Configurations: configs, SharedImport: 1_000_000}
			r.Write(t)
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(fmt.Sprintf(`
data "fleet_nixos_systems" "all" {
  flake   = "path:%s"
  workers = 2
  build   = true
}

resource "terraform_data" "systems" {
  input = { for name, s in data.fleet_nixos_systems.all.systems : name => s.system }
}
`, r.Dir))
			logFile := filepath.Join(t.TempDir(), "provider.log")
			s.Setenv("XDG_STATE_HOME", t.TempDir()) // where the evaluations are kept
			s.Setenv("TF_LOG_PROVIDER", "DEBUG")
			s.Setenv("TF_LOG_PATH", logFile)

			s.Run("apply", "-auto-approve", "-input=false")
			fields, first, evaluations, commands := readLog(t, takeLog(t, logFile))
			if len(evaluations) != 2 {
				t.Errorf("%d Nix processes evaluated %d configurations, want one per worker, 2:\n%s", len(evaluations), n, strings.Join(evaluations, "\n"))
			}
			// Every Nix invocation, the build's nix-store --realise included.
			if !slices.ContainsFunc(commands, func(c string) bool { return strings.HasPrefix(c, "nix-store --realise") }) {
				t.Fatalf("no build among the Nix commands logged:\n%s", strings.Join(commands, "\n"))
			}
			for _, c := range commands {
				if strings.Contains(c, "substitute") || strings.Contains(c, "--option") || strings.Contains(c, "://") {
					t.Errorf("the provider set Nix options of its own: %s", c)
				}
			}
			if !strings.Contains(fields, fmt.Sprintf("count=%d", n)) || !strings.Contains(fields, `source="flake path:`+r.Dir+`#nixosConfigurations"`) {
				t.Errorf("the read's log line does not say the source and count: %s", fields)
			}

			_, stderr, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			if code != 0 {
				t.Errorf("a plan of the unchanged repository exited %d, want 0:\n%s", code, stderr)
			}
			_, second, evaluations := read(t, takeLog(t, logFile))
			t.Logf("%s: %d configurations read in %d ms, again unchanged in %d ms (%.2f×)", cli.Name, n, first, second, float64(second)/float64(first))
			if len(evaluations) != 0 {
				t.Errorf("%d Nix processes evaluated the unchanged repository again, want none:\n%s", len(evaluations), strings.Join(evaluations, "\n"))
			}
			if float64(second) > 0.5*float64(first) {
				t.Errorf("the read of the unchanged repository took %d ms, the first %d ms: want at most half", second, first)
			}

			// The drift job's refresh-only plan of the unchanged fleet is
			// empty too.
			if _, stderr, code := s.ExitCode("plan", "-refresh-only", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
				t.Errorf("plan -refresh-only of the unchanged repository exited %d, want 0:\n%s", code, stderr)
			}
			_, _, _ = read(t, takeLog(t, logFile))

			edited := r.Configurations["host03"]
			edited.Revision++
			r.Configurations["host03"] = edited
			r.Write(t)
			stdout, stderr, code := s.ExitCode("plan", "-detailed-exitcode", "-input=false", "-no-color")
			changed := regexp.MustCompile(`(host\d\d) = "/nix/store/[^"]+" -> "/nix/store/[^"]+"`).FindAllStringSubmatch(stdout, -1)
			if code != 2 || len(changed) != 1 || changed[0][1] != "host03" {
				t.Errorf("a plan after host03 was edited exited %d, want 2 with host03's system changed and only it:\n%s\n%s", code, stdout, stderr)
			}
			_, _, _ = read(t, takeLog(t, logFile))
		})
	}
}

// The Nix the provider runs is the user's, as configured and found: a Nix
// too old or missing fails the read with Nix's version and what to do, and
// the user's NIX_CONFIG governs the build (here max-jobs = 0: Nix's own
// refusal, named by configuration).
func TestNixOSSystemsUsesTheUsersNix(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "nix"), []byte("#!/bin/sh\necho 'nix (Nix) 2.3.16'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	none := t.TempDir()
	r := repository(t, map[string]nixtest.Configuration{"web1": configuration()})
	config := fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  flake = \"path:%s\"\n  build = true\n}\n", r.Dir)
	for _, cli := range acctest.AlternateCLIs(t) {
		cases := []struct {
			name, path, nixConfig string
			want                  []string
		}{
			{"too old", old, nixtest.NixConfig, []string{"Nix cannot evaluate NixOS configurations", "Nix 2.3.16 is too old", "from Nix 2.4"}},
			{"missing", none, nixtest.NixConfig, []string{"Nix cannot evaluate NixOS configurations", "cannot run nix --version", "install Nix 2.4 or newer, or put its nix on PATH"}},
			{"max-jobs = 0", os.Getenv("PATH"), nixtest.NixConfig + "max-jobs = 0\n", []string{"NixOS configuration web1 does not build", "unable to start any build; either increase '--max-jobs'"}},
		}
		for _, c := range cases {
			t.Run(cli.Name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				s := acctest.NewBinarySession(t, cli, binary)
				s.Setenv("PATH", c.path)
				s.Setenv("NIX_CONFIG", c.nixConfig)
				s.WriteConfig(config)
				_, stderr, code := s.ExitCode("plan", "-input=false", "-no-color")
				if code != 1 {
					t.Errorf("plan exited %d, want 1", code)
				}
				for _, w := range c.want {
					if !wrapped(w).MatchString(stderr) {
						t.Errorf("the plan's error does not say %q:\n%s", w, stderr)
					}
				}
			})
		}
	}
}

// Ctrl-C during a plan that builds (build = true) ends the build: the
// plan fails saying the build was interrupted, soon, and no builder runs
// on after it.
func TestNixOSSystemsBuildInterrupted(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			delay := nixtest.OwnBuildDelay(71 * time.Second) // a sleep no other test's builder has
			slow := configuration()
			slow.BuildDelay = delay
			r := repository(t, map[string]nixtest.Configuration{"slow": slow, "web1": configuration()})
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(fmt.Sprintf("data \"fleet_nixos_systems\" \"all\" {\n  flake = \"path:%s\"\n  build = true\n}\n", r.Dir))
			_, stderr, took := s.InterruptWhen(func() bool { return nixtest.BuilderSleeps(delay) }, "plan", "-input=false", "-no-color")
			if took > 10*time.Second {
				t.Errorf("the plan went on for %s after the interrupt", took)
			}
			if !wrapped("NixOS systems not built: interrupted").MatchString(stderr) || !wrapped("before configuration slow's was done").MatchString(stderr) {
				t.Errorf("the plan does not say the build was interrupted:\n%s", stderr)
			}
			deadline := time.Now().Add(5 * time.Second)
			for nixtest.BuilderSleeps(delay) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if nixtest.BuilderSleeps(delay) {
				t.Errorf("the builder runs on after the interrupted plan")
			}
		})
	}
}

// The documented example, applied to a repository laid out as it says (a
// flake in nixos/, a hosts.nix beside the configuration): the hosts'
// systems come out, and the web hosts are built and ready; a second plan
// is empty.
func TestNixOSSystemsExampleApplies(t *testing.T) {
	t.Parallel()
	example, err := os.ReadFile("../../examples/data-sources/fleet_nixos_systems/data-source.tf")
	if err != nil {
		t.Fatal(err)
	}
	// The built provider, as Terraform starts it: in the directory it runs
	// in, which the example's relative paths (path.module is ".") need.
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			s := acctest.NewBinarySession(t, cli, binary)
			hosts := map[string]nixtest.Configuration{"web1": configuration(), "web2": configuration(), "db1": configuration()}
			flake := &nixtest.Repository{Dir: filepath.Join(s.Dir, "nixos"), Configurations: hosts}
			flake.Write(t)
			file := &nixtest.Repository{Dir: s.Dir, Configurations: hosts}
			file.Write(t)
			s.WriteConfig(string(example))
			s.Run("apply", "-auto-approve", "-input=false")
			out, _ := s.Run("output", "-json")
			var outputs map[string]struct{ Value any }
			if err := json.Unmarshal([]byte(out), &outputs); err != nil {
				t.Fatalf("output -json: %v\n%s", err, out)
			}
			systems, _ := outputs["systems"].Value.(map[string]any)
			for _, name := range []string{"db1", "web1", "web2"} {
				if sys, _ := systems[name].(string); !strings.HasSuffix(sys, "-nixos-system-"+name) {
					t.Errorf("systems[%s] = %v", name, systems[name])
				}
			}
			if got := fmt.Sprint(outputs["web_ready"].Value); got != "[web1 web2]" {
				t.Errorf("web_ready = %s, want web1 and web2 built", got)
			}
			if got := fmt.Sprint(outputs["web_failing"].Value); got != "map[]" {
				t.Errorf("web_failing = %s, want none", got)
			}
			s.WantNoChanges()
		})
	}
}
