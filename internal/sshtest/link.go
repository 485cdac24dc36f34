package sshtest

import (
	"net"
	"strconv"
	"sync"
	"time"
)

// Direction is one way of a Link's traffic.
type Direction int

const (
	// Up is from the client (a deployer) to the backend (a host).
	Up Direction = iota
	// Down is from the backend to the client.
	Down
)

func (d Direction) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// NewConns is what a Link does with a connection opened while a fault
// holds.
type NewConns int

const (
	// NewForward carries new connections as the fault says for all.
	NewForward NewConns = iota
	// NewRefuse resets new connections at once, as a firewall that rejects.
	NewRefuse
	// NewBlackHole accepts new connections and never forwards them, as a path
	// that drops every packet: ssh waits for its ConnectTimeout.
	NewBlackHole
)

// LinkFault is the state of a Link's path. The zero value is a healthy
// link.
type LinkFault struct {
	// Hold holds the traffic of each direction: bytes are kept, not lost,
	// and delivered once the hold ends, as TCP delivers after a stall
	// (a path that stops forwarding, a VPN that hangs). A held direction
	// delivers no end of stream either.
	Hold [2]bool
	// OnlyOpen limits Hold to the connections open when the fault was
	// set: later ones flow, as when one flow's path stalls (a lost NAT
	// entry) and a new connection takes another.
	OnlyOpen bool
	// Delay is added to each chunk of either direction.
	Delay time.Duration
	// New is what becomes of connections opened from now on.
	New NewConns
}

// Link is a TCP path on its own loopback port in front of a backend,
// whose faults a test sets while connections run over it: one per party
// of a test (each deployer reaching a host by a path of its own), so one
// party's path can stall, slow, reset and heal, in each direction, while
// another's works.
type Link struct {
	Host string
	Port int
	Addr string

	backend  string
	listener net.Listener

	mu      sync.Mutex
	fault   LinkFault
	epoch   int64         // counts Set calls; a connection remembers the one it opened under
	setAt   int64         // the epoch of the fault in force
	changed chan struct{} // closed when the fault changes
	conns   map[*linkConn]struct{}
	closed  bool
	wg      sync.WaitGroup
	once    sync.Once
}

type linkConn struct {
	epoch  int64
	client net.Conn
	server net.Conn
}

// NewLink starts a healthy link to backend ("host:port"), closed when the
// test ends.
func NewLink(tb TB, backend string) *Link {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("sshtest: link listen: %v", err)
	}
	port := portOf(tb, ln)
	l := &Link{Host: "127.0.0.1", Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		backend: backend, listener: ln, changed: make(chan struct{}), conns: map[*linkConn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	tb.Cleanup(l.Close)
	return l
}

// Set puts f in force from now on, for the connections open now and
// those to come (see LinkFault.OnlyOpen).
func (l *Link) Set(f LinkFault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	l.fault, l.setAt = f, l.epoch
	close(l.changed)
	l.changed = make(chan struct{})
}

// Heal ends every fault: held bytes are delivered.
func (l *Link) Heal() { l.Set(LinkFault{}) }

// Fault is the fault in force.
func (l *Link) Fault() LinkFault {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fault
}

// ResetOpen resets every connection open now, both ends, as a path that
// lost its state answers with RST: bytes held are lost.
func (l *Link) ResetOpen() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		resetConn(c.client)
		resetConn(c.server)
	}
}

// Open is how many connections the link carries now.
func (l *Link) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Close stops the link, ends its connections and waits for its goroutines.
func (l *Link) Close() {
	l.once.Do(func() {
		_ = l.listener.Close()
		l.mu.Lock()
		l.closed = true
		for c := range l.conns {
			_ = c.client.Close()
			if c.server != nil {
				_ = c.server.Close()
			}
		}
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
		l.wg.Wait()
	})
}

func resetConn(c net.Conn) {
	if c == nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.listener.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.serve(c)
		}()
	}
}

func (l *Link) serve(client net.Conn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = client.Close()
		return
	}
	mode := l.fault.New
	lc := &linkConn{epoch: l.epoch, client: client}
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.conns, lc)
		l.mu.Unlock()
		_ = client.Close()
		if lc.server != nil {
			_ = lc.server.Close()
		}
	}()
	switch mode {
	case NewRefuse:
		resetConn(client)
		return
	case NewBlackHole:
		buf := make([]byte, 4096)
		for {
			if _, err := client.Read(buf); err != nil {
				return
			}
		}
	case NewForward:
	}
	server, err := net.Dial("tcp", l.backend)
	if err != nil {
		return
	}
	l.mu.Lock()
	lc.server = server
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return
	}
	done := make(chan struct{}, 2)
	go func() { l.pipe(lc, Up, server, client); done <- struct{}{} }()
	go func() { l.pipe(lc, Down, client, server); done <- struct{}{} }()
	<-done
	<-done
}

// pipe copies src to dst, each chunk once the direction is not held for
// this connection, and the end of the stream likewise.
func (l *Link) pipe(lc *linkConn, d Direction, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !l.pass(lc, d) {
			break
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	// The other way may still carry what is held for it; the connection
	// ends once both ways have.
}

// pass waits while direction d of lc is held, then for the delay; false
// once the link closed.
func (l *Link) pass(lc *linkConn, d Direction) bool {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return false
		}
		f, setAt, changed := l.fault, l.setAt, l.changed
		l.mu.Unlock()
		held := f.Hold[d] && (!f.OnlyOpen || lc.epoch < setAt)
		if !held {
			if f.Delay > 0 {
				t := time.NewTimer(f.Delay)
				select {
				case <-t.C:
				case <-changed:
					t.Stop()
				}
			}
			return true
		}
		<-changed
	}
}
