package nixtest

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nixStore runs nix-store in the deployer's store and returns its output.
func nixStore(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("nix-store", args...)
	cmd.Env = DeployerEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nix-store %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// storeName is a store path's name, without /nix/store/ and its hash.
func storeName(t *testing.T, path string) string {
	t.Helper()
	base, ok := strings.CutPrefix(path, "/nix/store/")
	_, name, found := strings.Cut(base, "-")
	if !ok || !found || strings.Contains(base, "/") {
		t.Fatalf("%q is not a store path", path)
	}
	return name
}

// systemParts checks that the closure of the toplevel top is top and the
// store paths named in names, each referenced by top itself, and returns
// them by name.
func systemParts(t *testing.T, top string, names ...string) map[string]string {
	t.Helper()
	parts := map[string]string{}
	for _, p := range strings.Fields(nixStore(t, "--query", "--requisites", top)) {
		name := storeName(t, p)
		if _, dup := parts[name]; dup {
			t.Fatalf("the closure of %s has two paths named %s", top, name)
		}
		parts[name] = p
	}
	want := append([]string{storeName(t, top)}, names...)
	if got := slices.Sorted(maps.Keys(parts)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("nix-store -qR %s lists %q, want %q", top, got, slices.Sorted(slices.Values(want)))
	}
	if parts[storeName(t, top)] != top {
		t.Fatalf("nix-store -qR %s does not list it", top)
	}
	refs := strings.Fields(nixStore(t, "--query", "--references", top))
	slices.Sort(refs)
	var direct []string
	for _, n := range names {
		direct = append(direct, parts[n])
	}
	slices.Sort(direct)
	if !slices.Equal(refs, direct) {
		t.Errorf("nix-store -q --references %s = %q, want %q", top, refs, direct)
	}
	delete(parts, storeName(t, top))
	return parts
}

// wantLink checks that rel in top is a symlink to target.
func wantLink(t *testing.T, top, rel, target string) {
	t.Helper()
	got, err := os.Readlink(filepath.Join(top, rel))
	if err != nil || got != target {
		t.Errorf("%s/%s links to %q (%v), want %q", top, rel, got, err, target)
	}
}

// TestSystem: two systems sharing some parts (a package, units) and not
// others (a unit's text, a package's version, the kernel) are closures
// whose shared parts are the same store paths; their links resolve into
// the parts; and they boot and deploy onto a target as Closure's do.
func TestSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (builds systems with Nix): make test runs it")
	}
	t.Parallel()
	const (
		sshd   = "[Service]\nExecStart=/bin/sshd -D\n"
		getty  = "[Service]\nExecStart=-/sbin/agetty %I $TERM\n# 'quotes' \"and\" ${braces} \\ and ''\n"
		nginx1 = "[Service]\nExecStart=/bin/nginx -c /etc/nginx/nginx.conf\n"
		nginx2 = "[Service]\nExecStart=/bin/nginx -c /etc/nginx/nginx.conf -g 'worker_processes 4;'\n"
		big    = 5<<20 + 123 // several MiB
	)
	specA := SystemSpec{
		Behaviour: Behaviour{Kind: Succeed},
		Units:     map[string]string{"sshd.service": sshd, "getty@.service": getty, "nginx.service": nginx1},
		Packages:  map[string]int{"openssl-3.0.13": 4096, "nginx-1.26.2": big, "empty-1": 0},
	}
	specB := SystemSpec{
		Behaviour: Behaviour{Kind: RebootRequired},
		Units:     map[string]string{"sshd.service": sshd, "getty@.service": getty, "nginx.service": nginx2},
		Packages:  map[string]int{"openssl-3.0.13": 4096, "nginx-1.26.3": big + 1, "empty-1": 0},
		Kernel:    "6.6.1",
	}
	build := func(spec SystemSpec) string {
		t.Helper()
		start := time.Now()
		top := System(t, spec)
		t.Logf("System (%d units, %d packages) took %v: %s", len(spec.Units), len(spec.Packages), time.Since(start).Round(time.Millisecond), top)
		return top
	}
	a, b := build(specA), build(specB)

	partsA := systemParts(t, a, "unit-sshd.service", "unit-getty-.service", "unit-nginx.service",
		"openssl-3.0.13", "nginx-1.26.2", "empty-1", "linux-6.6.0", "initrd-linux-6.6.0")
	partsB := systemParts(t, b, "unit-sshd.service", "unit-getty-.service", "unit-nginx.service",
		"openssl-3.0.13", "nginx-1.26.3", "empty-1", "linux-6.6.1", "initrd-linux-6.6.1")
	for _, name := range []string{"unit-sshd.service", "unit-getty-.service", "openssl-3.0.13", "empty-1"} {
		if partsA[name] != partsB[name] {
			t.Errorf("%s: %s in one system, %s in the other; want one store path", name, partsA[name], partsB[name])
		}
	}
	if partsA["unit-nginx.service"] == partsB["unit-nginx.service"] {
		t.Errorf("nginx.service of different texts is one store path %s", partsA["unit-nginx.service"])
	}
	if a == b || !strings.Contains(a, "-nixos-system-nixtest-succeed-") || !strings.Contains(b, "-nixos-system-nixtest-reboot-required-") {
		t.Errorf("toplevels %s and %s: want distinct, named by their kinds", a, b)
	}

	for _, sys := range []struct {
		top   string
		spec  SystemSpec
		parts map[string]string
	}{{a, specA, partsA}, {b, specB, partsB}} {
		top, spec, parts := sys.top, sys.spec, sys.parts
		for unit, text := range spec.Units {
			rel := "etc/systemd/system/" + unit
			wantLink(t, top, rel, parts[UnitStoreName(unit)]+"/"+unit)
			if got, err := os.ReadFile(filepath.Join(top, rel)); err != nil || string(got) != text {
				t.Errorf("%s/%s reads %q (%v), want %q", top, rel, got, err, text)
			}
		}
		for pkg, size := range spec.Packages {
			wantLink(t, top, "sw/share/"+pkg, parts[pkg])
			if fi, err := os.Stat(filepath.Join(top, "sw/share", pkg, "data")); err != nil || fi.Size() != int64(size) {
				t.Errorf("%s/sw/share/%s/data: %v, want %d bytes", top, pkg, err, size)
			}
			narSize, err := strconv.ParseInt(strings.TrimSpace(nixStore(t, "--query", "--size", parts[pkg])), 10, 64)
			if err != nil || narSize < int64(size) {
				t.Errorf("nix-store -q --size %s = %d (%v), want at least %d", parts[pkg], narSize, err, size)
			}
		}
		kernel, initrd := parts["linux-"+spec.kernel()], parts["initrd-linux-"+spec.kernel()]
		wantLink(t, top, "kernel", kernel+"/bzImage")
		wantLink(t, top, "kernel-modules", kernel)
		wantLink(t, top, "initrd", initrd+"/initrd")
		for _, rel := range []string{"kernel", "initrd", "kernel-modules"} {
			if _, err := os.Stat(filepath.Join(top, rel)); err != nil {
				t.Errorf("%s/%s does not resolve: %v", top, rel, err)
			}
		}
		// What Closure makes.
		script := filepath.Join(top, "bin/switch-to-configuration")
		if got, err := os.ReadFile(script); err != nil || string(got) != spec.Behaviour.script() {
			t.Errorf("%s is not the Behaviour's script (%v)", script, err)
		}
		if fi, err := os.Stat(script); err != nil || fi.Mode().Perm()&0o111 != 0o111 {
			t.Errorf("%s is not executable: %v", script, err)
		}
		if got, err := os.ReadFile(filepath.Join(top, "nixos-version")); err != nil || string(got) != storeName(t, top)+"\n" {
			t.Errorf("%s/nixos-version = %q (%v)", top, got, err)
		}
		wantLink(t, top, "sw/bin/nix-env", "/usr/bin/nix-env")
		for _, tool := range standIns {
			wantLink(t, top, "sw/bin/"+tool, stateLink+"/bin/"+tool)
		}
		if entries, err := os.ReadDir(filepath.Join(top, "sw/bin")); err != nil || len(entries) != len(systemTools) {
			t.Errorf("%s/sw/bin holds %d entries (%v), want %d", top, len(entries), err, len(systemTools))
		}
	}
	for _, name := range []string{"nginx-1.26.2", "linux-6.6.0", "initrd-linux-6.6.0"} {
		if slices.Contains(slices.Collect(maps.Values(partsB)), partsA[name]) {
			t.Errorf("%s (%s) is in both systems", name, partsA[name])
		}
	}

	// The same spec again is a new toplevel with the same parts; another
	// initrd is another store path of the same name, the kernel staying.
	specC := specA
	specC.Initrd = "2"
	c := build(specC)
	partsC := systemParts(t, c, slices.Collect(maps.Keys(partsA))...)
	for name, p := range partsA {
		if same := partsC[name] == p; same != (name != "initrd-linux-6.6.0") {
			t.Errorf("%s: %s after %s, with the initrd's version alone changed", name, partsC[name], p)
		}
	}
	if c == a {
		t.Errorf("System made %s twice", c)
	}
	// The zero SystemSpec: no units, no packages, the default kernel.
	zero := build(SystemSpec{})
	partsZero := systemParts(t, zero, "linux-6.6.0", "initrd-linux-6.6.0")
	if partsZero["linux-6.6.0"] != partsA["linux-6.6.0"] || partsZero["initrd-linux-6.6.0"] != partsA["initrd-linux-6.6.0"] {
		t.Errorf("the zero SystemSpec's kernel and initrd are %q, want A's", partsZero)
	}
	if entries, err := os.ReadDir(filepath.Join(zero, "etc/systemd/system")); err != nil || len(entries) != 0 {
		t.Errorf("%s/etc/systemd/system holds %d entries (%v), want none", zero, len(entries), err)
	}

	// A boots onto a target, and B deploys onto it as a Closure does: only
	// what B does not share is new there.
	tg := NewTarget(t)
	tg.Boot(t, a)
	for name, p := range partsA {
		if !tg.HasPath(t, p) {
			t.Errorf("%s (%s) is not on the target after Boot", name, p)
		}
	}
	if tg.HasPath(t, partsB["nginx-1.26.3"]) {
		t.Errorf("%s is on the target before the copy", partsB["nginx-1.26.3"])
	}
	d := newDeployer(t, tg)
	d.copy(b)
	for name, p := range partsB {
		if !tg.HasPath(t, p) {
			t.Errorf("%s (%s) is not on the target after nix-copy-closure", name, p)
		}
	}
	if !tg.Exists(partsB["unit-nginx.service"] + "/nginx.service") {
		t.Errorf("B's nginx.service is not on the target")
	}
	d.setProfile(b)
	out, code := d.switchTo(b, "test")
	wantExit(t, "switch-to-configuration test", out, code, 100)
	if tg.CurrentSystem() != b || tg.BootEntry() != a {
		t.Errorf("after test: current %q, boot entry %q; want %q and still %q", tg.CurrentSystem(), tg.BootEntry(), b, a)
	}
	wantCalls(t, tg, "test "+b)
}

func TestSystemBadSpec(t *testing.T) {
	t.Parallel()
	for _, s := range []SystemSpec{
		{Behaviour: Behaviour{Kind: FailUnits}},
		{Units: map[string]string{"a b.service": ""}},
		{Units: map[string]string{"a/b.service": ""}},
		{Units: map[string]string{"..": ""}},
		{Packages: map[string]int{"nginx 1.26": 1}},
		{Packages: map[string]int{".hidden-1": 1}},
		{Packages: map[string]int{"": 1}},
		{Packages: map[string]int{"nginx-1.26.2": -1}},
		{Kernel: "6.6 rc1"},
		{Initrd: "1/2"},
	} {
		if err := s.check(); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if err := (SystemSpec{Units: map[string]string{"getty@tty1.service": "", "a:b.mount": ""}, Packages: map[string]int{"gcc-13.2.0+git=x?": 1}}).check(); err != nil {
		t.Errorf("good spec: %v", err)
	}
}
