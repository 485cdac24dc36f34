package nixtest

// A hostile local user on the host: a non-root account (HostileUserName,
// shared by every target, since targets share the machine's /etc/passwd)
// that owns directories on the target as a service's user owns its state
// directory, and that swaps what root is about to use in them for links
// to root's own files, at the worst moment (Arm: wrappers of the commands
// a deployer writes files with run its attacks just before and just
// after the real command) or all the time (Loop). Harmed says what root
// did that hurt root's bait or followed the user.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// Attack is what a hostile local user does at a path root is about to
// use, or has just used (see Hostile.Arm).
type Attack string

const (
	// SwapForLink: the path, when it exists and the user may replace it
	// (it is in a directory the user may write), is replaced by a
	// symbolic link to the bait; a path that does not exist yet is
	// created as one.
	SwapForLink Attack = "SwapForLink"
	// PlantDir: a path that does not exist becomes a directory the user
	// owns, mode 0777: a mv to the path moves the file into it.
	PlantDir Attack = "PlantDir"
	// LinkDirToRoot: the first missing component of the path becomes a
	// symbolic link to a directory of root's (the bait's), so that
	// mkdir -p or a write below it lands there.
	LinkDirToRoot Attack = "LinkDirToRoot"
)

// HostileUserName is the hostile local user's account.
const HostileUserName = "fleethostile"

// hostileLock serialises the account's creation between test binaries;
// hostileUserMu within one.
const hostileLock = "/run/lock/nixtest-hostile-user.lock"

var hostileUserMu sync.Mutex

// BaitPath is the hostile user's bait on every target: a file of root's,
// mode 0600, in a directory of root's. The target's /nix is its own, and
// outlives a reboot.
const BaitPath = "/nix/var/nixtest-bait/secret"

// baitContent is what the bait holds.
const baitContent = "root's own secret: nixtest's bait, which the hostile user aims links at\n"

// Hostile is a target's hostile local user (Target.Hostile).
type Hostile struct {
	t        *Target
	name     string
	uid, gid int

	mu    sync.Mutex
	owned []string // Own's directories, in order
}

// Hostile returns the target's hostile local user, creating the account
// on the machine (once) and the bait on the target.
func (t *Target) Hostile(tb TB) *Hostile {
	tb.Helper()
	t.hostileMu.Lock()
	defer t.hostileMu.Unlock()
	if t.hostile != nil {
		return t.hostile
	}
	uid, gid := ensureHostileUser(tb)
	h := &Hostile{t: t, name: HostileUserName, uid: uid, gid: gid}
	dir := t.Path(filepath.Dir(BaitPath))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("nixtest: the bait's directory: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatalf("nixtest: the bait's directory: %v", err)
	}
	if err := os.WriteFile(t.Path(BaitPath), []byte(baitContent), 0o600); err != nil {
		tb.Fatalf("nixtest: the bait: %v", err)
	}
	t.hostile = h
	return h
}

