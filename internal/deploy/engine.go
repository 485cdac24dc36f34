package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Goal is what a deployment does with a node's new system.
type Goal string

// The goals, as nixos-rebuild and colmena name them.
const (
	GoalSwitch      Goal = "switch"       // activate, judge, make it the boot default
	GoalBoot        Goal = "boot"         // make it the boot default only
	GoalTest        Goal = "test"         // activate and judge; the boot default stays
	GoalDryActivate Goal = "dry-activate" // show what activation would do
)

// Phase is where a node's deploy is, or how it ended.
type Phase string

// The phases of a node.
const (
	PhasePending    Phase = "Pending"
	PhaseCopying    Phase = "Copying"
	PhaseActivating Phase = "Activating"
	PhaseVerifying  Phase = "Verifying"
	PhaseFinalizing Phase = "Finalizing"
	PhaseSucceeded  Phase = "Succeeded"
	PhaseFailed     Phase = "Failed"
	PhaseRolledBack Phase = "RolledBack"
	PhaseSkipped    Phase = "Skipped"
)

// Check outcomes of a step: the condition each sets.
type Step string

// The steps, as conditions.
const (
	StepReachable  Step = "Reachable"
	StepCopied     Step = "ClosureCopied"
	StepActivated  Step = "Activated"
	StepVerdict    Step = "VerdictPassed"
	StepBootloader Step = "BootloaderFinalized"
)

// StepResult is one step's outcome: passed, or why not.
type StepResult struct {
	Passed  bool
	Reason  string
	Message string
}

// HTTPCheck and friends are the verdict's user checks.
type HTTPCheck struct {
	URL          string
	ExpectStatus int
}

// VerdictSpec is the deployment's verdict settings.
type VerdictSpec struct {
	ConfirmTimeout time.Duration
	SettleTimeout  time.Duration
	Rules          VerdictRules
	HTTP           []HTTPCheck
	TCP            []int    // ports on the node's host, from the deployer
	Command        []string // remote commands that must exit 0
}

// Options are a deployment's settings.
type Options struct {
	Goal              Goal
	Keep              bool // on_failure = "keep": a failing verdict leaves the new system active
	BootLockAttempts  int
	BootLockInterval  time.Duration
	ActivationTimeout time.Duration
	LockTimeout       time.Duration
	Verdict           VerdictSpec
	// Holder names this deployment to another one waiting for the lock.
	Holder string
	// NixCopyClosure is the nix-copy-closure binary; on PATH when empty.
	NixCopyClosure string
	// Env is added to the environment of local commands (NIX_CONFIG).
	Env []string
	// Log receives a line per step (tflog in the provider).
	Log func(node, msg string)
}

// Target is one node to deploy.
type Target struct {
	Settings
	System string
	// SkipIfCurrent leaves a host that already runs System alone: the
	// caller has no record of the node (a new one, or a deployment
	// replaced after a failed create) and asks the host instead.
	SkipIfCurrent bool
}

// Result is a node's record after its deploy.
type Result struct {
	Name, Host     string
	Phase          Phase
	PreviousSystem string
	CurrentSystem  string
	ExitCode       int
	Message, Hint  string
	Started        time.Time
	Finished       time.Time
	Steps          map[Step]StepResult
	RolledBack     bool
	// HostKeySeen is the key the host offered when the deploy logged in
	// ("type base64"); empty when it was not reached.
	HostKeySeen string
}

// Failed reports whether the node's deploy failed (a rollback is a failure).
func (r Result) Failed() bool { return r.Phase == PhaseFailed || r.Phase == PhaseRolledBack }

// Deployer deploys nodes over a transport.
type Deployer struct {
	Transport *Transport
	Options   Options
}

func (d *Deployer) log(node, format string, args ...any) {
	if d.Options.Log != nil {
		d.Options.Log(node, fmt.Sprintf(format, args...))
	}
}

// Deploy runs the nodes one at a time, in order; a failed node never stops
// the next. onResult is called after each node (so state can be saved as
// the deploy goes). An interrupted deploy stops after the current node's
// current step; nodes not reached are returned Pending.
func (d *Deployer) Deploy(ctx context.Context, nodes []Target, onResult func(Result)) []Result {
	out := make([]Result, len(nodes))
	for i, n := range nodes {
		if ctx.Err() != nil {
			out[i] = Result{Name: n.Name, Host: n.Host, Phase: PhasePending, Message: "not started: the deploy was interrupted"}
		} else {
			d.log(n.Name, "DEPLOYING %s", n.Name)
			out[i] = d.node(ctx, n)
			d.log(n.Name, "%s %s: %s", n.Name, out[i].Phase, out[i].Message)
		}
		if onResult != nil {
			onResult(out[i])
		}
	}
	return out
}

