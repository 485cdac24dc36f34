//go:build unix

package deploy

import (
	"fmt"
	"os"
	"syscall"
)

// checkPrivate refuses path when another user (not root) owns it, or
// group or others can write it; with own, path must be the user's and no
// symlink: a directory the provider made for itself.
func checkPrivate(path string, own bool) error {
	stat := os.Stat
	if own {
		stat = os.Lstat
	}
	fi, err := stat(path)
	if err != nil {
		return fmt.Errorf("cannot check %s: %w", path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid := uint32(os.Getuid())
	switch {
	case own && fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link, not a directory this provider made: remove it, and the next run makes it anew (mode 0700)", path)
	case st.Uid != uid && (own || st.Uid != 0):
		return fmt.Errorf("%s belongs to another user (uid %d), who decides what it trusts: remove it, or name a file of your own in known_hosts_file", path, st.Uid)
	case fi.Mode().Perm()&0o022 != 0 && fi.IsDir() && fi.Mode()&os.ModeSticky != 0:
		return fmt.Errorf("%s is a directory every user can make files in (mode %04o), where another user could have written a file of this name first: name a file in a directory only you can write in known_hosts_file (for example ~/.ssh/fleet_known_hosts)", path, st.Mode&0o7777)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s can be written by other users (mode %04o), who could plant host keys in it: chmod go-w %s, or name another file in known_hosts_file", path, st.Mode&0o7777, path)
	}
	return nil
}

// checkTempDir refuses a temporary directory that others can write
// without the sticky bit, or that another user (not root) owns.
func checkTempDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("temporary directory %s: %w: set TMPDIR to a directory of your own", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid := uint32(os.Getuid())
	switch {
	case st.Uid != uid && st.Uid != 0:
		return fmt.Errorf("the temporary directory %s belongs to another user (uid %d), who could replace the pinned host keys and control sockets a deployment keeps there: set TMPDIR to a directory of your own (mkdir -m 700 ~/tmp), or unset it", dir, st.Uid)
	case fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0:
		return fmt.Errorf("the temporary directory %s can be written by other users without the sticky bit (mode %04o): another user could replace the pinned host keys and control sockets a deployment keeps there; set TMPDIR to a directory only you can write (mkdir -m 700 ~/tmp), or unset it", dir, st.Mode&0o7777)
	}
	return nil
}
