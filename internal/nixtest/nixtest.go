// Package nixtest makes "NixOS-like" deploy targets for tests: each Target
// is a private mount namespace with its own empty Nix store on /nix and its
// own /run (so /run/current-system and /nix/var/nix/profiles/system are the
// target's), reached through its own real sshd, whose sessions find small
// stand-ins for systemctl, systemd-run, systemd-detect-virt and journalctl
// first on PATH and the real nix-store and nix-env of Debian's nix-bin
// after them. System closures (Closure) are store paths in the deployer's
// store, the host's /nix, whose bin/switch-to-configuration behaves as the
// test asks, so a deployer using the system OpenSSH client,
// nix-copy-closure --to, nix-env --set and switch-to-configuration can be
// tested end to end.
//
// Nix never reaches a binary cache: the target's nix.conf and the
// deployer's NIX_CONFIG (DeployerEnv) set no substituters.
//
// How a target is built: tmpfs mounts over /nix, /run and the user's home
// in the namespace (an empty store as nix-store --init sets one up, once
// for every target, where nix-copy-closure's remote `nix-store --serve
// --write` imports for real; a home without the host's .bashrc);
// /run/nixtest links to the state directory on the host; sshd runs in the
// namespace with SetEnv PATH and NIX_CONF_DIR, which OpenSSH 9.2 applies
// after its own PATH. The test reads the target's view through
// /proc/<holder>/root. Host and Port are a sshtest.Gate in front of sshd,
// so a CutSSH activation can refuse new connections while open ones carry
// on (SSHD.Port bypasses it).
//
// A target is as unkind as a real host where a deployer could be fooled:
// a reboot lingers before it goes down (SetRebootLinger) and may be
// refused or hang (SetRebootRefusal); a hostile local user (Hostile) owns
// directories on it and swaps what root is about to write there for links
// to root's files, at the worst moment (Hostile.Arm, through wrappers of
// chown, mv, base64 and the like first on PATH) or all the time
// (Hostile.Loop). Writes says with which mode and owner each base64 -d
// as root wrote its file, and Snapshot and Diff what else changed.
//
// Like sshtest, it is imported only from tests (it takes sshtest.TB), and it
// needs root: mount namespaces, and sshd logging in the current user.
package nixtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// TB is the part of testing.TB the harness needs.
type TB = sshtest.TB

// stateLink is the target's state directory as its own processes see it:
// a symlink in the target's private /run to the directory on the host where
// the test reads it.
const stateLink = "/run/nixtest"

// SessionTmp is a target's own temporary directory, its SSH sessions'
// TMPDIR: the target's /tmp is the machine's, and two targets' sessions
// must not meet in it (two tests' node health probes of nodes with the
// same name would take each other's markers for their own).
const SessionTmp = "/run/tmp"

// SessionPath is PATH in the target's SSH sessions: the stand-ins first.
const SessionPath = stateLink + "/bin:/usr/bin:/bin"

// standIns are the systemd tools the target's stand-ins replace; a system
// closure links them from its sw/bin.
var standIns = []string{"systemctl", "systemd-run", "journalctl", "systemd-detect-virt"}

// systemTools are the commands a system closure's sw/bin holds: the
// stand-ins and nix-env (nix-store stays on every login PATH, as
// nix-copy-closure needs it there).
var systemTools = append([]string{"nix-env"}, standIns...)

// ProfilePath is the system profile on a target.
const ProfilePath = "/nix/var/nix/profiles/system"

// NixConfig is the Nix configuration of the deployer (see DeployerEnv) and
// of every target: no substituters, so Nix never contacts a binary cache;
// no signatures required, since closures made by Closure are unsigned; no
// build users, which the image does not have.
const NixConfig = "substituters =\nrequire-sigs = false\nbuild-users-group =\nsandbox = false\n"

// DeployerEnv is this process's environment with NIX_CONFIG set to
// NixConfig, for the deployer's nix-copy-closure and nix-store.
func DeployerEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "NIX_CONFIG=") })
	return append(env, "NIX_CONFIG="+NixConfig)
}

// Option changes how NewTarget sets up a target.
type Option func(*config)

type config struct {
	systemd   bool
	container string
	env       []string
	sshdOpts  []sshtest.SSHDOption
	bareLogin bool
	user      string
	shell     Shell
}

// Shell is which shell a target's scripts run under.
type Shell string

const (
	// ShellDefault is Debian's: the login shell bash, sh dash.
	ShellDefault Shell = ""
	// ShellBash is NixOS's: the login shell bash, and sh bash too (in its
	// POSIX mode, as bash runs when called sh).
	ShellBash Shell = "bash"
	// ShellDash runs dash for both: the login shell (bash, in the
	// target's mount namespace, is dash) and sh.
	ShellDash Shell = "dash"
)

