// Package systemdtest boots real systemd hosts for tests: each Target is a
// Debian bookworm container (systemd-nspawn --boot) whose systemctl,
// systemd-run, journalctl and systemd-detect-virt are the real ones, with
// its own Nix store, reached through its own sshd. It checks what the
// stand-ins of internal/nixtest claim, against systemd itself. Its API is
// nixtest's where the two mean the same: Host, Port, User, HostKey,
// ClientKeyFile, Boot, CurrentSystem, ProfileSystem, BootEntry, Calls.
//
// How a target is built: the root file system that
// scripts/build-systemd-rootfs.sh made once (RootFS) is the lower layer of
// an overlay whose upper layer is the test's, so the cached tree is never
// written to. Before the boot the harness writes into the upper layer a
// fresh host key, the client key authorised for root, an sshd_config.d
// snippet with a free loopback port, and nix.conf (nixtest.NixConfig: no
// substituters, no signatures), so nix-copy-closure --to fills the
// container's own /nix from the deployer's. The overlay is mounted in a
// private mount namespace (unshare) that exists only as long as
// systemd-nspawn runs, so a stopped target leaves no mount behind. The
// container shares the host's network (tests listen on 127.0.0.1 only);
// it gets cgroups of its own, since the machine's PID 1 is not systemd
// (no systemd-machined to register with). Host and Port are a sshtest.Gate
// in front of the container's sshd, as in nixtest, so a test can drop the
// open connections; SSHDPort bypasses it.
//
// Like nixtest, it is imported only from tests, and it needs root.
package systemdtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// TB is the part of testing.TB the harness needs: sshtest's, and Skip,
// as a -short run skips every target.
type TB interface {
	sshtest.TB
	Skip(args ...any)
}

// ProfilePath is the system profile on a target.
const ProfilePath = nixtest.ProfilePath

// SessionPath is PATH in commands the harness runs on the target: what a
// Debian root login gets.
const SessionPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

const (
	// bootTimeout bounds the boot up to is-system-running and sshd's
	// banner; a boot takes a few seconds.
	bootTimeout = 90 * time.Second
	// stopTimeout bounds the orderly shutdown before the container is
	// killed.
	stopTimeout = 20 * time.Second
	// sshdPortAttempts: a port free when chosen can be taken before sshd
	// binds it; sshd is then restarted on another.
	sshdPortAttempts = 5
	commandTimeout   = 60 * time.Second
)

// Target is a real systemd host reached over SSH at Host:Port, a gate in
// front of its sshd, so a test can drop every open connection
// (Gate.SetMode) while the host runs on.
type Target struct {
	Host string // "127.0.0.1"
	Port int    // the gate's
	// SSHDPort is the port the container's sshd listens on, past the gate,
	// at a loopback address of its own (sshdHost).
	SSHDPort int
	sshdHost string
	User     string // root
	// HostKey is the target's sshd host key in authorized_keys form
	// ("ssh-ed25519 AAAA..."), to pin.
	HostKey string
	// ClientKeyFile is a private key file (0600) authorised for User.
	ClientKeyFile string
	// Machine is the container's name (systemd-nspawn --machine).
	Machine string
	// Dir holds the overlay's upper and work directories and the
	// container's console log (console.log).
	Dir string
	// PID is the container's init, its systemd, as the host numbers it.
	PID  int
	Gate *sshtest.Gate

	rootfs   string
	mu       sync.Mutex // guards stopping, boots and the restart of a rebooted container
	stopping bool
	boots    []Boot
	// live guards what a reboot changes: PID, root, cmd and exited.
	live sync.RWMutex

	tb      TB
	cmd     *exec.Cmd     // systemd-nspawn
	exited  chan struct{} // closed once cmd.Wait has returned
	root    string        // /proc/<PID>/root: the container's file system
	upper   string        // the overlay's upper directory
	cgroups []string      // the cgroups made for the container, on the host
}

