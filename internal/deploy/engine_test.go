package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// deployer for the targets of one test, with short timeouts.
func deployer(t *testing.T, opts deploy.Options) *deploy.Deployer {
	t.Helper()
	dir := t.TempDir()
	control, err := deploy.NewControlDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(control) })
	opts.Env = append(opts.Env, "NIX_CONFIG="+nixtest.NixConfig)
	if opts.Goal == "" {
		opts.Goal = deploy.GoalSwitch
	}
	if opts.Holder == "" {
		opts.Holder = t.Name()
	}
	opts.Log = func(e deploy.Event) {
		t.Logf("%s %s %s: %s", time.Now().Format("15:04:05.000"), e.Node, e.Step, e.Message)
	}
	return &deploy.Deployer{
		Transport: &deploy.Transport{KnownHostsFile: filepath.Join(dir, deploy.KnownHostsFileName), ControlDir: control, RemoteExecTimeout: 30 * time.Second},
		Options:   opts,
	}
}

// copyWrapper is a nix-copy-closure that runs the shell command before,
// then the real one with the same arguments.
func copyWrapper(t *testing.T, before string) string {
	t.Helper()
	nixCopy, err := exec.LookPath("nix-copy-closure")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nix-copy-closure")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+before+"\nexec "+nixCopy+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func targetOf(tg *nixtest.Target, name, system string) deploy.Target {
	return deploy.Target{System: system, Settings: deploy.Settings{
		Name: name, Host: tg.Host, User: tg.User, PrivateKeyFile: tg.ClientKeyFile, HostKey: tg.HostKey,
		SSHOpts: []string{"Port=" + strconv.Itoa(tg.Port), "IdentitiesOnly=yes"},
	}}
}

// FR-001, FR-008, FR-010, US1-3: a switch copies, activates, judges and
// makes the new system the boot default.
func TestDeploySwitchSucceeds(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	// nix-copy-closure, through a wrapper that records how it was called.
	dir := t.TempDir()
	wrapper := copyWrapper(t, fmt.Sprintf("printf '%%s\\n' \"$*\" \"$NIX_SSHOPTS\" > %s/called", dir))
	res := deployer(t, deploy.Options{NixCopyClosure: wrapper}).Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)
	r := res[0]
	if r.Phase != deploy.PhaseSucceeded {
		t.Fatalf("phase %s: %s (hint %q)", r.Phase, r.Message, r.Hint)
	}
	called, _ := os.ReadFile(filepath.Join(dir, "called"))
	if lines := strings.Split(string(called), "\n"); len(lines) < 2 || lines[0] != "--to --gzip --use-substitutes "+tg.Host+" "+sys ||
		!strings.Contains(lines[1], "-o ControlPath=") || !strings.Contains(lines[1], "-o BatchMode=yes") {
		t.Errorf("nix-copy-closure was called as %q: want --to --gzip --use-substitutes over the master (NIX_SSHOPTS)", called)
	}
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys || tg.ProfileSystem() != sys {
		t.Errorf("host: current %s, boot %s, profile %s; want %s", tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem(), sys)
	}
	if r.PreviousSystem != old {
		t.Errorf("previous system %q, want %q", r.PreviousSystem, old)
	}
	for _, cond := range []deploy.Condition{deploy.CondReachable, deploy.CondCopied, deploy.CondActivated, deploy.CondVerdict, deploy.CondBootloader} {
		if !r.Outcomes[cond].Passed {
			t.Errorf("%s: %+v", cond, r.Outcomes[cond])
		}
	}
	t.Logf("calls: %v; accepted connections: %d", tg.Calls(), tg.AcceptedConnections())
}

// A failing verdict (exit 4 with a unit not allowed) rolls back; the boot
// entry never moved.
func TestDeployFailedUnitsRollBack(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"nginx.service"}})
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 5 * time.Second, SettleTimeout: 2 * time.Second}})
	r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
	if r.Phase != deploy.PhaseRolledBack || !strings.Contains(r.Message, "nginx.service") {
		t.Fatalf("phase %s: %s", r.Phase, r.Message)
	}
	if tg.CurrentSystem() != old || tg.BootEntry() != old {
		t.Errorf("after the rollback: current %s, boot %s; want %s", tg.CurrentSystem(), tg.BootEntry(), old)
	}
	if r.ExitCode != 4 {
		t.Errorf("exit code %d, want 4", r.ExitCode)
	}
}

// one deploys sys to a fresh target booted into a first system, and
// returns the target, the first system and the result.
func one(t *testing.T, b nixtest.Behaviour, opts deploy.Options, targetOpts ...nixtest.Option) (*nixtest.Target, string, string, deploy.Result) {
	t.Helper()
	tg := nixtest.NewTarget(t, targetOpts...)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, b)
	if opts.Verdict.ConfirmTimeout == 0 {
		opts.Verdict.ConfirmTimeout = 3 * time.Second
	}
	if opts.Verdict.SettleTimeout == 0 {
		opts.Verdict.SettleTimeout = 2 * time.Second
	}
	r := deployer(t, opts).Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
	return tg, old, sys, r
}

func wantPhase(t *testing.T, r deploy.Result, phase deploy.Phase, words ...string) {
	t.Helper()
	if r.Phase != phase {
		t.Fatalf("phase %s, want %s: %s (hint %q)", r.Phase, phase, r.Message, r.Hint)
	}
	for _, w := range words {
		if !strings.Contains(r.Message+" | "+r.Hint, w) {
			t.Errorf("%q / %q does not say %q", r.Message, r.Hint, w)
		}
	}
}