// WithShell makes the target's scripts run under sh: see Shell.
func WithShell(sh Shell) Option { return func(c *config) { c.shell = sh } }

// WithLoginUser makes user (see sshtest.LoginUser and SudoUser) the only
// one the target lets in, and its User: a host whose deploy user is not
// root. The target's tools run as root only through sudo.
func WithLoginUser(user string) Option {
	return func(c *config) {
		c.user = user
		c.sshdOpts = append(c.sshdOpts, sshtest.WithConfigLines("AllowUsers "+user))
	}
}

// WithBareLoginPath makes a target whose login shell lacks the system's
// tools: PATH in its SSH sessions holds what /usr/bin holds except nix-env
// and the systemd tools (systemctl, systemd-run, ...), which are then found
// only through the system's sw/bin, as on a host whose login PATH does not
// have them.
func WithBareLoginPath() Option {
	return func(c *config) { c.bareLogin = true }
}

// WithoutSystemd makes a target where systemd does not run: no
// /run/systemd/system, and systemctl and systemd-run fail as they do
// without systemd as PID 1.
func WithoutSystemd() Option { return func(c *config) { c.systemd = false } }

// WithContainer makes the target a container of the given kind ("lxc",
// "systemd-nspawn", ...): systemd-detect-virt --container prints it and
// exits 0. By default a target is no container (it prints "none", exit 1).
func WithContainer(kind string) Option { return func(c *config) { c.container = kind } }

// WithSessionEnv sets NAME=VALUE in the target's SSH sessions (sshd
// SetEnv), besides PATH, NIX_CONF_DIR and TMPDIR. Values must hold no
// spaces.
func WithSessionEnv(name, value string) Option {
	return func(c *config) { c.env = append(c.env, name+"="+value) }
}

// WithSSHDOptions passes options to the target's sshtest.StartSSHD. A SetEnv
// line among them is ignored (sshd keeps the first); use WithSessionEnv.
func WithSSHDOptions(opts ...sshtest.SSHDOption) Option {
	return func(c *config) { c.sshdOpts = append(c.sshdOpts, opts...) }
}

// Target is a NixOS-like host reached over SSH at Host:Port (a gate in front
// of its sshd, so the host can cut itself off, see CutSSH).
type Target struct {
	// How a reboot goes (SetRebootDown, SetRebootNever, SetRebootLinger),
	// and whether one is under way (asked for and lingering, or down).
	rebootMu     sync.Mutex
	rebootDown   time.Duration
	rebootNever  bool
	rebootLinger time.Duration
	onBoot       func()
	rebooting    atomic.Bool

	Host string // "127.0.0.1"
	Port int
	User string // the user sshd logs in: the current user, root, unless WithLoginUser
	// HostKey is the sshd's host key in authorized_keys form
	// ("ssh-ed25519 AAAA..."), to pin.
	HostKey string
	// ClientKeyFile is a private key file (0600) authorised for User.
	ClientKeyFile string
	// StateDir is the target's state on the host: stand-ins, logs, boot
	// entry. Its processes see it as /run/nixtest.
	StateDir string

	SSHD *sshtest.SSHD
	NS   *sshtest.MountNamespace
	Gate *sshtest.Gate

	tb      TB
	nsRoot  string // /proc/<holder>/root: the target's file system view
	nsIdent string // the namespace's /proc/<pid>/ns/mnt link
	home    string // the login's home, a tmpfs of the target's own

	hostileMu sync.Mutex
	hostile   *Hostile // Hostile's, once asked for
}

