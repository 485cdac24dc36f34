package sshtest

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// HungMount is a directory that hangs like a hard NFS mount whose server has
// gone away: a FUSE file system, served by the test process, in which every
// change (creating or opening a file for writing, writing, fsync, chmod,
// truncating, removing or renaming an entry, making or removing a directory)
// blocks in the kernel until Release (and again after Hang), while statfs,
// stat, lookups and listings answer (the attribute cache of a dead mount).
// So the cheap tier of a path check passes and its heartbeat hangs, whatever
// name the heartbeat writes.
//
// As on NFS, the kernel holds a directory's lock while an entry is created
// or removed in it: while such a change hangs, other processes' lookups and
// changes in that directory wait in the kernel, before reaching the file
// system, and Blocked does not count them.
//
// A process blocked in the file system can be killed (SIGKILL), as on a hard
// NFS mount: the kernel interrupts the request, which ends with EINTR. The
// test's cleanup releases what is blocked and unmounts, lazily if something
// still holds the mount, and as a last resort aborts the FUSE connection, so
// that it never hangs the test.
type HungMount struct {
	// Dir is the mount point.
	Dir string

	ns      *MountNamespace // nil: this process's mount namespace
	conn    string          // the FUSE connection's name under fusectl
	root    *hungDir
	server  *fuse.Server
	served  chan struct{} // closed once the server's loop has ended
	blocked atomic.Int64

	mu   sync.Mutex
	gate chan struct{} // closed by Release; nil while the file system works
}

const (
	// hungUnmountBusy is how long the cleanup retries an unmount that
	// fails (a process released a moment ago still closing its file)
	// before it unmounts lazily.
	hungUnmountBusy = time.Second
	// hungServerEnd is how long the cleanup waits for the server to end
	// after an unmount, and again after aborting the connection.
	hungServerEnd = 2 * time.Second
)

// MountHung mounts a HungMount on dir (made if missing) in this process's
// mount namespace: processes of the test, and an sshd not started in a
// MountNamespace, see it; a MountNamespace made afterwards starts with a copy
// of it. It needs root and /dev/fuse; without them the test fails.
func MountHung(tb TB, dir string) *HungMount {
	tb.Helper()
	return mountHung(tb, dir, nil)
}

// MountHung mounts a HungMount on dir inside ns only (dir is made on the
// host, so that it exists in both views): local shells that enter ns and
// an sshd started WithMountNamespace(ns) see it hang, the host sees dir as
// it was.
func (ns *MountNamespace) MountHung(tb TB, dir string) *HungMount {
	tb.Helper()
	return mountHung(tb, dir, ns)
}

func mountHung(tb TB, dir string, ns *MountNamespace) *HungMount {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("sshtest: create mount point %s: %v", dir, err)
	}
	// mountinfo names the mount point by its physical path; looked up
	// before the mount, which answers nothing until it is served.
	physical, err := filepath.EvalSymlinks(dir)
	if err != nil {
		tb.Fatalf("sshtest: mount point %s: %v", dir, err)
	}
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("sshtest: open /dev/fuse: %v (a hung mount needs root and the fuse kernel module)", err)
	}
	// The mount is made by us, not by go-fuse, so that it can be made
	// inside a namespace: go-fuse then serves the descriptor it is given
	// as /dev/fd/N. allow_other and default_permissions: every user's
	// processes reach it, and the kernel checks their rights, as on NFS.
	opts := "rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions"
	if ns == nil {
		err = syscall.Mount("sshtest-hung", dir, "fuse.sshtest-hung", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("fd=%d,%s", fd, opts))
	} else {
		err = ns.mountFUSE(fd, dir, opts)
	}
	if err != nil {
		_ = syscall.Close(fd)
		tb.Fatalf("sshtest: mount a hung file system on %s: %v", dir, err)
	}
	m := &HungMount{Dir: dir, ns: ns, served: make(chan struct{}), gate: make(chan struct{})}
	m.root = &hungDir{m: m}
	pid := "self"
	if ns != nil {
		pid = strconv.Itoa(ns.PID)
	}
	if m.conn, err = fuseConnection(pid, physical); err != nil {
		m.unmount()
		_ = syscall.Close(fd)
		tb.Fatalf("sshtest: hung mount on %s: %v", dir, err)
	}
	// No caching: every lookup and stat reaches the server, as a test
	// that changes the directory behind the kernel's back expects.
	var zero time.Duration
	raw := fs.NewNodeFS(m.root, &fs.Options{EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero})
	m.server, err = fuse.NewServer(raw, "/dev/fd/"+strconv.Itoa(fd), &fuse.MountOptions{
		Logger: log.New(os.Stderr, "sshtest: hung mount "+dir+": ", 0),
	})
	if err != nil {
		// NewServer closed the descriptor, which aborts the connection.
		m.unmount()
		tb.Fatalf("sshtest: serve the hung file system on %s: %v", dir, err)
	}
	go func() {
		m.server.Serve()
		close(m.served)
	}()
	tb.Cleanup(m.stop)
	return m
}

