package sshtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"
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
	usersMu.Lock()
	defer usersMu.Unlock()
	if b, err := os.ReadFile(path); err == nil && string(b) == rule {
		return SudoUserName
	}
	// Written whole, then renamed: another test's sudo may read the file
	// at any time. sudo skips a name with a dot, as the temporary one has.
	tmp, err := os.CreateTemp("/etc/sudoers.d", "."+SudoUserName+"-*")
	if err != nil {
		tb.Fatalf("sshtest: %v (the tests need root)", err)
	}
	// Gone once renamed; left only when a step failed.
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.WriteString(rule)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o440)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
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
	} else if shadowPassword(name) == "*" {
		return
	}
	// Another test process (another package's) may hold the account
	// files' lock for a moment.
	for attempt := 1; ; attempt++ {
		out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		if err == nil {
			break
		}
		if attempt < 10 && strings.Contains(string(out), "lock") {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		tb.Fatalf("sshtest: %s (the tests need root): %v: %s", strings.Join(cmd, " "), err, strings.TrimSpace(string(out)))
	}
	if _, err := user.Lookup(name); err != nil {
		tb.Fatalf("sshtest: %s", fmt.Sprint("no user ", name, " after useradd: ", err))
	}
}

// shadowPassword is name's password field in /etc/shadow, "" when it
// cannot be read.
func shadowPassword(name string) string {
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) > 1 && f[0] == name {
			return f[1]
		}
	}
	return ""
}