// NewTarget starts a target and tears it down when the test ends. Missing
// tools fail the test naming the Debian package that provides them.
func NewTarget(tb TB, opts ...Option) *Target {
	tb.Helper()
	cfg := config{systemd: true}
	for _, o := range opts {
		o(&cfg)
	}
	requireNix(tb)
	for tool, pkg := range map[string]string{"setsid": "util-linux", "timeout": "coreutils", "mount": "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Fatalf("nixtest: %s not found: install Debian package %s", tool, pkg)
		}
	}
	u, err := user.Current()
	if err != nil {
		tb.Fatalf("nixtest: current user: %v", err)
	}

	t := &Target{Host: "127.0.0.1", User: u.Username, StateDir: tb.TempDir(), tb: tb, rebootLinger: DefaultRebootLinger, home: u.HomeDir}
	if cfg.user != "" {
		t.User = cfg.user
	}
	t.writeState(tb, cfg)

	// The mount point must exist on the host; the deployer's store lives
	// there too.
	if err := os.MkdirAll("/nix", 0o755); err != nil {
		tb.Fatalf("nixtest: create /nix: %v", err)
	}
	t.NS = sshtest.NewMountNamespace(tb)
	t.nsRoot = "/proc/" + strconv.Itoa(t.NS.PID) + "/root"
	t.nsIdent, err = os.Readlink("/proc/" + strconv.Itoa(t.NS.PID) + "/ns/mnt")
	if err != nil {
		tb.Fatalf("nixtest: read the target's mount namespace: %v", err)
	}
	// Runs after sshd has stopped (cleanups run last-in first-out): units
	// that systemd-run detached from the sessions are sshd's no more.
	tb.Cleanup(t.killDetached)

	// An empty home (the host's, with its .bashrc, would change PATH in
	// sessions), an empty store, and a /run of its own.
	setup := []string{
		"mount -t tmpfs -o mode=0755 nixtest-nix /nix",
		"mount -t tmpfs -o mode=0755 nixtest-run /run",
		"mount -t tmpfs -o mode=0700 nixtest-home " + shell.Quote(u.HomeDir),
		"mkdir -p /run/sshd", // sshd's privilege separation directory
		// The sessions' TMPDIR (SessionTmp): a temporary directory of the
		// target's own, as a host's /tmp is (the target's /tmp is the
		// machine's, shared by every target).
		"mkdir -p -m 1777 " + SessionTmp,
		"ln -s " + shell.Quote(t.StateDir) + " " + stateLink,
		// A boot id of its own, which a reboot changes.
		"mount --bind " + shell.Quote(filepath.Join(t.StateDir, "boot-id")) + " /proc/sys/kernel/random/boot_id",
	}
	if cfg.systemd {
		setup = append(setup, "mkdir -p /run/systemd/system")
	}
	switch cfg.shell {
	case ShellBash:
		setup = append(setup, "mount --bind \"$(command -v bash)\" \"$(readlink -f /bin/sh)\"")
	case ShellDash:
		setup = append(setup, "mount --bind \"$(readlink -f /bin/sh)\" \"$(command -v bash)\"")
	case ShellDefault:
	default:
		tb.Fatalf("nixtest: WithShell(%q): want ShellDefault, ShellBash or ShellDash", cfg.shell)
	}
	t.NS.Run(tb, "/bin/sh", "-ec", strings.Join(setup, "\n"))
	t.initStore(tb)

	path := SessionPath
	if cfg.bareLogin {
		path = t.bareLoginPath(tb)
	}
	setEnv := append([]string{"PATH=" + path, "NIX_CONF_DIR=" + stateLink + "/etc/nix", "TMPDIR=" + SessionTmp}, cfg.env...)
	sshdOpts := append([]sshtest.SSHDOption{
		sshtest.WithMountNamespace(t.NS),
		sshtest.WithConfigLines("SetEnv " + strings.Join(setEnv, " ")),
	}, cfg.sshdOpts...)
	// sntrup761 key exchange costs about 100ms a connection on a slow
	// machine; the deployer's tests measure nothing about it. sshd keeps
	// the first value it reads, so a test's own KexAlgorithms line wins.
	sshdOpts = append(sshdOpts, sshtest.WithConfigLines("KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org"))
	t.SSHD = sshtest.StartSSHD(tb, sshdOpts...)
	t.HostKey = t.SSHD.HostKeys[0].AuthorizedLine()
	t.ClientKeyFile = t.SSHD.ClientKey.WriteFile(tb, tb.TempDir())
	t.Gate = sshtest.NewGate(tb, t.SSHD.Addr, sshtest.WithModeFunc(t.gateMode))
	t.Port = t.Gate.Port
	t.watchReboots(tb)
	return t
}

func requireNix(tb TB) {
	tb.Helper()
	for _, tool := range []string{"nix-store", "nix-env", "nix-copy-closure"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Fatalf("nixtest: %s not found: install Debian package nix-bin", tool)
		}
	}
}