// NewTarget boots a target and stops it when the test ends, even when the
// test fails; a -short run (make test-short) skips the test instead. A
// missing tool or root file system fails the test with the fix.
func NewTarget(tb TB) *Target {
	tb.Helper()
	if testing.Short() {
		tb.Skip("slow (boots a systemd container): make test runs it")
	}
	requireTools(tb)
	rootfs := RootFS(tb)
	// A short directory of our own: overlayfs options cannot hold a comma,
	// which a test's TempDir may.
	dir, err := os.MkdirTemp("", "systemdtest-") //nolint:usetesting // see above
	if err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	nonce := make([]byte, 4)
	if _, err := rand.Read(nonce); err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
	t := &Target{Host: "127.0.0.1", User: "root", Machine: "fleet-" + hex.EncodeToString(nonce), Dir: dir, tb: tb}
	t.upper = filepath.Join(dir, "upper")
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			tb.Fatalf("systemdtest: %v", err)
		}
	}
	// sshd listens at a loopback address of its own: a port picked on
	// 127.0.0.1 could be taken by another test's server before the
	// container's sshd binds it, which would then answer in its place.
	t.sshdHost = sshtest.PrivateLoopback(tb)
	t.SSHDPort = sshtest.ClosedPortOn(tb, t.sshdHost)
	t.writeUpper(tb)
	t.makeCgroups(tb)
	t.rootfs = rootfs
	t.start(tb, rootfs)
	// Registered after the directory's removal, so it runs before it.
	tb.Cleanup(t.stop)
	t.findInit(tb)
	t.waitBooted(tb)
	t.waitSSHD(tb)
	t.Gate = sshtest.NewGate(tb, net.JoinHostPort(t.sshdHost, strconv.Itoa(t.SSHDPort)))
	t.Port = t.Gate.Port
	return t
}

func requireTools(tb TB) {
	tb.Helper()
	for tool, pkg := range map[string]string{
		"systemd-nspawn": "systemd-container", "unshare": "util-linux", "nsenter": "util-linux",
		"nix-store": "nix-bin", "nix-copy-closure": "nix-bin", "ssh": "openssh-client",
	} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Fatalf("systemdtest: %s not found: install Debian package %s (make setup)", tool, pkg)
		}
	}
	if os.Geteuid() != 0 {
		tb.Fatalf("systemdtest: systemd-nspawn and mounts need root")
	}
}

