package sshtest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// Behaviour is what an in-process Server does with the connections it
// accepts; most behaviours misbehave on purpose.
type Behaviour int

const (
	// Healthy is a correct SSH server: it presents HostKey, accepts
	// ClientKey, and answers every "exec" or "shell" request on a "session"
	// channel with exit status 0 at once, so `ssh host true` succeeds.
	Healthy Behaviour = iota
	// BlackHole accepts TCP connections, then never reads or writes.
	BlackHole
	// StallHandshake sends an SSH-2.0 banner, reads the client's banner,
	// then never sends KEXINIT, so the handshake stalls midway.
	StallHandshake
	// RefuseAuth is a correct server that fails every authentication.
	RefuseAuth
	// Bastion is Healthy and also serves "direct-tcpip" channels to
	// loopback destinations only; any other destination is refused with
	// ssh.Prohibited before anything is dialled.
	Bastion
	// StallingBastion is Healthy until it accepts a "direct-tcpip"
	// channel; then it stops reading its SSH connection, as a bastion that
	// hangs would: it forwards nothing and never answers the client's
	// channel close, so a read pending on the channel stays blocked until
	// the client closes the SSH connection itself.
	StallingBastion
	// ForbiddingBastion is Healthy and refuses every "direct-tcpip"
	// channel as administratively prohibited (AllowTcpForwarding no).
	ForbiddingBastion
)

func (b Behaviour) String() string {
	switch b {
	case Healthy:
		return "Healthy"
	case BlackHole:
		return "BlackHole"
	case StallHandshake:
		return "StallHandshake"
	case RefuseAuth:
		return "RefuseAuth"
	case Bastion:
		return "Bastion"
	case StallingBastion:
		return "StallingBastion"
	case ForbiddingBastion:
		return "ForbiddingBastion"
	}
	return "Behaviour(" + strconv.Itoa(int(b)) + ")"
}

// exchangesKeys reports whether the behaviour gets as far as key exchange,
// and so needs a host key.
func (b Behaviour) exchangesKeys() bool {
	return b == Healthy || b == RefuseAuth || b >= Bastion
}

// Server is an in-process SSH server on 127.0.0.1 with a chosen Behaviour.
type Server struct {
	Host string // "127.0.0.1"
	Port int
	Addr string // "127.0.0.1:port"
	// HostKey is the key presented; nil for behaviours that never reach
	// key exchange.
	HostKey *Key
	// ClientKey is the key accepted (RefuseAuth refuses even this one); nil
	// for behaviours that never reach authentication.
	ClientKey *Key

	behaviour Behaviour
	config    *ssh.ServerConfig
	listener  net.Listener
	accepted  atomic.Int64
	// dials counts Bastion's outgoing connections, so a test can prove a
	// refused destination was never dialled; dialed names them.
	dials    atomic.Int64
	dialedMu sync.Mutex
	dialed   []string
	// channels and requests count the channels clients asked to open (of
	// any type, served or not) and their global requests, so a test can
	// prove a client opened nothing on a connection.
	channels atomic.Int64
	sessions atomic.Int64
	requests atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // every open connection, both directions
	closed bool

	wg        sync.WaitGroup // every goroutine the server started
	closeOnce sync.Once
}

// NewServer starts a server with the given behaviour and fresh ed25519 keys,
// and closes it when the test ends.
func NewServer(tb TB, b Behaviour) *Server {
	tb.Helper()
	return NewServerWithKeys(tb, b, nil, nil)
}

// NewServerWithKeys is NewServer with a chosen host key and client key; nil
// generates one. Sharing one host key across many servers keeps them cheap.
func NewServerWithKeys(tb TB, b Behaviour, hostKey, clientKey *Key) *Server {
	tb.Helper()
	if b < Healthy || b > ForbiddingBastion {
		tb.Fatalf("sshtest: unknown behaviour %v", b)
	}
	s := &Server{behaviour: b, conns: map[net.Conn]struct{}{}}
	if b.exchangesKeys() {
		if hostKey == nil {
			hostKey = NewKey(tb)
		}
		if clientKey == nil {
			clientKey = NewKey(tb)
		}
		s.HostKey, s.ClientKey = hostKey, clientKey
		s.config = s.serverConfig()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("sshtest: listen on 127.0.0.1: %v", err)
	}
	s.listener = ln
	s.Host, s.Port = "127.0.0.1", portOf(tb, ln)
	s.Addr = net.JoinHostPort(s.Host, strconv.Itoa(s.Port))

	s.wg.Add(1)
	go s.acceptLoop()
	tb.Cleanup(s.Close)
	return s
}

