//go:build linux

package deploy

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FR-015: without host_key the accept-new trust store is fleet-known-hosts
// beside the key file, else in a private directory; when neither directory
// can take a key, ssh MUST use its default file. A state directory of ours
// that the user cannot write (a read-only file system) is such a case, and
// so is a key file in a directory no one can write.
// Serial: the state directory and ~ come from the process's XDG_STATE_HOME and HOME.
func TestDefaultKnownHostsFileFR015UnwritableFallsBackToSSHsOwn(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	dir := filepath.Join(state, StateDirName)
	mustMkdir(t, dir, 0o700)
	makeReadOnly(t, dir)
	keyDir := t.TempDir()
	makeReadOnly(t, keyDir)
	want := filepath.Join(home, ".ssh", "known_hosts")
	for _, key := range []string{"", filepath.Join(keyDir, "id_ed25519")} {
		got, err := DefaultKnownHostsFile(key)
		if err != nil || got != want {
			t.Errorf("key %q, the state directory %s read-only: DefaultKnownHostsFile = %q, %v; want ssh's own %s", key, dir, got, err, want)
		}
	}
}

// FR-015: with no $HOME (and no $XDG_STATE_HOME) there is no private
// directory; ssh's own file is where ssh itself looks, in the home
// directory the user database gives.
// Serial: the state directory and ~ come from the process's XDG_STATE_HOME and HOME.
func TestDefaultKnownHostsFileFR015NoHome(t *testing.T) {
	u, err := user.Current()
	if err != nil || u.HomeDir == "" {
		t.Fatalf("the user running the tests has no home directory: %v", err)
	}
	t.Setenv("HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	got, err := DefaultKnownHostsFile("")
	if want := filepath.Join(u.HomeDir, ".ssh", "known_hosts"); err != nil || got != want {
		t.Errorf("DefaultKnownHostsFile with no $HOME = %q, %v; want ssh's own %s", got, err, want)
	}
}

// FR-015 and the shared-runner rule: ssh's own file is no exception; a
// ~/.ssh others can write is refused, naming it.
// Serial: the state directory and ~ come from the process's XDG_STATE_HOME and HOME.
func TestDefaultKnownHostsFileFR015RefusesAnOpenSSHDirectory(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_STATE_HOME", filepath.Join(home, "file", "state"))
	if err := os.WriteFile(filepath.Join(home, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ssh := filepath.Join(home, ".ssh")
	mustMkdir(t, ssh, 0o777)
	got, err := DefaultKnownHostsFile("")
	if err == nil || !strings.Contains(err.Error(), ssh) || !strings.Contains(err.Error(), "can be written by other users") {
		t.Errorf("DefaultKnownHostsFile with %s mode 0777 = %q, %v; want it refused", ssh, got, err)
	}
}

// makeReadOnly makes dir one the user cannot create files in until the
// test ends: mode 0500, or, for root, whom modes do not stop, the
// immutable attribute (as chattr +i).
func makeReadOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	} else {
		setImmutable(t, dir, true)
		t.Cleanup(func() { setImmutable(t, dir, false) })
	}
	if writableByUser(dir) {
		t.Fatalf("%s is still writable", dir)
	}
}

// fsImmutableFL is FS_IMMUTABLE_FL of linux/fs.h, which x/sys/unix
// does not name.
const fsImmutableFL = 0x10

func setImmutable(t *testing.T, dir string, on bool) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("reading the attributes of %s: %v", dir, err)
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
		t.Fatalf("making %s immutable (chattr +i; the file system of the test's temporary directory must support it): %v", dir, err)
	}
}