// mountFUSE mounts the FUSE connection fd on dir inside ns: mount(8) gets a
// copy of fd as its fd 3, and -i keeps it from looking for a mount.fuse
// helper.
func (ns *MountNamespace) mountFUSE(fd int, dir, opts string) error {
	dup, err := syscall.Dup(fd)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), "/dev/fuse")
	defer f.Close()
	argv := []string{"mount", "-i", "-t", "fuse.sshtest-hung", "-o", "nosuid,nodev,fd=3," + opts, "sshtest-hung", dir}
	if out, err := ns.output([]*os.File{f}, argv...); err != nil {
		return fmt.Errorf("in mount namespace %d: %s: %w: %s", ns.PID, strings.Join(argv, " "), err, strings.TrimSpace(out))
	}
	return nil
}

// Release lets every blocked operation go on, and the file system works
// from then on (the NFS server is back), until Hang.
func (m *HungMount) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gate != nil {
		close(m.gate)
		m.gate = nil
	}
}

// Hang makes every change from now on block again, until the next Release
// (the NFS server has gone away again).
func (m *HungMount) Hang() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gate == nil {
		m.gate = make(chan struct{})
	}
}

// Blocked is the number of operations blocked in the file system now.
func (m *HungMount) Blocked() int { return int(m.blocked.Load()) }

// Entries lists the names in the mount's top directory, sorted, as the file
// system holds them (no process needed to look).
func (m *HungMount) Entries() []string {
	var names []string
	for name := range m.root.Children() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// hang blocks until Release, or until the kernel interrupts the request
// (the caller was killed): then EINTR.
func (m *HungMount) hang(ctx context.Context) syscall.Errno {
	m.mu.Lock()
	gate := m.gate
	m.mu.Unlock()
	if gate == nil {
		return 0
	}
	m.blocked.Add(1)
	defer m.blocked.Add(-1)
	select {
	case <-gate:
		return 0
	case <-ctx.Done():
		return syscall.EINTR
	}
}

// stop is the cleanup: release, unmount (lazily once retrying has not
// helped), wait for the server to end, and abort the connection if it does
// not (a copy of the mount in a namespace made after it, or a process
// still inside, keeps the file system alive past the unmount).
func (m *HungMount) stop() {
	m.Release()
	m.unmount()
	if m.ended(hungServerEnd) {
		return
	}
	if err := abortFUSE(m.conn); err != nil {
		fmt.Fprintf(os.Stderr, "sshtest: cleanup: hung mount %s: %v\n", m.Dir, err)
	}
	if !m.ended(hungServerEnd) {
		// Cleanup has no TB to fail; goleak reports the server left running.
		fmt.Fprintf(os.Stderr, "sshtest: cleanup: hung mount %s: its server still runs after aborting FUSE connection %s\n", m.Dir, m.conn)
	}
}

func (m *HungMount) ended(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.served:
		return true
	case <-t.C:
		return false
	}
}

