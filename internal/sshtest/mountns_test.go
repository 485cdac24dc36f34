package sshtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func TestMountNamespaceHolder(t *testing.T) {
	t.Parallel()
	ns := NewMountNamespace(t)
	proc := "/proc/" + strconv.Itoa(ns.PID)
	if comm, err := os.ReadFile(proc + "/comm"); err != nil || string(comm) != "sleep\n" {
		t.Errorf("holder %d comm = %q, %v; want sleep", ns.PID, comm, err)
	}
	host, _ := os.Readlink("/proc/self/ns/mnt")
	inside, err := os.Readlink(proc + "/ns/mnt")
	if err != nil || inside == host {
		t.Errorf("holder mount namespace %q (%v), host %q: want a different one", inside, err, host)
	}

	argv := ns.Command("stat", "-c", "%n")
	if !filepath.IsAbs(argv[0]) || filepath.Base(argv[0]) != "nsenter" {
		t.Errorf("Command()[0] = %q, want the absolute path of nsenter", argv[0])
	}
	want := []string{"-t", strconv.Itoa(ns.PID), "-m", "--", "stat", "-c", "%n"}
	if strings.Join(argv[1:], " ") != strings.Join(want, " ") {
		t.Errorf("Command() = %q, want [nsenter %q]", argv, want)
	}
}

// TestMountNamespacePrivatePropagation makes a shared mount on the host, as
// systemd makes /, so that a namespace without private propagation would
// pass its mounts back out; the namespace's tmpfs must stay inside.
func TestMountNamespacePrivatePropagation(t *testing.T) {
	t.Parallel()
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	hostMount := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("host: mount %q: %v\n%s", args, err, out)
		}
	}
	hostMount("--bind", shared, shared)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", shared).CombinedOutput(); err != nil {
			t.Errorf("host: umount %s: %v\n%s", shared, err, out)
		}
	})
	hostMount("--make-shared", shared)

	ns := NewMountNamespace(t)
	inner := filepath.Join(shared, "inner")
	ns.MountTmpfs(t, inner)
	if out := ns.Run(t, "stat", "-f", "-c", "%T", inner); out != "tmpfs\n" {
		t.Fatalf("filesystem type inside = %q, want tmpfs", out)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), inner) {
		t.Errorf("tmpfs on %s propagated to the host's namespace:\n%s", inner, mounts)
	}
}

func TestMountNamespaceTmpfs(t *testing.T) {
	t.Parallel()
	ns := NewMountNamespace(t)
	dir := filepath.Join(t.TempDir(), "data")
	ns.MountTmpfs(t, dir)

	ns.Run(t, "sh", "-c", `echo hello > "$1/f"`, "sh", dir)
	if out := ns.Run(t, "cat", filepath.Join(dir, "f")); out != "hello\n" {
		t.Errorf("cat inside = %q, want hello", out)
	}
	if out := ns.Run(t, "stat", "-f", "-c", "%T", dir); out != "tmpfs\n" {
		t.Errorf("filesystem type inside = %q, want tmpfs", out)
	}

	// Outside: the mount point exists, empty, and no tmpfs is mounted on it.
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("host view of %s: %d entries, %v; want empty", dir, len(entries), err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), dir) {
		t.Errorf("%s is mounted in the host's namespace:\n%s", dir, mounts)
	}
}

func TestMountNamespaceRemount(t *testing.T) {
	t.Parallel()
	ns := NewMountNamespace(t)
	dir := filepath.Join(t.TempDir(), "data")
	ns.MountTmpfs(t, dir)
	ns.Run(t, "sh", "-c", `echo before > "$1/f"`, "sh", dir)

	write := func(name string) (string, error) {
		argv := ns.Command("sh", "-c", `echo x > "$1/$2"`, "sh", dir, name)
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		return string(out), err
	}

	ns.RemountReadOnly(t, dir)
	out, err := write("g")
	if err == nil || !strings.Contains(out, "Read-only file system") {
		t.Errorf("write after RemountReadOnly: %v, output %q; want Read-only file system", err, out)
	}
	if out := ns.Run(t, "cat", filepath.Join(dir, "f")); out != "before\n" {
		t.Errorf("read after RemountReadOnly = %q, want the file written before", out)
	}

	ns.RemountReadWrite(t, dir)
	if out, err := write("g"); err != nil {
		t.Errorf("write after RemountReadWrite: %v, output %q", err, out)
	}
	if out := ns.Run(t, "cat", filepath.Join(dir, "g")); out != "x\n" {
		t.Errorf("cat after RemountReadWrite = %q, want x", out)
	}
}

