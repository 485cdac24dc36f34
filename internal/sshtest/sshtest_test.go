package sshtest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func clientConfig(key *Key, hostKey ssh.PublicKey) *ssh.ClientConfig {
	return &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(key.Signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey),
		Timeout:         5 * time.Second,
	}
}

func dial(t *testing.T, addr string, cfg *ssh.ClientConfig) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t *testing.T, c *ssh.Client, cmd string) string {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("run %q: %v (output %q)", cmd, err, out)
	}
	return string(out)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestKeys(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"ed25519", "ecdsa", "rsa"} {
		t.Run(typ, func(t *testing.T) {
			k := NewKeyOfType(t, typ)

			line := k.AuthorizedLine()
			if strings.HasSuffix(line, "\n") {
				t.Errorf("AuthorizedLine has a trailing newline: %q", line)
			}
			pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
			if err != nil || ssh.FingerprintSHA256(pub) != k.Fingerprint() {
				t.Errorf("AuthorizedLine %q does not round-trip: %v", line, err)
			}
			if !strings.HasPrefix(k.Fingerprint(), "SHA256:") {
				t.Errorf("Fingerprint = %q", k.Fingerprint())
			}

			signer, err := ssh.ParsePrivateKey(k.PEM())
			if err != nil || ssh.FingerprintSHA256(signer.PublicKey()) != k.Fingerprint() {
				t.Errorf("PEM does not round-trip: %v", err)
			}

			path := k.WriteFile(t, t.TempDir())
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("key file mode = %v, want 0600", fi.Mode().Perm())
			}
		})
	}
	if k := NewKey(t); k.Public.Type() != ssh.KeyAlgoED25519 {
		t.Errorf("NewKey type = %s, want ed25519", k.Public.Type())
	}
}

// One key type is enough: the bcrypt KDF is slow under -race and the code
// path does not depend on the type.
func TestEncryptedPEM(t *testing.T) {
	t.Parallel()
	k := NewKey(t)
	enc := k.EncryptedPEM(t, "s3cret")
	var missing *ssh.PassphraseMissingError
	if _, err := ssh.ParsePrivateKey(enc); !errors.As(err, &missing) {
		t.Errorf("encrypted PEM parsed without passphrase: %v", err)
	}
	signer, err := ssh.ParsePrivateKeyWithPassphrase(enc, []byte("s3cret"))
	if err != nil || ssh.FingerprintSHA256(signer.PublicKey()) != k.Fingerprint() {
		t.Errorf("encrypted PEM does not round-trip: %v", err)
	}
}

func TestSSHDRunsCommand(t *testing.T) {
	t.Parallel()
	d := StartSSHD(t)
	if d.Host != "127.0.0.1" || d.Addr != net.JoinHostPort(d.Host, strconv.Itoa(d.Port)) {
		t.Fatalf("bad address fields: %+v", d)
	}
	c := dial(t, d.Addr, clientConfig(d.ClientKey, d.HostKeys[0].Public))
	if out := run(t, c, "echo ok"); out != "ok\n" {
		t.Errorf("echo ok = %q\nsshd log:\n%s", out, d.Log())
	}
	if d.User != "root" {
		t.Logf("tests run as %q, not root", d.User)
	}
}

func TestSSHDHostKeyTypes(t *testing.T) {
	t.Parallel()
	d := StartSSHD(t, WithHostKeyTypes("ed25519", "ecdsa", "rsa"))
	if len(d.HostKeys) != 3 || d.HostKeys[0].Type != "ed25519" {
		t.Fatalf("HostKeys = %d keys, first %s", len(d.HostKeys), d.HostKeys[0].Type)
	}
	algos := []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoRSASHA256}
	for i, algo := range algos {
		cfg := clientConfig(d.ClientKey, d.HostKeys[i].Public)
		cfg.HostKeyAlgorithms = []string{algo}
		c := dial(t, d.Addr, cfg)
		c.Close()
	}
}

func TestSSHDOptions(t *testing.T) {
	t.Parallel()
	extra := NewKey(t)
	d := StartSSHD(t,
		WithAuthorizedKeys(extra),
		WithConfigLines("SetEnv FLEET_SSHTEST=42"),
	)
	c := dial(t, d.Addr, clientConfig(extra, d.HostKeys[0].Public))
	if out := run(t, c, "echo $FLEET_SSHTEST"); out != "42\n" {
		t.Errorf("SetEnv not applied: got %q", out)
	}
}

func TestSSHDStop(t *testing.T) {
	t.Parallel()
	d := StartSSHD(t)
	c := dial(t, d.Addr, clientConfig(d.ClientKey, d.HostKeys[0].Public))
	d.Stop()
	d.Stop()

	_, err := net.DialTimeout("tcp", d.Addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after Stop: %v, want connection refused", err)
	}
	// The session's own process is gone too: the open client sees the end.
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("open connection survived Stop")
		c.Close()
		<-done
	}
}