// writeState lays out the state directory: stand-ins, nix.conf, the
// target's answers.
func (t *Target) writeState(tb TB, cfg config) {
	tb.Helper()
	for _, d := range []string{"bin", "libexec", "etc/nix", "units", "counters", "systemd-run", "hostile"} {
		if err := os.MkdirAll(filepath.Join(t.StateDir, d), 0o755); err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
	}
	files := []struct {
		rel, text string
		mode      os.FileMode
	}{
		{"bin/systemctl", systemctlScript, 0o755},
		{"bin/systemd-run", systemdRunScript, 0o755},
		{"bin/journalctl", journalctlScript, 0o755},
		{"bin/systemd-detect-virt", detectVirtScript, 0o755},
		{"libexec/unit-runner", unitRunnerScript, 0o755},
		{"etc/nix/nix.conf", NixConfig, 0o644},
		{"container", cfg.container + "\n", 0o644},
		{"switch.log", "", 0o644},
		{"activation.log", "", 0o644},
		{"systemctl.log", "", 0o644},
		{"failed-units", "", 0o644},
		{"boot-id", newBootID() + "\n", 0o644},
		{"libexec/hostile-wrap", hostileWrapScript, 0o755},
		{"libexec/hostile-attack", hostileAttackScript, 0o644},
	}
	// The wrappers of the commands a deployer writes files with (see
	// Hostile.Arm and Writes).
	for _, tool := range wrappedTools {
		files = append(files, struct {
			rel, text string
			mode      os.FileMode
		}{"bin/" + tool, wrapperScript(tool, realTool(tb, tool)), 0o755})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(t.StateDir, f.rel), []byte(f.text), f.mode); err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
	}
}

// bareLoginPath fills login-bin in the state directory with links to
// /usr/bin's commands but the system's own (see WithBareLoginPath) and
// returns it as the target sees it.
func (t *Target) bareLoginPath(tb TB) string {
	tb.Helper()
	dir := filepath.Join(t.StateDir, "login-bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	entries, err := os.ReadDir("/usr/bin")
	if err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	for _, e := range entries {
		if slices.Contains(systemTools, e.Name()) {
			continue
		}
		target := filepath.Join("/usr/bin", e.Name())
		if slices.Contains(wrappedTools, e.Name()) {
			target = filepath.Join(stateLink, "bin", e.Name())
		}
		if err := os.Symlink(target, filepath.Join(dir, e.Name())); err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
	}
	return stateLink + "/login-bin"
}

// env is the environment of commands the harness runs on the target, the
// same as its SSH sessions get, but that the hostile user's attacks leave
// them alone (NIXTEST_HARNESS).
func (t *Target) env() []string {
	return []string{"PATH=" + SessionPath, "NIX_CONF_DIR=" + stateLink + "/etc/nix", "HOME=/root", "NIXTEST_HARNESS=1"}
}

// realTool is where the machine's own tool is, which its wrapper runs.
func realTool(tb TB, tool string) string {
	tb.Helper()
	for _, dir := range []string{"/usr/bin", "/bin"} {
		if fi, err := os.Stat(filepath.Join(dir, tool)); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(dir, tool)
		}
	}
	tb.Fatalf("nixtest: %s not found in /usr/bin or /bin: install Debian package coreutils", tool)
	return ""
}

// command is argv run inside the target's namespace with its environment.
func (t *Target) command(argv ...string) *exec.Cmd {
	full := t.NS.Command(argv...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = t.env()
	cmd.WaitDelay = time.Second
	return cmd
}

// killDetached kills what is left in the target's namespace besides its
// holder: units that systemd-run detached, a hung activation.
func (t *Target) killDetached() {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := t.processes()
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "nixtest: cleanup: processes %v still in the target's namespace after 5s\n", pids)
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processes lists the live processes in the target's namespace, but for
// its holder.
func (t *Target) processes() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == t.NS.PID {
			continue
		}
		// A zombie has no namespace links left, so it is not listed.
		if link, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt"); err == nil && link == t.nsIdent {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Leftovers lists the command lines of what runs in the target besides
// its sshd and the sessions sshd serves: what a deploy left behind (a
// watchdog, an activation, a lock's script).
func (t *Target) Leftovers() []string {
	var out []string
	for _, pid := range t.processes() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || len(b) == 0 {
			continue // ended meanwhile, or a zombie
		}
		cmdline := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if strings.HasPrefix(cmdline, "sshd:") || strings.HasPrefix(cmdline, "/usr/sbin/sshd ") {
			continue
		}
		out = append(out, strconv.Itoa(pid)+" "+cmdline)
	}
	return out
}

// gateMode runs on the gate's goroutines, so it cannot fail the test: an
// unreadable cut file leaves the gate open.
func (t *Target) gateMode() sshtest.GateMode {
	b, _ := os.ReadFile(filepath.Join(t.StateDir, "ssh-cut"))
	switch Cut(strings.TrimSpace(string(b))) {
	case CutReset:
		return sshtest.GateReset
	case CutBlackHole:
		return sshtest.GateBlackHole
	}
	return sshtest.GateOpen
}

// Destination is User@Host, for ssh and nix-copy-closure --to.
func (t *Target) Destination() string { return t.User + "@" + t.Host }

