package systemdtest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildScript makes the root file system and says where it is; the
// harness only asks it (--check), since a build takes minutes.
const buildScript = "scripts/build-systemd-rootfs.sh"

// RootFS is the cached Debian root file system every target boots on an
// overlay, as scripts/build-systemd-rootfs.sh --check names it. A tree not
// yet built fails the test with the fix: make setup.
func RootFS(tb TB) string {
	tb.Helper()
	root, err := repoRoot()
	if err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
	cmd := exec.Command(filepath.Join(root, buildScript), "--check")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("systemdtest: the systemd host's root file system is missing: run make setup (%s --check: %v: %s)", buildScript, err, strings.TrimSpace(stderr.String()))
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(path, "lib/systemd/systemd")); err != nil {
		tb.Fatalf("systemdtest: %s names %s, which has no systemd: run make setup (%v)", buildScript, path, err)
	}
	return path
}

// repoRoot is the directory holding the module's go.mod, found upwards from
// the working directory (a test runs in its package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no " + buildScript + " beside a go.mod above the working directory")
		}
		dir = parent
	}
}