// FR-001, FR-002, US1-1, US1-2, SC-002: list order; a failed node stops
// no later one; every node is reported.
func TestDeployOrderAndFailureDoesNotStopLaterNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (three hosts deployed in turn): make test runs it")
	}
	t.Parallel()
	var tgs []*nixtest.Target
	var nodes []deploy.Target
	for i, b := range []nixtest.Behaviour{{Kind: nixtest.Succeed}, {Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}}, {Kind: nixtest.Succeed}} {
		tg := nixtest.NewTarget(t)
		tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
		tgs = append(tgs, tg)
		nodes = append(nodes, targetOf(tg, "n"+strconv.Itoa(i+1), nixtest.Closure(t, b)))
	}
	var order []string
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	res := d.Deploy(context.Background(), nodes, func(r deploy.Result) { order = append(order, r.Name+":"+string(r.Phase)) })
	if got := strings.Join(order, " "); got != "n1:Succeeded n2:RolledBack n3:Succeeded" {
		t.Fatalf("order and outcomes: %s", got)
	}
	if !res[1].Failed() || res[0].Failed() || res[2].Failed() {
		t.Errorf("failed: %v %v %v", res[0].Failed(), res[1].Failed(), res[2].Failed())
	}
	if tgs[2].CurrentSystem() != nodes[2].System || tgs[2].BootEntry() != nodes[2].System {
		t.Errorf("the node after the failed one was not switched")
	}
	if line := deploy.FailedLine(res[1].Name, res[1].ExitCode, res[1].Message); !strings.HasPrefix(line, "DEPLOY FAILED for n2 (exit 4): ") {
		t.Errorf("failed line %q", line)
	}
}

// FR-010, US3-1, SC-003: the boot lock is retried every interval up to
// the attempts, and its budget ends the node.
func TestDeployBootLockRetriesAndBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a lock's retries): make test runs it")
	}
	t.Parallel()
	opts := deploy.Options{BootLockAttempts: 4, BootLockInterval: 200 * time.Millisecond}
	tg, _, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.LockHeld, LockedCalls: 2, LockedAction: "boot"}, opts)
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.BootEntry() != sys {
		t.Errorf("boot entry %s after the retries", tg.BootEntry())
	}
	start := time.Now()
	tg, old, _, r := one(t, nixtest.Behaviour{Kind: nixtest.LockHeld, LockedCalls: 10, LockedAction: "boot"}, opts)
	wantPhase(t, r, deploy.PhaseFailed, "held for all 4 attempts", "another switch")
	if r.ExitCode != 11 || tg.BootEntry() != old {
		t.Errorf("exit %d, boot entry %s (want 11, %s)", r.ExitCode, tg.BootEntry(), old)
	}
	if took := time.Since(start); took < 3*opts.BootLockInterval {
		t.Errorf("the budget of 4 attempts took %s, less than 3 intervals", took)
	}
}

// Exit 11 during activation is retried like the boot lock.
func TestDeployActivationLockRetried(t *testing.T) {
	t.Parallel()
	tg, _, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.LockHeld, LockedCalls: 2, LockedAction: "test"}, deploy.Options{BootLockInterval: 100 * time.Millisecond})
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys {
		t.Errorf("current %s", tg.CurrentSystem())
	}
}

// The verdict matrix, end to end: what fails, and that the host ends on
// its previous system with the boot entry untouched.
func TestDeployVerdictMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (six deploys, one waits out activation_timeout): make test runs it")
	}
	t.Parallel()
	cases := []struct {
		name  string
		b     nixtest.Behaviour
		opts  deploy.Options
		phase deploy.Phase
		words []string
	}{
		{"exit 4, unit allowed", nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"cups.service"}},
			deploy.Options{Verdict: deploy.VerdictSpec{Rules: deploy.VerdictRules{AllowFailedUnits: []string{"cups.service"}}}}, deploy.PhaseSucceeded, nil},
		{"reboot required", nixtest.Behaviour{Kind: nixtest.RebootRequired}, deploy.Options{}, deploy.PhaseRolledBack, []string{"reboot", "goal boot"}},
		{"reboot required, allowed", nixtest.Behaviour{Kind: nixtest.RebootRequired},
			deploy.Options{Verdict: deploy.VerdictSpec{Rules: deploy.VerdictRules{AllowRebootRequired: true}}}, deploy.PhaseSucceeded, nil},
		{"hang past activation_timeout", nixtest.Behaviour{Kind: nixtest.Hang}, deploy.Options{ActivationTimeout: 2 * time.Second}, deploy.PhaseRolledBack, []string{"activation_timeout (2s)"}},
		{"a failing command check", nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{Verdict: deploy.VerdictSpec{Command: []string{"test -e /nonexistent"}}}, deploy.PhaseRolledBack, []string{"test -e /nonexistent", "exited 1"}},
		{"a failing tcp check", nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{Verdict: deploy.VerdictSpec{TCP: []int{1}}}, deploy.PhaseRolledBack, []string{"tcp 127.0.0.1:1", "refused"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg, old, sys, r := one(t, c.b, c.opts)
			wantPhase(t, r, c.phase, c.words...)
			want := old
			if c.phase == deploy.PhaseSucceeded {
				want = sys
			}
			if tg.CurrentSystem() != want || tg.BootEntry() != want {
				t.Errorf("host: current %s, boot %s; want both %s", tg.CurrentSystem(), tg.BootEntry(), want)
			}
		})
	}
}

// A new system that cuts off SSH fails the verdict, and the host rolls
// itself back without SSH when no confirmation arrives.
func TestDeployCutSSHRollsBackOnTheHost(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out confirm_timeout): make test runs it")
	}
	t.Parallel()
	tg, old, _, r := one(t, nixtest.Behaviour{Kind: nixtest.CutSSH}, deploy.Options{})
	wantPhase(t, r, deploy.PhaseRolledBack, "new SSH connection after the activation failed", "rolls itself back")
	deadline := time.Now().Add(15 * time.Second)
	for tg.CurrentSystem() != old && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if tg.CurrentSystem() != old || tg.BootEntry() != old {
		t.Errorf("the host did not roll itself back: current %s, boot %s, want %s", tg.CurrentSystem(), tg.BootEntry(), old)
	}
}