// SSHOptions returns the OpenSSH client options a deployer pinning this
// target's host key uses, as separate arguments: -F /dev/null, BatchMode,
// the port, the client key only, and a temporary known_hosts holding only
// "* <HostKey>" with StrictHostKeyChecking=yes and no global file, and
// ConnectTimeout=10. Joined with spaces they are a NIX_SSHOPTS (no path in
// them holds a space). ssh keeps the first value of an option: put
// overrides before these.
func (t *Target) SSHOptions(tb TB) []string {
	tb.Helper()
	knownHosts := filepath.Join(tb.TempDir(), "known_hosts")
	if err := os.WriteFile(knownHosts, []byte("* "+t.HostKey+"\n"), 0o600); err != nil {
		tb.Fatalf("nixtest: write known_hosts: %v", err)
	}
	return []string{
		"-F", "/dev/null",
		"-o", "BatchMode=yes",
		"-o", "Port=" + strconv.Itoa(t.Port),
		"-o", "IdentityFile=" + t.ClientKeyFile,
		"-o", "IdentitiesOnly=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + knownHosts,
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "ConnectTimeout=10",
	}
}

// Boot makes system the target's running system, as if it had booted into
// it: it copies system's closure from the deployer's store into the
// target's (nix-store --export | --import, no SSH), sets the system profile
// to it and points /run/current-system, /run/booted-system and the boot
// entry at it. It is not
// recorded in Calls.
func (t *Target) Boot(tb TB, system string) {
	tb.Helper()
	archive := export(tb, system)
	script := `nix-store --import >/dev/null && nix-env -p "$1" --set "$2" && ln -sfn "$2" /run/current-system && ln -sfn "$2" /run/booted-system`
	imp := t.command("/bin/sh", "-ec", script, "sh", ProfilePath, system)
	imp.Stdin = bytes.NewReader(archive)
	if out, err := imp.CombinedOutput(); err != nil {
		tb.Fatalf("nixtest: Boot %s: import and set: %v %s", system, err, out)
	}
	t.writeFile(tb, "boot-entry", system+"\n")
}

// BootByHand makes system the target's boot entry as nixos-rebuild boot
// run by hand on it does: the system profile pointed at system (a new
// generation) and the boot entry made; the running system stays. system
// must be in the target's store already (Boot put it there, or a deploy).
func (t *Target) BootByHand(tb TB, system string) {
	tb.Helper()
	if out, err := t.command("/bin/sh", "-ec", `nix-env -p "$1" --set "$2"`, "sh", ProfilePath, system).CombinedOutput(); err != nil {
		tb.Fatalf("nixtest: BootByHand %s: %v %s", system, err, out)
	}
	t.writeFile(tb, "boot-entry", system+"\n")
}

// exports are the closures Boot exported from the deployer's store, by
// system: one booted on many targets (a fleet's hosts, the explorer's
// schedules) is read from the store once.
var exports sync.Map // system -> []byte

// export is system's closure as nix-store --export writes it.
func export(tb TB, system string) []byte {
	tb.Helper()
	if v, ok := exports.Load(system); ok {
		if b, ok := v.([]byte); ok {
			return b
		}
	}
	q := exec.Command("nix-store", "--query", "--requisites", system)
	q.Env = DeployerEnv()
	var qErr bytes.Buffer
	q.Stderr = &qErr
	paths, err := q.Output()
	if err != nil {
		tb.Fatalf("nixtest: Boot: %s is not in the deployer's store: %v\n%s", system, err, qErr.String())
	}
	e := exec.Command("nix-store", append([]string{"--export"}, strings.Fields(string(paths))...)...)
	e.Env = DeployerEnv()
	var eErr bytes.Buffer
	e.Stderr = &eErr
	b, err := e.Output()
	if err != nil {
		tb.Fatalf("nixtest: Boot: nix-store --export %s: %v\n%s", system, err, eErr.String())
	}
	exports.Store(system, b)
	return b
}

// emptyStore is an empty store's /nix as nix-store --init makes it (but
// for the space it reserves, which Nix makes again when it finds none), as
// a tar archive: made once, in a mount namespace of its own, and written
// into each target's /nix, which costs a fraction of running Nix there.
var emptyStore struct {
	once    sync.Once
	archive []byte
	err     error
}

// initStore gives the target's empty /nix what nix-store --init would.
func (t *Target) initStore(tb TB) {
	tb.Helper()
	emptyStore.once.Do(func() {
		script := "mount -t tmpfs -o mode=0755 nixtest-nix /nix && nix-store --init && tar -C /nix -cf - --exclude=./var/nix/db/reserved ."
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-ec", script)
		cmd.Env = DeployerEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		emptyStore.archive, emptyStore.err = cmd.Output()
		if emptyStore.err != nil {
			emptyStore.err = fmt.Errorf("%w\n%s", emptyStore.err, stderr.String())
		}
	})
	if emptyStore.err != nil {
		tb.Fatalf("nixtest: nix-store --init in an empty store: %v", emptyStore.err)
	}
	untar := t.command("tar", "-C", "/nix", "-xf", "-")
	untar.Stdin = bytes.NewReader(emptyStore.archive)
	if out, err := untar.CombinedOutput(); err != nil {
		tb.Fatalf("nixtest: the target's empty store: %v\n%s", err, out)
	}
}