// unmount unmounts m.Dir where it was mounted, retrying for
// hungUnmountBusy, then lazily.
func (m *HungMount) unmount() {
	if m.ns != nil {
		select {
		case <-m.ns.exited:
			return // the namespace, and the mount with it, is gone
		default:
		}
	}
	umount := func(lazy bool) error {
		if m.ns == nil {
			flags := 0
			if lazy {
				flags = syscall.MNT_DETACH
			}
			return syscall.Unmount(m.Dir, flags)
		}
		argv := []string{"umount", m.Dir}
		if lazy {
			argv = []string{"umount", "-l", m.Dir}
		}
		if out, err := m.ns.output(nil, argv...); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out))
		}
		return nil
	}
	deadline := time.Now().Add(hungUnmountBusy)
	for {
		err := umount(false)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err := umount(true); err != nil {
				fmt.Fprintf(os.Stderr, "sshtest: cleanup: unmount hung mount %s: %v\n", m.Dir, err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fuseConnection names the FUSE connection of the mount on dir, as seen by
// process pid: the kernel's device number of its superblock, from
// mountinfo's major:minor (the last mount on dir is the one on top).
func fuseConnection(pid, dir string) (string, error) {
	f, err := os.Open("/proc/" + pid + "/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	var conn string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		majmin := strings.SplitN(fields[2], ":", 2)
		major, err1 := strconv.ParseUint(majmin[0], 10, 32)
		minor, err2 := strconv.ParseUint(majmin[len(majmin)-1], 10, 32)
		if len(majmin) != 2 || err1 != nil || err2 != nil {
			return "", fmt.Errorf("mountinfo of %s: device %q is not major:minor", pid, fields[2])
		}
		conn = strconv.FormatUint(major<<20|minor, 10)
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if conn == "" {
		return "", fmt.Errorf("%s is not a mount point in the mount namespace of process %s", dir, pid)
	}
	return conn, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// abortFUSE aborts a FUSE connection through fusectl, mounted for the
// purpose where the machine has not mounted it: every request pending and
// to come fails, and the server's loop ends.
func abortFUSE(conn string) error {
	ctl := "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, conn)); err != nil {
		dir, err := os.MkdirTemp("", "sshtest-fusectl-")
		if err != nil {
			return err
		}
		defer func() { _ = os.Remove(dir) }()
		if err := syscall.Mount("fusectl", dir, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl to abort FUSE connection %s: %w", conn, err)
		}
		defer func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) }()
		ctl = dir
	}
	if err := os.WriteFile(filepath.Join(ctl, conn, "abort"), []byte("1"), 0); err != nil {
		return fmt.Errorf("abort FUSE connection %s: %w", conn, err)
	}
	return nil
}

// hungDir is a directory of a HungMount.
type hungDir struct {
	fs.Inode
	m *HungMount
}

var (
	_ fs.NodeGetattrer = (*hungDir)(nil)
	_ fs.NodeStatfser  = (*hungDir)(nil)
	_ fs.NodeCreater   = (*hungDir)(nil)
	_ fs.NodeMkdirer   = (*hungDir)(nil)
	_ fs.NodeUnlinker  = (*hungDir)(nil)
	_ fs.NodeRmdirer   = (*hungDir)(nil)
	_ fs.NodeRenamer   = (*hungDir)(nil)
)

func (d *hungDir) Getattr(context.Context, fs.FileHandle, *fuse.AttrOut) syscall.Errno { return 0 }

// Statfs answers as a file system with room to spare.
func (d *hungDir) Statfs(_ context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	out.Blocks, out.Bfree, out.Bavail = 1<<20, 1<<19, 1<<19
	out.Files, out.Ffree = 1<<16, 1<<15
	return 0
}

func (d *hungDir) Create(ctx context.Context, name string, _, mode uint32, _ *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := d.m.hang(ctx); errno != 0 {
		return nil, nil, 0, errno
	}
	if d.GetChild(name) != nil {
		return nil, nil, 0, syscall.EEXIST
	}
	f := &hungFile{m: d.m}
	f.attr.Mode = mode & 0o7777
	if c, ok := fuse.FromContext(ctx); ok {
		f.attr.Owner = c.Owner
	}
	now := time.Now()
	f.attr.SetTimes(&now, &now, &now)
	return d.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), nil, 0, 0
}

func (d *hungDir) Mkdir(ctx context.Context, name string, _ uint32, _ *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := d.m.hang(ctx); errno != 0 {
		return nil, errno
	}
	if d.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	return d.NewPersistentInode(ctx, &hungDir{m: d.m}, fs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (d *hungDir) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := d.m.hang(ctx); errno != 0 {
		return errno
	}
	switch c := d.GetChild(name); {
	case c == nil:
		return syscall.ENOENT
	case c.IsDir():
		return syscall.EISDIR
	}
	return 0
}

func (d *hungDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	if errno := d.m.hang(ctx); errno != 0 {
		return errno
	}
	switch c := d.GetChild(name); {
	case c == nil:
		return syscall.ENOENT
	case !c.IsDir():
		return syscall.ENOTDIR
	case len(c.Children()) > 0:
		return syscall.ENOTEMPTY
	}
	return 0
}

func (d *hungDir) Rename(ctx context.Context, name string, _ fs.InodeEmbedder, _ string, _ uint32) syscall.Errno {
	if errno := d.m.hang(ctx); errno != 0 {
		return errno
	}
	if d.GetChild(name) == nil {
		return syscall.ENOENT
	}
	return 0
}

// hungFile is a file of a HungMount, held in memory.
type hungFile struct {
	fs.Inode
	m *HungMount

	mu   sync.Mutex
	data []byte
	attr fuse.Attr
}

var (
	_ fs.NodeOpener    = (*hungFile)(nil)
	_ fs.NodeReader    = (*hungFile)(nil)
	_ fs.NodeWriter    = (*hungFile)(nil)
	_ fs.NodeFsyncer   = (*hungFile)(nil)
	_ fs.NodeGetattrer = (*hungFile)(nil)
	_ fs.NodeSetattrer = (*hungFile)(nil)
)

// Open blocks when it opens for writing or truncates.
func (f *hungFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 {
		if errno := f.m.hang(ctx); errno != 0 {
			return nil, 0, errno
		}
	}
	if flags&syscall.O_TRUNC != 0 {
		f.mu.Lock()
		f.data = nil
		f.mu.Unlock()
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *hungFile) Read(_ context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	off = min(off, int64(len(f.data)))
	end := min(off+int64(len(dest)), int64(len(f.data)))
	return fuse.ReadResultData(append([]byte(nil), f.data[off:end]...)), 0
}

func (f *hungFile) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := f.m.hang(ctx); errno != 0 {
		return 0, errno
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if end := off + int64(len(data)); end > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
	}
	copy(f.data[off:], data)
	return uint32(len(data)), 0
}

func (f *hungFile) Fsync(ctx context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	return f.m.hang(ctx)
}

func (f *hungFile) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Attr = f.attr
	out.Size = uint64(len(f.data))
	return 0
}

// Setattr (chmod, chown, truncate, touch) blocks.
func (f *hungFile) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := f.m.hang(ctx); errno != 0 {
		return errno
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if mode, ok := in.GetMode(); ok {
		f.attr.Mode = mode & 0o7777
	}
	if uid, ok := in.GetUID(); ok {
		f.attr.Uid = uid
	}
	if gid, ok := in.GetGID(); ok {
		f.attr.Gid = gid
	}
	if size, ok := in.GetSize(); ok {
		if size <= uint64(len(f.data)) {
			f.data = f.data[:size]
		} else {
			f.data = append(f.data, make([]byte, size-uint64(len(f.data)))...)
		}
	}
	if mtime, ok := in.GetMTime(); ok {
		f.attr.SetTimes(nil, &mtime, nil)
	}
	out.Attr = f.attr
	out.Size = uint64(len(f.data))
	return 0
}