// The SSH session drops during activation (every connection to the host
// is cut while switch-to-configuration runs): the deployer reconnects and
// decides from what the host recorded, never from the lost exit status.
func TestDeploySessionDroppedMidActivation(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (slow activations, asked after a drop): make test runs it")
	}
	t.Parallel()
	cases := []struct {
		name   string
		b      nixtest.Behaviour
		phase  deploy.Phase
		exit   int
		reason string
	}{
		{"the activation succeeds", nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 2 * time.Second}, deploy.PhaseSucceeded, 0, "ActivatedAfterSessionDropped"},
		{"the activation fails units", nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}, Delay: 2 * time.Second},
			deploy.PhaseRolledBack, deploy.ExitUnitsFailed, "UnitsFailedAfterSessionDropped"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, c.b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dropped := dropWhenJournalSays(ctx, tg, "activating the configuration")
			// The lock session drops too: the watchdog hears no word while
			// the deployer asks over new logins, which on a busy machine
			// take seconds. confirm_timeout leaves them that room.
			r := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 8 * time.Second, SettleTimeout: 2 * time.Second}}).
				Deploy(ctx, []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
			cancel()
			dropped.Wait()
			wantPhase(t, r, c.phase)
			if got := r.Outcomes[deploy.CondActivated]; got.Reason != c.reason || !strings.Contains(got.Message, fmt.Sprintf("the host recorded exit %d", c.exit)) {
				t.Errorf("activation step %+v, want reason %s and the host's exit %d", got, c.reason, c.exit)
			}
			if c.exit != 0 && r.ExitCode != c.exit {
				t.Errorf("exit code %d, want the host's %d", r.ExitCode, c.exit)
			}
			want := old
			if c.phase == deploy.PhaseSucceeded {
				want = sys
			}
			if tg.CurrentSystem() != want || tg.BootEntry() != want {
				t.Errorf("host: current %s, boot %s; want both %s", tg.CurrentSystem(), tg.BootEntry(), want)
			}
		})
	}
}

// dropWhenJournalSays closes every established connection to the target
// (new ones still pass) once its activation's journal says what, or ctx
// ends; Wait on what it returns waits for it.
func dropWhenJournalSays(ctx context.Context, tg *nixtest.Target, what string) *sync.WaitGroup {
	var dropped sync.WaitGroup
	dropped.Add(1)
	go func() {
		defer dropped.Done()
		for ctx.Err() == nil && !strings.Contains(tg.Journal(), what) {
			time.Sleep(50 * time.Millisecond)
		}
		tg.Gate.SetMode(sshtest.GateOpen)
	}()
	return &dropped
}

// An activation that hangs, whose session dropped, is stopped at
// activation_timeout, counted from its start, as one whose session held:
// its unit stopped, the node rolled back, nothing of it left running (not
// taken for one without systemd, "no exit status", and judged by the
// verdict while it hangs on).
func TestDeploySessionDroppedMidHungActivationTimesOut(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Hang})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dropped := dropWhenJournalSays(ctx, tg, "reloading user units")
	opts := deploy.Options{ActivationTimeout: 6 * time.Second, Verdict: deploy.VerdictSpec{ConfirmTimeout: 8 * time.Second, SettleTimeout: 2 * time.Second}}
	r := deployer(t, opts).Deploy(ctx, []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
	cancel()
	dropped.Wait()
	wantPhase(t, r, deploy.PhaseRolledBack, "activation_timeout (6s)", "was stopped")
	if !strings.Contains(r.Hint, "raise activation_timeout (6s)") {
		t.Errorf("hint %q: want it to say that a slow activation needs a longer activation_timeout", r.Hint)
	}
	if got := r.Outcomes[deploy.CondActivated]; got.Reason != "ActivationTimedOut" {
		t.Errorf("activation step %+v, want reason ActivationTimedOut", got)
	}
	// Its unit's client, whose session dropped, ends once the unit has
	// recorded its end: a moment after it stopped.
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left = left[:0]
		for _, p := range tg.Leftovers() {
			if strings.Contains(p, "switch-to-configuration") {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range left {
		t.Errorf("the hung activation runs on 10s after the deploy: %s", p)
	}
	if tg.CurrentSystem() != old {
		t.Errorf("host runs %s, want %s", tg.CurrentSystem(), old)
	}
}

// The seed's edge case: a host whose login shell lacks the deployer's
// tools on PATH still deploys, through the PATH fallback to the system's
// sw/bin (where the tools are reached here only).
func TestDeployPathFallback(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t, nixtest.WithBareLoginPath())
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	probe := exec.Command("ssh", append(tg.SSHOptions(t), tg.Destination(), "command -v systemd-run nix-env || echo missing")...)
	if out, err := probe.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "missing" {
		t.Fatalf("the login PATH has systemd-run (%q, %v): the test would prove nothing", out, err)
	}
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	r := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if len(tg.SystemdRuns()) == 0 {
		t.Errorf("the activation did not go through systemd-run")
	}
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("host: current %s, boot %s; want %s", tg.CurrentSystem(), tg.BootEntry(), sys)
	}
}