// writeUpper puts the target's own files in the overlay's upper layer,
// where they hide the root file system's: host key, authorised key, sshd
// port, Nix configuration.
func (t *Target) writeUpper(tb TB) {
	tb.Helper()
	hostKey, clientKey := sshtest.NewKey(tb), sshtest.NewKey(tb)
	t.HostKey = hostKey.AuthorizedLine()
	t.ClientKeyFile = clientKey.WriteFile(tb, tb.TempDir())
	files := []struct {
		rel, text string
		mode      os.FileMode
	}{
		{"etc/ssh/ssh_host_ed25519_key", string(hostKey.PEM()), 0o600},
		{"etc/ssh/ssh_host_ed25519_key.pub", t.HostKey + "\n", 0o644},
		{sshdSnippet, t.sshdConfig(), 0o644},
		{"root/.ssh/authorized_keys", clientKey.AuthorizedLine() + "\n", 0o600},
		{"etc/nix/nix.conf", nixtest.NixConfig, 0o644},
		{"etc/systemd/system/" + stage2Unit, stage2UnitFile, 0o644},
	}
	for _, f := range files {
		path := filepath.Join(t.upper, f.rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatalf("systemdtest: %v", err)
		}
		if err := os.WriteFile(path, []byte(f.text), f.mode); err != nil {
			tb.Fatalf("systemdtest: %v", err)
		}
	}
	if err := os.Chmod(filepath.Join(t.upper, "root/.ssh"), 0o700); err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
	wants := filepath.Join(t.upper, "etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
	if err := os.Symlink("/etc/systemd/system/"+stage2Unit, filepath.Join(wants, stage2Unit)); err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
}

// stage2Unit stands in for NixOS's stage 2 at boot: /run/booted-system
// and /run/current-system point at the system of the boot entry (none at
// the first boot, which Boot activates), and that system's units are
// installed and started, as its activation does.
const stage2Unit = "systemdtest-stage2.service"

const stage2UnitFile = `[Unit]
Description=systemdtest stand-in for NixOS stage 2
DefaultDependencies=no
Before=multi-user.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'e=$(cat ` + BootEntryPath + ` 2>/dev/null) || exit 0; [ -n "$e" ] || exit 0; ln -sfn "$e" /run/current-system; ln -sfn "$e" /run/booted-system; for f in "$e"/etc/systemd/system/*.service; do [ -f "$f" ] || continue; u=$(basename "$f"); sed "s|@out@|$e|g" "$f" > /run/systemd/system/$u; done; systemctl daemon-reload; for f in "$e"/etc/systemd/system/*.service; do [ -f "$f" ] && systemctl start --no-block $(basename "$f"); done; exit 0'

[Install]
WantedBy=multi-user.target
`

// sshdSnippet is read first by Debian's sshd_config (Include at its top),
// and sshd keeps the first value it reads.
const sshdSnippet = "etc/ssh/sshd_config.d/systemdtest.conf"

func (t *Target) sshdConfig() string {
	return strings.Join([]string{
		"Port " + strconv.Itoa(t.SSHDPort),
		"ListenAddress " + t.sshdHost,
		"HostKey /etc/ssh/ssh_host_ed25519_key",
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UseDNS no",
		// sntrup761 costs about 100ms a connection on a slow machine, as
		// in nixtest.
		"KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org",
		"LogLevel VERBOSE",
	}, "\n") + "\n"
}

// makeCgroups makes the cgroups systemd-nspawn runs in. Without
// systemd-machined it keeps the cgroup it starts in (--keep-unit) and
// splits it into payload and supervisor; the machine's root cgroup, shared
// by every test, must not be that.
func (t *Target) makeCgroups(tb TB) {
	tb.Helper()
	var bases []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		bases = []string{"/sys/fs/cgroup"} // cgroup v2 only
	} else {
		for _, b := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"} {
			if _, err := os.Stat(filepath.Join(b, "cgroup.procs")); err == nil {
				bases = append(bases, b)
			}
		}
	}
	if len(bases) == 0 {
		tb.Fatalf("systemdtest: no cgroup v2 or name=systemd hierarchy under /sys/fs/cgroup for systemd-nspawn")
	}
	for _, b := range bases {
		cg := filepath.Join(b, "systemdtest-"+t.Machine)
		if err := os.Mkdir(cg, 0o755); err != nil {
			tb.Fatalf("systemdtest: make the container's cgroup: %v", err)
		}
		t.cgroups = append(t.cgroups, cg)
	}
}

// start runs systemd-nspawn --boot on the overlay, in a mount namespace of
// its own, from the target's cgroups.
func (t *Target) start(tb TB, rootfs string) {
	tb.Helper()
	console, err := os.Create(filepath.Join(t.Dir, "console.log"))
	if err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
	script := `for cg in $CGROUPS; do echo $$ > "$cg/cgroup.procs"; done
mount -t overlay systemdtest -o "lowerdir=$LOWER,upperdir=$DIR/upper,workdir=$DIR/work" "$DIR/merged"
exec systemd-nspawn --quiet --settings=no --register=no --keep-unit --link-journal=no \
	--console=read-only --boot --machine="$MACHINE" --directory="$DIR/merged"`
	// unshare execs sh, which execs systemd-nspawn: one pid throughout.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-ec", script)
	cmd.Env = append(os.Environ(), "CGROUPS="+strings.Join(t.cgroups, " "), "LOWER="+rootfs, "DIR="+t.Dir, "MACHINE="+t.Machine)
	cmd.Stdout, cmd.Stderr = console, console
	// If the test binary dies before its cleanups run, systemd-nspawn
	// still shuts the container down (SIGTERM: an orderly poweroff).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	err = cmd.Start()
	console.Close()
	if err != nil {
		tb.Fatalf("systemdtest: start systemd-nspawn: %v", err)
	}
	exited := make(chan struct{})
	t.live.Lock()
	t.cmd, t.exited = cmd, exited
	t.live.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exited)
		if cmd.ProcessState.ExitCode() == exitReboot {
			t.rebooted(tb)
		}
	}()
}

// exitReboot is systemd-nspawn's exit status when the container asked to
// reboot.
const exitReboot = 133

// Boot is one reboot of a target: when its container went away and came
// back booted, and its new boot id.
type Boot struct {
	Down, Up time.Time
	ID       string
}

// Boots are the target's reboots so far, in order.
func (t *Target) Boots() []Boot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.boots)
}

