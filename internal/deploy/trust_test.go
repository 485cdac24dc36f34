package deploy

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// nobody is a uid no test runs as.
const nobody = 65534

// Issue 12, shared runners: the default accept-new trust store is never in
// a place someone else can write or has made.
// Serial: the state directory comes from the process's XDG_STATE_HOME.
func TestDefaultKnownHostsFile(t *testing.T) {
	private := t.TempDir() // 0700, ours
	key := filepath.Join(private, "id_ed25519")
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil { // as /tmp
		t.Fatal(err)
	}
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	ours := filepath.Join(state, StateDirName, "known_hosts")

	cases := []struct {
		name    string
		key     string
		prepare func(t *testing.T)
		want    string
		wantErr string
	}{
		{name: "beside a key in a private directory (FR-015)", key: key, want: filepath.Join(private, KnownHostsFileName)},
		{name: "a key in a directory others can write", key: filepath.Join(shared, "id"), want: ours},
		{name: "no key file", want: ours},
		{name: "the state directory belongs to another user", prepare: func(t *testing.T) {
			dir := filepath.Join(state, StateDirName)
			mustMkdir(t, dir, 0o700)
			mustChown(t, dir, nobody)
		}, wantErr: "belongs to another user"},
		{name: "the state directory can be written by others", prepare: func(t *testing.T) {
			mustMkdir(t, filepath.Join(state, StateDirName), 0o777)
		}, wantErr: "can be written by other users"},
		{name: "the state directory is a symbolic link", prepare: func(t *testing.T) {
			if err := os.Symlink(private, filepath.Join(state, StateDirName)); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "is a symbolic link"},
		{name: "the known_hosts file belongs to another user", prepare: func(t *testing.T) {
			mustMkdir(t, filepath.Join(state, StateDirName), 0o700)
			if err := os.WriteFile(ours, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			mustChown(t, ours, nobody)
		}, wantErr: "belongs to another user"},
		{name: "a fleet-known-hosts others can write beside the key", key: key, prepare: func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(private, KnownHostsFileName), nil, 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(private, KnownHostsFileName), 0o666); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "can be written by other users"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_ = os.RemoveAll(filepath.Join(state, StateDirName))
			_ = os.Remove(filepath.Join(private, KnownHostsFileName))
			if c.prepare != nil {
				c.prepare(t)
			}
			got, err := DefaultKnownHostsFile(c.key)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("DefaultKnownHostsFile = %q, %v; want an error saying %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("DefaultKnownHostsFile = %q, %v; want %q", got, err, c.want)
			}
			if got == ours {
				fi, err := os.Lstat(filepath.Dir(ours))
				if err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("the private directory: %v, %v; want mode 0700", fi, err)
				}
			}
		})
	}
}

// FR-015: when no private directory can be made, ssh's own default file
// is left.
// Serial: the state directory and ~ come from the process's XDG_STATE_HOME and HOME.
func TestDefaultKnownHostsFileFallsBackToSSHsOwn(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	notADir := filepath.Join(home, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_STATE_HOME", filepath.Join(notADir, "state"))
	got, err := DefaultKnownHostsFile("")
	if want := filepath.Join(home, ".ssh", "known_hosts"); err != nil || got != want {
		t.Errorf("DefaultKnownHostsFile = %q, %v; want ssh's own %s", got, err, want)
	}
}

// Issue 12: a known_hosts_file an operator names is refused when its
// directory is missing, or when someone else could have written it.
func TestCheckKnownHostsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "foreign")
	if err := os.WriteFile(foreign, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mustChown(t, foreign, nobody)
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o646); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "known_hosts"):            "",
		filepath.Join(dir, "missing", "known_hosts"): "does not exist",
		filepath.Join(shared, "known_hosts"):         "can be written by other users",
		foreign:                                      "belongs to another user",
		open:                                         "can be written by other users",
	} {
		err := CheckKnownHostsFile(path)
		if (want == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), filepath.Dir(path)))) {
			t.Errorf("CheckKnownHostsFile(%s) = %v; want %q", path, err, want)
		}
	}
}