// A node without a key file, with no ssh-agent, fails at once (BatchMode:
// never a prompt), naming the fix; nothing changes on it.
// Serial: "no agent" is an empty SSH_AUTH_SOCK in the process environment, which ssh inherits.
func TestDeployMissingKeyNoAgent(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.PrivateKeyFile = "" // the agent, which is not there; IdentitiesOnly keeps ~/.ssh out
	start := time.Now()
	r := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed, "the host refused the login", "Permission denied", "private_key_file, or the ssh-agent")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the refused login took %s", took)
	}
	if len(tg.Calls()) != 0 || tg.CurrentSystem() != old {
		t.Errorf("the node was changed: %v", tg.Calls())
	}
}

// FR-007 and the seed's edge case: a remote command whose host stops
// answering (the path to it stalls; nothing is closed) ends through the
// keepalive after about remote_exec_timeout, over the master connection.
func TestRemoteCommandEndsByKeepalive(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out the keepalive): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	control, err := os.MkdirTemp("", "fk") //nolint:usetesting // t.TempDir() is too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(control) })
	tr := &deploy.Transport{KnownHostsFile: filepath.Join(t.TempDir(), "kh"), ControlDir: control, RemoteExecTimeout: 5 * time.Second}
	c, err := tr.Open(context.Background(), targetOf(tg, "web1", "").Settings)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if out, err := exec.Command("ssh", c.MasterArgs()...).CombinedOutput(); err != nil {
		t.Fatalf("master: %v\n%s", err, out)
	}
	cmd := c.Command(context.Background(), "sleep 120")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	tg.Gate.Stall(true)
	defer tg.Gate.Stall(false)
	start := time.Now()
	err = cmd.Wait()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 255 {
		t.Errorf("the stalled command ended with %v, want exit 255", err)
	}
	// ServerAliveInterval=5 with ServerAliveCountMax=1: about 10 s.
	if took < 4*time.Second || took > 25*time.Second {
		t.Errorf("the stalled command ended after %s, want about 10 s (remote_exec_timeout 5 s)", took)
	}
}

// FR-009, US3-2, US3-3: in a container the activation has RuntimeMaxSec=180
// and a failing bootloader install says to use goal test.
func TestDeployContainer(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two deploys): make test runs it")
	}
	t.Parallel()
	tg, _, _, r := one(t, nixtest.Behaviour{Kind: nixtest.BootloaderFails}, deploy.Options{}, nixtest.WithContainer("lxc"))
	wantPhase(t, r, deploy.PhaseFailed, "goal = \"test\"")
	var props []string
	for _, run := range tg.SystemdRuns() {
		if strings.HasPrefix(run.Unit, "fleet-activate-") {
			props = append(props, run.Props...)
		}
	}
	if strings.Join(props, " ") != "RuntimeMaxSec=180" {
		t.Errorf("activation unit properties %q, want RuntimeMaxSec=180", props)
	}
	tg, _, _, r = one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{})
	wantPhase(t, r, deploy.PhaseSucceeded)
	for _, run := range tg.SystemdRuns() {
		if len(run.Props) > 0 {
			t.Errorf("on bare metal the unit %s has properties %q", run.Unit, run.Props)
		}
	}
}

// Without systemd running, the activation runs directly.
func TestDeployWithoutSystemd(t *testing.T) {
	t.Parallel()
	tg, _, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{}, nixtest.WithoutSystemd())
	wantPhase(t, r, deploy.PhaseSucceeded)
	if len(tg.SystemdRuns()) != 0 || tg.CurrentSystem() != sys {
		t.Errorf("systemd-run calls %v, current %s", tg.SystemdRuns(), tg.CurrentSystem())
	}
}

// The goals: boot touches only the boot entry; test only the running
// system; dry-activate neither.
func TestDeployGoals(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (three deploys): make test runs it")
	}
	t.Parallel()
	tg, old, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{Goal: deploy.GoalBoot})
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != old || tg.BootEntry() != sys {
		t.Errorf("boot: current %s, boot %s", tg.CurrentSystem(), tg.BootEntry())
	}
	tg, old, sys, r = one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{Goal: deploy.GoalTest})
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys || tg.BootEntry() != old || tg.ProfileSystem() != old {
		t.Errorf("test: current %s, boot %s, profile %s (the profile must stay, as with nixos-rebuild test)", tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem())
	}
	tg, old, _, r = one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{Goal: deploy.GoalDryActivate})
	// The record says what the dry activation said (on its standard
	// error, as NixOS's does).
	wantPhase(t, r, deploy.PhaseSucceeded, "dry-activate: the dry activation said: ", "would activate the configuration")
	if tg.CurrentSystem() != old || tg.BootEntry() != old || tg.ProfileSystem() != old {
		t.Errorf("dry-activate changed the host: current %s, boot %s, profile %s", tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem())
	}
}

// Issue 39: goal test then goal switch of the same system makes the boot
// entry, and activates nothing: the host ran the system after a passing
// verdict, but booted the one before it (goal test leaves the boot entry);
// a switch after that has nothing to do. A read says what the host boots.
func TestDeployGoalTestThenSwitchMakesTheBootEntry(t *testing.T) {
	t.Parallel()
	tg, old, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{Goal: deploy.GoalTest})
	wantPhase(t, r, deploy.PhaseSucceeded)
	if r.BootSystem != old {
		t.Errorf("goal test recorded the host booting %q, want the one before, %s", r.BootSystem, old)
	}
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	n := targetOf(tg, "web1", sys)
	if cur, err := d.ReadCurrent(context.Background(), n.Settings); err != nil || cur.System != sys || cur.Boots != old {
		t.Fatalf("ReadCurrent after goal test = %+v, %v; want it running %s and booting %s", cur, err, sys, old)
	}
	calls := len(tg.Calls())
	r = d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded, "is its boot entry now, without a new activation")
	if !r.BootEntryOnly || r.AlreadyCurrent || r.BootSystem != sys || r.VerifiedSystem != sys {
		t.Errorf("result %+v: want the boot entry made, booting and verified %s", r, sys)
	}
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys || tg.ProfileSystem() != sys {
		t.Errorf("the host runs %s, boots %s, its profile %s; want %s each", tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem(), sys)
	}
	if got := tg.Calls()[calls:]; len(got) != 1 || !strings.Contains(got[0], "boot") {
		t.Errorf("switch-to-configuration calls of the switch %q, want one boot entry and no activation", got)
	}
	if cur, err := d.ReadCurrent(context.Background(), n.Settings); err != nil || cur.Boots != sys {
		t.Errorf("ReadCurrent after the switch = %+v, %v; want it booting %s", cur, err, sys)
	}
	r = d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded, "already runs")
	if !r.AlreadyCurrent || r.BootSystem != sys {
		t.Errorf("the switch after: %+v, want nothing done, booting %s", r, sys)
	}
}