// rebooted starts the container again on the same overlay, as a host
// that reboots comes back: its stage-2 stand-in (stage2Unit) points
// /run/booted-system and /run/current-system at its boot entry.
func (t *Target) rebooted(tb TB) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopping {
		return
	}
	down := time.Now()
	t.start(tb, t.rootfs)
	t.findInit(tb)
	t.waitBooted(tb)
	t.waitSSHD(tb)
	id, _ := t.exec("cat", "/proc/sys/kernel/random/boot_id")
	t.boots = append(t.boots, Boot{Down: down, Up: time.Now(), ID: strings.TrimSpace(id)})
}

// findInit waits for the container's systemd: the child of systemd-nspawn
// that is PID 1 in its own PID namespace.
func (t *Target) findInit(tb TB) {
	tb.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		cmd, exited := t.current()
		if pid := initOf(cmd.Process.Pid); pid != 0 {
			t.live.Lock()
			t.PID = pid
			t.root = "/proc/" + strconv.Itoa(pid) + "/root"
			t.live.Unlock()
			return
		}
		select {
		case <-exited:
			tb.Fatalf("systemdtest: systemd-nspawn exited before the container started\n%s", t.Console())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("systemdtest: no container init under systemd-nspawn (pid %d) within %s\n%s", cmd.Process.Pid, bootTimeout, t.Console())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// initOf is the child of parent that is PID 1 in its PID namespace, 0 when
// there is none (yet).
func initOf(parent int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var ppid string
		var nspid []string
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				ppid = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspid = strings.Fields(v)
			}
		}
		if ppid == strconv.Itoa(parent) && len(nspid) > 1 && nspid[len(nspid)-1] == "1" {
			return pid
		}
	}
	return 0
}