// node runs the per-node sequence.
func (d *Deployer) node(ctx context.Context, n Target) (r Result) {
	r = Result{Name: n.Name, Host: n.Host, Phase: PhasePending, Started: time.Now().UTC(), Steps: map[Step]StepResult{}}
	defer func() { r.Finished = time.Now().UTC() }()
	fail := func(exit int, step Step, reason, msg, hint string) Result {
		r.Phase, r.ExitCode, r.Message, r.Hint = PhaseFailed, exit, msg, hint
		if step != "" {
			r.Steps[step] = StepResult{Reason: reason, Message: msg}
		}
		return r
	}
	if _, err := os.Stat(n.System); err != nil {
		return fail(1, StepCopied, "SystemMissing", fmt.Sprintf("system %s does not exist on this machine: build it first", n.System), "")
	}
	c, err := d.Transport.Open(ctx, n.Settings)
	if err != nil {
		return fail(1, StepReachable, "InvalidConfiguration", err.Error(), "")
	}
	defer c.Close()
	if c.Redirected != "" {
		d.log(n.Name, "ssh_config_file sends %s", c.Redirected)
	}
	if exit, msg := d.startMaster(ctx, c); exit != 0 {
		if hostKeyRefused(msg) {
			msg, hint, trusted := d.hostKeyMismatch(ctx, c, n.Settings)
			r.HostKeySeen = trusted // the refused key is never recorded
			return fail(exit, StepReachable, "HostKeyMismatch", msg, hint)
		}
		return fail(exit, StepReachable, "ConnectionFailed", "cannot reach the host: "+msg, sshHint(msg))
	}
	r.HostKeySeen = c.SeenKey(ctx)
	r.Steps[StepReachable] = StepResult{Passed: true, Reason: "Connected", Message: "logged in over SSH"}

	d.log(n.Name, "connected; taking the host's deploy lock and copying %s", n.System)
	// The copy only adds paths to the host's store, which is safe whoever
	// holds the lock: it runs while the lock is taken, and is abandoned if
	// the lock is not.
	copyCtx, stopCopy := context.WithCancel(ctx)
	defer stopCopy()
	copied := make(chan copyResult, 1)
	go func() {
		cmd := exec.CommandContext(copyCtx, d.nixCopyClosure(), "--to", "--gzip", "--use-substitutes", n.Host, n.System)
		cmd.Env = append(append(os.Environ(), d.Options.Env...), "NIX_SSHOPTS="+c.NixSSHOpts())
		out, err := d.run(cmd)
		copied <- copyResult{out, err}
	}()
	abandonCopy := func() { stopCopy(); <-copied }
	// Lock: held by a session for the whole deploy of the node; the same
	// round trip reads the host.
	release, lines, err := d.lock(ctx, c)
	if err != nil {
		abandonCopy()
		var busy lockBusyError
		if errors.As(err, &busy) {
			return fail(3, StepReachable, "DeployLockBusy", err.Error(), "another deployment of this host is running; it ends, or its lock_timeout must be longer")
		}
		return fail(1, StepReachable, "LockFailed", err.Error(), "")
	}
	defer release()
	for len(lines) < 4 {
		lines = append(lines, "")
	}
	r.PreviousSystem = strings.TrimSpace(lines[0])
	r.CurrentSystem = r.PreviousSystem
	container, systemd := lines[1] == "container", lines[2] == "systemd"
	if n.SkipIfCurrent && r.PreviousSystem == n.System && strings.TrimSpace(lines[3]) == n.System {
		abandonCopy()
		r.Phase, r.Message = PhaseSucceeded, "the host already runs this system: nothing to do"
		return r
	}

	// Copy.
	d.log(n.Name, "locked (current system %s); waiting for the copy", orNone(r.PreviousSystem))
	r.Phase = PhaseCopying
	if res := <-copied; res.err != nil {
		exit, msg := exitOf(res.err, res.out)
		return fail(exit, StepCopied, "CopyFailed", "nix-copy-closure failed: "+msg, "")
	}
	r.Steps[StepCopied] = StepResult{Passed: true, Reason: "Copied", Message: "the closure is in the host's store"}

	if d.Options.Goal == GoalDryActivate {
		out, err := d.output(c.Command(ctx, remote(q(n.System)+"/bin/switch-to-configuration dry-activate")))
		if err != nil {
			exit, msg := exitOf(err, out)
			return fail(exit, StepActivated, "DryActivationFailed", "dry-activate failed: "+msg, "")
		}
		r.Phase, r.Message = PhaseSucceeded, "dry-activate: "+lastLines(out, 20)
		return r
	}

	// Profile (not for goal test, which leaves the boot default alone, as
	// nixos-rebuild test does).
	profile := "nix-env -p " + ProfilePath + " --set " + q(n.System) + " || { echo " + q(profileFailed) + " >&2; exit 1; }; "
	if d.Options.Goal == GoalTest {
		profile = ""
	}
	if d.Options.Goal == GoalBoot {
		if out, err := d.output(c.Command(ctx, remote(profile))); err != nil {
			exit, msg := exitOf(err, out)
			return fail(exit, StepActivated, "ProfileFailed", "nix-env --set failed: "+msg, "")
		}
		return d.finalise(ctx, c, n, &r, container, "")
	}

	// Activate, with the host-side watchdog that rolls back unconfirmed;
	// the profile and the watchdog start in one round trip.
	d.log(n.Name, "activating")
	r.Phase = PhaseActivating
	run := runID()
	prev := r.PreviousSystem
	watch := !d.Options.Keep && prev != "" && prev != n.System
	prepare := "mkdir -p " + q(stateDir+"/"+run)
	if watch {
		prepare = d.startDetached(run, systemd,
			watchdogScript(run, prev, int(d.activationTimeout()/time.Second)+5, int(d.confirmTimeout()/time.Second)))
	}
	// A subshell: the watchdog's start exits it on failure, and the
	// marker then names the step.
	prepare = profile + "(\n" + prepare + "\n) || { echo " + q(prepareFailed) + " >&2; exit 1; }; "
	exit, actMsg, timedOut := d.activate(ctx, c, run, n.System, systemd, container, prepare)
	if exit != 0 && (strings.Contains(actMsg, profileFailed) || strings.Contains(actMsg, prepareFailed)) {
		switch {
		case strings.Contains(actMsg, profileFailed):
			return fail(exit, StepActivated, "ProfileFailed", "nix-env --set failed: "+actMsg, "")
		case watch:
			return fail(exit, StepActivated, "WatchdogFailed", "cannot start the rollback watchdog on the host: "+actMsg, "")
		}
		return fail(exit, StepActivated, "ActivationFailed", "cannot prepare the activation: "+actMsg, "")
	}
	if ctx.Err() != nil {
		msg := "interrupted during activation; the host decides: " + d.hostState(c, n.System)
		if watch {
			msg += fmt.Sprintf("; unconfirmed, the activation is switched back to %s by the host's watchdog within confirm_timeout (%s) of its end", prev, d.confirmTimeout())
		}
		return fail(ExitInterrupted, StepActivated, "Interrupted", msg,
			"the next apply retries this node; an activation the interrupt left running is rolled back by the host unless it was confirmed")
	}
	if timedOut {
		r.Steps[StepActivated] = StepResult{Reason: "ActivationTimedOut", Message: actMsg}
		r.Phase, r.ExitCode, r.Message = PhaseFailed, 1, actMsg
		r.Hint = "a unit of the new system does not start; on a container RuntimeMaxSec=180 ends the activation first"
		if watch {
			d.rollback(ctx, c, run, &r, true)
		}
		return r
	}
	dropped := exit == -1
	if dropped {
		// Decided from the host, not from the exit status the drop lost:
		// the activation runs on, and records its exit status there.
		d.log(n.Name, "%s; asking the host how the activation ended", actMsg)
		if hostExit, said, ok := d.activationExit(ctx, c, run); ok {
			exit = hostExit
			actMsg = fmt.Sprintf("the SSH session dropped during activation; the host recorded exit %d: %s", exit, said)
		}
	}
	r.Steps[StepActivated] = StepResult{Passed: exit == 0, Reason: activationReason(exit), Message: actMsg}
	if dropped && exit != -1 {
		r.Steps[StepActivated] = StepResult{Passed: exit == 0, Reason: activationReason(exit) + "AfterSessionDropped", Message: actMsg}
	}

	// Verdict.
	d.log(n.Name, "verifying (activation: %s)", actMsg)
	r.Phase = PhaseVerifying
	obs := d.observe(ctx, c, n, exit, systemd)
	r.CurrentSystem = obs.CurrentSystem
	v := Decide(n.System, obs, d.Options.Verdict.Rules)
	if exit == -1 && obs.Reconnected && obs.CurrentSystem == n.System {
		// The host kept no exit status (no systemd to outlive the
		// session): what it runs decides.
		r.Steps[StepActivated] = StepResult{Passed: true, Reason: "ActivatedSessionDropped",
			Message: "the session dropped during activation; the host runs the new system"}
	}
	// Over the master: the verdict's new connection has shown the host
	// still takes logins.
	if v.Passed && d.Options.Goal == GoalTest {
		if out, err := d.output(c.Command(ctx, remote(confirmScript(run)+markScript(n.System)))); err != nil && strings.Contains(out, confirmFailed) {
			_, msg := exitOf(err, out)
			v = Verdict{Reason: "ConfirmFailed", Message: "the confirmation did not reach the host: " + msg}
		}
	}
	if !v.Passed {
		d.failVerdict(ctx, c, run, &r, v, exit, watch, obs.Reconnected)
		return r
	}
	r.Steps[StepVerdict] = StepResult{Passed: true, Reason: v.Reason, Message: v.Message}
	if d.Options.Goal == GoalTest {
		r.Phase, r.Message = PhaseSucceeded, "activated and verified (goal test: the boot default is unchanged)"
		return r
	}
	return d.finalise(ctx, c, n, &r, container, run)
}

