package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"

	"github.com/hashicorp/go-retryablehttp"
)

// What the steps do on a host, over the node's connection.

// startMaster opens the node's master connection. ssh backgrounds it (-f)
// once logged in; its standard streams must not be pipes, which the master
// would hold open for as long as it lives.
func (d *Deployer) startMaster(ctx context.Context, c *Conn) (int, string) {
	errFile, err := os.CreateTemp(d.Transport.ControlDir, "master-*")
	if err != nil {
		return 1, err.Error()
	}
	defer func() { _ = os.Remove(errFile.Name()) }()
	cmd := d.Transport.command(ctx, d.Transport.ssh(), c.MasterArgs()...)
	cmd.Stderr = errFile
	err = cmd.Run()
	_ = errFile.Close()
	if err == nil {
		c.mastered = true
		return 0, ""
	}
	b, _ := os.ReadFile(errFile.Name())
	return exitOf(err, string(b))
}

// lockSession holds the host's deploy lock: a remote command over the
// master that took it and keeps it while the deployer speaks (see
// lockScript and words.go), until its standard input closes.
type lockSession struct {
	*hostSession
	words
}

// takeLock takes the host's deploy lock, waiting up to lock_timeout for
// another deployment to let go of it, or until ctx ends. The session's
// own context is not ctx: once held, the lock is kept until release, so
// that an interrupted node still holds it while its record is made.
// onWait, when not nil, is called once another deployment is found to
// hold the lock and the wait has begun. Once held, the deployer speaks
// to the host over it (words) until release.
func (d *Deployer) takeLock(ctx context.Context, c *Conn, onWait func()) (*lockSession, error) {
	wait := max(int(d.Options.LockTimeout/time.Second), 0)
	lease := int(d.Transport.remoteExecTimeout() / time.Second)
	hs, err := startHostSession(context.WithoutCancel(ctx), c.Command, lockScript(d.Options.Holder, wait, lease))
	if err != nil {
		return nil, err
	}
	l := &lockSession{hostSession: hs}
	line, err := l.next(ctx)
	if err != nil && ctx.Err() == nil {
		// The script ended before its first line: it could not even
		// open the lock, which is what root's rights are needed for.
		l.end()
		return nil, c.rightsFailure(err)
	}
	waited := false
	var noted time.Time
	for err == nil {
		holder, waiting := strings.CutPrefix(line, "wait")
		if !waiting {
			break
		}
		if time.Since(noted) >= lockWaitNoteEvery {
			noted = time.Now()
			d.note(c.s.Name, StepLock, "waiting for the host's deploy lock, held by %s (lock_timeout %s)", orNone(strings.TrimSpace(holder)), d.Options.LockTimeout)
			if onWait != nil {
				onWait()
			}
		}
		waited = true
		line, err = l.next(ctx)
	}
	switch {
	case err != nil && ctx.Err() == nil && waited:
		l.end()
		return nil, fail(255, "LockFailed", fmt.Sprintf("the connection to the host ended while this deployment waited for its deploy lock: the host stopped answering for remote_exec_timeout (%s), or dropped the connection (%s)",
			d.Transport.remoteExecTimeout(), orNone(strings.TrimSpace(l.stderr.String()))), "check the host; the next apply retries this node")
	case err != nil:
		l.end()
		return nil, err
	case line == "locked":
		l.start(c, hs, d.wordEvery())
		return l, nil
	}
	l.end()
	if holder, busy := strings.CutPrefix(line, "busy"); busy {
		holder = strings.TrimSpace(holder)
		hint := "another deployment of this host is running: retry once it ends, or give this deployment a lock_timeout long enough to wait for it"
		if strings.HasPrefix(holder, guardHolder) {
			// No deployment holds the lock: an activation or a watchdog
			// of one that stopped before they ended (interrupted, or
			// gone), which end within confirm_timeout of that deploy's
			// last word once the activation has.
			hint = "it ends once that activation has ended and its deployer has confirmed it or said nothing for its verdict.confirm_timeout: retry then, or give this deployment a lock_timeout at least that long"
		}
		return nil, &failure{exit: 3, reason: "DeployLockBusy",
			message: fmt.Sprintf("the host's deploy lock is held by %s and was not released within lock_timeout (%s)", orNone(holder), d.Options.LockTimeout),
			hint:    hint}
	}
	return nil, fail(1, "LockFailed", "cannot take the host's deploy lock: "+strings.TrimSpace(line+" "+l.stderr.String()), "")
}

