package nixos_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counted is a Nix that counts the processes it starts, by subcommand.
type counted struct {
	nixos.Nix
	mu   sync.Mutex
	runs []string
}

func newNix() *counted {
	c := &counted{}
	// The user's Nix builds several derivations at once.
	c.Env = []string{"NIX_CONFIG=" + nixtest.NixConfig + "max-jobs = 8\n"}
	c.Ran = func(args []string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.runs = append(c.runs, strings.Join(args, " "))
	}
	return c
}

// evaluations counts the nix processes that evaluate (eval, build).
func (c *counted) evaluations() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.runs {
		if strings.HasPrefix(r, "nix ") && (strings.Contains(r, " eval ") || strings.Contains(r, " build ")) {
			n++
		}
	}
	return n
}

func repo(t *testing.T, configs map[string]nixtest.Configuration) *nixtest.Repository {
	t.Helper()
	r := &nixtest.Repository{Dir: t.TempDir(), Configurations: configs}
	r.Write(t)
	return r
}

func fleetOf(n int) map[string]nixtest.Configuration {
	out := map[string]nixtest.Configuration{}
	for i := range n {
		out["web"+string(rune('a'+i))] = nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}}
	}
	return out
}

// N configurations are evaluated by one Nix process, named or all of
// them, from a flake and from a file alike,
// in the order asked for; each system's derivation is known and nothing
// is built.
func TestEvaluateIsOneProcessForTheFleet(t *testing.T) {
	r := repo(t, fleetOf(8))
	for _, src := range []nixos.Source{{Flake: "path:" + r.Dir}, {File: filepath.Join(r.Dir, "hosts.nix"), Attribute: "nixosConfigurations"}} {
		t.Run(src.String(), func(t *testing.T) {
			n := newNix()
			systems, err := n.Evaluate(context.Background(), src, []string{"webh", "weba", "webc"}, nixos.EvaluateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := n.evaluations(); got != 1 {
				t.Errorf("%d Nix processes evaluated 3 configurations, want 1: %q", got, n.runs)
			}
			for i, name := range []string{"webh", "weba", "webc"} {
				s := systems[i]
				if s.Name != name || !strings.HasSuffix(s.Path, "-nixos-system-"+name) || !strings.HasSuffix(s.Derivation, "-nixos-system-"+name+".drv") || s.Built {
					t.Errorf("systems[%d] = %+v, want %s's system, not built", i, s, name)
				}
				if _, err := os.Stat(s.Derivation); err != nil {
					t.Errorf("the derivation of %s is not in the store: %v", name, err)
				}
			}
			all, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{})
			if err != nil || len(all) != 8 || all[0].Name != "weba" || all[7].Name != "webh" {
				t.Fatalf("all configurations: %+v, %v", all, err)
			}
			if got := n.evaluations(); got != 2 {
				t.Errorf("%d Nix processes for the second evaluation, of all 8, want 1", got-1)
			}
		})
	}
}

// A configuration that does not evaluate is named with the head of Nix's
// error; the others are not blamed. With KeepGoing the others evaluate and
// the failing one carries its error.
func TestEvaluateNamesTheConfigurationThatFails(t *testing.T) {
	configs := fleetOf(6)
	configs["webc"] = nixtest.Configuration{EvalError: "webc's module is broken on purpose"}
	configs["webe"] = nixtest.Configuration{EvalExpression: `1 + "a"`}
	r := repo(t, configs)
	n := newNix()
	src := nixos.Source{Flake: "path:" + r.Dir}
	_, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{})
	var errs nixos.Errors
	if !errors.As(err, &errs) || len(errs) != 2 || errs[0].Name != "webc" || errs[1].Name != "webe" {
		t.Fatalf("Evaluate = %v, want webc and webe named", err)
	}
	if !strings.HasPrefix(errs[0].Message, "error: webc's module is broken on purpose") {
		t.Errorf("webc's error %q is not Nix's error line", errs[0].Message)
	}
	// Nix gives no position for a throw, but does for this one: in the
	// repository's file, not in the flake's copy in the store.
	if m := errs[1].Message; !strings.HasPrefix(m, "error: cannot add a string to an integer") || !strings.Contains(m, " at "+r.Dir+"/configurations.nix:") {
		t.Errorf("webe's error %q does not hold Nix's error line and its position in %s", m, r.Dir)
	}
	// A local git repository's flake, in a directory of it, alike; its
	// path is the repository's as it is, a "$" and all.
	top := filepath.Join(t.TempDir(), "infra$HOME$1")
	if err := os.Mkdir(top, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.Dir, filepath.Join(top, "nixos")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}} {
		if out, err := exec.Command("git", append([]string{"-C", top}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	_, err = n.Evaluate(context.Background(), nixos.Source{Flake: "git+file://" + top + "?dir=nixos"}, []string{"webe"}, nixos.EvaluateOptions{})
	if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Message, " at "+top+"/nixos/configurations.nix:") {
		t.Errorf("a git repository's flake: %v, want webe's error at its position in %s/nixos", err, top)
	}
	if err := os.Rename(filepath.Join(top, "nixos"), r.Dir); err != nil {
		t.Fatal(err)
	}
	systems, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{KeepGoing: true})
	if err != nil || len(systems) != 6 {
		t.Fatalf("KeepGoing: %+v, %v", systems, err)
	}
	for _, s := range systems {
		bad := s.Name == "webc" || s.Name == "webe"
		if bad != (s.Error != "") || bad == (s.Path != "") {
			t.Errorf("KeepGoing: %+v", s)
		}
	}
}