// FR-014, US4-1, SC-005: a host showing another key than its pin stops
// that node before the login; nothing changes on it.
func TestDeployHostKeyPinned(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	other := sshtest.NewKey(t).AuthorizedLine() // another host's key
	n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.HostKey = other
	r := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed, "Host key verification failed", "offered "+keyOf(tg.HostKey), "pinned in host_key ("+keyOf(other), "update host_key")
	if len(tg.Calls()) != 0 || tg.CurrentSystem() != old || tg.HasPath(t, n.System) {
		t.Errorf("the node was changed: calls %v, current %s", tg.Calls(), tg.CurrentSystem())
	}
}

// FR-015, US4-2: without a pin the first key is remembered, and a later
// deploy that reads the same file refuses another key at that address.
func TestDeployAcceptNewRemembered(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two hosts, two deploys): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.HostKey = ""
	d := deployer(t, deploy.Options{})
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{n}, nil)[0], deploy.PhaseSucceeded)
	// The same address now answers with another host's key.
	imposter := nixtest.NewTarget(t)
	imposter.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	tg.SSHD.Stop()
	m := targetOf(imposter, "web1", n.System)
	m.HostKey, m.SSHOpts = "", []string{"Port=" + strconv.Itoa(imposter.Port), "IdentitiesOnly=yes", "HostKeyAlias=[127.0.0.1]:" + strconv.Itoa(tg.Port)}
	r := d.Deploy(context.Background(), []deploy.Target{m}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed, "offered "+keyOf(imposter.HostKey), d.Transport.KnownHostsFile+" ("+keyOf(tg.HostKey)+")",
		"ssh-keygen -R '[127.0.0.1]:"+strconv.Itoa(tg.Port)+"'")
	if r.HostKeySeen != keyOf(tg.HostKey) {
		t.Errorf("HostKeySeen after the refusal %q, want the recorded %q", r.HostKeySeen, keyOf(tg.HostKey))
	}
	if len(imposter.Calls()) != 0 {
		t.Errorf("the imposter was deployed to: %v", imposter.Calls())
	}
}

// The host lock: a second deploy of the same host waits up to its
// lock_timeout, then fails naming the holder.
func TestDeployHostLock(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	tg.HoldDeployLock(t, "apply A")
	second := deployer(t, deploy.Options{Holder: "apply B", LockTimeout: time.Second})
	r := second.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed, "held by apply A", "lock_timeout (1s)")
	if r.ExitCode != 3 || r.Step != deploy.StepLock {
		t.Errorf("exit %d in step %q, want 3 in the lock step", r.ExitCode, r.Step)
	}
}

// Drift: the current system is read from the host.
func TestReadCurrent(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, sys)
	got, err := deployer(t, deploy.Options{}).ReadCurrent(context.Background(), targetOf(tg, "web1", sys).Settings)
	if err != nil || got.System != sys || got.HostKey != keyOf(tg.HostKey) {
		t.Errorf("ReadCurrent = %+v, %v; want %s and the key %s", got, err, sys, keyOf(tg.HostKey))
	}
}

// keyOf is an authorized_keys line's "type base64", without its comment.
func keyOf(line string) string { return strings.Join(strings.Fields(line)[:2], " ") }

// Beyond the seed: the key a node showed on first use is reported (state
// keeps it as host_key_seen), and a deploy or a read from a fresh runner
// (a new known_hosts file) that is given it refuses another key, naming
// both keys and the fix.
func TestDeployHostKeySeen(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (three deploys): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.HostKey = ""
	r := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if r.HostKeySeen != keyOf(tg.HostKey) {
		t.Fatalf("HostKeySeen %q, want %q", r.HostKeySeen, keyOf(tg.HostKey))
	}

	// A fresh runner, its known_hosts file empty, holds the node to a
	// recorded key the host does not have.
	other := sshtest.NewKey(t).AuthorizedLine() // another host's key
	m := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	m.HostKey, m.SeenHostKey = "", keyOf(other)
	before := tg.CurrentSystem()
	fresh := deployer(t, deploy.Options{})
	r = fresh.Deploy(context.Background(), []deploy.Target{m}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed, "offered "+keyOf(tg.HostKey), "host_key_seen in this node's status: "+keyOf(other), "set host_key on this node")
	if tg.CurrentSystem() != before || tg.HasPath(t, m.System) {
		t.Errorf("the node was changed: current %s", tg.CurrentSystem())
	}
	if kh, _ := os.ReadFile(fresh.Transport.KnownHostsFile); len(kh) != 0 {
		t.Errorf("the refused key went into the known_hosts file: %q", kh)
	}
	_, err := fresh.ReadCurrent(context.Background(), m.Settings)
	if err == nil || !strings.Contains(err.Error(), "offered "+keyOf(tg.HostKey)) || !strings.Contains(err.Error(), keyOf(other)) {
		t.Errorf("ReadCurrent with another recorded key: %v", err)
	}

	// The recorded key it does have: the deploy goes on.
	m.SeenHostKey = keyOf(tg.HostKey)
	wantPhase(t, fresh.Deploy(context.Background(), []deploy.Target{m}, nil)[0], deploy.PhaseSucceeded)
}

