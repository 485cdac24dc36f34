package sshtest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
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
)

// SSHD is a real OpenSSH server running in the foreground on 127.0.0.1.
type SSHD struct {
	Host     string // "127.0.0.1"
	Port     int
	Addr     string // "127.0.0.1:port"
	HostKeys []*Key // the host keys served; HostKeys[0] is the primary
	User     string // the local user tests log in as (the current user)
	// ClientKey is authorised for User.
	ClientKey *Key
	// Dir holds the config, the host keys and the log.
	Dir string

	authorizedPath string // readable by every user: see StartSSHD
	logPath        string
	cmd            *exec.Cmd
	exited         chan struct{} // closed once cmd.Wait has returned
	stopOnce       sync.Once
}

// SSHDOption changes how StartSSHD configures sshd.
type SSHDOption func(*sshdConfig)

type sshdConfig struct {
	hostKeyTypes []string
	authorized   []*Key
	lines        []string
	ns           *MountNamespace // run sshd inside it; nil for the host's
}

// WithHostKeyTypes makes sshd serve one host key of each type, in order;
// the first becomes HostKeys[0].
func WithHostKeyTypes(types ...string) SSHDOption {
	return func(c *sshdConfig) { c.hostKeyTypes = append([]string(nil), types...) }
}

// WithAuthorizedKeys authorises keys for User besides ClientKey.
func WithAuthorizedKeys(keys ...*Key) SSHDOption {
	return func(c *sshdConfig) { c.authorized = append(c.authorized, keys...) }
}

// WithConfigLines adds sshd_config lines. They are placed before the
// defaults so they override them (sshd keeps the first value it reads);
// a "Match" block and everything after it goes at the very end.
func WithConfigLines(lines ...string) SSHDOption {
	return func(c *sshdConfig) { c.lines = append(c.lines, lines...) }
}

const (
	sshdReadyTimeout = 10 * time.Second
	sshdStopTimeout  = 5 * time.Second
	sshdBindAttempts = 5
)

// StartSSHD starts /usr/sbin/sshd on a free loopback port and stops it when
// the test ends. Failing to start is fatal, with sshd's log in the message.
func StartSSHD(tb TB, opts ...SSHDOption) *SSHD {
	tb.Helper()
	cfg := sshdConfig{hostKeyTypes: []string{"ed25519"}}
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.hostKeyTypes) == 0 {
		tb.Fatalf("sshtest: WithHostKeyTypes needs at least one type")
	}

	bin := sshdBinary(tb)
	if os.Geteuid() == 0 {
		// sshd refuses to start without its privilege-separation directory,
		// which minimal images do not ship.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			tb.Fatalf("sshtest: create /run/sshd: %v", err)
		}
	}
	u, err := user.Current()
	if err != nil {
		tb.Fatalf("sshtest: current user: %v", err)
	}

	s := &SSHD{Host: "127.0.0.1", User: u.Username, ClientKey: NewKey(tb), Dir: tb.TempDir()}
	s.logPath = filepath.Join(s.Dir, "sshd.log")

	var hostKeyFiles []string
	for _, typ := range cfg.hostKeyTypes {
		k := NewKeyOfType(tb, typ)
		path := filepath.Join(s.Dir, "ssh_host_"+typ+"_key")
		if err := os.WriteFile(path, k.PEM(), 0o600); err != nil {
			tb.Fatalf("sshtest: write host key: %v", err)
		}
		s.HostKeys = append(s.HostKeys, k)
		hostKeyFiles = append(hostKeyFiles, path)
	}

	// sshd reads authorized_keys as the user logging in: for a user
	// other than root (LoginUser) the file must be readable by all, in a
	// directory all can enter, outside the test's private temporary one.
	// It holds public keys only.
	keys, err := os.MkdirTemp("", "sshtest-keys-")
	if err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(keys) })
	if err := os.Chmod(keys, 0o755); err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	// Sessions get an empty HOME: a shell that sshd starts reads the
	// login user's ~/.bashrc, which on a runner may cost a second of CPU
	// per command (a version manager's init) and change PATH.
	home := filepath.Join(keys, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	s.authorizedPath = filepath.Join(keys, "authorized_keys")
	authorizedPath := s.authorizedPath
	s.SetAuthorizedKeys(tb, append([]*Key{s.ClientKey}, cfg.authorized...)...)

	// The port is free when we pick it but another process may take it
	// before sshd binds, so a bind failure is retried on a new port.
	for attempt := 1; ; attempt++ {
		port := ClosedPortOn(tb, "127.0.0.1")
		s.Port = port
		s.Addr = net.JoinHostPort(s.Host, strconv.Itoa(port))
		configPath := filepath.Join(s.Dir, "sshd_config")
		conf := sshdConfigText(s.Addr, hostKeyFiles, authorizedPath, home, cfg.lines)
		if err := os.WriteFile(configPath, []byte(conf), 0o600); err != nil {
			tb.Fatalf("sshtest: write sshd_config: %v", err)
		}

		s.start(tb, bin, configPath, cfg.ns)
		err := s.waitReady()
		if err == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		s.stopProcess()
		log := s.Log()
		if attempt < sshdBindAttempts && strings.Contains(log, "Address already in use") {
			continue
		}
		tb.Fatalf("sshtest: sshd on %s not ready: %v\nsshd log:\n%s", s.Addr, err, log)
	}
}