// A configuration asked for that the source lacks is named with those it
// has, as a MissingError, whose fix is in the names asked for.
func TestEvaluateNamesTheMissingConfiguration(t *testing.T) {
	r := repo(t, fleetOf(2))
	for _, src := range []nixos.Source{{Flake: "path:" + r.Dir}, {File: filepath.Join(r.Dir, "hosts.nix"), Attribute: "nixosConfigurations"}} {
		_, err := newNix().Evaluate(context.Background(), src, []string{"weba", "db1"}, nixos.EvaluateOptions{})
		if err == nil || !strings.Contains(err.Error(), `no configuration "db1"`) || !strings.Contains(err.Error(), `"weba", "webb"`) {
			t.Errorf("%s: %v, want db1 named with weba and webb", src, err)
		}
		var missing *nixos.MissingError
		if !errors.As(err, &missing) || strings.Join(missing.Missing, ",") != "db1" || strings.Join(missing.Existing, ",") != "weba,webb" {
			t.Errorf("%s: %#v is not a MissingError of db1 among weba and webb", src, err)
		}
	}
}

// A source that is itself broken (a file that is not there, a flake.nix
// that does not parse) is an error of the source, with Nix's words, even
// with names given and KeepGoing: no configuration is blamed for it.
func TestEvaluateBlamesABrokenSourceNotItsConfigurations(t *testing.T) {
	r := repo(t, fleetOf(3))
	if err := os.WriteFile(filepath.Join(r.Dir, "flake.nix"), []byte("{ outputs = { self }: {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[nixos.Source]string{
		{Flake: "path:" + r.Dir}: "error: syntax error",
		{File: filepath.Join(r.Dir, "absent.nix"), Attribute: "nixosConfigurations"}: "absent.nix",
		// Not a git repository: git's own word, not only that git failed.
		{Flake: "git+file://" + r.Dir}: "does not appear to be a git repository",
	}
	for src, want := range cases {
		for _, opts := range []nixos.EvaluateOptions{{}, {KeepGoing: true}} {
			systems, err := newNix().Evaluate(context.Background(), src, []string{"weba", "webb"}, opts)
			var errs nixos.Errors
			if err == nil || errors.As(err, &errs) || !strings.HasPrefix(err.Error(), src.String()+": ") || !strings.Contains(err.Error(), want) {
				t.Errorf("%s, %+v: %+v, %v; want an error of the source holding %q", src, opts, systems, err, want)
			}
		}
	}
}

// A Nix too old for flakes is a plain error naming the version.
func TestCheckRefusesAnOldNix(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nix"), []byte("#!/bin/sh\necho 'nix (Nix) 2.3.16'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := nixos.Nix{Dir: dir}.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Nix 2.3.16 is too old") || !strings.Contains(err.Error(), "2.4") {
		t.Errorf("Check = %v", err)
	}
}