// rightsFailure is the failure of a lock session that ended at once:
// when the login user lacks root's rights (no sudo, or sudo that asks for
// a password), the node fails naming the right before anything changed.
func (c *Conn) rightsFailure(err error) error {
	msg := err.Error()
	user := c.s.User
	switch {
	case c.s.UseSudo && strings.Contains(msg, "sudo"):
		return &failure{exit: 1, reason: "SudoRefused",
			message: fmt.Sprintf("the login user %s cannot run commands as root with sudo -n (use_sudo): %s; nothing was done on the host", user, msg),
			hint:    fmt.Sprintf("give %s passwordless sudo on the host (for example %q in /etc/sudoers.d), or log in as root", user, user+" ALL=(ALL) NOPASSWD: ALL")}
	case !c.s.UseSudo && user != "root" && strings.Contains(msg, "Permission denied"):
		return &failure{exit: 1, reason: "NotRoot",
			message: fmt.Sprintf("the login user %s cannot take the host's deploy lock %s (%s): deploying needs root's rights on the host; nothing was done on it", user, LockFile, msg),
			hint:    fmt.Sprintf("set use_sudo = true and give %s passwordless sudo on the host, or log in as root", user)}
	}
	if strings.HasSuffix(msg, ": (none)") {
		// Nothing said why: the connection ended under the session.
		return fail(255, "LockFailed", "cannot take the host's deploy lock: the connection to the host ended before it answered (it stopped answering for remote_exec_timeout, or dropped the connection)",
			"check the host; the next apply retries this node")
	}
	return fail(1, "LockFailed", "cannot take the host's deploy lock: "+msg, "")
}

// lockWaitNoteEvery is how often the log says who holds the lock a node
// waits for.
const lockWaitNoteEvery = 30 * time.Second

// read returns what readScript printed in the session once it held the
// lock.
func (l *lockSession) read(ctx context.Context) ([]string, error) {
	var lines []string
	for {
		line, err := l.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, fail(1, "ReadFailed", "cannot read the current system: "+err.Error(), "")
		}
		if line == readEnd {
			return lines, nil
		}
		lines = append(lines, line)
	}
}

// release lets the lock go: the deployer stops speaking, standard input
// closes, the remote script removes the holder's name and ends; a session
// that does not end within half a second (the host stopped answering) is
// killed, which ends it on the host too.
func (l *lockSession) release() {
	l.stop()
	l.end()
}

// lockedBuffer is a bytes.Buffer safe for the copying goroutine of
// os/exec and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// percentEncode encodes every byte of s but letters, digits and "-._~" as
// %XX, which is all Nix decodes in a store URL's parameters.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// copyJob is nix-copy-closure of a node's system over its master (FR-008).
type copyJob struct {
	cancel context.CancelFunc
	done   chan struct{}
	out    string
	err    error
}

func (d *Deployer) startCopy(ctx context.Context, c *Conn, n Target) *copyJob {
	cctx, cancel := context.WithCancel(ctx)
	j := &copyJob{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		// A system built on the host needs its derivation's closure there.
		path, derivation := n.System, []string{}
		if n.buildsThere() {
			path, derivation = n.Derivation, []string{"--derivation"}
		}
		name, args := d.nixCopyClosure(), []string{"--to", "--gzip", "--use-substitutes", n.Host, path}
		if n.UseSudo {
			// The login user may not write the host's store: root does,
			// through sudo -n, as the store program nix copy runs there.
			name, args = d.nix(), append(append([]string{"--extra-experimental-features", "nix-command", "copy", "--no-check-sigs", "--substitute-on-destination"}, derivation...),
				"--to", "ssh://"+n.Host+"?compress=true&remote-program="+percentEncode(SudoPrefix+" nix-store"), path)
		}
		cmd := command(cctx, name, args...)
		cmd.Env = shell.Environ(append(d.Options.Env, "NIX_SSHOPTS="+c.NixSSHOpts())...)
		// Nix makes a directory in TMPDIR, which a copy that is
		// abandoned (killed: the node ended before it needed the copy)
		// leaves behind: each copy gets a TMPDIR of its own, removed once
		// it has ended.
		if tmp, err := os.MkdirTemp(d.Transport.ControlDir, "copy-"); err == nil {
			cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
			defer func() { _ = os.RemoveAll(tmp) }()
		}
		j.out, j.err = d.run(cmd)
	}()
	return j
}