func (s *Server) serverConfig() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{ServerVersion: "SSH-2.0-fleet_sshtest"}
	if s.behaviour == RefuseAuth {
		refuse := errors.New("sshtest: authentication refused")
		cfg.PublicKeyCallback = func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, refuse }
		cfg.PasswordCallback = func(ssh.ConnMetadata, []byte) (*ssh.Permissions, error) { return nil, refuse }
		cfg.KeyboardInteractiveCallback = func(ssh.ConnMetadata, ssh.KeyboardInteractiveChallenge) (*ssh.Permissions, error) {
			return nil, refuse
		}
	} else {
		want := s.ClientKey.Public.Marshal()
		cfg.PublicKeyCallback = func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(key.Marshal(), want) {
				return nil, nil
			}
			return nil, errors.New("sshtest: unknown client key")
		}
	}
	cfg.AddHostKey(s.HostKey.Signer)
	return cfg
}

// Accepted returns how many TCP connections the server has accepted.
func (s *Server) Accepted() int {
	return int(s.accepted.Load())
}

// Dialed lists the host:port destinations a Bastion connected to, in
// order.
func (s *Server) Dialed() []string {
	s.dialedMu.Lock()
	defer s.dialedMu.Unlock()
	return append([]string(nil), s.dialed...)
}

// Channels returns how many channels ("session", "direct-tcpip", any
// type) clients have asked to open, whether or not they were served.
func (s *Server) Channels() int {
	return int(s.channels.Load())
}

// Sessions returns how many of those channels were "session" channels,
// which carry shells and remote commands.
func (s *Server) Sessions() int {
	return int(s.sessions.Load())
}

// GlobalRequests returns how many global requests clients have sent.
func (s *Server) GlobalRequests() int {
	return int(s.requests.Load())
}

// Open returns how many connections the server holds open, both
// directions; once it is 0, everything clients sent has been handled.
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops the server: it closes the listener and every open
// connection, and returns once all of the server's goroutines are done.
// It is idempotent, and cleanup calls it too.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.listener.Close()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
}

// track records an open connection so Close can close it; it reports false
// once the server is closed.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of descriptors and the like: back off rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.accepted.Add(1)
		if s.behaviour == StallingBastion {
			conn = &freezingConn{Conn: conn, done: make(chan struct{})}
		}
		if !s.track(conn) {
			conn.Close()
			return
		}
		if s.behaviour == BlackHole {
			// Held open in s.conns until Close; no goroutine needed.
			continue
		}
		s.wg.Add(1)
		go s.serveConn(conn)
	}
}

func (s *Server) serveConn(conn net.Conn) {
	defer s.wg.Done()
	defer s.untrack(conn)
	if s.behaviour == StallHandshake {
		stall(conn)
		return
	}

	sconn, chans, reqs, err := ssh.NewServerConn(conn, s.config)
	if err != nil {
		return
	}
	defer sconn.Close()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// No global requests are served (tcpip-forward etc.): each is
		// counted and refused.
		for req := range reqs {
			s.requests.Add(1)
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
	}()

	// connDone tells tunnels the SSH connection is gone, so they stop
	// waiting on a quiet upstream.
	connDone := make(chan struct{})
	defer close(connDone)
	for nc := range chans {
		s.channels.Add(1)
		if nc.ChannelType() == "session" {
			s.sessions.Add(1)
		}
		switch {
		case nc.ChannelType() == "session":
			s.wg.Add(1)
			go s.serveSession(nc)
		case nc.ChannelType() == "direct-tcpip" && s.behaviour == Bastion:
			s.wg.Add(1)
			go s.serveTunnel(nc, connDone)
		case nc.ChannelType() == "direct-tcpip" && s.behaviour == StallingBastion:
			if _, _, err := nc.Accept(); err == nil {
				if fc, ok := conn.(*freezingConn); ok {
					fc.freeze()
				}
			}
		case nc.ChannelType() == "direct-tcpip" && s.behaviour == ForbiddingBastion:
			_ = nc.Reject(ssh.Prohibited, "open failed")
		default:
			_ = nc.Reject(ssh.UnknownChannelType, "sshtest: channel type not served")
		}
	}
}

// stall answers with a banner, reads the client's, then sends nothing more.
func stall(conn net.Conn) {
	if _, err := io.WriteString(conn, "SSH-2.0-fleet_sshtest_stall\r\n"); err != nil {
		return
	}
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil {
		return
	}
	// Swallow the client's KEXINIT and anything else until Close.
	_, _ = io.Copy(io.Discard, r)
}

