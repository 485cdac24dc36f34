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
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s can be written by other users (mode %04o), who could plant host keys in it: chmod go-w %s, or name another file in known_hosts_file", path, fi.Mode().Perm(), path)
	}
	return nil
}
