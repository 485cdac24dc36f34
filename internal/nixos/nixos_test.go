package nixos_test

import (
	"context"
	"errors"
	"fmt"
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

// evaluations counts the nix processes that evaluate configurations
// (not those that list them).
func (c *counted) evaluations() int { return len(c.evaluated()) }

// evaluated are the configurations each nix process that evaluated
// configurations was given, in order.
func (c *counted) evaluated() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]string
	for _, r := range c.runs {
		if !strings.HasPrefix(r, "nix ") || !strings.Contains(r, " eval ") || strings.Contains(r, "builtins.attrNames") {
			continue
		}
		list := r[strings.LastIndex(r, "[ ")+2 : strings.LastIndex(r, " ]")]
		var names []string
		for _, q := range strings.Fields(list) {
			names = append(names, strings.Trim(q, `"`))
		}
		out = append(out, names)
	}
	return out
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

// N configurations are evaluated by one Nix process per worker, each over
// a share of consecutive names, named or all of them, from a flake and
// from a file alike, in the order asked for; each system's derivation is
// known and nothing is built.
func TestEvaluateIsOneProcessPerWorker(t *testing.T) {
	t.Parallel()
	r := repo(t, fleetOf(8))
	for _, src := range []nixos.Source{{Flake: "path:" + r.Dir}, {File: filepath.Join(r.Dir, "hosts.nix"), Attribute: "nixosConfigurations"}} {
		t.Run(src.String(), func(t *testing.T) {
			n := newNix()
			systems, err := n.Evaluate(context.Background(), src, []string{"webh", "weba", "webc"}, nixos.EvaluateOptions{Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			if got := n.evaluated(); len(got) != 1 || strings.Join(got[0], ",") != "webh,weba,webc" {
				t.Errorf("one worker evaluated 3 configurations in %q, want one process of all three", got)
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
			n = newNix()
			all, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{Workers: 3})
			if err != nil || len(all) != 8 || all[0].Name != "weba" || all[7].Name != "webh" {
				t.Fatalf("all configurations: %+v, %v", all, err)
			}
			got := n.evaluated()
			slices.SortFunc(got, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
			if fmt.Sprint(got) != "[[weba webb] [webc webd webe] [webf webg webh]]" {
				t.Errorf("three workers evaluated all 8 in %q, want three processes, each over consecutive names", got)
			}
		})
	}
}

// A configuration that does not evaluate is named with the head of Nix's
// error; the others are not blamed. With KeepGoing the others evaluate and
// the failing one carries its error.
func TestEvaluateNamesTheConfigurationThatFails(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	if testing.Short() {
		t.Skip("slow (a build of 4 s): make test runs it")
	}
	t.Parallel()
	configs := fleetOf(3)
	const slow = 4 * time.Second
	configs["slow"] = nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}, BuildDelay: slow}
	configs["broken"] = nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}, BuildFails: true}
	configs["needs"] = nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed},
		Packages: map[string]int{"app-1.0": 16, "libc-2.40": 16}, FailingPackage: "app-1.0"}}
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
	b, err := n.StartBuild(context.Background(), outs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if err := b.Wait(context.Background(), byName["weba"].Derivation); err != nil {
		t.Fatalf("weba: %v", err)
	}
	// Ready before the slow system is built, however slow the machine.
	if _, err := os.Stat(byName["slow"].Path); err == nil {
		t.Errorf("weba was ready only once the slow system (a build of %s) was: it waited for it", slow)
	}
	err = b.Wait(context.Background(), byName["broken"].Derivation)
	var be *nixos.BuildError
	if !errors.As(err, &be) || !strings.Contains(be.Message, "error: builder for '"+byName["broken"].Derivation+"' failed with exit code 1") ||
		!strings.Contains(be.Message, "\nlast log lines:\n> nixtest: this system fails to build, on purpose") ||
		be.Failed != byName["broken"].Derivation || !strings.Contains(be.Message, "\nits log: nix-store -l "+byName["broken"].Derivation) {
		t.Errorf("broken: %v", err)
	}
	// A dependency that does not build is named, with its builder's last
	// log lines and its own log, not the system's (which has none).
	err = b.Wait(context.Background(), byName["needs"].Derivation)
	if !errors.As(err, &be) || !strings.HasSuffix(be.Failed, "-app-1.0.drv") ||
		!strings.Contains(be.Message, "app-1.0, which it needs, did not build: builder for '"+be.Failed+"' failed with exit code 1") ||
		!strings.Contains(be.Message, "\nlast log lines:\n> compiling app-1.0\n> "+nixtest.FailingPackageLine+" app-1.0") ||
		!strings.Contains(be.Message, "\nits log: nix-store -l "+be.Failed) || strings.Contains(be.Message, "libc") {
		t.Errorf("needs: %v", err)
	}
	// The command the error names prints the log, on this Nix (2.8,
	// where nix log needs nix-command).
	if be != nil {
		out, err := exec.Command("sh", "-c", nixos.LogCommand(be.Failed)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), nixtest.FailingPackageLine+" app-1.0") {
			t.Errorf("%s: %v\n%s", nixos.LogCommand(be.Failed), err, out)
		}
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
	t.Parallel()
	delay := nixtest.OwnBuildDelay(67 * time.Second)
	configs := map[string]nixtest.Configuration{"long": {System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}, BuildDelay: delay}}
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
	for !nixtest.BuilderSleeps(delay) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !nixtest.BuilderSleeps(delay) {
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
	if nixtest.BuilderSleeps(delay) {
		t.Errorf("the builder runs on after the build was stopped")
	}
}