// fatalTB records Fatalf instead of failing the test; run it with runFatal.
type fatalTB struct {
	*testing.T
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runFatal runs fn in its own goroutine, as testing does, and returns the
// Fatalf message, "" if fn returned normally.
func runFatal(t *testing.T, fn func(tb TB)) string {
	tb := &fatalTB{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	return tb.msg
}

// TestNewMountNamespaceFailsLoudly checks that a missing or failing unshare
// fails the test, with unshare's own words, instead of skipping it.
// Serial: the tools are looked up on the process's PATH.
func TestNewMountNamespaceFailsLoudly(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"nsenter", "sleep"} {
		realPath, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(realPath, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	msg := runFatal(t, func(tb TB) { NewMountNamespace(tb) })
	if !strings.Contains(msg, "unshare not found") || !strings.Contains(msg, "util-linux") {
		t.Errorf("without unshare: message %q", msg)
	}

	script := "#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "unshare"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	msg = runFatal(t, func(tb TB) { NewMountNamespace(tb) })
	for _, want := range []string{"holder exited", "exit status 1", "Operation not permitted"} {
		if !strings.Contains(msg, want) {
			t.Errorf("with a failing unshare: message lacks %q:\n%s", want, msg)
		}
	}
}

func TestMountNamespaceRunFailure(t *testing.T) {
	t.Parallel()
	ns := NewMountNamespace(t)
	msg := runFatal(t, func(tb TB) { ns.Run(tb, "sh", "-c", "echo boom; exit 3") })
	for _, want := range []string{"boom", "exit status 3", "sh -c"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Run failure message lacks %q:\n%s", want, msg)
		}
	}
	msg = runFatal(t, func(tb TB) { ns.RemountReadOnly(tb, filepath.Join(t.TempDir(), "not-a-mount")) })
	if !strings.Contains(msg, "remount,ro") {
		t.Errorf("RemountReadOnly of a non-mount point: message %q", msg)
	}
}

// startInNamespace starts sshd in a new namespace with a tmpfs on dir
// holding dir/f.
func startInNamespace(t *testing.T) (*MountNamespace, *SSHD, *ssh.Client, string) {
	t.Helper()
	ns := NewMountNamespace(t)
	dir := filepath.Join(t.TempDir(), "data")
	ns.MountTmpfs(t, dir)
	ns.Run(t, "sh", "-c", `echo inside > "$1/f"`, "sh", dir)
	d := StartSSHD(t, WithMountNamespace(ns))
	c := dial(t, d.Addr, clientConfig(d.ClientKey, d.HostKeys[0].Public))
	return ns, d, c, dir
}

func TestSSHDInMountNamespace(t *testing.T) {
	t.Parallel()
	ns, d, c, dir := startInNamespace(t)

	if out := run(t, c, "stat -f -c %T "+dir); out != "tmpfs\n" {
		t.Errorf("session: filesystem type of %s = %q, want tmpfs\nsshd log:\n%s", dir, out, d.Log())
	}
	if out := run(t, c, "cat "+filepath.Join(dir, "f")); out != "inside\n" {
		t.Errorf("session: cat = %q, want the file written in the namespace", out)
	}

	// nsenter execs: the pid StartSSHD tracks is sshd itself, in the
	// namespace, so Stop's descendant walk covers the sessions.
	proc := "/proc/" + strconv.Itoa(d.cmd.Process.Pid)
	if comm, err := os.ReadFile(proc + "/comm"); err != nil || string(comm) != "sshd\n" {
		t.Errorf("tracked pid %d comm = %q, %v; want sshd", d.cmd.Process.Pid, comm, err)
	}
	want, _ := os.Readlink("/proc/" + strconv.Itoa(ns.PID) + "/ns/mnt")
	if got, err := os.Readlink(proc + "/ns/mnt"); err != nil || got != want {
		t.Errorf("sshd mount namespace = %q, %v; want the holder's %q", got, err, want)
	}
}

func TestSSHDInMountNamespaceStop(t *testing.T) {
	t.Parallel()
	_, d, c, _ := startInNamespace(t)
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	stdout, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start("echo $$; exec sleep 60"); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 32)
	n, err := stdout.Read(line)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil || perr != nil {
		t.Fatalf("read session pid: %q, %v, %v", line[:n], err, perr)
	}

	d.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("session process %d survived Stop of sshd in a mount namespace", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = sess.Wait()
}

// gone reports whether pid has exited (a zombie counts: init may be slow to
// reap, or not reap at all, in a container).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}