// HasPath reports whether path is a valid path in the target's own store.
func (t *Target) HasPath(tb TB, path string) bool {
	tb.Helper()
	out, err := t.command("nix-store", "--check-validity", path).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false
	}
	tb.Fatalf("nixtest: nix-store --check-validity %s on the target: %v\n%s", path, err, out)
	return false
}

// Path is where path of the target's file system view is on this machine,
// for a test to read or plant files there.
func (t *Target) Path(path string) string { return t.nsRoot + path }

// Exists reports whether path exists in the target's file system view.
func (t *Target) Exists(path string) bool {
	_, err := os.Lstat(t.nsRoot + path)
	return err == nil
}

// CurrentSystem is where /run/current-system points on the target, "" when
// it does not exist.
func (t *Target) CurrentSystem() string { return t.readlink("/run/current-system") }

// ProfileLink is what the system profile link holds ("system-2-link"), ""
// before there is one.
func (t *Target) ProfileLink() string { return t.readlink(ProfilePath) }

// ProfileSystem is the store path the system profile's current generation
// points at, "" before there is one.
func (t *Target) ProfileSystem() string {
	link := t.ProfileLink()
	if link == "" {
		return ""
	}
	if !filepath.IsAbs(link) {
		link = filepath.Join(filepath.Dir(ProfilePath), link)
	}
	return t.readlink(link)
}

// ProfileGeneration is the number of the system profile's current
// generation, 0 before there is one.
func (t *Target) ProfileGeneration() int {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(t.ProfileLink(), "system-"), "-link"))
	if err != nil {
		return 0
	}
	return n
}

// readlink reads a symlink in the target's view; "" when there is none.
func (t *Target) readlink(path string) string {
	s, err := os.Readlink(t.nsRoot + path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.tb.Fatalf("nixtest: readlink %s on the target: %v", path, err)
	}
	return s
}

// BootEntry is the system the bootloader would boot, "" before a `boot`.
func (t *Target) BootEntry() string { return strings.TrimSpace(t.readFile("boot-entry")) }

// Calls lists every switch-to-configuration call on the target, in order,
// as "<action> <store path>".
func (t *Target) Calls() []string { return lines(t.readFile("switch.log")) }

// Event is one thing a switch-to-configuration call did on the target, as
// its event log says: a call's start (with what the host ran then and the
// transient unit it ran in), a change of the running system or of the boot
// entry, and its end.
type Event struct {
	Time time.Time
	PID  int // the call's: its events share it
	// "start", "set-current", "set-boot", "end"; the host's (PID 0):
	// "reboot", "reboot-asked", "reboot-refused", "hostile", "write"
	Kind string
	// Action and Before are the start's: test, boot or switch, and what
	// /run/current-system was. A reboot's Action is who asked for it:
	// "systemctl" on the target, "" the harness (Target.Reboot).
	Action, Before string
	// System is the closure called (start) or made current or the boot
	// entry (set-current, set-boot), or the boot entry a reboot boots
	// (empty for none): every call still running was killed as it went
	// down, and it runs that system once back.
	System string
	// Unit is the transient unit the call ran in ("fleet-activate-….service"),
	// empty for a call straight from a session; a reboot's, the run whose
	// fenced script asked for it (its reboot's fate claimed on the host).
	Unit string
	// Lease is the run whose lease the host's deploy lock was under as
	// the call started (a reboot: as systemctl asked for it); empty for
	// none.
	Lease string
	// Output is the file the call's output went to under the agreement's
	// state directory, as "<run>/boot.1.output" (the run whose script
	// made the call); empty for another.
	Output string
	RC     int // end's exit status

	// A "reboot-refused" event's: how the target refused systemctl
	// reboot (SetRebootRefusal). A "reboot-asked" event (PID 0) is a
	// reboot asked for and accepted, with Action, Lease and Unit as its
	// "reboot" event has them.
	Refusal RebootRefusal
	// A "hostile" event's (a hostile local user's attack, see Hostile):
	// what it did, where, and around what (Action: "before:chown",
	// "after:mktemp", "loop").
	Attack Attack
	// A "hostile" or "write" event's path; a write's mode (octal, as
	// stat %a prints it) and owner ("user:group") as the content was
	// written (see Writes).
	Path, Mode, Owner string
}