// Nix's dry run says what realising a system would build: its own
// derivation and its parts not built yet; nothing once it is built.
func TestWillBuild(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	configs := fleetOf(3)
	r := repo(t, configs)
	n := newNix()
	n.CacheDir = filepath.Join(t.TempDir(), "cache")
	src := nixos.Source{Flake: "path:" + r.Dir}
	one := nixos.EvaluateOptions{Workers: 1}
	first, err := n.Evaluate(context.Background(), src, nil, one)
	if err != nil {
		t.Fatal(err)
	}
	again, err := n.Evaluate(context.Background(), src, nil, one)
	if err != nil || !slices.Equal(first, again) {
		t.Fatalf("the second evaluation: %+v, %v; want %+v", again, err, first)
	}
	if got := n.evaluations(); got != 1 {
		t.Errorf("%d nix eval for two evaluations of an unchanged flake, want 1", got)
	}
	configs["webb"] = nixtest.Configuration{System: configs["webb"].System, Revision: 2}
	r.Write(t)
	edited, err := n.Evaluate(context.Background(), src, nil, one)
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

// A failure every configuration shares (a broken import they all use) is
// found once, not bisected down to each configuration: with one worker,
// three processes (the first and two more, each failing on its first
// configuration); with two workers, four at most. Every configuration is
// named with the failure.
func TestEvaluateFindsASharedFailureOnce(t *testing.T) {
	t.Parallel()
	r := &nixtest.Repository{Dir: t.TempDir(), Configurations: fleetOf(16), SharedError: "the shared module is broken on purpose"}
	r.Write(t)
	for workers, most := range map[int]int{1: 3, 2: 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			n := newNix()
			_, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{Workers: workers})
			var errs nixos.Errors
			if !errors.As(err, &errs) || len(errs) != 16 {
				t.Fatalf("Evaluate = %v, want all 16 configurations named", err)
			}
			for _, e := range errs {
				if !strings.HasPrefix(e.Message, "error: the shared module is broken on purpose") {
					t.Errorf("%s: %q, want the shared failure", e.Name, e.Message)
				}
			}
			if got := n.evaluations(); got > most {
				t.Errorf("%d processes evaluated a failure all 16 share, want at most %d: %q", got, most, n.evaluated())
			}
		})
	}
}

