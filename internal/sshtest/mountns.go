package sshtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MountNamespace is a private mount namespace (unshare --mount --propagation
// private) held open by a sleeping process; storage faults for node health
// tests are made inside it. Mounts made in it are invisible to the host and
// to other tests, and vanish once its last process is gone.
//
// It starts as a copy of the host's mounts, so host files stay visible in it
// until something is mounted over them; mount only below tb.TempDir() so the
// sshd files and the test's own files are never hidden.
type MountNamespace struct {
	// PID is the holder: a sleep process inside the namespace. nsenter joins
	// the namespace through it.
	PID int

	nsenter string // absolute path
	cmd     *exec.Cmd
	errPath string        // the holder's stderr, for failure messages
	exited  chan struct{} // closed once cmd.Wait has returned
}

const (
	mountNSReadyTimeout = 5 * time.Second
	mountNSRunTimeout   = 30 * time.Second
)

// NewMountNamespace starts the holder and kills it when the test ends. It
// needs unshare and nsenter (Debian package util-linux) and the right to
// create mount namespaces (root); without them the test fails, it is never
// skipped, so a storage fault cannot silently go untested.
func NewMountNamespace(tb TB) *MountNamespace {
	tb.Helper()
	unshare := utilLinuxBinary(tb, "unshare")
	nsenter := utilLinuxBinary(tb, "nsenter")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		tb.Fatalf("sshtest: sleep not found: install Debian package coreutils")
	}
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		tb.Fatalf("sshtest: read this process's mount namespace: %v", err)
	}

	errFile, err := os.CreateTemp(tb.TempDir(), "unshare-*.log")
	if err != nil {
		tb.Fatalf("sshtest: create unshare log: %v", err)
	}
	ns := &MountNamespace{nsenter: nsenter, errPath: errFile.Name()}
	// unshare execs sleep without forking (no --fork), so the pid is the
	// holder's from start to end.
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", sleep, "infinity")
	cmd.Stdout = errFile
	cmd.Stderr = errFile
	// If the test binary dies before its cleanups run (a -timeout panic),
	// the holder must not sleep forever with the namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	errFile.Close()
	if err != nil {
		tb.Fatalf("sshtest: start %s: %v", unshare, err)
	}
	ns.cmd = cmd
	ns.PID = cmd.Process.Pid
	ns.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(ns.exited)
	}()
	tb.Cleanup(ns.stop)

	if err := ns.waitReady(hostNS); err != nil {
		tb.Fatalf("sshtest: private mount namespace (%s --mount --propagation private): %v\nunshare output:\n%s",
			unshare, err, ns.holderOutput())
	}
	return ns
}

func utilLinuxBinary(tb TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("sshtest: %s not found: install Debian package util-linux", name)
	}
	return path
}

// waitReady polls until the holder has left the host's mount namespace and
// become sleep, which unshare execs only after setting propagation private.
func (ns *MountNamespace) waitReady(hostNS string) error {
	deadline := time.Now().Add(mountNSReadyTimeout)
	proc := "/proc/" + strconv.Itoa(ns.PID)
	for time.Now().Before(deadline) {
		select {
		case <-ns.exited:
			return fmt.Errorf("holder exited: %v", ns.cmd.ProcessState)
		default:
		}
		comm, _ := os.ReadFile(proc + "/comm")
		mnt, _ := os.Readlink(proc + "/ns/mnt")
		if strings.TrimSpace(string(comm)) == "sleep" && mnt != "" && mnt != hostNS {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("holder %d not in a new mount namespace within %v", ns.PID, mountNSReadyTimeout)
}

func (ns *MountNamespace) holderOutput() string {
	b, err := os.ReadFile(ns.errPath)
	if err != nil {
		return fmt.Sprintf("(cannot read unshare output: %v)", err)
	}
	return string(b)
}

// stop kills the holder and waits for it. Processes still inside the
// namespace (an sshd started with WithMountNamespace) keep it alive; their
// own cleanups stop them.
func (ns *MountNamespace) stop() {
	_ = ns.cmd.Process.Kill()
	<-ns.exited
}

// Command returns argv prefixed so that it runs inside the namespace:
// [/abs/nsenter -t PID -m -- argv...]. nsenter execs argv without forking,
// so the process started is argv's own.
func (ns *MountNamespace) Command(argv ...string) []string {
	return append([]string{ns.nsenter, "-t", strconv.Itoa(ns.PID), "-m", "--"}, argv...)
}

// Run runs argv inside the namespace and returns its combined output. A
// failure, or no exit within 30s, is fatal, with the output in the message.
// To expect a failure, run ns.Command(argv...) with os/exec instead.
func (ns *MountNamespace) Run(tb TB, argv ...string) string {
	tb.Helper()
	if len(argv) == 0 {
		tb.Fatalf("sshtest: MountNamespace.Run needs a command")
	}
	out, err := ns.output(nil, argv...)
	if err != nil {
		tb.Fatalf("sshtest: in mount namespace %d: %s: %v\noutput:\n%s", ns.PID, strings.Join(argv, " "), err, out)
	}
	return out
}

// output runs argv inside the namespace, with extra as its descriptors from
// 3 on, and returns its combined output; no exit within 30s is an error.
func (ns *MountNamespace) output(extra []*os.File, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mountNSRunTimeout)
	defer cancel()
	full := ns.Command(argv...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.ExtraFiles = extra
	// A background child holding the output open must not hang Run.
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("no exit within %v: %w", mountNSRunTimeout, err)
	}
	return string(out), err
}

// MountTmpfs creates dir on the host (so it exists in both views) and mounts
// a fresh tmpfs on it inside the namespace only; the host's dir stays empty.
func (ns *MountNamespace) MountTmpfs(tb TB, dir string) {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("sshtest: create mount point %s: %v", dir, err)
	}
	ns.Run(tb, "mount", "-t", "tmpfs", "sshtest", dir)
}

// RemountReadOnly remounts the filesystem mounted on dir read-only inside
// the namespace, so writes there fail with EROFS ("Read-only file system"),
// as on a disk the kernel has remounted after an I/O error.
func (ns *MountNamespace) RemountReadOnly(tb TB, dir string) {
	tb.Helper()
	ns.Run(tb, "mount", "-o", "remount,ro", dir)
}

// RemountReadWrite undoes RemountReadOnly.
func (ns *MountNamespace) RemountReadWrite(tb TB, dir string) {
	tb.Helper()
	ns.Run(tb, "mount", "-o", "remount,rw", dir)
}

// WithMountNamespace makes StartSSHD run sshd inside ns (its command is
// prefixed with ns.Command), so every session sees the namespace's mounts.
// Create ns before StartSSHD: cleanups run last-in first-out, so sshd stops
// before the holder is killed.
func WithMountNamespace(ns *MountNamespace) SSHDOption {
	return func(c *sshdConfig) { c.ns = ns }
}