func TestBlackHole(t *testing.T) {
	t.Parallel()
	s := NewServer(t, BlackHole)
	if s.HostKey != nil {
		t.Errorf("BlackHole has a host key")
	}
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(300 * time.Millisecond))
	_, _, _, err = ssh.NewClientConn(conn, s.Addr, clientConfig(NewKey(t), NewKey(t).Public))
	if !isTimeout(err) {
		t.Errorf("handshake with BlackHole: %v, want timeout", err)
	}
	waitAccepted(t, s, 1)
}

func TestStallHandshake(t *testing.T) {
	t.Parallel()
	s := NewServer(t, StallHandshake)

	// Raw: the banner arrives, then nothing.
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	r := bufio.NewReader(conn)
	banner, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(banner, "SSH-2.0-") {
		t.Fatalf("banner %q, %v", banner, err)
	}
	conn.Write([]byte("SSH-2.0-client\r\n"))
	conn.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r.ReadByte(); !isTimeout(err) {
		t.Errorf("read after banner: %v, want timeout", err)
	}

	// With a real client: the handshake times out.
	conn2, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	conn2.SetDeadline(time.Now().Add(300 * time.Millisecond))
	_, _, _, err = ssh.NewClientConn(conn2, s.Addr, clientConfig(NewKey(t), NewKey(t).Public))
	if !isTimeout(err) {
		t.Errorf("handshake with StallHandshake: %v, want timeout", err)
	}
}

func TestRefuseAuth(t *testing.T) {
	t.Parallel()
	s := NewServer(t, RefuseAuth)
	_, err := ssh.Dial("tcp", s.Addr, clientConfig(s.ClientKey, s.HostKey.Public))
	if err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("dial RefuseAuth: %v, want unable to authenticate", err)
	}
}

func TestHealthy(t *testing.T) {
	t.Parallel()
	s := NewServer(t, Healthy)
	if s.Accepted() != 0 {
		t.Fatalf("Accepted before any dial = %d", s.Accepted())
	}
	c := dial(t, s.Addr, clientConfig(s.ClientKey, s.HostKey.Public))
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Run("anything at all"); err != nil {
		t.Errorf("exec: %v", err)
	}
	sess, err = c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	if err := sess.Wait(); err != nil {
		t.Errorf("shell: %v", err)
	}
	if got := s.Accepted(); got != 1 {
		t.Errorf("Accepted = %d, want 1", got)
	}

	// A wrong client key is refused.
	if _, err := ssh.Dial("tcp", s.Addr, clientConfig(NewKey(t), s.HostKey.Public)); err == nil {
		t.Error("Healthy accepted an unknown client key")
	}

	// Close ends open connections and is idempotent.
	s.Close()
	s.Close()
	if err := c.Wait(); err == nil {
		t.Log("client ended cleanly")
	}
	if _, err := net.DialTimeout("tcp", s.Addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after Close: %v, want connection refused", err)
	}
}

func TestBastion(t *testing.T) {
	t.Parallel()
	bastion := NewServer(t, Bastion)
	target := NewServer(t, Healthy)
	d := StartSSHD(t)
	c := dial(t, bastion.Addr, clientConfig(bastion.ClientKey, bastion.HostKey.Public))

	hop := func(addr string, key *Key, hostKey ssh.PublicKey) {
		t.Helper()
		conn, err := c.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s through bastion: %v", addr, err)
		}
		sc, chans, reqs, err := ssh.NewClientConn(conn, addr, clientConfig(key, hostKey))
		if err != nil {
			t.Fatalf("handshake with %s through bastion: %v", addr, err)
		}
		inner := ssh.NewClient(sc, chans, reqs)
		defer inner.Close()
		sess, err := inner.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if err := sess.Run("true"); err != nil {
			t.Errorf("run through bastion to %s: %v", addr, err)
		}
	}
	hop(target.Addr, target.ClientKey, target.HostKey.Public)
	hop(d.Addr, d.ClientKey, d.HostKeys[0].Public)
	hop(net.JoinHostPort("localhost", strconv.Itoa(target.Port)), target.ClientKey, target.HostKey.Public)
	if got := bastion.dials.Load(); got != 3 {
		t.Errorf("bastion dialled %d times, want 3", got)
	}

	for _, addr := range []string{"192.0.2.1:22", "10.0.0.1:22", "[2001:db8::1]:22", "localhost.example.com:22", "127.0.0.1.example.com:22"} {
		_, err := c.Dial("tcp", addr)
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) || oce.Reason != ssh.Prohibited {
			t.Errorf("dial %s through bastion: %v, want prohibited", addr, err)
		}
	}
	if got := bastion.dials.Load(); got != 3 {
		t.Errorf("bastion dialled %d times after refusals, want still 3", got)
	}

	// Other channel types are refused.
	if _, _, err := c.OpenChannel("x11", nil); err == nil {
		t.Error("bastion accepted an x11 channel")
	}
	// Healthy does not forward.
	hc := dial(t, target.Addr, clientConfig(target.ClientKey, target.HostKey.Public))
	if _, err := hc.Dial("tcp", d.Addr); err == nil {
		t.Error("Healthy server forwarded a direct-tcpip channel")
	}
}