// ensureHostileUser makes the hostile user's account if it is missing:
// a system account without a home or a login shell. Parallel tests, and
// test binaries, may ask at once.
func ensureHostileUser(tb TB) (uid, gid int) {
	tb.Helper()
	hostileUserMu.Lock()
	defer hostileUserMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(hostileLock), 0o755); err != nil {
		tb.Fatalf("nixtest: %v (the tests need root)", err)
	}
	lock, err := os.OpenFile(hostileLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		tb.Fatalf("nixtest: %v (the tests need root)", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		tb.Fatalf("nixtest: lock %s: %v", hostileLock, err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if _, err := user.Lookup(HostileUserName); err != nil {
		for attempt := 1; ; attempt++ {
			cmd := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", HostileUserName)
			out, err := cmd.CombinedOutput()
			if err == nil || cmd.ProcessState.ExitCode() == 9 { // 9: already exists
				break
			}
			// Another process (sshtest's users) may hold the account
			// files' lock for a moment.
			if attempt < 10 && strings.Contains(string(out), "lock") {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			tb.Fatalf("nixtest: useradd %s (the tests need root): %v: %s", HostileUserName, err, bytes.TrimSpace(out))
		}
	}
	u, err := user.Lookup(HostileUserName)
	if err != nil {
		tb.Fatalf("nixtest: no user %s after useradd: %v", HostileUserName, err)
	}
	uid, err = strconv.Atoi(u.Uid)
	if err == nil {
		gid, err = strconv.Atoi(u.Gid)
	}
	if err != nil {
		tb.Fatalf("nixtest: user %s: %v", HostileUserName, err)
	}
	return uid, gid
}

// User is the hostile user's name.
func (h *Hostile) User() string { return h.name }

// UID is the hostile user's uid.
func (h *Hostile) UID() int { return h.uid }

// Bait is a file of root's on the target (mode 0600, known content, in a
// directory of root's) that the user aims its links at.
func (h *Hostile) Bait() string { return BaitPath }

// privateRoots are where Own may make directories: the target's own
// mounts, not the machine's.
func (h *Hostile) privateRoots() []string {
	return []string{"/run/", "/nix/var/", h.t.home + "/"}
}

// Own makes directory path on the target the hostile user's (mode 0755),
// as a service's state directory is its user's, making its parents as
// root's (0755) where missing. path must be below the target's own /run,
// /nix/var or the login's home: the rest of its file system is the
// machine's. A directory below /run is made again at each boot, as
// systemd makes a service's runtime directory.
func (h *Hostile) Own(path string) {
	t := h.t
	clean := filepath.Clean(path)
	if clean != path || !slices.ContainsFunc(h.privateRoots(), func(r string) bool { return strings.HasPrefix(path, r) }) ||
		strings.HasPrefix(path, stateLink+"/") || path == stateLink {
		t.tb.Fatalf("nixtest: Own(%q): want a clean absolute path below %q (the target's own mounts)", path, h.privateRoots())
	}
	if err := h.own(path); err != nil {
		t.tb.Fatalf("nixtest: Own(%q): %v", path, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Contains(h.owned, path) {
		h.owned = append(h.owned, path)
	}
}

func (h *Hostile) own(path string) error {
	t := h.t
	if err := os.MkdirAll(t.Path(filepath.Dir(path)), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(t.Path(path), 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	if err := os.Lchown(t.Path(path), h.uid, h.gid); err != nil {
		return err
	}
	return os.Chmod(t.Path(path), 0o755)
}

// remakeRuntime makes the owned directories below /run again (a boot
// emptied /run).
func (h *Hostile) remakeRuntime() {
	h.mu.Lock()
	owned := slices.Clone(h.owned)
	h.mu.Unlock()
	for _, p := range owned {
		if strings.HasPrefix(p, "/run/") {
			if err := h.own(p); err != nil {
				fmt.Fprintf(os.Stderr, "nixtest: reboot: the hostile user's %s: %v\n", p, err)
			}
		}
	}
}

// Arm makes the wrappers of chown, chmod, mv, rm, mkdir, base64, ln, cp,
// install, touch and mktemp (first on the target's PATH) run attacks as
// the hostile user when root runs them with a path argument (base64: its
// standard output; mktemp: the path it made) in a directory the user may
// write (owns, or group- or other-writable without the sticky bit): just
// before and just after the real command. At each such path the first of
// attacks that applies is done (a path that is already the user's doing
// is left alone), and logged in the event log (kind "hostile"). Arm with
// no attacks disarms.
func (h *Hostile) Arm(attacks ...Attack) {
	t := h.t
	path := filepath.Join(t.StateDir, armedFile)
	if len(attacks) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.tb.Fatalf("nixtest: Arm: %v", err)
		}
		return
	}
	names := make([]string, len(attacks))
	for i, a := range attacks {
		switch a {
		case SwapForLink, PlantDir, LinkDirToRoot:
		default:
			t.tb.Fatalf("nixtest: Arm(%q): want SwapForLink, PlantDir or LinkDirToRoot", a)
		}
		names[i] = string(a)
	}
	t.writeFile(t.tb, armedFile, fmt.Sprintf("%d %d %s %s\n", h.uid, h.gid, BaitPath, strings.Join(names, ",")))
}

// Loop starts the hostile user's background process: until the test
// ends it keeps swapping entries of the user's directories (Own) and of
// their subdirectories for links to the bait, and planting directories
// and links at names it saw there that are gone, choosing with a
// generator seeded with seed (logged). It attacks the directories Own
// made before it started. A reboot kills it; it starts again once the
// target is back. Each attack is in the event log (kind
// "hostile", Action "loop").
func (h *Hostile) Loop(tb TB, seed int64) {
	tb.Helper()
	t := h.t
	if l, ok := tb.(interface{ Logf(string, ...any) }); ok {
		l.Logf("nixtest: the hostile user's loop on %s, seed %d", t.StateDir, seed)
	}
	if seed < 0 {
		seed = -seed
	}
	if err := os.WriteFile(filepath.Join(t.StateDir, "libexec", "hostile-loop"), []byte(hostileLoopScript), 0o644); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	var (
		mu      sync.Mutex
		stopped bool
		running *exec.Cmd
		wg      sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Go(func() {
		for n := int64(0); ; n++ {
			for !t.up() {
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
			h.mu.Lock()
			dirs := slices.Clone(h.owned)
			h.mu.Unlock()
			quoted := make([]string, len(dirs))
			for i, d := range dirs {
				quoted[i] = shell.Quote(d)
			}
			script := fmt.Sprintf("exec setpriv --reuid=%d --regid=%d --clear-groups -- /bin/sh -s -- %d %s %s < %s/libexec/hostile-loop >> %s/events.log 2>/dev/null",
				h.uid, h.gid, seed+n, BaitPath, strings.Join(quoted, " "), stateLink, stateLink)
			cmd := t.command("/bin/sh", "-c", script)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			mu.Lock()
			if stopped {
				mu.Unlock()
				return
			}
			err := cmd.Start()
			if err == nil {
				running = cmd
			}
			mu.Unlock()
			if err != nil {
				fmt.Fprintf(os.Stderr, "nixtest: the hostile user's loop: %v\n", err)
				return
			}
			_ = cmd.Wait()
			mu.Lock()
			running = nil
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	tb.Cleanup(func() {
		mu.Lock()
		stopped = true
		if running != nil {
			_ = syscall.Kill(-running.Process.Pid, syscall.SIGKILL)
		}
		mu.Unlock()
		close(done)
		wg.Wait()
	})
}

// up says whether the target is up now: no reboot asked for or under way.
func (t *Target) up() bool {
	_, err := os.Stat(filepath.Join(t.StateDir, "reboot-request"))
	return os.IsNotExist(err) && !t.rebooting.Load()
}

// Harmed says what root did that harmed the bait or followed the user,
// a line each: the bait's owner, group, mode or content changed (or it
// is gone); something appeared in the bait's directory (root followed a
// link there); a file root wrote inside a directory the user planted;
// a link of the user's to the bait or its directory that root put at a
// path of its own (moved there). Empty when nothing.
func (h *Hostile) Harmed() []string {
	t := h.t
	var out []string
	fi, err := os.Lstat(t.Path(BaitPath))
	switch {
	case err != nil:
		out = append(out, fmt.Sprintf("the bait %s is gone: %v", BaitPath, err))
	case !fi.Mode().IsRegular():
		out = append(out, fmt.Sprintf("the bait %s is no regular file now: %s", BaitPath, fi.Mode().Type()))
	default:
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if st.Uid != 0 {
				out = append(out, fmt.Sprintf("the bait %s's owner changed from root to %s", BaitPath, userName(int(st.Uid))))
			}
			if st.Gid != 0 {
				out = append(out, fmt.Sprintf("the bait %s's group changed from root to %s", BaitPath, groupName(int(st.Gid))))
			}
		}
		if m := fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky); m != 0o600 {
			out = append(out, fmt.Sprintf("the bait %s's mode changed from 0600 to %#o", BaitPath, m))
		}
		if b, err := os.ReadFile(t.Path(BaitPath)); err != nil || string(b) != baitContent {
			out = append(out, fmt.Sprintf("the bait %s's content changed: %q", BaitPath, truncate(string(b), 80)))
		}
	}
	dir := filepath.Dir(BaitPath)
	if entries, err := os.ReadDir(t.Path(dir)); err == nil {
		for _, e := range entries {
			if e.Name() != filepath.Base(BaitPath) {
				out = append(out, fmt.Sprintf("%s appeared in the bait's directory %s (root followed a link of the user's)", filepath.Join(dir, e.Name()), dir))
			}
		}
	}
	// Paths the user's own attacks made: a link there is the user's
	// doing, not root's.
	made := map[string]bool{}
	var planted []string
	for _, e := range t.Events() {
		if e.Kind != "hostile" {
			continue
		}
		made[e.Path] = true
		if e.Attack == PlantDir {
			planted = append(planted, e.Path)
		}
	}
	for _, d := range planted {
		// What cannot be read (gone meanwhile) is passed over.
		_ = filepath.WalkDir(t.Path(d), func(p string, e os.DirEntry, walkErr error) error {
			if walkErr == nil && e.Type().IsRegular() {
				if info, err := e.Info(); err == nil {
					if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != h.uid {
						out = append(out, fmt.Sprintf("root wrote %s inside the directory the user planted at %s", strings.TrimPrefix(p, t.Path("")), d))
					}
				}
			}
			return nil
		})
	}
	// A link to the bait where the user may not put one: root moved it
	// there.
	seen := map[string]bool{}
	for _, p := range lines(t.readFile("hostile/touched")) {
		if seen[p] || made[p] {
			continue
		}
		seen[p] = true
		if l, err := os.Readlink(t.Path(p)); err == nil && (l == BaitPath || l == dir) && !h.mayWrite(filepath.Dir(p)) {
			out = append(out, fmt.Sprintf("root put the user's link to %s at %s", l, p))
		}
	}
	return out
}

// mayWrite says whether the user may add entries to directory dir on the
// target, as the wrappers judge it: owns it, or it is group- (the user's
// group) or other-writable (sticky or not: in a sticky one it adds its
// own).
func (h *Hostile) mayWrite(dir string) bool {
	fi, err := os.Stat(h.t.Path(dir))
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	m := fi.Mode()
	if int(st.Uid) == h.uid {
		return true
	}
	return m&0o002 != 0 || int(st.Gid) == h.gid && m&0o020 != 0
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Write is a file a base64 -d run as root wrote on the target, as it was
// when the content went in.
type Write struct {
	Path  string      // where its standard output was (readlink /proc/self/fd/1)
	Mode  os.FileMode // its permission bits then
	Owner string      // "user:group" then
	Time  time.Time
}

// Writes lists every base64 -d run as root on the target whose standard
// output was a regular file, in order: the file's path, mode and owner as
// the content was written. A secret written into a file others may read,
// or straight to its destination (no temporary file renamed over it),
// shows here.
func (t *Target) Writes() []Write {
	var out []Write
	for _, e := range t.Events() {
		if e.Kind != "write" {
			continue
		}
		m, err := strconv.ParseUint(e.Mode, 8, 32)
		if err != nil {
			t.tb.Fatalf("nixtest: a write event's mode %q", e.Mode)
		}
		out = append(out, Write{Path: e.Path, Mode: os.FileMode(m) & (os.ModePerm), Owner: e.Owner, Time: e.Time})
	}
	return out
}
