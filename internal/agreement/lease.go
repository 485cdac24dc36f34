package agreement

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The deployer's half: taking a host's lease, speaking to keep it (and the
// run's watchdog waiting), deciding, letting go.

// Host runs the agreement's scripts on one host: over the node's master
// connection, or over a new login (fresh), which works when the master's
// path is stuck.
type Host interface {
	// Command is an ssh running script on the host, not yet started.
	Command(ctx context.Context, script string, fresh bool) *exec.Cmd
	// Output runs script and returns what it printed (on failure, its
	// standard error too): its outcome is its exit status.
	Output(ctx context.Context, script string, fresh bool) (string, error)
}

// NewRun is a new run's id: the name of a node's deploy on its host.
func NewRun() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Busy says another holds the host's lock (or the guard: Holder is then
// an earlier run's actor, see GuardHolder) after the wait.
type Busy struct{ Holder string }

func (b *Busy) Error() string { return "the host's deploy lock is held by " + b.Holder }

// EndedWhileWaiting says the lock session ended while it waited for the
// lock: the host stopped answering, or dropped the connection. Stderr is
// what ssh said.
type EndedWhileWaiting struct{ Stderr string }

func (e *EndedWhileWaiting) Error() string {
	return "the connection to the host ended while waiting for its deploy lock: " + orNone(e.Stderr)
}

// EndedAtOnce says the lock session ended before it said anything: the
// script could not even open the lock (root's rights), or the connection
// ended. Stderr is what it said.
type EndedAtOnce struct{ Stderr string }

func (e *EndedAtOnce) Error() string { return "the lock session ended: " + orNone(e.Stderr) }

// Refused says the take script refused (it could not open its files).
type Refused struct{ Said string }

func (e *Refused) Error() string { return e.Said }

// Lease is a run's hold of a host's deploy lock: a session over the
// node's master that took it and keeps it while the deployer speaks, and,
// when that session's answers go quiet, a spare session over a new login
// that carries the words too.
type Lease struct {
	run    string
	host   Host
	timing Timing
	lock   *session

	mu    sync.Mutex
	watch bool // words say "w": the run's watchdog waits
	spare *session
	// replaced are the spare sessions a newer one replaced, ending: Release
	// waits for them.
	replaced sync.WaitGroup
	// spares counts spare sessions opened, for the log and tests.
	spares atomic.Int32
	// spareEvery is how long a spare has to answer before another
	// replaces it (speak's goroutine only).
	spareEvery time.Duration
	// retired is the last answer of the spares a newer one replaced (Unix
	// nanoseconds): Quiet counts from it too, so that replacing a spare
	// does not forget when the host last answered.
	retired atomic.Int64
	started time.Time
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// Take takes host's deploy lock for run, waiting up to wait for another
// run to let go of it (and for the actors of earlier runs, the guard), or
// until ctx ends. onWait is called with the holder once a wait for it has
// begun, and again now and then while it lasts. Held, the lease is kept
// (words, every Timing.WordEvery) until Release, whatever ctx does, so
// that an interrupted deploy still holds it while its record is made. The
// lines are what the host runs: current system, "container" or "bare",
// "systemd" or "nosystemd", the last system that passed its verdict there.
func Take(ctx context.Context, host Host, run, holder string, wait time.Duration, t Timing, onWait func(holder string)) (*Lease, []string, error) {
	s, err := startSession(context.WithoutCancel(ctx), host, takeScript(run, holder, max(int(wait/time.Second), 0), t), false)
	if err != nil {
		return nil, nil, err
	}
	line, err := s.next(ctx)
	if err != nil && ctx.Err() == nil {
		s.end()
		return nil, nil, &EndedAtOnce{Stderr: strings.TrimSpace(s.stderr.String())}
	}
	waited := false
	for err == nil {
		h, waiting := strings.CutPrefix(line, "wait")
		if !waiting {
			break
		}
		if onWait != nil {
			onWait(strings.TrimSpace(h))
		}
		waited = true
		line, err = s.next(ctx)
	}
	switch {
	case err != nil && ctx.Err() == nil && waited:
		s.end()
		return nil, nil, &EndedWhileWaiting{Stderr: strings.TrimSpace(s.stderr.String())}
	case err != nil:
		s.end()
		return nil, nil, err
	case line == "locked":
	default:
		s.end()
		if h, busy := strings.CutPrefix(line, "busy"); busy {
			return nil, nil, &Busy{Holder: strings.TrimSpace(h)}
		}
		return nil, nil, &Refused{Said: strings.TrimSpace(line + " " + s.stderr.String())}
	}
	var lines []string
	for {
		line, err := s.next(ctx)
		if err != nil {
			s.end()
			return nil, nil, fmt.Errorf("reading the host: %w", err)
		}
		if line == readEnd {
			break
		}
		lines = append(lines, line)
	}
	l := &Lease{run: run, host: host, timing: t, lock: s, started: time.Now(), spareEvery: t.SpareAfter(), quit: make(chan struct{}), done: make(chan struct{})}
	go l.speak()
	return l, lines, nil
}

// Run is the lease's run.
func (l *Lease) Run() string { return l.run }

// Lost reports whether the lease has ended: its session did (the
// connection it rode dropped, or the host ended the lease of a deployer
// it had not heard from).
func (l *Lease) Lost() bool { return l.lock.ended() }

// Watch makes every word from now on keep the run's watchdog waiting (w),
// or no longer (h): its clock then runs from the last word that did.
func (l *Lease) Watch(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watch = on
}

// Quiet is how long the host has answered no word, on any session (or,
// before its first answer, since the lease was taken).
func (l *Lease) Quiet() time.Duration {
	l.mu.Lock()
	sessions := []*session{l.lock, l.spare}
	l.mu.Unlock()
	last := max(l.started.UnixNano(), l.retired.Load())
	for _, s := range sessions {
		if s != nil {
			last = max(last, s.acked.Load())
		}
	}
	return time.Since(time.Unix(0, last))
}

// Spares is how many spare sessions the lease opened.
func (l *Lease) Spares() int { return int(l.spares.Load()) }

// speak says a word every Timing.WordEvery on the lock session and the
// spare, and opens a spare whenever the sessions that carry words have
// answered none for Timing.SpareAfter: a stalled connection is noticed by
// its answers long before ssh's keepalive gives up on it.
func (l *Lease) speak() {
	defer close(l.done)
	tick := time.NewTicker(l.timing.WordEvery())
	defer tick.Stop()
	for {
		l.say(l.word())
		l.spareIfQuiet()
		select {
		case <-l.quit:
			return
		case <-tick.C:
		}
	}
}

func (l *Lease) word() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.watch {
		return "w " + l.run
	}
	return "h " + l.run
}

// say sends line on every live session.
func (l *Lease) say(line string) {
	l.mu.Lock()
	sessions := []*session{l.lock, l.spare}
	l.mu.Unlock()
	for _, s := range sessions {
		if s != nil && !s.ended() {
			_ = s.say(line)
		}
	}
}

// spareIfQuiet opens a spare session when the sessions have been quiet for
// SpareAfter, and replaces it (ending the old one) when it has ended or has
// had its time to answer: SpareAfter, doubled at each replacement that
// brought no answer, up to a login's ConnectTimeout. A path that only
// stalls resumes with the logins already on it; a host cut off is not sent
// a login a second, to find them all at once when it is back (sshd's
// MaxStartups refuses logins beyond a few at a time).
func (l *Lease) spareIfQuiet() {
	after := l.timing.SpareAfter()
	if l.Quiet() < after {
		l.spareEvery = after
		return
	}
	l.mu.Lock()
	spare := l.spare
	l.mu.Unlock()
	if spare != nil && !spare.ended() && time.Since(spare.begun) < l.spareEvery {
		return
	}
	if spare != nil {
		l.spareEvery = min(2*l.spareEvery, askAtLeast)
	}
	s, err := startSession(context.Background(), l.host, spareScript(), true)
	if err != nil {
		return
	}
	l.spares.Add(1)
	l.mu.Lock()
	old := l.spare
	if old != nil {
		l.retired.Store(max(l.retired.Load(), old.acked.Load()))
	}
	l.spare = s
	l.mu.Unlock()
	if old != nil {
		l.replaced.Go(old.end)
	}
	_ = s.say(l.word())
}

// Decide asks the host to decide the run (DecisionConfirm or
// DecisionRollback) unless it is decided, over every session that carries
// words, and returns the decision that stands. It gives up when ctx ends,
// or when the host has answered nothing for HostGivesUp (it may have taken
// the request: Ask then tells).
func (l *Lease) Decide(ctx context.Context, decision string) (string, error) {
	word := "r " + l.run
	if decision == DecisionConfirm {
		word = "c " + l.run
	}
	l.say(word)
	asked := time.Now()
	resent := asked
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		l.mu.Lock()
		sessions := []*session{l.lock, l.spare}
		l.mu.Unlock()
		for _, s := range sessions {
			if s == nil {
				continue
			}
			if d, ok := s.decided(l.run); ok {
				return d, nil
			}
		}
		if time.Since(resent) >= l.timing.WordEvery() {
			// A spare opened since, or a session that was stuck, gets it
			// too: a decision is made once, however often it is asked.
			l.say(word)
			resent = time.Now()
		}
		if q := l.Quiet(); q > l.timing.HostGivesUp() && time.Since(asked) > l.timing.SpareAfter() {
			return "", fmt.Errorf("the host answered nothing for %s", q.Round(100*time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
	}
}

// Release lets the lease go: the words stop, the lock session's standard
// input closes and its script ends the lease; when that session is quiet
// (its path stuck), the spare says so too ("b"), so that the host lets go
// at once rather than after remote_exec_timeout.
func (l *Lease) Release() {
	l.stopped.Do(func() {
		close(l.quit)
		<-l.done
		l.mu.Lock()
		spare := l.spare
		l.mu.Unlock()
		if spare != nil && !spare.ended() {
			_ = spare.say("b " + l.run)
			spare.waitAck(500 * time.Millisecond)
		}
		var wg sync.WaitGroup
		wg.Go(l.lock.end)
		if spare != nil {
			wg.Go(spare.end)
		}
		wg.Wait()
		l.replaced.Wait()
	})
}

// session is a remote script that reads the deployer's lines on its
// standard input and prints lines back, until its standard input closes:
// the lock session, and the spares.
type session struct {
	cmd     *exec.Cmd
	kill    context.CancelFunc
	stdin   *os.File
	out     *os.File
	lines   chan string // what it prints, acknowledgements and decisions aside
	stderr  lockedBuffer
	exited  chan struct{}
	begun   time.Time
	acked   atomic.Int64 // when it last acknowledged a word, in Unix nanoseconds
	acks    chan struct{}
	mu      sync.Mutex // serialises writes to stdin
	once    sync.Once
	decMu   sync.Mutex
	decides map[string]string // run -> the decision it answered
}

// startSession starts script on host. Its context is ctx's values only:
// the session lasts until end.
func startSession(ctx context.Context, host Host, script string, fresh bool) (*session, error) {
	hctx, kill := context.WithCancel(context.WithoutCancel(ctx))
	s := &session{kill: kill, lines: make(chan string, 64), exited: make(chan struct{}), begun: time.Now(),
		acks: make(chan struct{}, 1), decides: map[string]string{}}
	s.cmd = host.Command(hctx, script, fresh)
	in, stdin, err := os.Pipe()
	if err != nil {
		kill()
		return nil, err
	}
	out, w, err := os.Pipe()
	if err != nil {
		kill()
		_ = in.Close()
		_ = stdin.Close()
		return nil, err
	}
	s.stdin, s.out = stdin, out
	s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr = in, w, &s.stderr
	err = s.cmd.Start()
	_ = in.Close()
	_ = w.Close()
	if err != nil {
		kill()
		_ = stdin.Close()
		_ = out.Close()
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "ack" {
				s.acked.Store(time.Now().UnixNano())
				select {
				case s.acks <- struct{}{}:
				default:
				}
				continue
			}
			if rest, ok := strings.CutPrefix(line, "decided "); ok {
				s.acked.Store(time.Now().UnixNano())
				if run, d, ok := strings.Cut(rest, " "); ok {
					s.decMu.Lock()
					s.decides[run] = d
					s.decMu.Unlock()
				}
				continue
			}
			select {
			case s.lines <- line:
			default: // nobody reads what a held lock prints any more
			}
		}
		close(s.lines)
	}()
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// next is the session's next line, or the error that ended it.
func (s *session) next(ctx context.Context) (string, error) {
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	select {
	case line, ok := <-s.lines:
		if !ok {
			<-s.exited
			return "", fmt.Errorf("the lock session ended: %s", orNone(strings.TrimSpace(s.stderr.String())))
		}
		return line, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// decided is the decision the session answered for run, if it did.
func (s *session) decided(run string) (string, bool) {
	s.decMu.Lock()
	defer s.decMu.Unlock()
	d, ok := s.decides[run]
	return d, ok
}

// say sends the host a line; a session whose ssh reads no more (its
// path stalled for long) is not waited for.
func (s *session) say(line string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.stdin.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := s.stdin.WriteString(line + "\n")
	return err
}

// waitAck waits up to d for the next acknowledgement.
func (s *session) waitAck(d time.Duration) {
	select {
	case <-s.acks:
	case <-s.exited:
	case <-time.After(d):
	}
}

// ended reports whether the session's ssh has ended.
func (s *session) ended() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// end closes standard input, which ends the script on the host; a session
// that does not end within half a second (the host stopped answering) is
// killed, which ends it on the host too.
func (s *session) end() {
	s.once.Do(func() {
		s.mu.Lock()
		_ = s.stdin.Close()
		s.mu.Unlock()
		select {
		case <-s.exited:
		case <-time.After(500 * time.Millisecond):
			s.kill()
			<-s.exited
		}
		s.kill()
		_ = s.out.Close()
		for range s.lines {
		}
	})
}

// lockedBuffer is a bytes.Buffer safe for the copying goroutine of
// os/exec and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	return s
}