// serveSession finishes every command at once with exit status 0.
func (s *Server) serveSession(nc ssh.NewChannel) {
	defer s.wg.Done()
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	for req := range reqs {
		switch req.Type {
		case "exec", "shell":
			_ = req.Reply(true, nil)
			// The order OpenSSH uses: EOF, exit-status, close.
			_ = ch.CloseWrite()
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
			_ = ch.Close()
		case "env", "pty-req", "window-change":
			_ = req.Reply(true, nil)
		default:
			_ = req.Reply(false, nil)
		}
	}
	// reqs ends when the client acknowledges the close or the connection
	// drops, so nothing is left blocked on this channel.
	_ = ch.Close()
}

// directTCPIP is the payload of a "direct-tcpip" channel open (RFC 4254 7.2).
type directTCPIP struct {
	Host     string
	Port     uint32
	OrigHost string
	OrigPort uint32
}

// loopbackHost returns the address to dial for host if it is a loopback
// address; "localhost" is mapped to 127.0.0.1 so no resolver is consulted.
func loopbackHost(host string) (string, bool) {
	if strings.EqualFold(host, "localhost") {
		return "127.0.0.1", true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ip.String(), true
	}
	return "", false
}

func (s *Server) serveTunnel(nc ssh.NewChannel, connDone <-chan struct{}) {
	defer s.wg.Done()
	var req directTCPIP
	if err := ssh.Unmarshal(nc.ExtraData(), &req); err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, "sshtest: malformed direct-tcpip request")
		return
	}
	host, ok := loopbackHost(req.Host)
	if !ok {
		// Tests must never reach beyond this machine.
		_ = nc.Reject(ssh.Prohibited, fmt.Sprintf("sshtest: bastion only forwards to loopback, not %q", req.Host))
		return
	}
	if req.Port == 0 || req.Port > 65535 {
		_ = nc.Reject(ssh.ConnectionFailed, fmt.Sprintf("sshtest: bad port %d", req.Port))
		return
	}

	s.dials.Add(1)
	s.dialedMu.Lock()
	s.dialed = append(s.dialed, net.JoinHostPort(host, strconv.Itoa(int(req.Port))))
	s.dialedMu.Unlock()
	up, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(int(req.Port))), 5*time.Second)
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	if !s.track(up) {
		up.Close()
		_ = nc.Reject(ssh.ConnectionFailed, "sshtest: server closed")
		return
	}
	defer s.untrack(up)
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer ch.Close()

	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ssh.DiscardRequests(reqs)
	}()
	upDone := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(upDone)
		_, _ = io.Copy(ch, up)
		_ = ch.CloseWrite()
	}()
	_, _ = io.Copy(up, ch)
	if tcp, ok := up.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
	// The client is done sending; let the upstream finish its answer unless
	// the SSH connection itself has gone.
	select {
	case <-upDone:
	case <-connDone:
	}
}

// freezingConn is a connection that, once frozen, delivers nothing more to
// its reader until it is closed.
type freezingConn struct {
	net.Conn
	frozen    atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
}

func (c *freezingConn) freeze() { c.frozen.Store(true) }

func (c *freezingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.frozen.Load() {
		<-c.done
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *freezingConn) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// ClosedPort returns a loopback port with nothing listening on it, for
// "connection refused" tests. It stays so until the test ends: a socket
// bound to it, and never listening, keeps another test's server from
// taking it meanwhile.
func ClosedPort(tb TB) (host string, port int) {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("sshtest: socket: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		tb.Fatalf("sshtest: bind 127.0.0.1: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	in4, ok := sa.(*syscall.SockaddrInet4)
	if err != nil || !ok {
		_ = syscall.Close(fd)
		tb.Fatalf("sshtest: the bound port: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	return "127.0.0.1", in4.Port
}

// ClosedPortOn returns a port of loopback address host with nothing
// listening on it.
func ClosedPortOn(tb TB, host string) int {
	tb.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		tb.Fatalf("sshtest: listen on %s: %v", host, err)
	}
	port := portOf(tb, ln)
	ln.Close()
	return port
}

// PrivateLoopback is a loopback address of 127.0.0.0/8 other than
// 127.0.0.1, drawn at random, for a server a test starts in another
// process and cannot hand a listening socket to: no other test picks its
// ports there, so the one picked stays free until the server binds it.
func PrivateLoopback(tb TB) string {
	tb.Helper()
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	return fmt.Sprintf("127.%d.%d.%d", 100+int(b[0])%100, b[1], 1+int(b[2])%254)
}

// portOf is the TCP port a loopback listener was given.
func portOf(tb TB, ln net.Listener) int {
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		tb.Fatalf("sshtest: listener address %v is not TCP", ln.Addr())
	}
	return addr.Port
}