// US2, SC-006: a node reached on a port only the ssh_config_file names
// (its name an alias there), the copy included. FR-016: a host-key option
// the file sets under a Match line is left to the file, and the log says
// so.
func TestDeployThroughSSHConfigFile(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	d.Transport.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
	config := "Host alias-web1\n  HostName " + tg.Host + "\n  Port " + strconv.Itoa(tg.Port) + "\n  IdentitiesOnly yes\n" +
		"Match user someone-else\n  StrictHostKeyChecking ask\n"
	if err := os.WriteFile(d.Transport.ConfigFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	n := targetOf(tg, "web1", sys)
	n.Host, n.SSHOpts = "alias-web1", nil
	var logged []string
	d.Options.Log = func(e deploy.Event) { logged = append(logged, e.Message) }
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("current %s boot %s", tg.CurrentSystem(), tg.BootEntry())
	}
	if !strings.Contains(strings.Join(logged, "\n"), "ssh_config_file sends alias-web1 -> 127.0.0.1") {
		t.Errorf("the redirect was not logged: %q", logged)
	}
	if !strings.Contains(strings.Join(logged, "\n"), "ssh_config_file sets StrictHostKeyChecking under a Match line") {
		t.Errorf("the host-key option under a Match line was not logged: %q", logged)
	}
}

// An interrupted deploy stops after the current node's current step: the
// node interrupted in its activation is recorded as such with what the
// host runs, and the nodes after it are not started.
func TestDeployInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two hosts, an interrupted activation): make test runs it")
	}
	t.Parallel()
	// n2 is never started: its host boots nothing, and its logins and
	// calls say whether it was touched.
	tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg1.Boot(t, old)
	nodes := []deploy.Target{
		targetOf(tg1, "n1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Hang})),
		targetOf(tg2, "n2", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})),
	}
	d := deployer(t, deploy.Options{ActivationTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Interrupted once the host has begun the activation (a fixed time
	// may come, on a busy machine, before the step).
	var loginTook time.Duration
	var begun sync.WaitGroup
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == deploy.EventStepEnded && e.Node == "n1" && e.Step == deploy.StepConnect {
			loginTook = e.Took
		}
		if e.Kind == deploy.EventStepStarted && e.Node == "n1" && e.Step == deploy.StepActivate {
			begun.Go(func() {
				for ctx.Err() == nil && !strings.Contains(tg1.Journal(), "activating the configuration") {
					time.Sleep(20 * time.Millisecond)
				}
				cancel()
			})
		}
	}
	start := time.Now()
	res := d.Deploy(ctx, nodes, nil)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the interrupted deploy took %s", took)
	}
	cancel()
	begun.Wait()
	// What the host runs is asked over the master for AskTimeout: on a
	// machine so busy that a login took half of that, no answer may come.
	words := []string{"interrupted during the activate step", "it runs " + old}
	if loginTook > deploy.AskTimeout/2 && strings.Contains(res[0].Message, "what it runs now could not be read") {
		words = words[:1]
	}
	wantPhase(t, res[0], deploy.PhaseFailed, words...)
	if res[1].Phase != deploy.PhasePending || len(tg2.Calls()) != 0 || tg2.AcceptedConnections() != 0 {
		t.Errorf("n2 after the interrupt: %s, calls %v, %d logins", res[1].Phase, tg2.Calls(), tg2.AcceptedConnections())
	}
	if tg1.BootEntry() != old {
		t.Errorf("n1's boot entry moved: %s", tg1.BootEntry())
	}
}

// FR-017: a node behind a ProxyJump: the jump host is trusted on first use
// in the deployment's known_hosts file, and the node's own pinned key is
// still checked end to end.
func TestDeployThroughProxyJump(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two deploys through a bastion): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, tg.SSHD.ClientKey)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	n := targetOf(tg, "web1", sys)
	n.SSHOpts = append(n.SSHOpts, "ProxyJump=jump@"+bastion.Addr)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if bastion.Accepted() == 0 {
		t.Errorf("the deploy did not go through the bastion")
	}
	kh, err := os.ReadFile(d.Transport.KnownHostsFile)
	if err != nil || !strings.Contains(string(kh), strings.Fields(bastion.HostKey.AuthorizedLine())[1]) {
		t.Errorf("the bastion's key was not remembered in %s: %q, %v", d.Transport.KnownHostsFile, kh, err)
	}
	// Through the same bastion, a node pinned to another key is refused.
	other := sshtest.NewKey(t).AuthorizedLine() // another host's key
	m := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	m.HostKey, m.SSHOpts = other, append(m.SSHOpts, "ProxyJump=jump@"+bastion.Addr)
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{m}, nil)[0], deploy.PhaseFailed, "Host key verification failed")
}

