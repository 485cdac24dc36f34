package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// From configurations (issue 23): systems this machine's store lacks are
// built from their derivations, on this machine in one invocation for the
// rollout, or on the host.

// evaluated writes a repository of configs and evaluates it: name ->
// system.
func evaluated(t *testing.T, configs map[string]nixtest.Configuration) map[string]nixos.System {
	t.Helper()
	r := &nixtest.Repository{Dir: t.TempDir(), Configurations: configs}
	r.Write(t)
	systems, err := nixos.Nix{Env: []string{"NIX_CONFIG=" + nixtest.NixConfig}}.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]nixos.System{}
	for _, s := range systems {
		if s.Built {
			t.Fatalf("%s is built already", s.Name)
		}
		out[s.Name] = s
	}
	return out
}

func good() nixtest.Configuration {
	return nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}, Units: map[string]string{"web.service": "[Service]\n"}}}
}

// needsBroken is a configuration whose system needs a package that does
// not build, app-1.0, as a real system fails far more often than by its
// own builder.
func needsBroken() nixtest.Configuration {
	c := good()
	c.System.Packages, c.System.FailingPackage = map[string]int{"app-1.0": 16}, "app-1.0"
	return c
}

// wantsBrokenPackage fails the test unless r names app-1.0 as what did
// not build, with its builder's last log line, and points at its own log
// (where), not the system's, which has none.
func wantsBrokenPackage(t *testing.T, r deploy.Result, where string) {
	t.Helper()
	wantPhase(t, r, deploy.PhaseFailed, "app-1.0, which", "did not build", nixtest.FailingPackageLine+" app-1.0")
	if !strings.Contains(r.Hint, "nix-store -l /nix/store/") || !strings.HasSuffix(strings.TrimSuffix(r.Hint, where), "-app-1.0.drv") ||
		strings.Contains(r.Message, "nix-store -l") || strings.Contains(r.Message, "nix log") {
		t.Errorf("the hint %q does not name app-1.0's log%s, or the message %q names a log too", r.Hint, where, r.Message)
	}
}

// builderRuns counts the processes a deployer's Builder starts.
type builderRuns struct {
	mu   sync.Mutex
	runs []string
}

func (b *builderRuns) hook(d *deploy.Deployer) {
	d.Options.Builder.Ran = func(args []string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.runs = append(b.runs, strings.Join(args, " "))
	}
}

func (b *builderRuns) count(prefix string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range b.runs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// Three nodes whose systems are not built: one nix-store --realise builds
// them for the rollout; the one that fails to build fails only itself,
// naming Nix's words, before anything is done on its host; the others
// deploy.
func TestDeployBuildsWhatThisMachineLacks(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (four hosts and their builds): make test runs it")
	}
	t.Parallel()
	systems := evaluated(t, map[string]nixtest.Configuration{"web1": good(), "web2": {System: good().System, BuildFails: true}, "web3": good(), "web4": needsBroken()})
	var nodes []deploy.Target
	var tgs []*nixtest.Target
	for _, name := range []string{"web1", "web2", "web3", "web4"} {
		tg := nixtest.NewTarget(t)
		tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
		n := targetOf(tg, name, systems[name].Path)
		n.Derivation = systems[name].Derivation
		nodes, tgs = append(nodes, n), append(tgs, tg)
	}
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	var runs builderRuns
	runs.hook(d)
	res := d.Deploy(context.Background(), nodes, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	wantPhase(t, res[1], deploy.PhaseFailed, "did not build", "fails to build, on purpose")
	if res[1].Hint != "its build log: nix-store -l "+systems["web2"].Derivation {
		t.Errorf("web2's hint is %q, want the command that prints its build log", res[1].Hint)
	}
	wantPhase(t, res[2], deploy.PhaseSucceeded)
	wantsBrokenPackage(t, res[3], "")
	if res[1].Step != deploy.StepBuild || res[1].Outcomes[deploy.CondCopied].Reason != "BuildFailed" {
		t.Errorf("web2 failed in %q with %+v, want the build step", res[1].Step, res[1].Outcomes[deploy.CondCopied])
	}
	if n := tgs[1].AcceptedConnections(); n != 0 {
		t.Errorf("web2, whose system did not build, was logged in to %d times", n)
	}
	for i, name := range []string{"web1", "web3"} {
		if got := tgs[i*2].CurrentSystem(); got != systems[name].Path {
			t.Errorf("%s runs %s, want %s", name, got, systems[name].Path)
		}
	}
	if n := runs.count("nix-store --realise"); n != 1 {
		t.Errorf("%d nix-store --realise for the rollout, want 1: %q", n, runs.runs)
	}
}

// builtOnTheTarget is node web1 of configuration c, not built here, with
// build_on = "target", on a host booted into another system.
func builtOnTheTarget(t *testing.T, c nixtest.Configuration) (*nixtest.Target, deploy.Target) {
	t.Helper()
	systems := evaluated(t, map[string]nixtest.Configuration{"web1": c})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n := targetOf(tg, "web1", systems["web1"].Path)
	n.Derivation, n.BuildOn = systems["web1"].Derivation, deploy.BuildTarget
	return tg, n
}

// build_on = "target": the derivation's closure is copied to the host and
// the system built there; this machine's store never has it.
func TestDeployBuildsOnTheTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a build on the host): make test runs it")
	}
	t.Parallel()
	tg, n := builtOnTheTarget(t, good())
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	var runs builderRuns
	runs.hook(d)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if r.Outcomes[deploy.CondCopied].Reason != "BuiltOnHost" {
		t.Errorf("ClosureCopied %+v, want BuiltOnHost", r.Outcomes[deploy.CondCopied])
	}
	if tg.CurrentSystem() != n.System || !tg.HasPath(t, n.Derivation) {
		t.Errorf("the host runs %s (want %s); its store has the derivation: %v", tg.CurrentSystem(), n.System, tg.HasPath(t, n.Derivation))
	}
	if _, err := os.Stat(n.System); err == nil {
		t.Errorf("the system %s was built on this machine too", n.System)
	}
	if n := runs.count("nix-store --realise"); n != 0 {
		t.Errorf("%d builds on this machine", n)
	}
}

