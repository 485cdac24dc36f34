package nixtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// SystemSpec describes a system closure whose parts are store paths of
// their own, as a NixOS system's are: units, packages, a kernel and an
// initrd that two systems share when they are the same and do not share
// when they differ.
type SystemSpec struct {
	// Behaviour is how bin/switch-to-configuration behaves, as for Closure.
	Behaviour Behaviour
	// Units maps a unit name ("nginx.service") to its unit file's text.
	Units map[string]string
	// Packages maps a package's name and version ("nginx-1.26.2") to the
	// size in bytes of its content.
	Packages map[string]int
	// FailingPackage, when set, is a package of Packages whose builder
	// fails: it prints FailingPackageLine and the name, then exits 1, as a
	// dependency of a real system does far more often than the system.
	FailingPackage string
	// Kernel is the version of the system's kernel ("6.6.1"); empty means
	// "6.6.0".
	Kernel string
	// Initrd is the version of the system's initrd, which changes with it
	// while the kernel stays ("2"); empty means "1".
	Initrd string
}

// storeNamePattern is what Nix allows in a store path's name.
var storeNamePattern = regexp.MustCompile(`^[A-Za-z0-9+_?=-][A-Za-z0-9+._?=-]*$`)

// checkStoreName reports a name that cannot be (part of) a store path's
// name.
func checkStoreName(what, name string) error {
	// Nix allows 211 characters; "unit-" and the like come in front.
	if !storeNamePattern.MatchString(name) || len(name) > 200 {
		return fmt.Errorf("%s %q: want letters, digits and + - . _ ? = only, not starting with a dot, at most 200 of them", what, name)
	}
	return nil
}

// check reports a SystemSpec that System cannot build.
func (s SystemSpec) check() error {
	if err := s.Behaviour.check(); err != nil {
		return err
	}
	for u := range s.Units {
		if !unitPattern.MatchString(u) || u == "." || u == ".." || len(u) > 200 {
			return fmt.Errorf("unit %q: want a unit name such as nginx.service", u)
		}
	}
	for p, size := range s.Packages {
		if err := checkStoreName("package", p); err != nil {
			return err
		}
		if size < 0 {
			return fmt.Errorf("package %s of %d bytes: want a size of 0 or more", p, size)
		}
	}
	if _, ok := s.Packages[s.FailingPackage]; s.FailingPackage != "" && !ok {
		return fmt.Errorf("failing package %s is not one of the packages", s.FailingPackage)
	}
	if err := checkStoreName("kernel version", s.kernel()); err != nil {
		return err
	}
	return checkStoreName("initrd version", s.initrd())
}

func (s SystemSpec) kernel() string {
	if s.Kernel == "" {
		return "6.6.0"
	}
	return s.Kernel
}

func (s SystemSpec) initrd() string {
	if s.Initrd == "" {
		return "1"
	}
	return s.Initrd
}

// UnitStoreName is the name of the store path that holds the unit file of
// unit: "unit-" and the unit's name with "@" and ":" made "-", as NixOS
// names it ("unit-getty-.service" for getty@.service).
func UnitStoreName(unit string) string {
	return "unit-" + strings.NewReplacer("@", "-", ":", "-").Replace(unit)
}

// systemFunction is a Nix function from a system spec (a systemJSON) to
// its toplevel derivation: System builds it, and the configurations of a
// Repository are made of it. It uses builtins.derivation alone (no
// nixpkgs): every builder is /bin/sh with absolute paths to the host's
// tools, and every text reaches its file through an attribute, an
// environment variable of the builder, which writes it with printf '%s'.
// The parts depend on nothing but what they hold, so the same part of two
// systems is the same store path. The toplevel's symlinks hold the parts'
// store paths, so Nix's scan of its output finds them as its references.
// Its arguments: spec, system (the platform), and in the toplevel's
// builder, before anything, prelude (a shell command: a delay, a failure).
const systemFunction = `{ spec, system, prelude ? "" }:
let
  build = name: script: attrs: derivation ({
    inherit name system;
    builder = "/bin/sh";
    args = [ "-ec" script ];
  } // attrs);
  unit = u: build u.storeName ''
    /bin/mkdir "$out"
    printf '%s' "$text" > "$out/$unit"
  '' { unit = u.name; text = u.text; };
  package = p: if p ? fails then build p.name ''
    printf '%s\n' "compiling $name" "$fails"
    exit 1
  '' { inherit (p) fails; } else build p.name ''
    /bin/mkdir "$out"
    /usr/bin/head -c "$size" /dev/zero > "$out/data"
  '' { size = toString p.size; };
  kernel = build "linux-${spec.kernel}" ''
    /bin/mkdir "$out"
    printf 'nixtest kernel: linux %s\n' "$version" > "$out/bzImage"
  '' { version = spec.kernel; };
  initrd = build "initrd-linux-${spec.kernel}" ''
    /bin/mkdir "$out"
    printf 'nixtest initrd %s for linux %s\n' "$version" "$kernel" > "$out/initrd"
  '' { version = spec.initrd; kernel = spec.kernel; };
  links =
    map (u: "${unit u}/${u.name} etc/systemd/system/${u.name}") spec.units
    ++ map (p: "${package p} sw/share/${p.name}") spec.packages
    ++ [ "${kernel}/bzImage kernel" "${kernel} kernel-modules" "${initrd}/initrd initrd" ]
    ++ map (t: "${t.target} sw/bin/${t.name}") spec.tools;
in build spec.name ''
  eval "$prelude"
  /bin/mkdir -p "$out/bin" "$out/sw/bin" "$out/sw/share" "$out/etc/systemd/system"
  printf '%s' "$switch" > "$out/bin/switch-to-configuration"
  /bin/chmod 755 "$out/bin/switch-to-configuration"
  printf '%s\n' "$name" > "$out/nixos-version"
  set -f
  set -- $links
  while [ $# -gt 0 ]; do
    /bin/ln -s "$1" "$out/$2"
    shift 2
  done
'' {
  switch = spec.switch;
  links = builtins.concatStringsSep " " links;
  inherit prelude;
}
`