// Issue 12: every control socket path fits the shortest limit of the
// supported systems (104 bytes), whatever $TMPDIR is.
// Serial: the control directory is made in the process's TMPDIR.
func TestControlDirLeavesRoomForSockets(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 60))
	mustMkdir(t, long, 0o700)
	for _, tmp := range []string{"", long} {
		if tmp != "" {
			t.Setenv("TMPDIR", tmp)
		}
		dir, err := NewControlDir()
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if n := len(dir) + socketRoom; n > maxSocketPath {
			t.Errorf("TMPDIR %q: control sockets in %s would be %d bytes long", tmp, dir, n)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("control directory %s: %v, %v; want mode 0700", dir, fi, err)
		}
	}
}

func mustMkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func mustChown(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatalf("chown %s (the tests run as root): %v", path, err)
	}
}

// Issue 12 (trial): on a shared runner another user must not be able to
// swap the pinned host keys a deployment writes. They go into the
// deployment's private control directory, never loose in $TMPDIR; and a
// $TMPDIR others can write without the sticky bit (where they could rename
// that directory away), or that another user owns, is refused.
// Serial: the control directory is made in the process's TMPDIR.
func TestControlDirRefusesATemporaryDirectoryOthersControl(t *testing.T) {
	// Short: a $TMPDIR too long for socket paths is passed over for /tmp.
	base, err := os.MkdirTemp("/tmp", "ct") //nolint:usetesting // t.TempDir names are too long to leave room for sockets
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	for _, c := range []struct {
		name  string
		mode  os.FileMode
		owner int
		want  string // empty: accepted
	}{
		{"private", 0o700, -1, ""},
		{"sticky, like /tmp", 0o777 | os.ModeSticky, -1, ""},
		{"writable by others", 0o777, -1, "can be written by other users without the sticky bit (mode 0777)"},
		{"group writable", 0o770, -1, "without the sticky bit (mode 0770)"},
		{"another user's", 0o755, 4242, "belongs to another user (uid 4242)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(base, strings.Fields(c.name)[0])
			mustMkdir(t, dir, c.mode.Perm())
			if err := os.Chmod(dir, c.mode); err != nil {
				t.Fatal(err)
			}
			if c.owner >= 0 {
				mustChown(t, dir, c.owner)
			}
			t.Setenv("TMPDIR", dir)
			control, err := NewControlDir()
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer os.RemoveAll(control)
				tr := &Transport{KnownHostsFile: filepath.Join(control, KnownHostsFileName), ControlDir: control}
				conn := openConn(t, tr, Settings{Name: "web1", Host: "10.0.0.5", User: "root",
					HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", SSHOpts: []string{}})
				if filepath.Dir(conn.pinned) != control || filepath.Dir(conn.offered) != control {
					t.Errorf("pinned key %s and offered key %s are not in the control directory %s", conn.pinned, conn.offered, control)
				}
				if entries, _ := os.ReadDir(dir); len(entries) != 1 {
					t.Errorf("$TMPDIR holds %d entries, want only the control directory", len(entries))
				}
				return
			}
			if err == nil {
				_ = os.RemoveAll(control)
				t.Fatalf("TMPDIR %s (%s) accepted, made %s", dir, c.name, control)
			}
			for _, want := range []string{dir, c.want, "set TMPDIR"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

// Issue 12 (trial): a known_hosts file named in a shared directory such
// as /tmp is refused without advising to change that directory's mode.
func TestCheckKnownHostsFileInASharedDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "shared")
	mustMkdir(t, dir, 0o777)
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	err := CheckKnownHostsFile(filepath.Join(dir, "known_hosts"))
	if err == nil || !strings.Contains(err.Error(), "mode 1777") || !strings.Contains(err.Error(), "every user can make files in") || strings.Contains(err.Error(), "chmod") {
		t.Errorf("a known_hosts file in a sticky shared directory: %v", err)
	}
}

// A control directory left by a process that ended without removing it
// (killed mid-apply) goes when the next one is made; a live process's
// stays.
func TestControlDirOfAnEndedProcessGoes(t *testing.T) {
	t.Parallel()
	base, err := controlBase("fssh")
	if err != nil {
		t.Fatal(err)
	}
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	left, err := os.MkdirTemp(base, "fssh") //nolint:usetesting // it must be where NewControlDir prunes, not in a test directory
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(left) })
	if err := os.WriteFile(filepath.Join(left, "pid"), []byte(strconv.Itoa(ended.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := NewControlDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(live) })
	if _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the control directory of an ended process is still there: %v", err)
	}
	again, err := NewControlDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(again) })
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the control directory of this live process went: %v", err)
	}
}
