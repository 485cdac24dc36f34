package sshtest

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fuseSuperMagic is statfs's f_type of a FUSE file system.
const fuseSuperMagic = 0x65735546

// process is a command started in the background, waited for by a goroutine.
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    lockedBuffer
	err    error
	exited chan struct{}
}

// lockedBuffer is a process's output, readable while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start starts argv, with a pipe as its standard input. When the test ends
// it releases m first, so that a process that waits in the kernel behind a
// blocked operation (for a directory's lock, say, which no signal breaks)
// can be killed, then kills it if it is still running.
func start(t *testing.T, m *HungMount, argv ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(argv[0], argv[1:]...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if m != nil {
			m.Release()
		}
		_ = p.cmd.Process.Kill() // fails harmlessly once it has exited
		<-p.exited
	})
	return p
}

// within reports whether p exits within d.
func (p *process) within(d time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// waitFor polls cond every 10ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// wantBlocked fails unless exactly n operations are blocked in m within 5s
// and every one of ps is still running 300ms later.
func wantBlocked(t *testing.T, m *HungMount, n int, ps ...*process) {
	t.Helper()
	if !waitFor(5*time.Second, func() bool { return m.Blocked() == n }) {
		t.Fatalf("%d operations blocked, want %d", m.Blocked(), n)
	}
	time.Sleep(300 * time.Millisecond)
	for _, p := range ps {
		select {
		case <-p.exited:
			t.Fatalf("%q exited while the mount hangs (%v): %s", p.cmd.Args, p.err, p.out.String())
		default:
		}
	}
	if got := m.Blocked(); got != n {
		t.Errorf("%d operations blocked, want still %d", got, n)
	}
}

// wantClean fails unless every one of ps exits with status 0 within 5s.
func wantClean(t *testing.T, ps ...*process) {
	t.Helper()
	for _, p := range ps {
		if !p.within(5 * time.Second) {
			t.Errorf("%q still blocked 5s after Release", p.cmd.Args)
		} else if p.err != nil {
			t.Errorf("%q after Release: %v: %s", p.cmd.Args, p.err, p.out.String())
		}
	}
}

// readMounted and writeMounted reach a file of a mount this process serves
// with plain system calls. A file opened with os goes to the runtime's
// poller, whose epoll_ctl asks the file system (FUSE_POLL) while its
// thread holds a P: a garbage collection then waits for that P, and the
// server, stopped with everything else, never answers.
func readMounted(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(fd, buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

func writeMounted(path, text string) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	_, err = syscall.Write(fd, []byte(text))
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// TestHungMount: on a hung mount every kind of change blocks in the file
// system, while statfs, stat, listing and lookups answer; Release lets the
// changes finish, and Hang makes the next ones block again. Each change is
// made in a directory of its own: the kernel holds a directory's lock while
// an entry is created or removed in it, so a second change there waits in
// the kernel, not in the file system.
func TestHungMount(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "hung")
	m := MountHung(t, dir)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Type != fuseSuperMagic {
		t.Fatalf("statfs %s: type %#x, %v; want FUSE (%#x)", dir, st.Type, err, fuseSuperMagic)
	}

	// What the cheap tier of a path check does answers while it hangs.
	reads := start(t, m, "sh", "-c", `stat -f -c %i "$1" >/dev/null && test -d "$1" && ls -A "$1" && test ! -e "$1/nothing"`, "sh", dir)
	if !reads.within(5*time.Second) || reads.err != nil || reads.out.String() != "" {
		t.Fatalf("statfs, stat, listing and a lookup on the hung mount: exited %v, %v: %q", reads.cmd.ProcessState, reads.err, reads.out.String())
	}
	create := start(t, m, "sh", "-c", `echo x > "$1/f"`, "sh", dir)
	wantBlocked(t, m, 1, create)
	m.Release()
	wantClean(t, create)
	if b, err := readMounted(filepath.Join(dir, "f")); err != nil || string(b) != "x\n" {
		t.Errorf("after Release: f holds %q, %v; want x", b, err)
	}

	// While it works: a directory per change, holding what it changes,
	// and a file opened for writing before the mount hangs again.
	path := func(name ...string) string { return filepath.Join(append([]string{dir}, name...)...) }
	for _, d := range []string{"create", "excl", "mkdir", "open", "write", "fsync", "chmod", "rm", "mv", "rmdir"} {
		if err := os.Mkdir(path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"open/f", "write/f", "fsync/f", "chmod/f", "rm/f", "mv/f"} {
		if err := writeMounted(path(f), "x\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(path("rmdir", "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	opened := start(t, m, "sh", "-c", `exec 3>>"$1" && echo opened && read -r go && echo y >&3`, "sh", path("write", "f"))
	if !waitFor(5*time.Second, func() bool { return strings.Contains(opened.out.String(), "opened") }) {
		t.Fatalf("the writer did not open its file: %s", opened.out.String())
	}

	m.Hang()
	changes := []*process{
		start(t, m, "sh", "-c", `echo x > "$1"`, "sh", path("create", "f")),
		start(t, m, "dd", "of="+path("excl", "f"), "conv=excl,fsync", "status=none", "if=/dev/null"),
		start(t, m, "mkdir", path("mkdir", "d")),
		start(t, m, "sh", "-c", `: >> "$1"`, "sh", path("open", "f")),
		start(t, m, "sync", path("fsync", "f")),
		start(t, m, "chmod", "600", path("chmod", "f")),
		start(t, m, "rm", path("rm", "f")),
		start(t, m, "mv", path("mv", "f"), path("mv", "g")),
		start(t, m, "rmdir", path("rmdir", "d")),
		opened,
	}
	if _, err := io.WriteString(opened.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	wantBlocked(t, m, len(changes), changes...)
	m.Release()
	wantClean(t, changes...)
	for _, c := range []struct {
		dir  string
		want []string
	}{{"create", []string{"f"}}, {"excl", []string{"f"}}, {"mkdir", []string{"d"}}, {"rm", nil}, {"mv", []string{"g"}}, {"rmdir", nil}} {
		entries, err := os.ReadDir(path(c.dir))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if err != nil || !slices.Equal(names, c.want) {
			t.Errorf("after Release: %s holds %q, %v; want %q", c.dir, names, err, c.want)
		}
	}
	if b, err := readMounted(path("write", "f")); err != nil || string(b) != "x\ny\n" {
		t.Errorf("after Release: write/f holds %q, %v; want the write made while hung", b, err)
	}
	if fi, err := os.Stat(path("chmod", "f")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("after Release: chmod/f: %v, %v; want mode 0600", fi, err)
	}
	if got := m.Entries(); !slices.Equal(got, []string{"chmod", "create", "excl", "f", "fsync", "mkdir", "mv", "open", "rm", "rmdir", "write"}) {
		t.Errorf("entries %q", got)
	}
}

// TestHungMountKilledWriter: a process blocked in a hung mount dies of
// SIGKILL, as on a hard NFS mount, and its operation no longer counts as
// blocked.
func TestHungMountKilledWriter(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "hung")
	m := MountHung(t, dir)
	w := start(t, m, "sh", "-c", `exec dd of="$1/f" status=none if=/dev/zero count=1`, "sh", dir)
	wantBlocked(t, m, 1, w)
	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if !w.within(5 * time.Second) {
		t.Fatal("a writer blocked in the hung mount survived SIGKILL by 5s")
	}
	if !waitFor(5*time.Second, func() bool { return m.Blocked() == 0 }) {
		t.Errorf("%d operations blocked after their process was killed, want 0", m.Blocked())
	}
}

// TestHungMountInMountNamespaceThroughSSHD: the composition the health tests
// use. A hung mount made inside a namespace hangs a write of a session of an
// sshd started in it, the host's view of the directory stays as it was, and
// Release lets the write finish.
func TestHungMountInMountNamespaceThroughSSHD(t *testing.T) {
	t.Parallel()
	ns := NewMountNamespace(t)
	dir := filepath.Join(t.TempDir(), "hung")
	m := ns.MountHung(t, dir)
	d := StartSSHD(t, WithMountNamespace(ns))
	c := dial(t, d.Addr, clientConfig(d.ClientKey, d.HostKeys[0].Public))

	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Type == fuseSuperMagic {
		t.Errorf("host view of %s: statfs type %#x, %v; want the directory under it, not the namespace's FUSE mount", dir, st.Type, err)
	}
	if out := run(t, c, "stat -f -c %t "+dir); out != "65735546\n" {
		t.Errorf("session: file system type of %s = %q, want FUSE's 65735546\nsshd log:\n%s", dir, out, d.Log())
	}

	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var werr error
	exited := make(chan struct{})
	go func() {
		werr = sess.Run(`echo x > "` + dir + `/f"`)
		close(exited)
	}()
	t.Cleanup(func() {
		// If the test failed with the write blocked, closing the client
		// ends the session; sshd's Stop runs only after this cleanup.
		c.Close()
		<-exited
	})
	if !waitFor(30*time.Second, func() bool { return m.Blocked() == 1 }) {
		t.Fatalf("the session's write never blocked in the hung mount (%d blocked)\nsshd log:\n%s", m.Blocked(), d.Log())
	}
	select {
	case <-exited:
		t.Fatalf("session write exited while the mount hangs: %v", werr)
	case <-time.After(300 * time.Millisecond):
	}
	m.Release()
	select {
	case <-exited:
		if werr != nil {
			t.Errorf("session write after Release: %v", werr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("session write still blocked 5s after Release")
	}
	if got := m.Entries(); !slices.Equal(got, []string{"f"}) {
		t.Errorf("entries %q, want f", got)
	}
}

// cleanupTB collects cleanups, so that a test can run them itself.
type cleanupTB struct {
	*testing.T
	cleanups []func()
}

func (c *cleanupTB) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }

func (c *cleanupTB) runCleanups() {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
}

// TestHungMountCleanupNeverHangs: the cleanup of a hung mount ends, and its
// server with it, however the mount is held: with a write blocked in it, a
// process whose working directory is in it (the unmount is busy; a lazy
// one leaves the file system alive), or a copy of it in a mount namespace
// made after it (the unmount leaves the file system alive there).
func TestHungMountCleanupNeverHangs(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out the cleanup's bounds): make test runs it")
	}
	t.Parallel()
	for _, c := range []struct {
		name string
		hold func(t *testing.T, dir string)
	}{
		{"blocked write", func(*testing.T, string) {}},
		{"working directory inside", func(t *testing.T, dir string) {
			start(t, nil, "sh", "-c", `cd "$1" && exec sleep 60`, "sh", dir)
		}},
		{"copy in a later namespace", func(t *testing.T, _ string) { NewMountNamespace(t) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "hung")
			tb := &cleanupTB{T: t}
			m := MountHung(tb, dir)
			w := start(t, m, "sh", "-c", `echo x > "$1/f"`, "sh", dir)
			wantBlocked(t, m, 1, w)
			c.hold(t, dir)

			began := time.Now()
			tb.runCleanups()
			// The bound: retrying the unmount, waiting for the server,
			// aborting the connection, waiting again; and slack.
			if took, bound := time.Since(began), hungUnmountBusy+2*hungServerEnd+5*time.Second; took > bound {
				t.Errorf("cleanup took %v, want at most %v", took, bound)
			}
			select {
			case <-m.served:
			default:
				t.Errorf("the hung mount's server still runs after its cleanup")
			}
			wantClean(t, w)
		})
	}
}