// systemExpr is the Nix expression System builds: systemFunction (in the
// file systemFile) of the spec in specFile.
const systemExpr = `{ specFile, systemFile }: import systemFile { spec = builtins.fromJSON (builtins.readFile specFile); system = builtins.currentSystem; }`

// systemJSON is what systemExpr reads. No name or target in it holds a
// space, which separates them in the toplevel's list of links.
type systemJSON struct {
	Name     string        `json:"name"`
	Switch   string        `json:"switch"`
	Units    []unitJSON    `json:"units"`
	Packages []packageJSON `json:"packages"`
	Kernel   string        `json:"kernel"`
	Initrd   string        `json:"initrd"`
	Tools    []toolJSON    `json:"tools"`
}

type unitJSON struct {
	Name      string `json:"name"`
	StoreName string `json:"storeName"`
	Text      string `json:"text"`
}

type packageJSON struct {
	Name  string `json:"name"`
	Size  int    `json:"size"`
	Fails string `json:"fails,omitempty"`
}

// FailingPackageLine is the last line a SystemSpec's FailingPackage's
// builder prints, before its name.
const FailingPackageLine = "error: nixtest: this package does not build, on purpose:"

type toolJSON struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// System builds the system spec describes in the deployer's Nix store (the
// host's /nix) with nix-build and returns its toplevel store path, named
// nixos-system-nixtest-<kind>-<random> as Closure names it: a directory
// holding what a Closure holds (bin/switch-to-configuration behaving as
// spec.Behaviour says, nixos-version, sw/bin) and links to the system's
// parts, each a store path of its own that the toplevel references:
//
//   - etc/systemd/system/<unit> links to <unit>'s file in the store path
//     UnitStoreName(unit) ("unit-nginx.service"), which holds that file
//     alone;
//   - sw/share/<package> links to the store path named <package>
//     ("nginx-1.26.2"), a directory holding the file data of the given size
//     (zeros);
//   - kernel links to bzImage in linux-<Kernel>, kernel-modules to that
//     store path itself, and initrd to the file initrd in
//     initrd-linux-<Kernel>, whose content depends on Initrd and Kernel.
//
// Each call makes a distinct toplevel, but a part is the same store path
// in every system that has it: the same unit text under the same name, the
// same package name and size, the same kernel, the same initrd. The paths
// stay in the host's store (no test holds a GC root for them).
func System(tb TB, spec SystemSpec) string {
	tb.Helper()
	if err := spec.check(); err != nil {
		tb.Fatalf("nixtest: System: %v", err)
	}
	requireNix(tb)
	if _, err := exec.LookPath("nix-build"); err != nil {
		tb.Fatalf("nixtest: nix-build not found: install Debian package nix-bin")
	}
	nonce := make([]byte, 5)
	if _, err := rand.Read(nonce); err != nil {
		tb.Fatalf("nixtest: random name: %v", err)
	}
	// Empty lists, not null, for a spec without units or packages.
	in := systemJSONOf("nixos-system-nixtest-"+spec.Behaviour.Kind.slug()+"-"+hex.EncodeToString(nonce), spec)
	text, err := json.Marshal(in)
	if err != nil {
		tb.Fatalf("nixtest: System: %v", err)
	}
	dir := tb.TempDir()
	specFile, systemFile := filepath.Join(dir, "system.json"), filepath.Join(dir, "system.nix")
	if err := os.WriteFile(specFile, text, 0o644); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	if err := os.WriteFile(systemFile, []byte(systemFunction), 0o644); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}

	cmd := exec.Command("nix-build", "--no-out-link", "--argstr", "specFile", specFile, "--argstr", "systemFile", systemFile, "-E", systemExpr)
	cmd.Env = DeployerEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("nixtest: System: nix-build %s: %v\n%s", in.Name, err, stderr.String())
	}
	path := strings.TrimSpace(string(out))
	if !strings.HasPrefix(path, "/nix/store/") || !strings.HasSuffix(path, "-"+in.Name) || strings.Contains(path, "\n") {
		tb.Fatalf("nixtest: System: nix-build printed %q, want one store path named %s\n%s", out, in.Name, stderr.String())
	}
	return path
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