// A host left running a system whose verdict failed (on_failure = keep)
// is not taken as done by a later deploy of it: only a passing verdict
// marks a system done there, and a deploy of a system the host runs after
// a passing verdict activates nothing.
func TestDeployKeptFailureIsNotDone(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (four deploys): make test runs it")
	}
	t.Parallel()
	tg, old, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}}, deploy.Options{Keep: true})
	wantPhase(t, r, deploy.PhaseFailed, "kept active", "the system profile points back at "+old)
	if tg.CurrentSystem() != sys {
		t.Fatalf("keep: current %s", tg.CurrentSystem())
	}
	// Issue 39: the system whose verdict failed is not what the host
	// boots, nor what a boot entry made later would install.
	if tg.ProfileSystem() != old || tg.BootEntry() != old || r.BootSystem != old {
		t.Errorf("keep: profile %s, boot entry %s, recorded boot %s; want the system before, %s", tg.ProfileSystem(), tg.BootEntry(), r.BootSystem, old)
	}
	n := targetOf(tg, "web1", sys)
	d := deployer(t, deploy.Options{Keep: true, Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{n}, nil)[0], deploy.PhaseFailed, "db.service")
	// A system that passed is done.
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	g := targetOf(tg, "web1", good)
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{g}, nil)[0], deploy.PhaseSucceeded, "switched")
	calls := len(tg.Calls())
	r = d.Deploy(context.Background(), []deploy.Target{g}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded, "already runs", "without a new activation")
	if !r.AlreadyCurrent || len(tg.Calls()) != calls {
		t.Errorf("a system the host runs after a passing verdict was activated again: %v", tg.Calls()[calls:])
	}
}

// Issue 14 (trial): the copy starts while the lock is taken and is
// abandoned when the host already runs the system; Nix left the
// directory it makes in TMPDIR behind when killed, one per such node per
// apply. Each copy has a TMPDIR of its own, gone once the deploy ends.
func TestDeployAbandonedCopyLeavesNoTemporaryDirectory(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, sys)
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	if r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]; r.Phase != deploy.PhaseSucceeded {
		t.Fatalf("first deploy: %s %s", r.Phase, r.Message)
	}
	dir := t.TempDir()
	d.Options.NixCopyClosure = copyWrapper(t, fmt.Sprintf("printf '%%s\\n' \"$TMPDIR\" > %s/tmpdir", dir))
	r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded, "already runs")
	b, err := os.ReadFile(filepath.Join(dir, "tmpdir"))
	tmp := strings.TrimSpace(string(b))
	if err != nil || tmp == "" {
		t.Fatalf("the copy did not start, or had no TMPDIR of its own (%q, %v)", tmp, err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the copy's TMPDIR %s is still there after the deploy (%v)", tmp, err)
	}
}

// The verdict's http checks, from the deployer: a URL answering what is
// expected passes; one that answers otherwise fails the node and rolls
// it back.
func TestDeployHTTPVerdictCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two deploys): make test runs it")
	}
	t.Parallel()
	var mu sync.Mutex
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
	}))
	defer srv.Close()
	opts := deploy.Options{Verdict: deploy.VerdictSpec{HTTP: []deploy.HTTPCheck{{URL: srv.URL + "/health", ExpectStatus: 200}}}}
	tg, _, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, opts)
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys {
		t.Errorf("current %s", tg.CurrentSystem())
	}
	mu.Lock()
	status = http.StatusNotFound
	mu.Unlock()
	tg, old, _, r := one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, opts)
	wantPhase(t, r, deploy.PhaseRolledBack, "status 404, expected 200")
	if tg.CurrentSystem() != old || tg.BootEntry() != old {
		t.Errorf("after a failing http check: current %s, boot %s, want %s", tg.CurrentSystem(), tg.BootEntry(), old)
	}
}

// Issue 12: host_key_seen is only ever a key the host showed. A node
// pinned to host A's key whose ssh_opts turn the check off
// (StrictHostKeyChecking=no) and that reaches host B records B's key,
// never the pin it was not held to; so do its reads.
func TestHostKeySeenIsTheKeyTheHostShowed(t *testing.T) {
	t.Parallel()
	aKey := sshtest.NewKey(t).AuthorizedLine() // host A is never reached: its key is all it takes
	b := nixtest.NewTarget(t)
	b.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n := targetOf(b, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.HostKey = aKey
	n.SSHOpts = append(n.SSHOpts, "StrictHostKeyChecking=no")
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	cur, err := d.ReadCurrent(context.Background(), n.Settings)
	if err != nil || cur.HostKey != keyOf(b.HostKey) {
		t.Errorf("ReadCurrent: key %q, %v; want B's %q (the pin was A's %q)", cur.HostKey, err, keyOf(b.HostKey), keyOf(aKey))
	}
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if r.HostKeySeen != keyOf(b.HostKey) {
		t.Errorf("HostKeySeen %q, want B's %q (the pin was A's %q)", r.HostKeySeen, keyOf(b.HostKey), keyOf(aKey))
	}
}

// Issue 12: a deployer whose $TMPDIR is long (a macOS one is about 50
// bytes) still gets control sockets ssh can make.
// Serial: the control directory is made in the process's TMPDIR.
func TestDeployWithALongTMPDIR(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("t", 70))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	tg, _, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.Succeed}, deploy.Options{})
	wantPhase(t, r, deploy.PhaseSucceeded)
	if tg.CurrentSystem() != sys {
		t.Errorf("current %s", tg.CurrentSystem())
	}
}