// failVerdict records a failing verdict and rolls the node back, or keeps
// the new system with on_failure = keep.
func (d *Deployer) failVerdict(ctx context.Context, c *Conn, run string, r *Result, v Verdict, exit int, watch, reachable bool) {
	r.Steps[StepVerdict] = StepResult{Reason: v.Reason, Message: v.Message}
	r.Phase, r.ExitCode, r.Message, r.Hint = PhaseFailed, max(exit, 1), v.Message, v.Hint
	switch {
	case watch:
		d.rollback(ctx, c, run, r, reachable)
	case !d.Options.Keep:
		r.Message += "; nothing to roll back to"
	}
	if d.Options.Keep {
		_, _ = d.output(c.FreshCommand(ctx, remote("touch "+q(stateDir+"/"+run+"/confirm"))))
		r.Message += "; kept active for inspection (on_failure = keep)"
	}
}

// activationExit waits, over new connections, for the exit status the
// activation of run records on the host, up to activation_timeout, and
// returns it with the activation's last words; false when none comes (no
// systemd kept the activation alive, or the host cannot be reached).
func (d *Deployer) activationExit(ctx context.Context, c *Conn, run string) (int, string, bool) {
	dir := stateDir + "/" + run
	deadline := time.Now().Add(d.activationTimeout())
	for {
		out, err := d.output(c.FreshCommand(ctx, remote("cat "+q(dir+"/activated")+" 2>/dev/null || echo pending; tail -n 3 "+q(dir+"/output")+" 2>/dev/null")))
		if err == nil {
			first, rest, _ := strings.Cut(out, "\n")
			if n, err := strconv.Atoi(strings.TrimSpace(first)); err == nil {
				return n, lastLines(rest, 3), true
			}
		}
		if time.Now().After(deadline) || !sleep(ctx, time.Second) {
			return -1, "", false
		}
	}
}

