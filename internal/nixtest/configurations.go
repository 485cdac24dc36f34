package nixtest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mathrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
)

// Configuration is one NixOS-like configuration of a Repository: what its
// system is, and what goes wrong with it on purpose.
type Configuration struct {
	// System is its system, named nixos-system-<configuration name>.
	System SystemSpec
	// EvalError, when set, is what evaluating the configuration throws.
	EvalError string
	// EvalExpression, when set, is a Nix expression its toplevel is
	// instead, for an evaluation error of another kind (1 + "a").
	EvalExpression string
	// BuildFails makes its system's builder fail (exit 1, saying so).
	BuildFails bool
	// BuildDelay makes its system's builder sleep this long first.
	BuildDelay time.Duration
	// Revision changes the system (its store path) and nothing else: a
	// configuration edited.
	Revision int
	// Cost, when above zero, is the length of a list its evaluation
	// makes, sums and keeps (the configuration holds it): a stand-in for
	// what a real NixOS configuration costs and holds. On this machine
	// 400 000 cost about 0.2 s and 30 MiB.
	Cost int
}

// Repository is an infrastructure repository's NixOS configurations, as
// operators keep them, with no nixpkgs: a flake without inputs
// (flake.nix, nixosConfigurations.<name>) and the same as a plain Nix
// file (hosts.nix, whose nixosConfigurations attribute holds them), each
// configuration an attribute set with config.system.build.toplevel, made
// by the same expression as System's systems.
type Repository struct {
	Dir            string
	Configurations map[string]Configuration
	// SharedImport, when above zero, is the number of additions of a
	// shared import every configuration uses, evaluated once per Nix
	// process: a stand-in for nixpkgs.
	SharedImport int
	// SharedError, when set, is what evaluating the shared import throws:
	// a broken module every configuration imports.
	SharedError string
	// Nonce is in every system, so that no two repositories share a store
	// path; the first Write sets it when empty, and later ones keep it.
	Nonce string
}

// Write writes the repository's files into Dir (made if missing).
func (r *Repository) Write(tb TB) {
	tb.Helper()
	requireNix(tb)
	if r.Nonce == "" {
		b := make([]byte, 5)
		if _, err := rand.Read(b); err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
		r.Nonce = hex.EncodeToString(b)
	}
	for _, d := range []string{r.Dir, filepath.Join(r.Dir, "systems")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
	}
	files := map[string]string{"system.nix": systemFunction, "shared.nix": sharedImport(r.SharedImport)}
	if r.SharedError != "" {
		files["shared.nix"] = fmt.Sprintf("throw %s\n", nixos.Literal(r.SharedError))
	}
	var entries []string
	for _, name := range sortedKeys(r.Configurations) {
		c := r.Configurations[name]
		spec := c.System
		if err := spec.check(); err != nil {
			tb.Fatalf("nixtest: configuration %s: %v", name, err)
		}
		sys := systemJSONOf("nixos-system-"+name, spec)
		text, err := json.MarshalIndent(sys, "", " ")
		if err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
		files["systems/"+name+".json"] = string(text) + "\n"
		var prelude []string
		if c.BuildDelay > 0 {
			prelude = append(prelude, "/bin/sleep "+seconds(c.BuildDelay))
		}
		if c.BuildFails {
			prelude = append(prelude, "echo 'nixtest: this system fails to build, on purpose' >&2; exit 1")
		}
		value := fmt.Sprintf("mk %s %d %s %d", nixos.Literal(name), c.Revision, nixos.Literal(strings.Join(prelude, "; ")), c.Cost)
		switch {
		case c.EvalError != "":
			value = fmt.Sprintf("{ config.system.build.toplevel = throw %q; }", c.EvalError)
		case c.EvalExpression != "":
			value = fmt.Sprintf("{ config.system.build.toplevel = %s; }", c.EvalExpression)
		}
		entries = append(entries, fmt.Sprintf("    %s = %s;", attrName(name), value))
	}
	configs := fmt.Sprintf(`{ system }:
let
  shared = import ./shared.nix;
  mk = name: revision: prelude: cost: rec {
    kept = builtins.genList (x: x) cost;
    config.system.build.toplevel = import ./system.nix {
      inherit system;
      spec = builtins.fromJSON (builtins.readFile (./systems + "/${name}.json"));
      prelude = "# shared ${toString shared}, revision ${toString revision}, %s\n"
        + (if cost > 0 then "# cost ${toString (builtins.foldl' builtins.add 0 kept)}\n" else "") + prelude;
    };
  };
in {
%s
}
`, r.Nonce, strings.Join(entries, "\n"))
	files["configurations.nix"] = configs
	files["flake.nix"] = fmt.Sprintf(`{
  description = "NixOS-like configurations for fleet's tests";
  outputs = { self }: {
    nixosConfigurations = import ./configurations.nix { system = %q; };
  };
}
`, Platform(tb))
	files["hosts.nix"] = fmt.Sprintf("{\n  nixosConfigurations = import ./configurations.nix { system = %q; };\n}\n", Platform(tb))
	for rel, text := range files {
		if err := os.WriteFile(filepath.Join(r.Dir, rel), []byte(text), 0o644); err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
	}
}