func TestOpenSSHClientAgainstHealthy(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatalf("ssh not found: install Debian package openssh-client")
	}
	s := NewServer(t, Healthy)
	dir := t.TempDir()
	keyFile := s.ClientKey.WriteFile(t, dir)
	knownHosts := filepath.Join(dir, "known_hosts")
	line := "[127.0.0.1]:" + strconv.Itoa(s.Port) + " " + s.HostKey.AuthorizedLine() + "\n"
	if err := os.WriteFile(knownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// ssh expands %-tokens in both paths and splits -o values on spaces.
	sshPath := func(p string) string { return `"` + strings.ReplaceAll(p, "%", "%%") + `"` }
	cmd := exec.CommandContext(ctx, bin,
		"-F", "/dev/null",
		"-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile="+sshPath(knownHosts),
		"-o", "IdentityFile="+sshPath(keyFile),
		"-o", "IdentitiesOnly=yes",
		"-p", strconv.Itoa(s.Port),
		"root@127.0.0.1", "true")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh true against Healthy: %v\n%s", err, out)
	}
}

func TestClosedPort(t *testing.T) {
	t.Parallel()
	host, port := ClosedPort(t)
	_, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial ClosedPort: %v, want connection refused", err)
	}
	// No server takes it while the test runs.
	if ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))); err == nil {
		ln.Close()
		t.Errorf("another server could listen on the closed port %d", port)
	}
}

// TestManyServers checks that idle servers are cheap enough to run by the
// thousand in one process when they share a host key.
func TestManyServers(t *testing.T) {
	t.Parallel()
	hostKey, clientKey := NewKey(t), NewKey(t)
	var servers []*Server
	for range 200 {
		servers = append(servers, NewServerWithKeys(t, Healthy, hostKey, clientKey))
	}
	last := servers[len(servers)-1]
	if last.HostKey != hostKey || last.ClientKey != clientKey {
		t.Fatal("NewServerWithKeys did not use the given keys")
	}
	c := dial(t, last.Addr, clientConfig(clientKey, hostKey.Public))
	c.Close()
}

func waitAccepted(t *testing.T, s *Server, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for s.Accepted() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.Accepted(); got != want {
		t.Errorf("Accepted = %d, want %d", got, want)
	}
}

func TestGate(t *testing.T) {
	t.Parallel()
	backend := NewServer(t, Healthy)
	g := NewGate(t, backend.Addr)
	dial := func() error {
		cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(backend.ClientKey.Signer)},
			HostKeyCallback: ssh.FixedHostKey(backend.HostKey.Public), Timeout: time.Second}
		c, err := ssh.Dial("tcp", g.Addr, cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(); err != nil {
		t.Fatalf("open gate: %v", err)
	}
	g.SetMode(GateReset)
	if err := dial(); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reset gate: got %v, want a connection reset", err)
	}
	g.SetMode(GateBlackHole)
	start := time.Now()
	conn, err := net.Dial("tcp", g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); err == nil || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("black-holed gate answered: %v", err)
	}
	conn.Close()
	g.SetMode(GateOpen)
	if err := dial(); err != nil {
		t.Fatalf("reopened gate: %v", err)
	}
}

// TestGateModeFunc: a mode function decides for each new connection and
// leaves connections already forwarded alone.
func TestGateModeFunc(t *testing.T) {
	t.Parallel()
	backend := NewServer(t, Healthy)
	var mode atomic.Int32
	g := NewGate(t, backend.Addr, WithModeFunc(func() GateMode { return GateMode(mode.Load()) }))
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(backend.ClientKey.Signer)},
		HostKeyCallback: ssh.FixedHostKey(backend.HostKey.Public), Timeout: time.Second}
	established, err := ssh.Dial("tcp", g.Addr, cfg)
	if err != nil {
		t.Fatalf("open gate: %v", err)
	}
	defer established.Close()
	mode.Store(int32(GateReset))
	if c, err := ssh.Dial("tcp", g.Addr, cfg); err == nil || !strings.Contains(err.Error(), "reset") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("mode func says reset: got %v, want a connection reset", err)
	}
	// The connection made while open still carries sessions.
	sess, err := established.NewSession()
	if err != nil {
		t.Fatalf("established connection after the mode changed: %v", err)
	}
	if err := sess.Run("true"); err != nil {
		t.Errorf("session on the established connection: %v", err)
	}
	sess.Close()
	mode.Store(int32(GateOpen))
	c, err := ssh.Dial("tcp", g.Addr, cfg)
	if err != nil {
		t.Fatalf("mode func says open again: %v", err)
	}
	c.Close()
}
