package sshtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
)

// Local accounts that are not root, for tests of what a login without
// root's rights can do: LoginUserName may not use sudo, SudoUserName may,
// without a password. Every SSHD authorises the same keys for every user,
// so with `AllowUsers <name>` in its configuration only that account can
// log in.
const (
	LoginUserName = "fleet-ci-login"
	SudoUserName  = "fleet-ci-sudo"
)

var usersMu sync.Mutex

// LoginUser makes sure LoginUserName exists and returns its name.
func LoginUser(tb TB) string {
	tb.Helper()
	ensureUser(tb, LoginUserName)
	return LoginUserName
}

// SudoUser makes sure SudoUserName exists and may run anything as root
// through sudo without a password (a file in /etc/sudoers.d), and returns
// its name.
func SudoUser(tb TB) string {
	tb.Helper()
	ensureUser(tb, SudoUserName)
	if _, err := exec.LookPath("sudo"); err != nil {
		tb.Fatalf("sshtest: sudo not found: install Debian package sudo (scripts/setup.sh does)")
	}
	rule := SudoUserName + " ALL=(ALL) NOPASSWD: ALL\n"
	path := filepath.Join("/etc/sudoers.d", SudoUserName)
	if b, err := os.ReadFile(path); err == nil && string(b) == rule {
		return SudoUserName
	}
	if err := os.WriteFile(path, []byte(rule), 0o440); err != nil {
		tb.Fatalf("sshtest: %v (the tests need root)", err)
	}
	return SudoUserName
}

// ensureUser makes name a system account with a shell, a home and no
// password, with useradd (the tests run as root), or makes sure an
// existing one is not locked.
func ensureUser(tb TB, name string) {
	tb.Helper()
	usersMu.Lock()
	defer usersMu.Unlock()
	cmd := []string{"usermod", "--password", "*", name}
	if _, err := user.Lookup(name); err != nil {
		// A password of "*" is none, and not locked: sshd without PAM
		// refuses a locked account ("!"), useradd's default.
		cmd = []string{"useradd", "--system", "--create-home", "--shell", "/bin/sh", "--password", "*", name}
	}
	if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
		tb.Fatalf("sshtest: %s (the tests need root): %v: %s", strings.Join(cmd, " "), err, strings.TrimSpace(string(out)))
	}
	if _, err := user.Lookup(name); err != nil {
		tb.Fatalf("sshtest: %s", fmt.Sprint("no user ", name, " after useradd: ", err))
	}
}