// startDetached runs script on the host in the background, as a transient
// unit where systemd runs, so that it survives the SSH session.
func (d *Deployer) startDetached(run string, systemd bool, script string) string {
	mk := "mkdir -p " + q(stateDir+"/"+run) + " || exit 1; "
	if systemd {
		return mk + "systemd-run --collect --quiet --no-ask-password --unit=" + q("fleet-watchdog-"+run) + " sh -c " + q(pathFallback+script)
	}
	// Only the background command itself, with every stream redirected:
	// a backgrounded list would keep the session's output open.
	return mk + "nohup sh -c " + q(pathFallback+script) + " </dev/null >/dev/null 2>&1 &"
}

// activate runs switch-to-configuration test, through systemd-run where
// systemd runs (RuntimeMaxSec=180 in a container), retrying exit 11 like
// the boot lock. It returns the exit status (-1 when the session dropped:
// the host decides) and what happened.
// prepare runs first, in the same round trip as the first attempt.
func (d *Deployer) activate(ctx context.Context, c *Conn, run, system string, systemd, container bool, prepare string) (exit int, msg string, timedOut bool) {
	script := activationScript(run, system, "test")
	cmd := "sh -c " + q(script)
	if systemd {
		props := ""
		if container {
			props = " -p RuntimeMaxSec=180"
		}
		cmd = "systemd-run --collect --pipe --quiet --no-ask-password --service-type=exec --unit=" + q("fleet-activate-"+run) + props + " " + cmd
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, d.activationTimeout())
		first := ""
		if attempt == 1 {
			first = prepare
		}
		out, err := d.output(c.Command(actx, remote(first+cmd)))
		expired := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if attempt == 1 && err != nil && (strings.Contains(out, profileFailed) || strings.Contains(out, prepareFailed)) {
			_, msg := exitOf(err, out)
			return 1, msg + " (" + strings.TrimSpace(out) + ")", false
		}
		if expired {
			return 1, fmt.Sprintf("the activation did not finish within activation_timeout (%s)", d.activationTimeout()), true
		}
		exit, msg := exitOf(err, out)
		if exit == 255 {
			return -1, "the SSH session dropped during activation: " + msg, false
		}
		if exit == ExitSwitchLocked && attempt < d.bootLockAttempts() {
			d.log("", "switch lock held (exit 11); attempt %d of %d", attempt, d.bootLockAttempts())
			if !sleep(ctx, d.bootLockInterval()) {
				return exit, "interrupted while waiting for the switch lock", false
			}
			continue
		}
		if exit == 0 {
			return 0, "switch-to-configuration test succeeded", false
		}
		return exit, fmt.Sprintf("switch-to-configuration test exited %d: %s", exit, msg), false
	}
}