// waitBooted waits until systemctl is-system-running says the boot is
// over: running, or degraded (a unit failed to start).
func (t *Target) waitBooted(tb TB) {
	tb.Helper()
	deadline := time.Now().Add(bootTimeout)
	var state string
	for {
		// --wait blocks while the system is starting; before systemd
		// listens, systemctl fails at once and is asked again.
		left := time.Until(deadline).Seconds()
		out, _ := t.exec("timeout", strconv.Itoa(max(int(left), 1)), "systemctl", "is-system-running", "--wait")
		state = lastLine(out)
		switch state {
		case "running":
			return
		case "degraded":
			failed, _ := t.exec("systemctl", "--failed", "--no-pager")
			fmt.Fprintf(os.Stderr, "systemdtest: %s booted degraded:\n%s\n", t.Machine, failed)
			return
		}
		_, exited := t.current()
		select {
		case <-exited:
			tb.Fatalf("systemdtest: systemd-nspawn exited during the boot\n%s", t.Console())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("systemdtest: %s did not finish booting within %s: systemctl is-system-running says %q\n%s", t.Machine, bootTimeout, state, t.Console())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSSHD waits for sshd's banner on the port; when sshd failed (its
// port was taken meanwhile), it moves sshd to another port.
func (t *Target) waitSSHD(tb TB) {
	tb.Helper()
	addr := func() string { return net.JoinHostPort(t.sshdHost, strconv.Itoa(t.SSHDPort)) }
	deadline := time.Now().Add(bootTimeout)
	for attempt := 1; ; {
		err := readBanner(addr())
		if err == nil {
			return
		}
		if _, code := t.exec("systemctl", "is-failed", "--quiet", "ssh.service"); code == 0 && attempt < sshdPortAttempts {
			attempt++
			t.SSHDPort = sshtest.ClosedPortOn(tb, t.sshdHost)
			if err := os.WriteFile(t.rootNow()+"/"+sshdSnippet, []byte(t.sshdConfig()), 0o644); err != nil {
				tb.Fatalf("systemdtest: %v", err)
			}
			if out, code := t.exec("sh", "-c", "systemctl reset-failed ssh.service && systemctl restart ssh.service"); code != 0 {
				tb.Fatalf("systemdtest: restart sshd on port %d: exit %d\n%s", t.SSHDPort, code, out)
			}
			continue
		}
		if time.Now().After(deadline) {
			journal, _ := t.exec("journalctl", "--no-pager", "-u", "ssh.service")
			tb.Fatalf("systemdtest: no SSH banner on %s within %s: %v\n%s", addr(), bootTimeout, err, journal)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readBanner(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "SSH-2.0-") {
		return fmt.Errorf("unexpected banner %q", line)
	}
	return nil
}

// stop shuts the container down in order (systemd-nspawn turns SIGTERM
// into a poweroff), kills it when that takes longer than stopTimeout, and
// removes its cgroups. The overlay goes with the mount namespace.
func (t *Target) stop() {
	t.mu.Lock()
	t.stopping = true
	t.mu.Unlock()
	var problems []string
	cmd, exited := t.current()
	pid := t.pidNow()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if !waitClosed(exited, stopTimeout) {
		problems = append(problems, fmt.Sprintf("no orderly shutdown within %s: killed", stopTimeout))
		// Killing a PID namespace's init kills everything in it;
		// systemd-nspawn then reaps it and exits.
		if pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !waitClosed(exited, 5*time.Second) {
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	for _, cg := range t.cgroups {
		if err := removeCgroup(cg); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		t.tb.Fatalf("systemdtest: stopping %s: %s\n%s", t.Machine, strings.Join(problems, "; "), t.Console())
	}
}

func waitClosed(c chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-c:
		return true
	case <-timer.C:
		return false
	}
}

// removeCgroup removes a cgroup and the ones systemd made below it,
// deepest first; one whose last processes are still exiting is retried
// for a while.
func removeCgroup(cg string) error {
	var dirs []string
	_ = filepath.WalkDir(cg, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	deadline := time.Now().Add(5 * time.Second)
	for i := len(dirs) - 1; i >= 0; i-- {
		for {
			err := syscall.Rmdir(dirs[i])
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %v", dirs[i], err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// exec runs argv in the container (its mount, UTS, IPC and PID namespaces,
// as root with SessionPath) and returns its combined output and exit
// status; -1 when it could not run.
func (t *Target) exec(argv ...string) (string, int) {
	return t.execInput(nil, argv...)
}

func (t *Target) execInput(stdin []byte, argv ...string) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	full := append([]string{"--target", strconv.Itoa(t.pidNow()), "--mount", "--uts", "--ipc", "--pid", "--",
		"/usr/bin/env", "-i", "PATH=" + SessionPath, "HOME=/root", "LC_ALL=C"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	cmd.WaitDelay = time.Second
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return string(out), exit.ExitCode()
	}
	return string(out) + err.Error(), -1
}

// Exec runs argv on the target as root (not over SSH: the harness enters
// the container) and returns its combined output and exit status. It
// fails the test when argv cannot run at all.
func (t *Target) Exec(tb TB, argv ...string) (string, int) {
	tb.Helper()
	out, code := t.exec(argv...)
	if code == -1 {
		tb.Fatalf("systemdtest: %s on %s: %s", strings.Join(argv, " "), t.Machine, out)
	}
	return out, code
}

// Systemctl runs the target's systemctl with args and returns what it
// printed, trimmed, and its exit status.
func (t *Target) Systemctl(tb TB, args ...string) (string, int) {
	tb.Helper()
	out, code := t.Exec(tb, append([]string{"systemctl"}, args...)...)
	return strings.TrimSpace(out), code
}

// SystemState is systemctl is-system-running's answer: "running",
// "degraded", ...
func (t *Target) SystemState(tb TB) string {
	tb.Helper()
	out, _ := t.Systemctl(tb, "is-system-running")
	return lastLine(out)
}

// DetectVirt is systemd-detect-virt --container's answer on the target.
func (t *Target) DetectVirt(tb TB) string {
	tb.Helper()
	out, _ := t.Exec(tb, "systemd-detect-virt", "--container")
	return strings.TrimSpace(out)
}

// Service is how a service stands on the target.
type Service struct {
	ActiveState string // "active", "failed", "inactive", ...
	// System is the system closure whose unit file is loaded ("" for a
	// unit no systemdtest closure installed).
	System string
}

// Service reads unit's state and the system it came from.
func (t *Target) Service(tb TB, unit string) Service {
	tb.Helper()
	out, code := t.Systemctl(tb, "show", "--property=ActiveState,Description", unit)
	if code != 0 {
		tb.Fatalf("systemdtest: systemctl show %s: exit %d: %s", unit, code, out)
	}
	var s Service
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "ActiveState":
			s.ActiveState = v
		case "Description":
			if _, sys, ok := strings.Cut(v, " of "); ok && strings.HasPrefix(v, "systemdtest ") {
				s.System = sys
			}
		}
	}
	return s
}

// Journal is what the target's journal holds for unit.
func (t *Target) Journal(tb TB, unit string) string {
	tb.Helper()
	out, _ := t.Exec(tb, "journalctl", "--no-pager", "--output=short", "-u", unit)
	return out
}

// Console is what the container printed on its console, for failure
// messages.
func (t *Target) Console() string {
	b, err := os.ReadFile(filepath.Join(t.Dir, "console.log"))
	if err != nil {
		return fmt.Sprintf("(no console log: %v)", err)
	}
	return "console:\n" + string(b)
}

// Destination is User@Host, for ssh and nix-copy-closure --to.
func (t *Target) Destination() string { return t.User + "@" + t.Host }

// SSHOptions returns the OpenSSH client options that reach the target with
// its host key pinned, as nixtest.Target.SSHOptions does.
func (t *Target) SSHOptions(tb TB) []string {
	tb.Helper()
	knownHosts := filepath.Join(tb.TempDir(), "known_hosts")
	if err := os.WriteFile(knownHosts, []byte("* "+t.HostKey+"\n"), 0o600); err != nil {
		tb.Fatalf("systemdtest: write known_hosts: %v", err)
	}
	return []string{
		"-F", "/dev/null",
		"-o", "BatchMode=yes",
		"-o", "Port=" + strconv.Itoa(t.Port),
		"-o", "IdentityFile=" + t.ClientKeyFile,
		"-o", "IdentitiesOnly=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + knownHosts,
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "ConnectTimeout=10",
	}
}

// Boot makes system the target's running system, as if it had booted into
// it: it copies system's closure from the deployer's store into the
// target's, sets the system profile and runs its switch-to-configuration
// switch, which must succeed. Its calls are not kept in Calls.
func (t *Target) Boot(tb TB, system string) {
	tb.Helper()
	if out, code := t.switchTo(tb, system); code != 0 {
		tb.Fatalf("systemdtest: Boot %s: switch-to-configuration switch exited %d\n%s", system, code, out)
	}
	for _, f := range []string{"switch.log", "activations"} {
		if err := os.Remove(t.rootNow() + StateDir + "/" + f); err != nil {
			tb.Fatalf("systemdtest: Boot: %v", err)
		}
	}
}

// Switch does on the target what an operator does with nixos-rebuild
// switch there, outside any deployment: system's closure copied into its
// store, the profile set, switch-to-configuration switch. It returns that
// command's output and exit status.
func (t *Target) Switch(tb TB, system string) (string, int) {
	tb.Helper()
	return t.switchTo(tb, system)
}

func (t *Target) switchTo(tb TB, system string) (string, int) {
	tb.Helper()
	t.importClosure(tb, system)
	return t.Exec(tb, "sh", "-c", `nix-env -p "$1" --set "$2" && "$2/bin/switch-to-configuration" switch`, "sh", ProfilePath, system)
}

// importClosure copies system's closure from the deployer's store into the
// target's (nix-store --export | --import, no SSH).
func (t *Target) importClosure(tb TB, system string) {
	tb.Helper()
	q := exec.Command("nix-store", "--query", "--requisites", system)
	q.Env = nixtest.DeployerEnv()
	var qErr bytes.Buffer
	q.Stderr = &qErr
	paths, err := q.Output()
	if err != nil {
		tb.Fatalf("systemdtest: %s is not in the deployer's store: %v\n%s", system, err, qErr.String())
	}
	export := exec.Command("nix-store", append([]string{"--export"}, strings.Fields(string(paths))...)...)
	export.Env = nixtest.DeployerEnv()
	var exportErr bytes.Buffer
	export.Stderr = &exportErr
	archive, err := export.Output()
	if err != nil {
		tb.Fatalf("systemdtest: nix-store --export %s: %v\n%s", system, err, exportErr.String())
	}
	if out, code := t.execInput(archive, "nix-store", "--import"); code != 0 {
		tb.Fatalf("systemdtest: nix-store --import of %s on %s: exit %d\n%s", system, t.Machine, code, out)
	}
}

// HasPath reports whether path is a valid path in the target's own store.
func (t *Target) HasPath(tb TB, path string) bool {
	tb.Helper()
	out, code := t.Exec(tb, "nix-store", "--check-validity", path)
	switch code {
	case 0:
		return true
	case 1:
		return false
	}
	tb.Fatalf("systemdtest: nix-store --check-validity %s on %s: exit %d\n%s", path, t.Machine, code, out)
	return false
}

// CurrentSystem is where /run/current-system points on the target, "" when
// it does not exist.
func (t *Target) CurrentSystem() string { return t.readlink("/run/current-system") }

// ProfileSystem is the store path the system profile's current generation
// points at, "" before there is one.
func (t *Target) ProfileSystem() string {
	link := t.readlink(ProfilePath)
	if link == "" {
		return ""
	}
	if !filepath.IsAbs(link) {
		link = filepath.Join(filepath.Dir(ProfilePath), link)
	}
	return t.readlink(link)
}

// BootEntry is the system the bootloader would boot, "" before a `boot`.
func (t *Target) BootEntry() string { return strings.TrimSpace(t.readFile(BootEntryPath)) }

// Calls lists every switch-to-configuration call on the target since Boot,
// in order, as "<action> <store path>".
func (t *Target) Calls() []string { return lines(t.readFile(StateDir + "/switch.log")) }

// Activation is one switch-to-configuration call as it recorded itself
// when it ended.
type Activation struct {
	Action string // "test", "boot", "switch", "dry-activate"
	System string
	// Unit is the service it ran in: a systemd-run transient unit
	// ("fleet-activate-….service"), or ssh.service for a command of an
	// SSH session (the root file system has no pam_systemd to give a
	// session a scope); "" outside any service.
	Unit string
	// RuntimeMaxSec is that unit's RuntimeMaxUSec as systemctl show
	// prints it: "3min", "infinity".
	RuntimeMaxSec string
	Exit          int
	// SystemState and FailedUnits are systemctl's answers when a test or
	// switch ended.
	SystemState string
	FailedUnits []string
}

// Activations lists the switch-to-configuration calls that ended since
// Boot, in order.
func (t *Target) Activations() []Activation {
	var out []Activation
	for _, l := range lines(t.readFile(StateDir + "/activations")) {
		f := strings.Split(l, "\t")
		for len(f) < 7 {
			f = append(f, "")
		}
		exit, err := strconv.Atoi(f[4])
		if err != nil {
			t.tb.Fatalf("systemdtest: activations line %q: %v", l, err)
		}
		out = append(out, Activation{Action: f[0], System: f[1], Unit: f[2], RuntimeMaxSec: f[3], Exit: exit, SystemState: f[5], FailedUnits: strings.Fields(f[6])})
	}
	return out
}

// readlink reads a symlink in the target's file system; "" when there is
// none.
func (t *Target) readlink(path string) string {
	s, err := os.Readlink(t.rootNow() + path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.tb.Fatalf("systemdtest: readlink %s on %s: %v", path, t.Machine, err)
	}
	return s
}

// readFile reads a file in the target's file system; "" when there is none.
func (t *Target) readFile(path string) string {
	b, err := os.ReadFile(t.rootNow() + path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.tb.Fatalf("systemdtest: read %s on %s: %v", path, t.Machine, err)
	}
	return string(b)
}

func lines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func lastLine(s string) string {
	l := lines(strings.TrimSpace(s))
	if len(l) == 0 {
		return ""
	}
	return strings.TrimSpace(l[len(l)-1])
}

// current is the running systemd-nspawn and the channel closed once it
// has exited.
func (t *Target) current() (*exec.Cmd, chan struct{}) {
	t.live.RLock()
	defer t.live.RUnlock()
	return t.cmd, t.exited
}

// pidNow is the container's init now; rootNow its file system.
func (t *Target) pidNow() int {
	t.live.RLock()
	defer t.live.RUnlock()
	return t.PID
}

func (t *Target) rootNow() string {
	t.live.RLock()
	defer t.live.RUnlock()
	return t.root
}