// Two configurations failing alike, each the first of its process, are
// not yet a failure every configuration shares: the others evaluate.
func TestEvaluateTwoAlikeFailuresAreNotShared(t *testing.T) {
	t.Parallel()
	configs := fleetOf(6)
	configs["weba"] = nixtest.Configuration{EvalError: "the same typo"}
	configs["webb"] = nixtest.Configuration{EvalError: "the same typo"}
	r := repo(t, configs)
	n := newNix()
	systems, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{Workers: 1, KeepGoing: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range systems {
		if bad := s.Name == "weba" || s.Name == "webb"; bad != (s.Error != "") {
			t.Errorf("%s: %+v", s.Name, s)
		}
	}
}

// A worker's process is replaced once it passes the memory bound, after
// each configuration it has done: with a bound nothing stays under, one
// worker evaluates four configurations (each about a tenth of a second) in
// a process each, every one over the rest of its share, and every system
// is right. (A machine so busy that a process finishes a configuration
// before it is stopped makes one process fewer; never more.)
func TestEvaluateReplacesAWorkerPastItsMemoryBound(t *testing.T) {
	t.Parallel()
	configs := fleetOf(4)
	for name, c := range configs {
		c.Cost = 200_000
		configs[name] = c
	}
	r := repo(t, configs)
	n := newNix()
	systems, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{Workers: 1, MaxMemory: 1})
	if err != nil || len(systems) != 4 {
		t.Fatalf("Evaluate: %+v, %v", systems, err)
	}
	for i, s := range systems {
		if want := "web" + string(rune('a'+i)); s.Name != want || !strings.HasSuffix(s.Path, "-nixos-system-"+want) {
			t.Errorf("systems[%d] = %+v, want %s's", i, s, want)
		}
	}
	got := n.evaluated()
	all := []string{"weba", "webb", "webc", "webd"}
	if len(got) < 3 || len(got) > 4 || !slices.Equal(got[0], all) {
		t.Fatalf("processes evaluated %q, want each replaced after one configuration", got)
	}
	for i := 1; i < len(got); i++ {
		if len(got[i]) >= len(got[i-1]) || !slices.Equal(got[i], all[len(all)-len(got[i]):]) {
			t.Errorf("process %d evaluated %q after %q: not the rest of the share", i, got[i], got[i-1])
		}
	}
}

// Names reach Nix as data: a configuration named with &, <, >, a quote, a
// dollar and braces, or a newline is found under its name; a reference or
// an attribute that begins with a dash is refused before Nix sees it, as
// an option it would be.
func TestEvaluateTakesNamesAndReferencesAsData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := []string{"a&b", "x<y>", `q"uote`, "d${o}llar", "new\nline"}
	var attrs strings.Builder
	for i, name := range names {
		fmt.Fprintf(&attrs, "      %s = { config.system.build.toplevel = derivation { name = \"odd-%d\"; system = %q; builder = \"/bin/sh\"; args = [ \"-c\" \"echo > $out\" ]; }; };\n",
			nixos.Literal(name), i, nixtest.Platform(t))
	}
	flake := "{\n  outputs = { self }: {\n    nixosConfigurations = {\n" + attrs.String() + "    };\n  };\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "flake.nix"), []byte(flake), 0o644); err != nil {
		t.Fatal(err)
	}
	n := newNix()
	systems, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:" + dir}, names, nixos.EvaluateOptions{})
	if err != nil || len(systems) != len(names) {
		t.Fatalf("Evaluate: %+v, %v", systems, err)
	}
	for i, s := range systems {
		if s.Name != names[i] || !strings.HasSuffix(s.Path, fmt.Sprintf("-odd-%d", i)) {
			t.Errorf("systems[%d] = %+v, want %q's", i, s, names[i])
		}
	}
	for _, src := range []nixos.Source{{Flake: "--version"}, {Flake: "--impure"}, {File: filepath.Join(dir, "flake.nix"), Attribute: "--version"}} {
		n := newNix()
		if _, err := n.Evaluate(context.Background(), src, nil, nixos.EvaluateOptions{}); err == nil || !strings.Contains(err.Error(), "begins with a dash") {
			t.Errorf("%+v: %v, want it refused", src, err)
		}
		if len(n.runs) != 0 {
			t.Errorf("%+v reached Nix: %q", src, n.runs)
		}
	}
}