func activationReason(exit int) string {
	switch exit {
	case 0:
		return "Activated"
	case -1:
		return "SessionDropped"
	case ExitUnitsFailed:
		return "UnitsFailed"
	case ExitSwitchLocked:
		return "SwitchLockBusy"
	case ExitRebootRequired:
		return "RebootRequired"
	}
	return "ActivationFailed"
}

// observe gathers the verdict's inputs: a new connection must succeed, and
// the current system, the system state within the settle timeout and the
// failed units are read, then the user checks run.
func (d *Deployer) observe(ctx context.Context, c *Conn, n Target, exit int, systemd bool) Observed {
	o := Observed{ActivationExit: exit}
	settle := int(d.settleTimeout() / time.Second)
	script := fmt.Sprintf(`readlink -f /run/current-system || echo
timeout %d systemctl is-system-running --wait 2>/dev/null | tail -n 1 || true
echo --failed--
systemctl --failed --plain --no-legend 2>/dev/null | awk '{print $1}'`, settle)
	if !systemd {
		// No systemd to settle or to list failed units: the current
		// system and the user checks decide.
		script = "readlink -f /run/current-system || echo\necho running\necho --failed--"
	}
	// The new login and the reading over the master run side by side.
	fresh := make(chan error, 1)
	go func() {
		out, err := d.output(c.FreshCommand(ctx, "true"))
		if err != nil {
			_, msg := exitOf(err, out)
			err = errors.New(msg)
		}
		fresh <- err
	}()
	out, err := d.output(c.Command(ctx, remote(script)))
	if ferr := <-fresh; ferr != nil {
		o.ReconnectError = ferr.Error()
		return o
	}
	if err != nil {
		_, o.ReconnectError = exitOf(err, out)
		return o
	}
	o.Reconnected = true
	head, failed, _ := strings.Cut(out, "--failed--")
	lines := strings.Split(strings.TrimSpace(head), "\n")
	if len(lines) > 0 {
		o.CurrentSystem = strings.TrimSpace(lines[0])
	}
	if len(lines) > 1 {
		o.SystemState = strings.TrimSpace(lines[len(lines)-1])
	}
	for _, u := range strings.Fields(failed) {
		if !strings.HasPrefix(u, "fleet-") { // the deploy's own transient units
			o.FailedUnits = append(o.FailedUnits, u)
		}
	}
	o.CheckFailures = d.userChecks(ctx, c, n)
	return o
}

// userChecks runs the verdict's http and tcp checks from the deployer and
// its commands on the node.
func (d *Deployer) userChecks(ctx context.Context, c *Conn, n Target) []string {
	var failures []string
	spec := d.Options.Verdict
	for _, cmd := range spec.Command {
		if out, err := d.output(c.Command(ctx, remote(cmd))); err != nil {
			exit, msg := exitOf(err, out)
			failures = append(failures, fmt.Sprintf("command %q exited %d: %s", cmd, exit, msg))
		}
	}
	for _, port := range spec.TCP {
		addr := net.JoinHostPort(n.Host, strconv.Itoa(port))
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
		cancel()
		if err != nil {
			failures = append(failures, fmt.Sprintf("tcp %s: %v", addr, err))
			continue
		}
		_ = conn.Close()
	}
	for _, h := range spec.HTTP {
		if msg := httpCheck(ctx, h); msg != "" {
			failures = append(failures, msg)
		}
	}
	return failures
}