// Issue 13 §5: deploying as a user who is not root. With use_sudo the
// login user runs every command that needs root through sudo -n, and the
// closure is copied into the host's store by root through sudo; a login
// without the rights fails the node at the lock, before anything changed,
// naming the right it lacks.
func TestDeployAsALoginUserThatIsNotRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (three hosts): make test runs it")
	}
	t.Parallel()
	for _, c := range []struct {
		name    string
		user    func(sshtest.TB) string
		useSudo bool
		words   []string // empty: succeeds
	}{
		{"use_sudo with passwordless sudo", sshtest.SudoUser, true, nil},
		{"use_sudo without sudo rights", sshtest.LoginUser, true,
			[]string{"the login user " + sshtest.LoginUserName + " cannot run commands as root with sudo -n", "nothing was done", "NOPASSWD"}},
		{"not root, no use_sudo", sshtest.SudoUser, false,
			[]string{"the login user " + sshtest.SudoUserName + " cannot take the host's deploy lock", "needs root's rights", "set use_sudo = true"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t, nixtest.WithLoginUser(c.user(t)))
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			n := targetOf(tg, "web1", sys)
			n.UseSudo = c.useSudo
			d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
			r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
			if c.words == nil {
				wantPhase(t, r, deploy.PhaseSucceeded)
				if tg.CurrentSystem() != sys || tg.BootEntry() != sys || !tg.HasPath(t, sys) {
					t.Errorf("the host runs %s and boots %s, want %s", tg.CurrentSystem(), tg.BootEntry(), sys)
				}
				return
			}
			wantPhase(t, r, deploy.PhaseFailed, c.words...)
			if r.Step != deploy.StepLock {
				t.Errorf("failed in step %s, want %s", r.Step, deploy.StepLock)
			}
			untouched(t, tg, old, sys)
		})
	}
}

// Issue 14 trial: an ssh-agent holding more keys than sshd lets a login
// try ends in "Too many authentication failures". The host answered: the
// node says its login was refused and how to offer one key, not that the
// host cannot be reached.
// Serial: ssh finds the agent and ~/.ssh through the process's SSH_AUTH_SOCK and HOME.
func TestDeployAgentWithTooManyKeysIsALoginRefused(t *testing.T) {
	var keys []*sshtest.Key
	for range 8 {
		keys = append(keys, sshtest.NewKey(t))
	}
	t.Setenv("SSH_AUTH_SOCK", sshtest.StartAgent(t, keys...))
	t.Setenv("HOME", t.TempDir()) // no ~/.ssh keys of this machine's user
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.PrivateKeyFile = ""
	n.SSHOpts = []string{"Port=" + strconv.Itoa(tg.Port)} // every agent key is offered
	r := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed, "the host refused the login", "Too many authentication failures", "give the node's key with private_key_file")
	if strings.Contains(r.Message, "cannot reach") {
		t.Errorf("message %q says the host cannot be reached", r.Message)
	}
	if len(tg.Calls()) != 0 || tg.CurrentSystem() != old {
		t.Errorf("the node was changed: %v", tg.Calls())
	}
}

// The lock prunes the runs' directories on the host (the activation's
// output, the watchdog's decision) to the latest 10, oldest first, and
// leaves fewer alone.
func TestDeployKeepsTheLatestRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two deploys): make test runs it")
	}
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	// plant makes run directories, each a minute newer than the one
	// before, the first ago old.
	plant := func(ago time.Duration, names ...string) {
		for i, name := range names {
			dir := tg.Path("/run/fleet-deploy/" + name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			when := time.Now().Add(-ago + time.Duration(i)*time.Minute)
			if err := os.Chtimes(dir, when, when); err != nil {
				t.Fatal(err)
			}
		}
	}
	runs := func() []string {
		entries, err := os.ReadDir(tg.Path("/run/fleet-deploy"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			if e.IsDir() {
				names = append(names, e.Name())
			}
		}
		return names
	}
	// The first deploy's watchdog may still be ending when the second
	// one locks.
	d := deployer(t, deploy.Options{LockTimeout: 30 * time.Second})
	deployNew := func() {
		t.Helper()
		sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}) // a new store path each call
		wantPhase(t, d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", sys)}, nil)[0], deploy.PhaseSucceeded)
	}
	plant(time.Hour, "a1", "a2", "a3", "a4", "a5")
	deployNew()
	if got := runs(); len(got) != 6 || !slices.Contains(got, "a1") {
		t.Fatalf("after a deploy beside 5 earlier runs the host keeps %v, want all 5 and the new one", got)
	}
	plant(10*time.Hour, "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8")
	deployNew()
	got := runs()
	if len(got) != 11 {
		t.Fatalf("after a deploy beside 14 earlier runs the host keeps %d: %v, want the latest 10 and the new run", len(got), got)
	}
	for _, name := range []string{"b1", "b2", "b3", "b4"} {
		if slices.Contains(got, name) {
			t.Errorf("the old run %s was kept: %v", name, got)
		}
	}
	for _, name := range []string{"b5", "b8", "a1", "a5"} {
		if !slices.Contains(got, name) {
			t.Errorf("run %s, one of the latest 10, was removed: %v", name, got)
		}
	}
}

// A verdict command never goes on into the watchdog's switch back (issue
// 37's trial: a check was left running on the host after Ctrl-C,
// re-parented to PID 1, and did what it did 23 s after the interrupt,
// during the switch back). Interrupted while the check runs, the check is
// stopped on the host once the run is decided.
func TestDeployInterruptedCheckEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (an interrupted verdict check): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	started, done := filepath.Join(tg.StateDir, "check-started"), filepath.Join(tg.StateDir, "check-done")
	check := "touch /run/nixtest/check-started; sleep 7; touch /run/nixtest/check-done"
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second, Command: []string{check}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var begun sync.WaitGroup
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == deploy.EventStepStarted && e.Step == deploy.StepVerdict {
			begun.Go(func() {
				for ctx.Err() == nil {
					if _, err := os.Stat(started); err == nil {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				cancel()
			})
		}
	}
	r := d.Deploy(ctx, []deploy.Target{targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))}, nil)[0]
	cancel()
	begun.Wait()
	wantPhase(t, r, deploy.PhaseFailed, "interrupted during the verdict step")
	// The watchdog decides confirm_timeout (3 s) after the interrupt, and
	// the check (7 s) is stopped then.
	time.Sleep(9 * time.Second)
	if _, err := os.Stat(done); err == nil {
		t.Errorf("the verdict's check went on after the interrupt and finished on the host")
	}
}