// Building several systems is one nix-store --realise: each is waited for
// on its own, the first built is ready before the slow one is, and a
// failing one fails only itself, with Nix's words and the builder's last
// log lines (its own words, which Nix's error leaves out).
func TestBuildWaitsForEachSystemOnItsOwn(t *testing.T) {
	configs := fleetOf(3)
	configs["slow"] = nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}, BuildDelay: 4 * time.Second}
	configs["broken"] = nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}, BuildFails: true}
	r := repo(t, configs)
	n := newNix()
	systems, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	outs := map[string]string{}
	byName := map[string]nixos.System{}
	for _, s := range systems {
		outs[s.Derivation] = s.Path
		byName[s.Name] = s
	}
	start := time.Now()
	b, err := n.StartBuild(context.Background(), outs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if err := b.Wait(context.Background(), byName["weba"].Derivation); err != nil {
		t.Fatalf("weba: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("weba was ready after %s: it waited for the slow system", took)
	}
	err = b.Wait(context.Background(), byName["broken"].Derivation)
	var be *nixos.BuildError
	if !errors.As(err, &be) || !strings.Contains(be.Message, "error: builder for '"+byName["broken"].Derivation+"' failed with exit code 1") ||
		!strings.Contains(be.Message, "\nlast log lines:\n> nixtest: this system fails to build, on purpose") {
		t.Errorf("broken: %v", err)
	}
	for _, name := range []string{"webb", "webc", "slow"} {
		if err := b.Wait(context.Background(), byName[name].Derivation); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := os.Stat(byName[name].Path); err != nil {
			t.Errorf("%s is not in the store: %v", name, err)
		}
	}
	n.mu.Lock()
	runs := strings.Join(n.runs, "\n")
	n.mu.Unlock()
	if strings.Count(runs, "nix-store --realise") != 1 {
		t.Errorf("not one nix-store --realise:\n%s", runs)
	}
}

// A build stopped ends its builders: nothing of it runs on.
func TestBuildStoppedLeavesNoBuilder(t *testing.T) {
	configs := map[string]nixtest.Configuration{"long": {System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}, BuildDelay: 67 * time.Second}}
	r := repo(t, configs)
	n := newNix()
	systems, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.StartBuild(context.Background(), map[string]string{systems[0].Derivation: systems[0].Path})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !sleeping() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !sleeping() {
		t.Fatal("the builder never started")
	}
	start := time.Now()
	b.Stop()
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("Stop took %s", took)
	}
	if err := b.Wait(context.Background(), systems[0].Derivation); err == nil {
		t.Errorf("a stopped build says it built")
	}
	time.Sleep(500 * time.Millisecond)
	if sleeping() {
		t.Errorf("the builder runs on after the build was stopped")
	}
}

// sleeping reports whether the long builder's sleep runs.
func sleeping() bool {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		if b, err := os.ReadFile(f); err == nil && string(b) == "/bin/sleep\x0067\x00" {
			return true
		}
	}
	return false
}

// Nix's dry run says what realising a system would build: its own
// derivation and its parts not built yet; nothing once it is built.
func TestWillBuild(t *testing.T) {
	r := repo(t, fleetOf(1))
	n := newNix()
	systems, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := n.WillBuild(context.Background(), systems[0].Derivation)
	if err != nil || !slices.Contains(p.Build, systems[0].Derivation) || len(p.Fetch) != 0 {
		t.Fatalf("WillBuild = %+v, %v; want the system's derivation to build", p, err)
	}
	b, err := n.StartBuild(context.Background(), map[string]string{systems[0].Derivation: systems[0].Path})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(context.Background(), systems[0].Derivation); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	if p, err := n.WillBuild(context.Background(), systems[0].Derivation); err != nil || len(p.Build)+len(p.Fetch) != 0 {
		t.Errorf("after the build, WillBuild = %+v, %v; want nothing", p, err)
	}
}

// With a cache, an unchanged flake is not evaluated again (no nix eval
// at all), an edited one is, and a cache directory others can write is
// refused, naming it.
func TestEvaluateKeepsAnUnchangedFlake(t *testing.T) {
	configs := fleetOf(3)
	r := repo(t, configs)
	n := newNix()
	n.CacheDir = filepath.Join(t.TempDir(), "cache")
	src := nixos.Source{Flake: "path:" + r.Dir}
	first, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{})
	if err != nil || !slices.Equal(first, again) {
		t.Fatalf("the second evaluation: %+v, %v; want %+v", again, err, first)
	}
	if got := n.evaluations(); got != 1 {
		t.Errorf("%d nix eval for two evaluations of an unchanged flake, want 1", got)
	}
	configs["webb"] = nixtest.Configuration{System: configs["webb"].System, Revision: 2}
	r.Write(t)
	edited, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{})
	if err != nil || edited[1].Path == first[1].Path || edited[0].Path != first[0].Path {
		t.Fatalf("after webb was edited: %+v, %v", edited, err)
	}
	if got := n.evaluations(); got != 2 {
		t.Errorf("%d nix eval after the edit, want 2", got)
	}
	if err := os.Chmod(n.CacheDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{}); err == nil || !strings.Contains(err.Error(), n.CacheDir) || !strings.Contains(err.Error(), "other users") {
		t.Errorf("a cache others can write: %v", err)
	}
}