// A system built on the host that needs a package that does not build:
// the node fails naming the package, its builder's last log lines, and
// its log on the host.
func TestDeployBuildOnTheTargetNamesTheDependencyThatFails(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a build on the host): make test runs it")
	}
	t.Parallel()
	tg, n := builtOnTheTarget(t, needsBroken())
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantsBrokenPackage(t, r, ", run on the host")
	if tg.CurrentSystem() == n.System {
		t.Error("the host runs a system that did not build")
	}
}

// An interrupt during a build stops it at once: exit 130 in the build
// step, nothing done on the host (no login), no builder left running.
func TestDeployInterruptedDuringABuild(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (an evaluation and a build): make test runs it")
	}
	t.Parallel()
	delay := nixtest.OwnBuildDelay(71 * time.Second)
	systems := evaluated(t, map[string]nixtest.Configuration{"slow": {System: good().System, BuildDelay: delay}})
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	n := targetOf(tg, "slow", systems["slow"].Path)
	n.Derivation = systems["slow"].Derivation
	d := deployer(t, deploy.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for !nixtest.BuilderSleeps(delay) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	r := d.Deploy(ctx, []deploy.Target{n}, nil)[0]
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the interrupted build took %s", took)
	}
	wantPhase(t, r, deploy.PhaseFailed, "interrupted during the build step", "nothing was done on the host")
	if r.ExitCode != deploy.ExitInterrupted || r.Step != deploy.StepBuild {
		t.Errorf("exit %d in %q, want 130 in the build step", r.ExitCode, r.Step)
	}
	if tg.AcceptedConnections() != 0 || tg.CurrentSystem() != old {
		t.Errorf("the host was touched: %d logins, runs %s", tg.AcceptedConnections(), tg.CurrentSystem())
	}
	if nixtest.BuilderSleeps(delay) {
		t.Errorf("the builder runs on after the deploy ended")
	}
}

// An interrupt during a build on the host (build_on = "target") stops the
// host's build too, as the end of the session tells it: exit 130 in the
// build step, the host's system unchanged, and no builder left running
// there.
func TestDeployInterruptedDuringABuildOnTheTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (an evaluation and a build): make test runs it")
	}
	t.Parallel()
	delay := nixtest.OwnBuildDelay(73 * time.Second)
	systems := evaluated(t, map[string]nixtest.Configuration{"slow": {System: good().System, BuildDelay: delay}})
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	n := targetOf(tg, "slow", systems["slow"].Path)
	n.Derivation, n.BuildOn = systems["slow"].Derivation, deploy.BuildTarget
	d := deployer(t, deploy.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for !nixtest.BuilderSleeps(delay) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	r := d.Deploy(ctx, []deploy.Target{n}, nil)[0]
	if r.ExitCode != deploy.ExitInterrupted || r.Step != deploy.StepBuild {
		t.Errorf("exit %d in %q, want 130 in the build step: %s", r.ExitCode, r.Step, r.Message)
	}
	if tg.CurrentSystem() != old {
		t.Errorf("the host runs %s, want %s still", tg.CurrentSystem(), old)
	}
	// Nix stops its builder once told; give it a moment.
	for end := time.Now().Add(10 * time.Second); nixtest.BuilderSleeps(delay) && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	if nixtest.BuilderSleeps(delay) {
		t.Errorf("the host's builder runs on after the deploy ended")
	}
}