// SetAuthorizedKeys replaces the keys authorised for User; sshd reads the
// file at every login, so the change applies to the next connection. No key
// at all refuses every login: a key removed from a host, say.
func (s *SSHD) SetAuthorizedKeys(tb TB, keys ...*Key) {
	tb.Helper()
	var authorized strings.Builder
	for _, k := range keys {
		authorized.WriteString(k.AuthorizedLine() + "\n")
	}
	if err := os.WriteFile(s.authorizedPath, []byte(authorized.String()), 0o644); err != nil {
		tb.Fatalf("sshtest: write authorized_keys: %v", err)
	}
}

func sshdBinary(tb TB) string {
	tb.Helper()
	bin := "/usr/sbin/sshd"
	if _, err := os.Stat(bin); err != nil {
		bin, err = exec.LookPath("sshd")
		if err != nil {
			tb.Fatalf("sshd not found: install Debian package openssh-server")
		}
	}
	// sshd re-executes itself per connection and insists on an absolute path.
	abs, err := filepath.Abs(bin)
	if err != nil {
		tb.Fatalf("sshtest: absolute path of %s: %v", bin, err)
	}
	return abs
}

func sshdConfigText(addr string, hostKeyFiles []string, authorizedPath, home string, extra []string) string {
	var head, tail, env []string
	for i, line := range extra {
		f := strings.Fields(line)
		if len(f) > 0 && strings.EqualFold(f[0], "Match") {
			tail = extra[i:]
			break
		}
		if len(f) > 0 && strings.EqualFold(f[0], "SetEnv") {
			// sshd keeps the first SetEnv line: the test's variables and
			// the empty HOME go in one.
			env = append(env, f[1:]...)
			continue
		}
		head = append(head, line)
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(strings.Trim(kv, `"`), "HOME=") }) {
		env = append(env, quote("HOME="+home))
	}
	lines := append([]string{}, head...)
	lines = append(lines, "SetEnv "+strings.Join(env, " "))
	lines = append(lines, "ListenAddress "+addr)
	for _, p := range hostKeyFiles {
		lines = append(lines, "HostKey "+quote(p))
	}
	lines = append(lines,
		// sshd expands %-tokens in this path; t.TempDir names may hold '%'.
		"AuthorizedKeysFile "+quote(strings.ReplaceAll(authorizedPath, "%", "%%")),
		"PidFile none",
		"UsePAM no",
		"StrictModes no", // t.TempDir paths are not root-owned all the way up
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PubkeyAuthentication yes",
		"PermitRootLogin prohibit-password",
		"LogLevel VERBOSE",
		"MaxStartups 100:30:200",
		"UseDNS no",
	)
	lines = append(lines, tail...)
	return strings.Join(lines, "\n") + "\n"
}

// quote keeps a path with spaces (from TMPDIR) one sshd_config argument.
func quote(path string) string {
	return `"` + path + `"`
}

func (s *SSHD) start(tb TB, bin, configPath string, ns *MountNamespace) {
	tb.Helper()
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatalf("sshtest: open sshd log: %v", err)
	}
	// An *os.File as Stderr is handed straight to the child, so no copying
	// goroutine exists to outlive the test.
	// -r: each connection is served by a fork of the listener, not a new
	// sshd executable that loads its configuration and host keys again;
	// that halves what a login costs sshd (measured: 50 to 25 ms of CPU),
	// and the suite logs in thousands of times. The protocol is the same.
	argv := []string{bin, "-D", "-r", "-e", "-f", configPath}
	if ns != nil {
		// nsenter execs sshd without forking, so the pid stays sshd's and
		// stopProcess finds its sessions as before.
		argv = ns.Command(argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = s.Dir
	// If the test binary dies before its cleanups run (a -timeout panic),
	// sshd must not listen on for good.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	logFile.Close()
	if err != nil {
		tb.Fatalf("sshtest: start %s: %v", strings.Join(argv, " "), err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
}

// waitReady polls until sshd says it listens on its port, and it accepts a
// connection and sends its banner. Its own word matters: another test's
// server may have taken the port before sshd could, and answer in its
// place while sshd is still starting (then failing to bind).
func (s *SSHD) waitReady() error {
	deadline := time.Now().Add(sshdReadyTimeout)
	listening := fmt.Sprintf("Server listening on %s port %d.", s.Host, s.Port)
	last := errors.New("sshd has not said it listens")
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("sshd exited: %v", s.cmd.ProcessState)
		default:
		}
		if strings.Contains(s.Log(), listening) {
			if last = readBanner(s.Addr); last == nil {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no SSH banner within %v: %v", sshdReadyTimeout, last)
}

func readBanner(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "SSH-2.0-") {
		return fmt.Errorf("unexpected banner %q", line)
	}
	return nil
}

// Log returns what sshd has logged so far, for failure messages.
func (s *SSHD) Log() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read sshd log: %v)", err)
	}
	return string(b)
}

// Stop stops sshd and every session it forked, so the host looks down.
// It is idempotent, and cleanup calls it too.
func (s *SSHD) Stop() {
	s.stopOnce.Do(s.stopProcess)
}

func (s *SSHD) stopProcess() {
	// Per-connection children call setsid and would survive their parent,
	// so they are found and killed while they are still its children.
	for _, pid := range descendants(s.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(sshdStopTimeout)
	defer timer.Stop()
	select {
	case <-s.exited:
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// descendants lists the processes below pid, read from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentPID(p); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func parentPID(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses; fields after the
	// last ')' are fixed: state, then ppid.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, errors.New("malformed stat")
	}
	return strconv.Atoi(f[1])
}