func httpCheck(ctx context.Context, h HTTPCheck) string {
	want := h.ExpectStatus
	if want == 0 {
		want = http.StatusOK
	}
	client := retryablehttp.NewClient()
	client.Logger = nil
	client.RetryMax = 3
	client.RetryWaitMin, client.RetryWaitMax = 200*time.Millisecond, 2*time.Second
	client.ErrorHandler = retryablehttp.PassthroughErrorHandler
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := retryablehttp.NewRequestWithContext(rctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return fmt.Sprintf("http %s: %v", h.URL, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Sprintf("http %s: %v", h.URL, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Sprintf("http %s: status %d, expected %d", h.URL, resp.StatusCode, want)
	}
	return ""
}

// rollback asks the host's watchdog to switch back now (when SSH still
// works) and waits for it; without SSH the host rolls itself back when the
// confirmation does not come.
func (d *Deployer) rollback(ctx context.Context, c *Conn, run string, r *Result, reachable bool) {
	dir := stateDir + "/" + run
	if !reachable {
		r.Phase = PhaseRolledBack
		r.RolledBack = true
		r.Message += fmt.Sprintf("; the host rolls itself back to %s when no confirmation arrives within confirm_timeout (%s): it could not be confirmed over SSH",
			r.PreviousSystem, d.confirmTimeout())
		return
	}
	_, _ = d.output(c.FreshCommand(ctx, remote("touch "+q(dir+"/rollback"))))
	deadline := time.Now().Add(d.confirmTimeout() + 30*time.Second)
	for time.Now().Before(deadline) {
		out, err := d.output(c.FreshCommand(ctx, remote("cat "+q(dir+"/rolledback")+" 2>/dev/null; readlink -f /run/current-system")))
		if err == nil {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) == 2 {
				r.CurrentSystem = lines[1]
				if lines[0] == "0" && lines[1] == r.PreviousSystem {
					r.Phase, r.RolledBack = PhaseRolledBack, true
					r.Message += "; rolled back to " + r.PreviousSystem
					return
				}
				r.Message += fmt.Sprintf("; the rollback to %s failed (exit %s; the host runs %s)", r.PreviousSystem, lines[0], lines[1])
				return
			}
		}
		if !sleep(ctx, time.Second) {
			break
		}
	}
	r.Message += "; the rollback was not seen to finish"
}

// finalise makes the system the boot default: switch-to-configuration boot
// under timeout 120, exit 11 retried every interval up to the attempts.
// With a run, its first attempt confirms the verdict to the run's
// watchdog in the same round trip.
func (d *Deployer) finalise(ctx context.Context, c *Conn, n Target, r *Result, container bool, run string) Result {
	d.log(n.Name, "finalising the boot entry")
	r.Phase = PhaseFinalizing
	boot := "timeout 120 " + q(n.System) + "/bin/switch-to-configuration boot; rc=$?; [ $rc -ne 0 ] || " + markScript(n.System) + "; exit $rc"
	for attempt := 1; ; attempt++ {
		cmd := boot
		if attempt == 1 && run != "" {
			cmd = confirmScript(run) + boot
		}
		out, err := d.output(c.Command(ctx, remote(cmd)))
		exit, msg := exitOf(err, out)
		if exit == 0 {
			r.Steps[StepBootloader] = StepResult{Passed: true, Reason: "BootDefault", Message: "the boot entry points at the new system"}
			r.Phase, r.Message = PhaseSucceeded, fmt.Sprintf("switched to %s", n.System)
			if d.Options.Goal == GoalBoot {
				r.Message = fmt.Sprintf("%s is the boot default from the next boot", n.System)
			}
			return *r
		}
		if attempt == 1 && run != "" && strings.Contains(out, confirmFailed) {
			// The watchdog was not confirmed: the host rolls back.
			r.Phase, r.ExitCode, r.Message = PhaseFailed, 1, "the confirmation did not reach the host: "+msg
			r.Steps[StepVerdict] = StepResult{Reason: "ConfirmFailed", Message: r.Message}
			d.rollback(ctx, c, run, r, false)
			return *r
		}
		if exit == ExitSwitchLocked && attempt < d.bootLockAttempts() {
			if !sleep(ctx, d.bootLockInterval()) {
				exit, msg = ExitInterrupted, "interrupted while waiting for the switch lock"
			} else {
				continue
			}
		}
		hint := ""
		if container {
			hint = "the host is a container, which has no bootloader to install: deploy it with goal = \"test\""
		}
		if exit == ExitSwitchLocked {
			msg = fmt.Sprintf("the switch lock was held for all %d attempts, %s apart", d.bootLockAttempts(), d.bootLockInterval())
			hint = "another switch is running on the host"
		}
		if exit == 255 {
			msg += "; the host decides: " + d.hostState(c, n.System)
		}
		r.Steps[StepBootloader] = StepResult{Reason: "BootloaderFailed", Message: msg}
		r.Phase, r.ExitCode, r.Message, r.Hint = PhaseFailed, exit, "switch-to-configuration boot failed: "+msg, hint
		return *r
	}
}

// markScript records on the host that system was deployed with a passing
// verdict (see succeededFile).
func markScript(system string) string {
	return "{ mkdir -p " + q(stateDir) + " && printf '%s\\n' " + q(system) + " > " + succeededFile + "; }"
}

// startMaster opens the node's master connection. ssh backgrounds it (-f)
// once logged in; its standard streams must not be pipes, which the master
// would hold open for as long as it lives.
func (d *Deployer) startMaster(ctx context.Context, c *Conn) (int, string) {
	errFile, err := os.CreateTemp("", "fleet-ssh-master-*")
	if err != nil {
		return 1, err.Error()
	}
	defer func() { _ = os.Remove(errFile.Name()) }()
	cmd := exec.CommandContext(ctx, d.Transport.ssh(), c.MasterArgs()...)
	cmd.Stderr = errFile
	err = cmd.Run()
	_ = errFile.Close()
	if err == nil {
		return 0, ""
	}
	b, _ := os.ReadFile(errFile.Name())
	return exitOf(err, string(b))
}

// copyResult is how nix-copy-closure ended.
type copyResult struct {
	out string
	err error
}

// lockBusyError is a deploy lock another deployment held past lock_timeout.
type lockBusyError struct{ msg string }

func (e lockBusyError) Error() string { return e.msg }

// lock takes the host's deploy lock in a session held open until release,
// and returns what readScript printed in that session.
func (d *Deployer) lock(ctx context.Context, c *Conn) (func(), []string, error) {
	wait := max(int(d.Options.LockTimeout/time.Second), 0)
	cmd := c.Command(context.WithoutCancel(ctx), lockScript(d.Options.Holder, wait))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	out := bufio.NewReader(stdout)
	line, _ := out.ReadString('\n')
	line = strings.TrimSpace(line)
	if line == "locked" {
		release := func() { _ = stdin.Close(); _ = cmd.Wait() }
		var read []string
		for {
			l, err := out.ReadString('\n')
			if strings.TrimSpace(l) == readEnd {
				return release, read, nil
			}
			if err != nil {
				release()
				return nil, nil, fmt.Errorf("cannot read the current system: %s", orNone(strings.TrimSpace(stderr.String())))
			}
			read = append(read, strings.TrimSpace(l))
		}
	}
	_ = stdin.Close()
	_ = cmd.Wait()
	if holder, busy := strings.CutPrefix(line, "busy"); busy {
		return nil, nil, lockBusyError{fmt.Sprintf("the host's deploy lock is held by %s and was not released within lock_timeout (%s)", orNone(strings.TrimSpace(holder)), d.Options.LockTimeout)}
	}
	return nil, nil, fmt.Errorf("cannot take the host's deploy lock: %s", strings.TrimSpace(line+" "+stderr.String()))
}

// hostState says what the host runs now, over a new connection.
func (d *Deployer) hostState(c *Conn, system string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := d.output(c.FreshCommand(ctx, remote(readCurrentScript)))
	if err != nil {
		return "the host could not be read"
	}
	if current := parseCurrent(out); current.System != system {
		return "it runs " + current.System
	}
	return "it runs the new system"
}

// Current is what a read of a node found.
type Current struct {
	System string
	// Succeeded is the last system a deploy finished on the host with a
	// passing verdict; empty when none did.
	Succeeded string
	HostKey   string // the key the host offered ("type base64")
}

// Runs reports whether the host runs system and a deploy of it passed its
// verdict there: a new record of the node has nothing to do.
func (c Current) Runs(system string) bool { return c.System == system && c.Succeeded == system }

// ReadCurrent reads a node's current system (refresh, drift) and the key
// it offered; a key other than its pin or recorded key is refused with
// both named.
func (d *Deployer) ReadCurrent(ctx context.Context, s Settings) (Current, error) {
	c, err := d.Transport.Open(ctx, s)
	if err != nil {
		return Current{}, err
	}
	defer c.Close()
	out, err := d.output(c.FreshCommand(ctx, remote(readCurrentScript)))
	if err != nil {
		_, msg := exitOf(err, out)
		if hostKeyRefused(msg) {
			msg, hint, _ := d.hostKeyMismatch(ctx, c, s)
			return Current{}, fmt.Errorf("%s. Fix: %s", msg, hint)
		}
		return Current{}, errors.New(msg)
	}
	current := parseCurrent(out)
	current.HostKey = c.SeenKey(ctx)
	return current, nil
}

// parseCurrent reads what readCurrentScript printed.
func parseCurrent(out string) Current {
	lines := strings.Split(strings.TrimSpace(out)+"\n", "\n")
	return Current{System: strings.TrimSpace(lines[0]), Succeeded: strings.TrimSpace(lines[1])}
}

// waitDelay bounds the wait for a killed command's output: a command over
// the master passed its standard streams to the master, which holds them
// until the remote command ends, however long that takes.
const waitDelay = time.Second

// ExitInterrupted is a node's exit code when an interrupt stopped it, as a
// shell reports a command ended by Ctrl-C.
const ExitInterrupted = 130

// run runs a local command whose output is only for errors.
func (d *Deployer) run(cmd *exec.Cmd) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	return out.String(), err
}