// wait waits for the copy to end, or for ctx.
func (j *copyJob) wait(ctx context.Context) error {
	select {
	case <-j.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if j.err != nil {
		exit, msg := exitOf(j.err, j.out)
		return fail(exit, "CopyFailed", "nix-copy-closure failed: "+msg, "")
	}
	return nil
}

// abandon stops the copy if it still runs.
func (j *copyJob) abandon() {
	j.cancel()
	<-j.done
}

// startWatchdog runs the watchdog script on the host in the background, as
// a transient unit where systemd runs, so that it survives the SSH
// session, and waits up to ten seconds for it to hold GuardFile (it
// touches guarded then): from then on the next deployment of the host
// waits for it.
func (d *Deployer) startWatchdog(run string, systemd bool, script string) string {
	dir := shell.Quote(stateDir + "/" + run)
	start := "mkdir -p " + dir + " || exit 1; "
	if systemd {
		start += "systemd-run --collect --quiet --no-ask-password --unit=" + shell.Quote("fleet-watchdog-"+run) + " sh -c " + shell.Quote(pathFallback+script) + " || exit 1"
	} else {
		// Only the background command itself, with every stream
		// redirected: a backgrounded list would keep the session's
		// output open.
		start += "nohup sh -c " + shell.Quote(pathFallback+script) + " </dev/null >/dev/null 2>&1 &"
	}
	return start + "\nn=0; while [ ! -e " + dir + "/guarded ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done; [ -e " + dir + "/guarded ]"
}

// activate runs switch-to-configuration test, through systemd-run where
// systemd runs (RuntimeMaxSec=180 in a container, FR-009), retrying exit
// 11 like the boot lock. It returns the exit status (-1 when the session
// dropped: the host decides) and what happened. prepare runs first, in the
// same round trip as the first attempt.
func (d *Deployer) activate(ctx context.Context, c *Conn, run, system string, systemd, container bool, prepare string) (exit int, msg string, timedOut bool) {
	cmd := "sh -c " + shell.Quote(activationScript(run, system, "test"))
	if systemd {
		props := ""
		if container {
			props = " -p RuntimeMaxSec=180"
		}
		cmd = "systemd-run --collect --pipe --quiet --no-ask-password --service-type=exec --unit=" + shell.Quote("fleet-activate-"+run) + props + " " + cmd
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
		if ctx.Err() != nil {
			return -1, "", false
		}
		if attempt == 1 && err != nil && (strings.Contains(out, profileFailed) || strings.Contains(out, prepareFailed)) {
			exit, msg := exitOf(err, out)
			return exit, msg + " (" + strings.TrimSpace(out) + ")", false
		}
		if expired {
			msg := fmt.Sprintf("the activation did not finish within activation_timeout (%s)", d.activationTimeout())
			if systemd {
				msg += "; " + d.stopActivation(c, run)
			}
			return 1, msg, true
		}
		exit, msg := exitOf(err, out)
		if exit == 255 {
			return -1, "the SSH session dropped during activation: " + msg, false
		}
		if exit == ExitSwitchLocked && attempt < d.bootLockAttempts() {
			d.note(c.s.Name, StepActivate, "switch lock held (exit 11); attempt %d of %d", attempt, d.bootLockAttempts())
			if !sleep(ctx, d.bootLockInterval()) {
				return -1, "", false
			}
			continue
		}
		if exit == 0 {
			return 0, "switch-to-configuration test succeeded", false
		}
		return exit, fmt.Sprintf("switch-to-configuration test exited %d: %s", exit, msg), false
	}
}

// stopActivation stops the transient unit of an activation that outlived
// activation_timeout, so that what hangs in it does not run on beside the
// rollback, and says how that went.
func (d *Deployer) stopActivation(c *Conn, run string) string {
	ctx, cancel := context.WithTimeout(context.Background(), stopActivationTimeout)
	defer cancel()
	unit := "fleet-activate-" + run + ".service"
	if out, err := d.output(c.Command(ctx, remote("systemctl stop "+shell.Quote(unit)))); err != nil {
		_, msg := exitOf(err, out)
		return "stopping its unit " + unit + " failed: " + msg
	}
	return "its unit " + unit + " was stopped"
}

// stopActivationTimeout bounds the stop of a hung activation's unit.
const stopActivationTimeout = 30 * time.Second

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

// activationExit waits, over new connections, for the exit status the
// activation of run records on the host, up to activation_timeout, and
// returns it with the activation's last words; false when none comes (no
// systemd kept the activation alive, the host cannot be reached, or ctx
// ended).
func (d *Deployer) activationExit(ctx context.Context, c *Conn, run string) (int, string, bool) {
	dir := stateDir + "/" + run
	deadline := time.Now().Add(d.activationTimeout())
	for {
		out, err := d.output(c.FreshCommand(ctx, remote("cat "+shell.Quote(dir+"/activated")+" 2>/dev/null || echo pending; tail -n 3 "+shell.Quote(dir+"/output")+" 2>/dev/null")))
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

// observe gathers the verdict's inputs: a new connection must succeed, and
// the current system, the system state within the settle timeout and the
// failed units are read, then the user checks run.
func (d *Deployer) observe(ctx context.Context, c *Conn, exit int, systemd bool) Observed {
	o := Observed{ActivationExit: exit}
	settle := int(d.settleTimeout() / time.Second)
	// The state is the last line before --failed--, a failed unit the
	// first word of each line after it.
	script := fmt.Sprintf(`readlink -f /run/current-system || echo
timeout %d systemctl is-system-running --wait 2>/dev/null
echo --failed--
systemctl --failed --plain --no-legend 2>/dev/null`, settle)
	if !systemd {
		// No systemd to settle or to list failed units: the current
		// system and the user checks decide.
		script = "readlink -f /run/current-system || echo\necho running\necho --failed--"
	}
	// The reading is the new login's command: one session on the host
	// for both.
	out, err := d.output(c.FreshCommand(ctx, remote(script)))
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
	for _, line := range strings.Split(failed, "\n") {
		words := strings.Fields(line)
		if len(words) == 0 {
			continue
		}
		// The deploy's own transient units are not the system's; a unit
		// of the system named fleet-something is.
		if u := words[0]; !strings.HasPrefix(u, "fleet-activate-") && !strings.HasPrefix(u, "fleet-watchdog-") {
			o.FailedUnits = append(o.FailedUnits, u)
		}
	}
	o.CheckFailures = d.userChecks(ctx, c)
	return o
}

// userChecks runs the verdict's http and tcp checks from the deployer and
// its commands on the node.
func (d *Deployer) userChecks(ctx context.Context, c *Conn) []string {
	var failures []string
	spec := d.Options.Verdict
	for _, cmd := range spec.Command {
		if out, err := d.output(c.Command(ctx, remote(cmd))); err != nil {
			exit, msg := exitOf(err, out)
			failures = append(failures, fmt.Sprintf("command %q exited %d: %s", cmd, exit, msg))
		}
	}
	if len(spec.TCP) > 0 {
		reach, err := c.tcpRoute(ctx)
		for _, port := range spec.TCP {
			if err == nil {
				err = reach(ctx, port)
			}
			if err != nil {
				failures = append(failures, fmt.Sprintf("tcp port %d: %v", port, err))
			}
			err = nil
		}
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
// works) and waits for it to have done so and let go of the host; without
// SSH the host rolls itself back once confirm_timeout has passed since the
// deployer's last word.
func (d *Deployer) rollback(ctx context.Context, c *Conn, run string, r *Result, reachable bool) {
	dir := stateDir + "/" + run
	if !reachable {
		r.Phase = PhaseRolledBack
		r.RolledBack = true
		r.Message += fmt.Sprintf("; the host rolls itself back to %s once confirm_timeout (%s) has passed without a confirmation: it could not be confirmed over SSH",
			r.PreviousSystem, d.confirmTimeout())
		return
	}
	// The watchdog switches back with the previous system's own
	// activation, which activation_timeout bounds.
	bound := int((d.activationTimeout() + 30*time.Second) / time.Second)
	out, err := d.output(c.FreshCommand(ctx, remote(decideScript(run, decisionRollback)+"; "+releasedScript(bound)+
		"; fleet_rc=; read -r fleet_rc < "+shell.Quote(dir+"/rolledback")+" 2>/dev/null; echo \"rolledback=$fleet_rc\"; echo \"current=$(readlink -f /run/current-system)\"")))
	if ctx.Err() != nil {
		return
	}
	var decision, rc, current string
	released := false
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case i == 0:
			decision = line
		case line == "released":
			released = true
		case strings.HasPrefix(line, "rolledback="):
			rc = strings.TrimPrefix(line, "rolledback=")
		case strings.HasPrefix(line, "current="):
			current = strings.TrimPrefix(line, "current=")
		}
	}
	if current != "" {
		r.CurrentSystem = current
	}
	switch {
	case err != nil && current == "":
		_, msg := exitOf(err, out)
		r.Message += fmt.Sprintf("; the rollback could not be asked for (%s): unless the request arrived, the host's watchdog switches back to %s once confirm_timeout (%s) has passed", msg, r.PreviousSystem, d.confirmTimeout())
	case decision == decisionConfirm:
		r.Message += "; the host's watchdog had already taken a confirmation: the new system stays active"
	case !released:
		r.Message += fmt.Sprintf("; the rollback was not seen to finish within %ds", bound)
	case rc == "0" && current == r.PreviousSystem:
		r.Phase, r.RolledBack = PhaseRolledBack, true
		r.Message += "; rolled back to " + r.PreviousSystem
	default:
		r.Message += fmt.Sprintf("; the rollback to %s failed (exit %s; the host runs %s)", r.PreviousSystem, orNone(rc), orNone(current))
	}
}

// decision asks the host, over a new connection, what was decided for
// run: decisionConfirm, decisionRollback, or "" when nothing was decided
// yet; false when the host could not be asked.
func (d *Deployer) decision(ctx context.Context, c *Conn, run string) (string, bool) {
	out, err := d.output(c.FreshCommand(ctx, remote("readlink "+shell.Quote(stateDir+"/"+run+"/decision")+" 2>/dev/null; echo .")))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(out), ".")), true
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

// waitDelay bounds the wait for a command's output once it has ended: a
// command over the master passed its standard streams to the master,
// which holds them until the remote command ends, however long that takes.
const waitDelay = 250 * time.Millisecond

// run runs a local command whose output is only for errors: both streams
// together.
func (d *Deployer) run(cmd *exec.Cmd) (string, error) {
	out, _, err := capture(cmd, true)
	return out, err
}

// output runs cmd and returns its standard output; on failure, what it
// printed on standard error too.
func (d *Deployer) output(cmd *exec.Cmd) (string, error) {
	stdout, stderr, err := capture(cmd, false)
	if err != nil {
		return stdout + stderr, err
	}
	return stdout, nil
}

// capture runs cmd and returns what it printed. Its outcome is its exit
// status: the streams are files of the command's own, read until they
// close or, once the command has ended, for waitDelay more, and a stream
// something else still holds open (a master connection, a process the
// command left behind) is no failure. With combined, both streams go to
// the first result.
func capture(cmd *exec.Cmd, combined bool) (stdout, stderr string, err error) {
	var bufs [2]bytes.Buffer
	var readers, writers []*os.File
	var wg sync.WaitGroup
	streams := 2
	if combined {
		streams = 1
	}
	for i := range streams {
		r, w, perr := os.Pipe()
		if perr != nil {
			for _, f := range append(readers, writers...) {
				_ = f.Close()
			}
			return "", "", perr
		}
		readers, writers = append(readers, r), append(writers, w)
		wg.Go(func() { _, _ = io.Copy(&bufs[i], r) })
	}
	cmd.Stdout, cmd.Stderr = writers[0], writers[len(writers)-1]
	err = cmd.Start()
	for _, w := range writers {
		_ = w.Close() // the command has its own copies
	}
	if err == nil {
		err = cmd.Wait()
	}
	read := make(chan struct{})
	go func() {
		wg.Wait()
		close(read)
	}()
	select {
	case <-read:
	case <-time.After(waitDelay):
		for _, r := range readers {
			_ = r.SetReadDeadline(time.Now())
		}
		<-read
	}
	for _, r := range readers {
		_ = r.Close()
	}
	return bufs[0].String(), bufs[1].String(), err
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

// loginRefused is whether ssh's message says the host answered and
// refused the login (not that it could not be reached).
func loginRefused(msg string) bool {
	return strings.Contains(msg, "Permission denied") || strings.Contains(msg, "Too many authentication failures")
}

// sshHint names the fix for the usual SSH failures.
func sshHint(msg string) string {
	switch {
	case strings.Contains(msg, "Too many authentication failures"):
		return "the host closed the login after too many keys were tried (an ssh-agent holding many keys offers each): " +
			"give the node's key with private_key_file or private_key (only that key is offered then), or load fewer keys in the agent"
	case strings.Contains(msg, "Permission denied"):
		return "the key was refused: check user and private_key_file, or the ssh-agent"
	case strings.Contains(msg, "Connection refused"):
		return "nothing listens on that port: check host and the Port in ssh_opts, and that sshd runs on the host"
	case strings.Contains(msg, "timed out"), strings.Contains(msg, "No route to host"), strings.Contains(msg, "Network is unreachable"):
		return "the host does not answer from this machine: check host, the Port in ssh_opts, a ProxyJump the network needs, and firewalls between them"
	case strings.Contains(msg, "Could not resolve hostname"):
		return "the host name does not resolve from this machine: check host"
	}
	return "check host and the Port in ssh_opts, then that this machine can reach the host with ssh"
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