// OwnBuildDelay is a build delay of d and a random fraction of a second:
// the builder's sleep of a test that looks for it among the machine's
// processes (BuilderSleeps) is no other test's.
func OwnBuildDelay(d time.Duration) time.Duration {
	return d + time.Duration(mathrand.Int64N(int64(time.Second)))
}

// BuilderSleeps reports whether the sleep of a builder whose BuildDelay
// is d runs on this machine.
func BuilderSleeps(d time.Duration) bool {
	want := "/bin/sleep\x00" + seconds(d) + "\x00"
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		if b, err := os.ReadFile(f); err == nil && string(b) == want {
			return true
		}
	}
	return false
}

// seconds is d as sleep(1) takes it.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// sharedImport is a Nix file whose value costs loops additions to
// evaluate.
func sharedImport(loops int) string {
	return fmt.Sprintf("builtins.foldl' (a: b: a + b) 0 (builtins.genList (x: x) %d)\n", max(loops, 0))
}

// attrName is name as a Nix attribute name.
func attrName(name string) string {
	if storeNamePattern.MatchString(name) && !strings.ContainsAny(name, ".+?=") && (name[0] < '0' || name[0] > '9') {
		return name
	}
	return nixos.Literal(name)
}

var (
	platformOnce sync.Once
	platform     string
	platformErr  error
)

// Platform is this machine's Nix platform ("x86_64-linux"): a flake's
// evaluation is pure and cannot ask for it.
func Platform(tb TB) string {
	tb.Helper()
	platformOnce.Do(func() {
		cmd := exec.Command("nix-instantiate", "--eval", "--expr", "builtins.currentSystem")
		cmd.Env = DeployerEnv()
		out, err := cmd.Output()
		platform, platformErr = strings.Trim(strings.TrimSpace(string(out)), `"`), err
	})
	if platformErr != nil || platform == "" {
		tb.Fatalf("nixtest: nix-instantiate --eval builtins.currentSystem: %v (%q)", platformErr, platform)
	}
	return platform
}

// systemJSONOf is spec as systemFunction reads it, its toplevel named
// name.
func systemJSONOf(name string, spec SystemSpec) systemJSON {
	in := systemJSON{
		Name:     name,
		Switch:   spec.Behaviour.script(),
		Units:    []unitJSON{},
		Packages: []packageJSON{},
		Kernel:   spec.kernel(),
		Initrd:   spec.initrd(),
	}
	for _, u := range sortedKeys(spec.Units) {
		in.Units = append(in.Units, unitJSON{Name: u, StoreName: UnitStoreName(u), Text: spec.Units[u]})
	}
	for _, p := range sortedKeys(spec.Packages) {
		pj := packageJSON{Name: p, Size: spec.Packages[p]}
		if p == spec.FailingPackage {
			pj.Fails = FailingPackageLine + " " + p
		}
		in.Packages = append(in.Packages, pj)
	}
	for _, tool := range systemTools {
		target := stateLink + "/bin/" + tool
		if !slices.Contains(standIns, tool) {
			target = "/usr/bin/" + tool
		}
		in.Tools = append(in.Tools, toolJSON{Name: tool, Target: target})
	}
	return in
}