// KeysSeen are the key files each activation found in /run/keys as it
// began, a line each: "ACTION PATH SHA256".
func (t *Target) KeysSeen() []string { return lines(t.readFile("keys-seen.log")) }

// Release lets an activation of a system made with Behaviour.Hold go on
// (each one after, too).
func (t *Target) Release(tb TB) {
	tb.Helper()
	t.writeFile(tb, "released", "")
}

// Restarts are the units systemctl restart was asked to restart, in
// order.
func (t *Target) Restarts() []string { return lines(t.readFile("restarts.log")) }

// Events lists what every switch-to-configuration call (test, boot,
// switch) did on the target, and what befell the host (reboots asked for,
// refused and done; the hostile user's attacks; root's base64 -d writes),
// in the order it happened.
func (t *Target) Events() []Event {
	var out []Event
	for _, line := range lines(t.readFile("events.log")) {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.tb.Fatalf("nixtest: events.log line %q", line)
		}
		sec, err := strconv.ParseFloat(f[0], 64)
		pid, perr := strconv.Atoi(f[1])
		if err != nil || perr != nil {
			t.tb.Fatalf("nixtest: events.log line %q", line)
		}
		e := Event{Time: time.Unix(0, int64(sec*1e9)), PID: pid, Kind: f[2]}
		switch {
		case e.Kind == "start" && len(f) == 9:
			e.Action, e.System, e.Before = f[3], f[4], f[5]
			e.Unit, e.Lease, e.Output = strings.TrimPrefix(f[6], "-"), strings.TrimPrefix(f[7], "-"), strings.TrimPrefix(f[8], "-")
		case (e.Kind == "set-current" || e.Kind == "set-boot") && len(f) == 4:
			e.System = f[3]
		case e.Kind == "reboot" && len(f) == 7:
			e.System, e.Action, e.Lease, e.Unit = strings.TrimPrefix(f[3], "-"), strings.TrimPrefix(f[4], "-"), strings.TrimPrefix(f[5], "-"), strings.TrimPrefix(f[6], "-")
		case e.Kind == "reboot-asked" && len(f) == 6:
			e.Action, e.Lease, e.Unit = strings.TrimPrefix(f[3], "-"), strings.TrimPrefix(f[4], "-"), strings.TrimPrefix(f[5], "-")
		case e.Kind == "reboot-refused" && len(f) == 4:
			e.Refusal = RebootRefusal(f[3])
		case e.Kind == "hostile" && len(f) >= 6:
			e.Attack, e.Action, e.Path = Attack(f[3]), f[4], rest(line, 5)
		case e.Kind == "write" && len(f) >= 6:
			e.Mode, e.Owner, e.Path = f[3], f[4], rest(line, 5)
		case e.Kind == "end" && len(f) == 4:
			e.RC, err = strconv.Atoi(f[3])
		default:
			err = errors.New("unknown event")
		}
		if err != nil {
			t.tb.Fatalf("nixtest: events.log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// Journal is what the last activation logged (what journalctl prints).
func (t *Target) Journal() string { return t.readFile("activation.log") }

// UnitJournal is what the transient unit (a systemd-run --unit) logged:
// its start, its output unless it ran with --pipe, and how it ended.
func (t *Target) UnitJournal(unit string) string {
	if !strings.Contains(unit, ".") {
		unit += ".service"
	}
	return t.readFile(filepath.Join("units", unit, "journal"))
}

// SystemctlCalls lists the arguments of every systemctl call, in order.
func (t *Target) SystemctlCalls() []string { return lines(t.readFile("systemctl.log")) }

// SystemdRun is one systemd-run call.
type SystemdRun struct {
	Unit  string   // with its suffix: "fleet-activate.service"
	Flags []string // as given: "--collect", "--pipe", "--service-type=exec", ...
	Props []string // the -p/--property values: "RuntimeMaxSec=180"
	Argv  []string // the command
}

// SystemdRuns lists every systemd-run call, in order.
func (t *Target) SystemdRuns() []SystemdRun {
	dir := filepath.Join(t.StateDir, "systemd-run")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.tb.Fatalf("nixtest: %v", err)
	}
	var runs []SystemdRun
	for _, e := range entries { // ReadDir sorts by name: by time
		rel := filepath.Join("systemd-run", e.Name())
		runs = append(runs, SystemdRun{
			Unit:  strings.TrimSpace(t.readFile(filepath.Join(rel, "unit"))),
			Flags: lines(t.readFile(filepath.Join(rel, "flags"))),
			Props: lines(t.readFile(filepath.Join(rel, "props"))),
			Argv:  lines(t.readFile(filepath.Join(rel, "argv"))),
		})
	}
	return runs
}

// SystemdRunProps is the properties the last systemd-run call was given,
// nil before any call.
func (t *Target) SystemdRunProps() []string {
	runs := t.SystemdRuns()
	if len(runs) == 0 {
		return nil
	}
	return runs[len(runs)-1].Props
}

// AcceptedConnections counts the SSH logins sshd has accepted, each a new
// connection (sessions multiplexed over one connection count once).
func (t *Target) AcceptedConnections() int {
	return strings.Count(t.SSHD.Log(), "Accepted publickey for ")
}

// SSHCut is how new connections are cut, "" while SSH is open.
func (t *Target) SSHCut() Cut { return Cut(strings.TrimSpace(t.readFile("ssh-cut"))) }

// CutSSH cuts new connections to the target as c says, as a CutSSH closure
// does; open connections carry on.
func (t *Target) CutSSH(tb TB, c Cut) {
	tb.Helper()
	if err := (Behaviour{Kind: CutSSH, Cut: c}).check(); err != nil || c == "" {
		tb.Fatalf("nixtest: CutSSH(%q): want CutReset or CutBlackHole", c)
	}
	t.writeFile(tb, "ssh-cut", string(c)+"\n")
}

// RestoreSSH lets new connections through again.
func (t *Target) RestoreSSH(tb TB) {
	tb.Helper()
	// A target rebooting opens it once it is back (a reboot cuts SSH
	// while it is away).
	t.WaitUp(time.Minute)
	if err := os.Remove(filepath.Join(t.StateDir, "ssh-cut")); err != nil && !errors.Is(err, os.ErrNotExist) {
		tb.Fatalf("nixtest: %v", err)
	}
}

// SetSystemState makes systemctl is-system-running answer state
// ("starting", "degraded", "maintenance", ...); with --wait it waits while
// the state is "initializing" or "starting". "" returns to the default:
// "degraded" while units are failed, else "running".
func (t *Target) SetSystemState(tb TB, state string) {
	tb.Helper()
	t.writeFile(tb, "system-state", state+"\n")
}

// SetUnitStartDelay makes every transient unit systemd-run starts from
// now on begin its command d late, as a busy systemd's start job waits; a
// systemctl stop meanwhile cancels the start. 0 starts them at once.
func (t *Target) SetUnitStartDelay(tb TB, d time.Duration) {
	tb.Helper()
	text := ""
	if d > 0 {
		text = fmt.Sprintf("%.3f\n", d.Seconds())
	}
	t.writeFile(tb, "unit-start-delay", text)
}

// SetRestartFails makes systemctl restart of each of units fail (exit 1,
// as systemd says when a unit's start fails), and the others restart;
// none, every unit restarts.
func (t *Target) SetRestartFails(tb TB, units ...string) {
	tb.Helper()
	t.writeFile(tb, "restart-fails", strings.Join(units, "\n")+"\n")
}

// SetFailedUnits replaces the units systemctl reports failed (until the
// next activation sets them).
func (t *Target) SetFailedUnits(tb TB, units ...string) {
	tb.Helper()
	text := strings.Join(units, "\n")
	if text != "" {
		text += "\n"
	}
	t.writeFile(tb, "failed-units", text)
}

func (t *Target) writeFile(tb TB, rel, text string) {
	tb.Helper()
	// Atomic, since the target's scripts may read it at any time.
	path := filepath.Join(t.StateDir, rel)
	tmp := path + ".nixtest-tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
}

// readFile reads a file of the state directory; "" when it does not exist.
func (t *Target) readFile(rel string) string {
	b, err := os.ReadFile(filepath.Join(t.StateDir, rel))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.tb.Fatalf("nixtest: %v", err)
	}
	return string(b)
}

// rest is what follows the first n space-separated fields of line: a
// path, which may hold spaces.
func rest(line string, n int) string {
	for range n {
		_, line, _ = strings.Cut(line, " ")
	}
	return line
}

func lines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// HoldDeployLock takes the target's deploy lock as another deployment of
// the host would (flock on deploy.LockFile, holder named in
// deploy.HolderFile) and holds it until the returned release is called or
// the test ends. It returns once the lock is held.
func (t *Target) HoldDeployLock(tb TB, holder string) (release func()) {
	tb.Helper()
	script := fmt.Sprintf("exec 9>>%s && flock 9 && printf '%%s\\n' %s > %s && echo held && exec sleep 3600",
		deploy.LockFile, shell.Quote(holder), deploy.HolderFile)
	cmd := t.command("/bin/sh", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("nixtest: hold the deploy lock: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	tb.Cleanup(release)
	line := make([]byte, 5)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "held\n" {
		tb.Fatalf("nixtest: the deploy lock was not taken: %q, %v", line, err)
	}
	return release
}