// With parallelism, a node whose system is ready does not wait for the
// build of the node before it.
func TestDeployDoesNotWaitForAnotherNodesBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a build of 8 s): make test runs it")
	}
	t.Parallel()
	systems := evaluated(t, map[string]nixtest.Configuration{"slow": {System: good().System, BuildDelay: 8 * time.Second}, "quick": good()})
	var nodes []deploy.Target
	for _, name := range []string{"slow", "quick"} {
		tg := nixtest.NewTarget(t)
		tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
		n := targetOf(tg, name, systems[name].Path)
		n.Derivation = systems[name].Derivation
		nodes = append(nodes, n)
	}
	d := deployer(t, deploy.Options{Parallelism: 2, Builder: nixos.Nix{Env: []string{"NIX_CONFIG=" + nixtest.NixConfig + "max-jobs = 4\n"}},
		Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	ended := map[string]time.Time{}
	var mu sync.Mutex
	res := d.Deploy(context.Background(), nodes, func(r deploy.Result) {
		mu.Lock()
		defer mu.Unlock()
		ended[r.Name] = time.Now()
	})
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	wantPhase(t, res[1], deploy.PhaseSucceeded)
	if !ended["quick"].Before(ended["slow"].Add(-3 * time.Second)) {
		t.Errorf("quick ended %s, slow %s: quick waited for slow's build", ended["quick"].Format("15:04:05.000"), ended["slow"].Format("15:04:05.000"))
	}
}

// A saved plan applied on a machine whose store has neither the system
// nor its derivation fails that node saying what is missing and how to
// carry it, before anything is done on the host.
func TestDeployDerivationNotInThisStore(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n := targetOf(tg, "web1", "/nix/store/00000000000000000000000000000000-nixos-system-web1")
	n.Derivation = "/nix/store/00000000000000000000000000000000-nixos-system-web1.drv"
	r := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed, "nor its derivation", "in this machine's store", "plan again on this machine", "nix copy --derivation")
	if tg.AcceptedConnections() != 0 {
		t.Errorf("the host was logged in to")
	}
}

// With build_on = "target", the plan's summary says what the host's
// store lacks, not this machine's: a host that runs an earlier revision
// of the system (the same packages) builds the new toplevel only,
// although this machine, whose store has not the packages, would build
// them too.
func TestPreviewOnTheTargetSaysWhatTheHostLacks(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two evaluations and a build): make test runs it")
	}
	t.Parallel()
	c := good()
	// Packages of this test's own, which no other system holds.
	unique := fmt.Sprint(time.Now().UnixNano())
	c.System.Packages = map[string]int{"app-" + unique: 16, "libc-" + unique: 16}
	r := &nixtest.Repository{Dir: t.TempDir(), Configurations: map[string]nixtest.Configuration{"web1": c}}
	r.Write(t)
	nix := nixos.Nix{Env: []string{"NIX_CONFIG=" + nixtest.NixConfig}}
	earlier, err := nix.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	realise := exec.Command("nix-store", "--realise", earlier[0].Derivation)
	realise.Env = nixtest.DeployerEnv()
	if out, err := realise.CombinedOutput(); err != nil {
		t.Fatalf("nix-store --realise: %v\n%s", err, out)
	}
	tg := nixtest.NewTarget(t)
	tg.Boot(t, earlier[0].Path)
	// This machine keeps neither the system nor its packages (the
	// rest, other tests' systems hold too).
	closure, err := exec.Command("nix-store", "--query", "--requisites", earlier[0].Path).Output()
	if err != nil {
		t.Fatal(err)
	}
	var own []string
	for _, p := range strings.Fields(string(closure)) {
		if p == earlier[0].Path || strings.Contains(p, unique) {
			own = append(own, p)
		}
	}
	del := exec.Command("nix-store", append([]string{"--delete"}, own...)...)
	del.Env = nixtest.DeployerEnv()
	if out, err := del.CombinedOutput(); err != nil {
		t.Fatalf("nix-store --delete: %v\n%s", err, out)
	}
	c.Revision = 1
	r.Configurations["web1"] = c
	r.Write(t)
	next, err := nix.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	here, err := nix.WillBuild(context.Background(), next[0].Derivation)
	if err != nil || len(here.Build) != 3 {
		t.Fatalf("this machine would build %q (%v): want the two packages and the system", here.Build, err)
	}
	d := deployer(t, deploy.Options{})
	n := targetOf(tg, "web1", next[0].Path)
	sess, err := d.OpenSession(context.Background(), n.Settings)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	p, err := d.Preview(context.Background(), sess, next[0].Path, deploy.PreviewOptions{Derivation: next[0].Derivation, BuildOn: deploy.BuildTarget})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Pending.Build, " ") != next[0].Derivation || !strings.Contains(p.Text(), "build 1 derivation on the host (what its store lacks)") {
		t.Errorf("the host builds %q, want the new toplevel only:\n%s", p.Pending.Build, p.Text())
	}
}

