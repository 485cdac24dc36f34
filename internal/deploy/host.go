package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
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

// stopActivation stops the transient unit of an activation that outlived
// activation_timeout, so that what hangs in it does not run on beside the
// rollback, and says how that went.
func (d *Deployer) stopActivation(c *Conn, run string) string {
	ctx, cancel := context.WithTimeout(context.Background(), stopActivationTimeout)
	defer cancel()
	unit := "fleet-activate-" + run + ".service"
	if out, err := output(c.Command(ctx, remote("systemctl stop "+shell.Quote(unit)))); err != nil {
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

// observe gathers the verdict's inputs: a new connection must succeed, and
// the current system, the system state within the settle timeout and the
// failed units are read, then the user checks run.
func (d *Deployer) observe(ctx context.Context, c *Conn, run string, exit int, systemd bool) Observed {
	o := Observed{ActivationExit: exit}
	settle := int(d.settleTimeout() / time.Second)
	// The state is the last line before --failed--, a failed unit the
	// first word of each line after it.
	script := fmt.Sprintf(`readlink -e /run/current-system || echo
timeout %d systemctl is-system-running --wait 2>/dev/null
echo --failed--
systemctl --failed --plain --no-legend 2>/dev/null`, settle)
	if !systemd {
		// No systemd to settle or to list failed units: the current
		// system and the user checks decide.
		script = "readlink -e /run/current-system || echo\necho running\necho --failed--"
	}
	// The reading is the new login's command: one session on the host
	// for both. A login that ssh gave up on may have met a stall of the
	// path as it connected rather than the new configuration: another new
	// connection is tried before the verdict says SSH is cut off.
	out, err := output(c.FreshCommand(ctx, remote(script)))
	if err != nil {
		exit, msg := exitOf(err, out)
		if exit == 255 && ctx.Err() == nil {
			out, err = output(c.FreshCommand(ctx, remote(script)))
			if _, again := exitOf(err, out); err != nil && again == msg {
				msg += " (over two new connections)"
			} else if err != nil {
				msg += "; then, over another new connection: " + again
			}
		}
		if err != nil {
			o.ReconnectError = msg
			return o
		}
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
	o.CheckFailures = d.userChecks(ctx, c, run)
	return o
}

// decisionBound is a verdict command as the node runs it for run: in a
// session of its own, stopped (SIGTERM to its process group) once run has
// been decided on the host (its "decision": the watchdog's, as when the
// deploy was interrupted or killed, or a deployer's), so that no check goes
// on into the watchdog's switch back (a session without a terminal sends
// its command no hangup when its deployer goes). Not the lease: a check
// may run again over a new login after the lease ended with a stalled
// session, and still count. The decision is looked at twice a second, with
// the shell's builtins.
func decisionBound(run, cmd string) string {
	return "setsid sh -c " + shell.Quote(cmd) + " </dev/null & fleet_c=$!\n" +
		"( while kill -0 $fleet_c 2>/dev/null; do [ ! -L " + shell.Quote(agreement.StateDir+"/"+run+"/decision") + " ] || { kill -TERM -$fleet_c 2>/dev/null; exit 0; }; sleep 0.5; done ) </dev/null >/dev/null 2>&1 &\n" +
		"fleet_w=$!\nwait $fleet_c; fleet_rc=$?\nkill $fleet_w 2>/dev/null\nexit $fleet_rc"
}

// userChecks runs the verdict's http and tcp checks from the deployer and
// its commands on the node, each bound to run's decision.
func (d *Deployer) userChecks(ctx context.Context, c *Conn, run string) []string {
	var failures []string
	spec := d.Options.Verdict
	for _, cmd := range spec.Command {
		out, err := output(c.Command(ctx, remote(decisionBound(run, cmd))))
		exit, msg := exitOf(err, out)
		if exit == 255 && ctx.Err() == nil {
			// ssh's own failure, not the command's: the session to the host
			// was lost (its path stalled past the keepalive), so it runs
			// again over a new login, and the check's outcome is its.
			out, err = output(c.FreshCommand(ctx, remote(decisionBound(run, cmd))))
			exit, msg = exitOf(err, out)
		}
		switch {
		case err == nil:
		case exit == 255:
			failures = append(failures, fmt.Sprintf("command %q could not be run: the SSH session to the host was lost, over the node's connection and over a new login (%s)", cmd, orStr(msg, "no word from ssh")))
		default:
			failures = append(failures, fmt.Sprintf("command %q exited %d: %s", cmd, exit, orStr(msg, "no output")))
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
func output(cmd *exec.Cmd) (string, error) {
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