// An error's position in a flake named by a relative path (as
// "path:${path.module}/nixos" is from the configuration's directory) is
// given in the repository's file, not in the flake's copy in the store.
// Serial: the relative flake is found from the process's working directory.
func TestEvaluateGivesPositionsOfARelativeFlakeInItsFiles(t *testing.T) {
	configs := fleetOf(2)
	configs["webb"] = nixtest.Configuration{EvalExpression: `1 + "a"`}
	r := repo(t, configs)
	t.Chdir(filepath.Dir(r.Dir))
	n := newNix()
	_, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:./" + filepath.Base(r.Dir)}, nil, nixos.EvaluateOptions{})
	var errs nixos.Errors
	if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Message, " at "+r.Dir+"/configurations.nix:") {
		t.Errorf("Evaluate = %v, want webb's error at its position in %s", err, r.Dir)
	}
}

// The cache answers only for what it was asked: each input of its key
// (the flake's content, its reference and attribute, the names, the Nix
// version, NIX_CONFIG, the environment given to Nix) changed alone is one
// new evaluation, with the right result. Two flakes
// in one git repository (?dir=prod, ?dir=staging) share the repository's
// narHash: each gets its own systems.
// Serial: NIX_CONFIG, one input of the cache key, is the process environment's.
func TestEvaluateCacheKeyHoldsWhatSelects(t *testing.T) {
	top := t.TempDir()
	for dir, rev := range map[string]int{"prod": 0, "staging": 1} {
		c := fleetOf(2)
		for name, cfg := range c {
			cfg.Revision = rev
			c[name] = cfg
		}
		r := &nixtest.Repository{Dir: filepath.Join(top, dir), Configurations: c}
		r.Write(t)
	}
	// A second attribute of configurations in prod's flake: webb only.
	flake, err := os.ReadFile(filepath.Join(top, "prod", "flake.nix"))
	if err != nil {
		t.Fatal(err)
	}
	flake = []byte(strings.Replace(string(flake), "nixosConfigurations = import ./configurations.nix",
		"other = { inherit (self.nixosConfigurations) webb; };\n    nixosConfigurations = import ./configurations.nix", 1))
	if err := os.WriteFile(filepath.Join(top, "prod", "flake.nix"), flake, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}} {
		if out, err := exec.Command("git", append([]string{"-C", top}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	// A Nix that says another version: the user upgraded.
	upgraded := t.TempDir()
	nix, err := exec.LookPath("nix")
	if err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'nix (Nix) 2.99.0'; exit 0; fi\nexec " + nix + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(upgraded, "nix"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	n := newNix()
	n.CacheDir = filepath.Join(t.TempDir(), "cache")
	one := nixos.EvaluateOptions{Workers: 1}
	prod := nixos.Source{Flake: "git+file://" + top + "?dir=prod"}
	base, err := n.Evaluate(context.Background(), prod, []string{"webb"}, one)
	if err != nil {
		t.Fatal(err)
	}
	count := n.evaluations()
	for _, c := range []struct {
		what  string
		src   nixos.Source
		names []string
		nix   func(*counted)
		same  bool // the same systems as base
	}{
		{what: "the reference (another directory of the repository)", src: nixos.Source{Flake: "git+file://" + top + "?dir=staging"}, names: []string{"webb"}},
		{what: "the attribute", src: nixos.Source{Flake: prod.Flake + "#other"}, names: []string{"webb"}, same: true},
		{what: "the names", src: prod, names: []string{"webb", "weba"}, same: true},
		{what: "NIX_CONFIG", src: prod, names: []string{"webb"}, same: true, nix: func(*counted) { t.Setenv("NIX_CONFIG", nixtest.NixConfig+"max-jobs = 3\n") }},
		{what: "the environment given to Nix", src: prod, names: []string{"webb"}, same: true, nix: func(c *counted) { c.Env = append(c.Env, "NIX_PATH=x=/nonexistent") }},
		{what: "the Nix version", src: prod, names: []string{"webb"}, same: true, nix: func(c *counted) { c.Dir = upgraded }},
		// Last: the others are keyed on the content before this edit. A
		// comment changes the flake's narHash, not what it evaluates to.
		{what: "the flake's content", src: prod, names: []string{"webb"}, same: true, nix: func(*counted) {
			f, err := os.OpenFile(filepath.Join(top, "prod", "flake.nix"), os.O_APPEND|os.O_WRONLY, 0)
			if err == nil {
				_, err = f.WriteString("# edited\n")
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			m := newNix()
			m.CacheDir, m.Env, m.Ran = n.CacheDir, slices.Clone(n.Env), n.Ran
			if c.nix != nil {
				c.nix(m)
			}
			got, err := m.Evaluate(context.Background(), c.src, c.names, one)
			if err != nil {
				t.Fatal(err)
			}
			if now := n.evaluations(); now != count+1 {
				t.Errorf("changing %s alone: %d new evaluations, want 1", c.what, now-count)
			}
			count = n.evaluations()
			if c.same != (got[0] == base[0]) || got[0].Name != "webb" {
				t.Errorf("changing %s: %+v, the first evaluation %+v (want the same: %v)", c.what, got[0], base[0], c.same)
			}
			// Unchanged, it is the cache's.
			if _, err := m.Evaluate(context.Background(), c.src, c.names, one); err != nil || n.evaluations() != count {
				t.Errorf("%s asked again: %v, %d new evaluations, want none", c.what, err, n.evaluations()-count)
			}
		})
	}
}

// Nix gets what its fetchers and substituters read of the user's
// environment (an S3 substituter's AWS_*, a private git input's
// GIT_SSH_COMMAND and GIT_CONFIG_*, NETRC), and nothing else of the
// provider's (its key, a runner's tokens).
// Serial: what Nix is given comes from the process environment.
func TestEvaluateGivesNixWhatItsFetchersRead(t *testing.T) {
	wrapped := t.TempDir()
	nix, err := exec.LookPath("nix")
	if err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(t.TempDir(), "env")
	script := "#!/bin/sh\nenv >> " + envFile + "\nexec " + nix + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrapped, "nix"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	passed := map[string]string{"AWS_PROFILE": "cache", "AWS_ACCESS_KEY_ID": "AKIA", "GIT_SSH_COMMAND": "ssh -i /k", "GIT_CONFIG_COUNT": "1",
		"GIT_CONFIG_KEY_0": "url.x.insteadOf", "GIT_CONFIG_VALUE_0": "y", "NETRC": "/n"}
	for k, v := range passed {
		t.Setenv(k, v)
	}
	t.Setenv("FLEET_PRIVATE_KEY", "secret")
	t.Setenv("GITHUB_TOKEN", "secret")
	r := repo(t, fleetOf(1))
	n := newNix()
	n.Dir = wrapped
	if _, err := n.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	for k, v := range passed {
		if !strings.Contains(env, "\n"+k+"="+v+"\n") && !strings.HasPrefix(env, k+"="+v+"\n") {
			t.Errorf("Nix did not get %s", k)
		}
	}
	if strings.Contains(env, "secret") {
		t.Errorf("Nix got the provider's secrets:\n%s", env)
	}
}

// BuilderFailure finds the builder that failed in a plain build's output,
// with its last log lines, as the nix-store command prints them (under
// its "building" line) and as the nix command does (below its error).
func TestBuilderFailureReadsBothOutputs(t *testing.T) {
	t.Parallel()
	const app = "/nix/store/ilw1nxvlchc7zf1kjh62j7qh51ywbrbq-app-1.0.drv"
	for _, c := range []struct{ what, output, want string }{
		{"nix-store", "these 2 derivations will be built:\n  " + app + "\nbuilding '" + app + "'...\ncompiling app-1.0\nit broke\n" +
			"error: builder for '" + app + "' failed with exit code 1\nerror: 1 dependencies of derivation '/nix/store/x-nixos-system-web1.drv' failed to build\n",
			"builder for '" + app + "' failed with exit code 1\nlast log lines:\n> compiling app-1.0\n> it broke"},
		{"nix", "error: builder for '" + app + "' failed with exit code 1;\n       last 2 log lines:\n       > compiling app-1.0\n       > it broke\n" +
			"       For full logs, run 'nix log " + app + "'.\nerror: 1 dependencies of derivation '/nix/store/x-nixos-system-web1.drv' failed to build\n",
			"builder for '" + app + "' failed with exit code 1;\nlast 2 log lines:\n> compiling app-1.0\n> it broke"},
		// A builder's own error line is its log; Nix's lines are not.
		{"nix-store, a compiler's error", "building '" + app + "'...\ncompiling app-1.0\nerror: app.h: No such file or directory\nerror: build of '/nix/store/z-other.drv' failed\n" +
			"error: builder for '" + app + "' failed with exit code 1\n",
			"builder for '" + app + "' failed with exit code 1\nlast log lines:\n> compiling app-1.0\n> error: app.h: No such file or directory"},
		{"nothing failed", "copying path '/nix/store/y' from 'https://cache'...\n", ""},
	} {
		drv, account := nixos.BuilderFailure(c.output)
		if account != c.want || (c.want != "") != (drv == app) {
			t.Errorf("%s: %q, %q; want %q", c.what, drv, account, c.want)
		}
	}
}

// A private input git cannot fetch over ssh says how the provider's Nix
// gets a key: ssh's own words, and the variables it reads.
func TestEvaluateSaysHowAPrivateInputGetsItsKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Port 1 on loopback: nothing listens, ssh is refused at once.
	flake := `{ inputs.private.url = "git+ssh://git@127.0.0.1:1/private.git"; outputs = { self, private }: { nixosConfigurations = {}; }; }`
	if err := os.WriteFile(filepath.Join(dir, "flake.nix"), []byte(flake), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newNix().Evaluate(context.Background(), nixos.Source{Flake: "path:" + dir}, nil, nixos.EvaluateOptions{})
	if err == nil || !strings.Contains(err.Error(), "Connection refused") || !strings.Contains(err.Error(), "GIT_SSH_COMMAND") || !strings.Contains(err.Error(), "SSH_AUTH_SOCK") {
		t.Fatalf("an input ssh could not fetch: %v; want ssh's words and how to give it a key", err)
	}
}

// A flake's dir= naming no directory of its repository says so, and where
// dir= is looked for, not only the store path Nix names.
func TestEvaluateSaysADirIsMissing(t *testing.T) {
	t.Parallel()
	r := repo(t, fleetOf(1))
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}} {
		if out, err := exec.Command("git", append([]string{"-C", r.Dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	_, err := newNix().Evaluate(context.Background(), nixos.Source{Flake: "git+file://" + r.Dir + "?dir=prod"}, nil, nixos.EvaluateOptions{})
	if err == nil || !strings.Contains(err.Error(), "dir=prod names no directory of the flake's repository at "+r.Dir) {
		t.Fatalf("a dir= the repository lacks: %v", err)
	}
}