// Two nodes that give one derivation each another system (the second's
// system from another evaluation): the derivation is built once, for what
// it makes; the node whose system it makes deploys, the other fails alone,
// saying its system and derivation do not go together.
func TestDeployNodesSharingADerivation(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two hosts and a build): make test runs it")
	}
	t.Parallel()
	systems := evaluated(t, map[string]nixtest.Configuration{"web1": good(), "web2": {System: good().System, Revision: 1}})
	var nodes []deploy.Target
	var tgs []*nixtest.Target
	for _, sys := range []string{systems["web1"].Path, systems["web2"].Path} {
		tg := nixtest.NewTarget(t)
		tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
		n := targetOf(tg, fmt.Sprintf("n%d", len(nodes)+1), sys)
		n.Derivation = systems["web1"].Derivation
		nodes, tgs = append(nodes, n), append(tgs, tg)
	}
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	res := d.Deploy(context.Background(), nodes, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	wantPhase(t, res[1], deploy.PhaseFailed, "is not what its derivation "+systems["web1"].Derivation+" builds", "from one evaluation")
	if tgs[0].CurrentSystem() != systems["web1"].Path || tgs[1].AcceptedConnections() != 0 {
		t.Errorf("n1 runs %s (want %s); n2 was logged in to %d times", tgs[0].CurrentSystem(), systems["web1"].Path, tgs[1].AcceptedConnections())
	}
}

// A node no record speaks of (every node of a deployment replaced after
// its first apply failed) whose host already runs its system after a
// passing verdict (built there, with build_on = "target" then) is asked
// first and recorded without a build here; a node a record speaks of is
// not asked, and its system is built.
func TestDeployDoesNotBuildWhatTheHostRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (three deploys and a build): make test runs it")
	}
	t.Parallel()
	_, n := builtOnTheTarget(t, good())
	opts := deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}}
	wantPhase(t, deployer(t, opts).Deploy(context.Background(), []deploy.Target{n}, nil)[0], deploy.PhaseSucceeded)

	n.BuildOn, n.Unrecorded = deploy.BuildLocal, true
	// The plan's look says so: nothing to build.
	d := deployer(t, opts)
	sess, err := d.OpenSession(context.Background(), n.Settings)
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []deploy.BuildOn{deploy.BuildLocal, deploy.BuildTarget} {
		p, err := d.Preview(context.Background(), sess, n.System, deploy.PreviewOptions{Derivation: n.Derivation, BuildOn: on})
		if text := p.Text(); err != nil || !strings.Contains(text, "already runs its system") || !strings.Contains(text, "without building or activating it again") || strings.Contains(text, "build ") || strings.Contains(text, "built") {
			t.Errorf("build_on %s: the preview of a host that runs its unbuilt system (%v):\n%s", on, err, text)
		}
	}
	sess.Close()
	d = deployer(t, opts)
	var runs builderRuns
	runs.hook(d)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded, "already runs")
	if !r.AlreadyCurrent || runs.count("nix-store --realise") != 0 {
		t.Errorf("a host that runs its system: recorded without activation %v, %d builds here (%q), want none", r.AlreadyCurrent, runs.count("nix-store --realise"), runs.runs)
	}
	if _, err := os.Stat(n.System); err == nil {
		t.Errorf("the system %s was built on this machine", n.System)
	}

	n.Unrecorded = false
	d = deployer(t, opts)
	var recorded builderRuns
	recorded.hook(d)
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{n}, nil)[0], deploy.PhaseSucceeded, "already runs")
	if recorded.count("nix-store --realise") != 1 {
		t.Errorf("a node a record speaks of: %d builds here, want 1 (it is not asked first)", recorded.count("nix-store --realise"))
	}
}
