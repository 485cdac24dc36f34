package sshtest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// GateMode is what a Gate does with a new connection.
type GateMode int32

const (
	// GateOpen forwards connections to the backend.
	GateOpen GateMode = iota
	// GateReset accepts connections and resets them at once, as a host whose
	// SSH service is gone does.
	GateReset
	// GateBlackHole accepts connections and never answers, as a firewall
	// that drops packets after the handshake does.
	GateBlackHole
)

// Gate is a TCP forwarder on a fixed loopback address in front of a backend.
// Switching its mode breaks and mends the path to a host without changing the
// host's address, so a test can take a host down and bring it back.
type Gate struct {
	Host string
	Port int
	Addr string

	backend  atomic.Value // string: "host:port"
	mode     atomic.Int32
	stalled  atomic.Bool
	modeFunc func() GateMode // nil: mode decides
	listener net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	once   sync.Once
}

// GateOption changes how NewGate sets up a gate.
type GateOption func(*Gate)

// WithModeFunc makes the gate ask f, for each new connection, what to do
// with it; what SetMode set is then ignored for new connections (SetMode
// still closes open ones). Connections already forwarded are left alone, as
// a firewall that starts rejecting new connections leaves established ones,
// so a host can cut itself off (f reads a file the host writes) while the
// session that did it goes on. f runs on the gate's goroutines.
func WithModeFunc(f func() GateMode) GateOption {
	return func(g *Gate) { g.modeFunc = f }
}

// NewGate starts an open gate to backend ("host:port"), closed when the test
// ends.
func NewGate(tb TB, backend string, opts ...GateOption) *Gate {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("sshtest: gate listen: %v", err)
	}
	port := portOf(tb, ln)
	g := &Gate{Host: "127.0.0.1", Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		listener: ln, conns: map[net.Conn]struct{}{}}
	g.backend.Store(backend)
	for _, o := range opts {
		o(g)
	}
	g.wg.Add(1)
	go g.accept()
	tb.Cleanup(g.Close)
	return g
}

// SetMode changes what the gate does with connections from now on; open
// connections are closed, so an established path breaks too.
func (g *Gate) SetMode(m GateMode) {
	g.mode.Store(int32(m))
	g.DropAll()
}

// DropAll closes every connection the gate forwards, as a host that goes
// down drops its peers; what it does with new ones is unchanged.
func (g *Gate) DropAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for c := range g.conns {
		_ = c.Close()
	}
}

// SetBackend sends new connections to backend ("host:port") from now on;
// open ones stay where they are: another host answering at the gate's
// address, as after a reinstall or in an interception.
func (g *Gate) SetBackend(backend string) { g.backend.Store(backend) }

// Stall stops (true) or resumes (false) the traffic of every connection
// the gate forwards, without closing any: a peer that stops answering, as
// a host that froze or a network path that started dropping packets.
func (g *Gate) Stall(on bool) { g.stalled.Store(on) }

// waitStall waits while the gate is stalled; false when the gate closed.
func (g *Gate) waitStall() bool {
	for g.stalled.Load() {
		g.mu.Lock()
		closed := g.closed
		g.mu.Unlock()
		if closed {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Close stops the gate and waits for its goroutines.
func (g *Gate) Close() {
	g.once.Do(func() {
		_ = g.listener.Close()
		g.mu.Lock()
		g.closed = true
		for c := range g.conns {
			_ = c.Close()
		}
		g.mu.Unlock()
		g.wg.Wait()
	})
}

func (g *Gate) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		_ = c.Close()
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *Gate) untrack(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.conns, c)
	_ = c.Close()
}

func (g *Gate) accept() {
	defer g.wg.Done()
	for {
		c, err := g.listener.Accept()
		if err != nil {
			return
		}
		if !g.track(c) {
			continue
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer g.untrack(c)
			g.serve(c)
		}()
	}
}

func (g *Gate) serve(c net.Conn) {
	mode := GateMode(g.mode.Load())
	if g.modeFunc != nil {
		mode = g.modeFunc()
	}
	switch mode {
	case GateReset:
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST, not FIN
		}
		return
	case GateBlackHole:
		_, _ = io.Copy(io.Discard, c) // until the gate or the client closes it
		return
	case GateOpen:
	}
	backend, _ := g.backend.Load().(string)
	b, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	if !g.track(b) {
		return
	}
	defer g.untrack(b)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && (!g.waitStall() || writeAll(dst, buf[:n]) != nil) {
				break
			}
			if err != nil {
				break
			}
		}
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(b, c)
	go pipe(c, b)
	<-done
	<-done
}

func writeAll(w io.Writer, b []byte) error {
	_, err := w.Write(b) // a net.Conn writes all of b or fails
	return err
}
