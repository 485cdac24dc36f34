package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// What decides trust on the deployer's machine lives where no one else
// can write: CI runners are shared. A trust file or directory that another
// user owns, or that others can write, is refused, naming it and the fix.

// maxSocketPath is the longest Unix socket path every supported OS takes
// (104 bytes on macOS and the BSDs, 108 on Linux).
const maxSocketPath = 104

// socketRoom is what ssh adds to a control directory's path: "/", the 40
// characters of %C, and the 17 of the temporary name it creates the
// socket under.
const socketRoom = 1 + 40 + 17

// NewControlDir makes a directory of its own (0700, a name no one could
// have taken first) for a deployment's master sockets and its temporary
// files (the pinned host keys among them): in the temporary directory when
// its path leaves room for a socket name, else in /tmp (a macOS $TMPDIR is
// about 50 bytes long). A temporary directory others can write without
// the sticky bit is refused: there another user could rename this one
// away and put their own in its place.
//
// It holds the process's pid: a process killed before it could remove its
// directory (a CI runner killed mid-apply) leaves it, and the next one to
// make a control directory removes those of processes that have ended.
func NewControlDir() (string, error) {
	base, err := controlBase("fssh")
	if err != nil {
		return "", err
	}
	pruneEndedDirs(base, "fssh")
	dir, err := os.MkdirTemp(base, "fssh")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// CheckTemporaryDirectory is what NewControlDir would refuse of the
// temporary directory: a plan says it before the apply would.
func CheckTemporaryDirectory() error {
	_, err := controlBase("fssh")
	return err
}

// controlBase is the temporary directory a control directory named
// pattern and up to 10 digits goes in (see NewControlDir): TMPDIR when its
// path is short enough for a socket name and plain (see plainPath), else
// /tmp.
func controlBase(pattern string) (string, error) {
	for _, base := range []string{os.TempDir(), "/tmp"} {
		if len(base)+1+len(pattern)+10+socketRoom <= maxSocketPath && plainPath(base) {
			return base, checkTempDir(base)
		}
	}
	return "", fmt.Errorf("no temporary directory has a path short enough for ssh's control sockets (at most %d bytes) and free of spaces, quotes, %%, $ and backslashes: set TMPDIR to one", maxSocketPath-socketRoom)
}

// plainPath reports whether path holds only characters that neither ssh
// (which splits option values on whitespace and expands %-tokens and
// ${NAME}), nor Nix (which splits NIX_SSHOPTS on whitespace and knows no
// quoting), nor a shell take apart: the control directory's files are
// named in all three.
func plainPath(path string) bool {
	for _, r := range path {
		plain := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+,:@~=", r)
		if !plain {
			return false
		}
	}
	return path != ""
}

// StateDirName is the provider's directory in the user's state directory.
const StateDirName = "terraform-provider-fleet"

// DefaultKnownHostsFile is the accept-new trust store of a deployment that
// names none (FR-015): fleet-known-hosts beside the key file when that
// directory is the user's own, no one else can write it and the user can;
// else known_hosts in the provider's private state directory
// ($XDG_STATE_HOME, else ~/.local/state), made 0700 when missing; else,
// last, when that cannot be made or the user cannot write it (a read-only
// file system), ssh's own default file, ~/.ssh/known_hosts. A directory or
// file of these that another user owns or others can write is refused.
func DefaultKnownHostsFile(privateKeyFile string) (string, error) {
	if privateKeyFile != "" {
		if key, err := sshdial.ExpandHome(privateKeyFile); err == nil {
			dir := filepath.Dir(key)
			if writableByUser(dir) && checkPrivate(dir, false) == nil {
				path := filepath.Join(dir, KnownHostsFileName)
				return path, checkPrivateFile(path)
			}
		}
	}
	if state, ok := userStateDir(); ok {
		dir := filepath.Join(state, StateDirName)
		if err := os.MkdirAll(dir, 0o700); err == nil {
			if err := checkPrivate(dir, true); err != nil {
				return "", err
			}
			if writableByUser(dir) {
				path := filepath.Join(dir, "known_hosts")
				return path, checkPrivateFile(path)
			}
		}
		// It cannot be made (no home, a read-only or foreign file
		// system), or it is ours but cannot take a new key: accept-new
		// could record nothing there, so ssh's own file is left.
	}
	return sshKnownHostsFile()
}

// sshKnownHostsFile is ssh's own default trust store, the last of FR-015:
// ~/.ssh/known_hosts of the user running the provider. ~ is $HOME, as
// everywhere in the provider; with no $HOME it is the home directory the
// user database gives, which is where ssh itself looks. A ~/.ssh that
// another user owns or others can write is refused, as the file is.
func sshKnownHostsFile() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		u, uerr := user.Current()
		if uerr != nil || u.HomeDir == "" {
			return "", fmt.Errorf("no private directory for the deployment's known_hosts file and no home directory for ssh's own (%v, %v): set known_hosts_file", err, uerr)
		}
		home = u.HomeDir
	}
	dir := filepath.Join(home, ".ssh")
	if _, err := os.Stat(dir); err == nil {
		if err := checkPrivate(dir, false); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, "known_hosts")
	return path, checkPrivateFile(path)
}

// CheckKnownHostsFile refuses a known_hosts file an operator named whose
// directory does not exist, or that someone else could have written: the
// file, when it exists, must be the user's (or root's) and writable by no
// one else, and so must its directory.
func CheckKnownHostsFile(path string) error {
	expanded, err := sshdial.ExpandHome(path)
	if err != nil {
		return err
	}
	if _, err := pathOption("UserKnownHostsFile", expanded, ""); err != nil {
		return err
	}
	dir := filepath.Dir(expanded)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("the directory %s does not exist: create it (mkdir -m 700 %s), or name a file in an existing directory", dir, dir)
	}
	if err := checkPrivate(dir, false); err != nil {
		return err
	}
	return checkPrivateFile(expanded)
}

// StateDir is the provider's directory in the user's state directory
// ($XDG_STATE_HOME, else ~/.local/state); false when there is none (no
// home).
func StateDir() (string, bool) {
	d, ok := userStateDir()
	return filepath.Join(d, StateDirName), ok
}

// userStateDir is the user's state directory: $XDG_STATE_HOME, else
// ~/.local/state.
func userStateDir() (string, bool) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return d, true
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", false
	}
	return filepath.Join(home, ".local", "state"), true
}

// writableByUser reports whether the user can make files in dir.
func writableByUser(dir string) bool {
	f, err := os.CreateTemp(dir, ".fleet-write-test-*")
	if err != nil {
		return false
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return true
}

// checkPrivateFile checks a trust file that may not exist yet.
func checkPrivateFile(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return checkPrivate(path, false)
}