// output runs cmd and returns its standard output; on failure, what it
// printed on standard error too.
func (d *Deployer) output(cmd *exec.Cmd) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// exitOf is a command's exit status and its last words (without ssh's
// note that accept-new added a key, which is no failure).
func exitOf(err error, out string) (int, string) {
	var kept []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "Warning: Permanently added") {
			kept = append(kept, line)
		}
	}
	out = strings.Join(kept, "\n")
	if err == nil {
		return 0, lastLines(out, 3)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), lastLines(out, 3)
	}
	return 1, err.Error()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(s, "\r", "")), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// sshHint names the fix for the usual SSH failures.
func sshHint(msg string) string {
	if strings.Contains(msg, "Permission denied") {
		return "the key was refused: check user and private_key_file, or the ssh-agent"
	}
	return ""
}

func hostKeyRefused(msg string) bool {
	return strings.Contains(msg, "Host key verification failed") || strings.Contains(msg, "HOST IDENTIFICATION HAS CHANGED")
}

// hostKeyMismatch says which key the node offered, which one it was held
// to and where that came from, and how to accept a key changed on purpose.
// trusted is the key it was held to without a pin (recorded on first use),
// which stays the node's host_key_seen.
func (d *Deployer) hostKeyMismatch(ctx context.Context, c *Conn, s Settings) (msg, hint, trusted string) {
	offered := orNone(c.OfferedKey(ctx))
	const otherwise = "; if not, something else answers at this address: do not deploy to it"
	switch {
	case s.HostKey != "":
		return fmt.Sprintf("Host key verification failed: the host offered %s, not the key pinned in host_key (%s); nothing was done on it", offered, strings.TrimSpace(s.HostKey)),
			"if the host was reinstalled or re-keyed, update host_key to the key it offers now" + otherwise, ""
	case s.SeenHostKey != "":
		return fmt.Sprintf("Host key verification failed: the host offered %s, not the key it showed on first use (host_key_seen in this node's status: %s); nothing was done on it", offered, strings.TrimSpace(s.SeenHostKey)),
			"if the host was reinstalled or re-keyed, set host_key on this node to the key it offers now: the next apply that reaches it records that key as host_key_seen, and host_key can then go again" + otherwise,
			strings.TrimSpace(s.SeenHostKey)
	}
	recorded, name := c.RecordedKey(ctx)
	if name == "" {
		name = s.Host
	}
	return fmt.Sprintf("Host key verification failed: the host offered %s, not the key recorded for it on first use in %s (%s); nothing was done on it", offered, d.Transport.KnownHostsFile, orNone(recorded)),
		fmt.Sprintf("if the host was reinstalled or re-keyed, set host_key on this node to the key it offers now (with no record of the node in state, removing its line with ssh-keygen -R '%s' -f %s also does)", name, d.Transport.KnownHostsFile) + otherwise,
		recorded
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func runID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (d *Deployer) nixCopyClosure() string {
	if d.Options.NixCopyClosure != "" {
		return d.Options.NixCopyClosure
	}
	return "nix-copy-closure"
}

func (d *Deployer) activationTimeout() time.Duration {
	return orDefault(d.Options.ActivationTimeout, 5*time.Minute)
}
func (d *Deployer) confirmTimeout() time.Duration {
	return orDefault(d.Options.Verdict.ConfirmTimeout, 30*time.Second)
}
func (d *Deployer) settleTimeout() time.Duration {
	return orDefault(d.Options.Verdict.SettleTimeout, 90*time.Second)
}
func (d *Deployer) bootLockInterval() time.Duration {
	return orDefault(d.Options.BootLockInterval, 5*time.Second)
}
func (d *Deployer) bootLockAttempts() int {
	if d.Options.BootLockAttempts > 0 {
		return d.Options.BootLockAttempts
	}
	return 60
}

func orDefault(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}
