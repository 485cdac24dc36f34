package deploy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The deployer speaks to a host it deploys: from the moment it holds the
// host's deploy lock until it lets go, it sends a word (a line) every
// wordEvery, and the host acknowledges each. A word keeps the lock's lease
// (lockScript); a word naming an activation's run keeps that run's
// watchdog waiting (watchdogScript) while the deployer judges it, so a
// verdict that takes its time is not undone for lateness, and a host cut
// off from the deployer still switches itself back confirm_timeout after
// its last word. Acknowledgements tell the deployer in turn when the host
// stopped answering: once it has not for confirm_timeout, no confirmation
// could reach it in time, and the node's outcome is known.

// hostSession is a remote command that reads the deployer's lines on its
// standard input and prints lines back, until its standard input closes:
// the deploy lock's session, and those that only pass words on.
type hostSession struct {
	cmd    *exec.Cmd
	kill   context.CancelFunc
	stdin  *os.File
	out    *os.File
	lines  chan string // what it prints, acknowledgements aside
	stderr lockedBuffer
	exited chan struct{}
	acked  atomic.Int64 // when it last acknowledged a word, in Unix nanoseconds
	mu     sync.Mutex   // serialises writes to stdin
	once   sync.Once
}

// startHostSession starts script on the host with command (a Conn's
// Command or FreshCommand). Its context is ctx's values only: the session
// lasts until end.
func startHostSession(ctx context.Context, command func(context.Context, string) *exec.Cmd, script string) (*hostSession, error) {
	hctx, kill := context.WithCancel(context.WithoutCancel(ctx))
	h := &hostSession{kill: kill, lines: make(chan string, 64), exited: make(chan struct{})}
	h.cmd = command(hctx, script)
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
	h.stdin, h.out = stdin, out
	h.cmd.Stdin, h.cmd.Stdout, h.cmd.Stderr = in, w, &h.stderr
	err = h.cmd.Start()
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
				h.acked.Store(time.Now().UnixNano())
				continue
			}
			select {
			case h.lines <- line:
			default: // nobody reads what a held lock prints any more
			}
		}
		close(h.lines)
	}()
	go func() {
		_ = h.cmd.Wait()
		close(h.exited)
	}()
	return h, nil
}

// next is the session's next line, or the error that ended it.
func (h *hostSession) next(ctx context.Context) (string, error) {
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	select {
	case line, ok := <-h.lines:
		if !ok {
			<-h.exited
			return "", fmt.Errorf("the lock session ended: %s", orNone(strings.TrimSpace(h.stderr.String())))
		}
		return line, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// say sends the host a line.
func (h *hostSession) say(line string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.stdin.WriteString(line + "\n")
	return err
}

// ended reports whether the session's ssh has ended.
func (h *hostSession) ended() bool {
	select {
	case <-h.exited:
		return true
	default:
		return false
	}
}

// end closes standard input, which ends the script on the host; a session
// that does not end within half a second (the host stopped answering) is
// killed, which ends it on the host too.
func (h *hostSession) end() {
	h.once.Do(func() {
		h.mu.Lock()
		_ = h.stdin.Close()
		h.mu.Unlock()
		select {
		case <-h.exited:
		case <-time.After(500 * time.Millisecond):
			h.kill()
			<-h.exited
		}
		h.kill()
		_ = h.out.Close()
		for range h.lines {
		}
	})
}

// words is what the deployer says to one host, every wordEvery, over the
// lock's session, or, once that has ended (the connection it rode
// dropped) while an activation is being judged, over a new login that
// passes words on (wordScript).
type words struct {
	c       *Conn
	lock    *hostSession
	started time.Time
	mu      sync.Mutex
	run     string // the activation named, "" for none
	spare   *hostSession
	ctx     context.Context
	cancel  context.CancelFunc
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// start begins speaking over lock, every every.
func (w *words) start(c *Conn, lock *hostSession, every time.Duration) {
	w.c, w.lock, w.started = c, lock, time.Now()
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.quit, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			w.say()
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
		}
	}()
}

// speakFor names run's activation in every word from now on: its watchdog
// then waits while the deployer judges it.
func (w *words) speakFor(run string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.run = run
}

// hush stops naming an activation: its watchdog's clock runs from the
// last word that named it.
func (w *words) hush() { w.speakFor("") }

func (w *words) say() {
	w.mu.Lock()
	run := w.run
	w.mu.Unlock()
	word := "h"
	if run != "" {
		word += " " + run
	}
	s := w.lock
	if s.ended() {
		if run == "" {
			return // the lease went with the session; nothing waits for a word
		}
		if w.spare == nil || w.spare.ended() {
			if w.spare != nil {
				w.spare.end()
			}
			sp, err := startHostSession(w.ctx, w.c.FreshCommand, wordScript())
			if err != nil {
				return
			}
			w.mu.Lock()
			w.spare = sp
			w.mu.Unlock()
		}
		s = w.spare
	}
	_ = s.say(word)
}

// quiet is how long the host has not acknowledged a word (or, before its
// first, since the lock was taken).
func (w *words) quiet() time.Duration {
	last := w.started.UnixNano()
	w.mu.Lock()
	sessions := []*hostSession{w.lock, w.spare}
	w.mu.Unlock()
	for _, s := range sessions {
		if s != nil {
			last = max(last, s.acked.Load())
		}
	}
	return time.Since(time.Unix(0, last))
}

// lost reports whether the lock's session has ended while the lock was
// meant to be held: the connection dropped, or the host ended the lease.
func (w *words) lost() bool { return w.lock != nil && w.lock.ended() }

// stop ends the speaking, and the spare session if one was opened.
func (w *words) stop() {
	if w.quit == nil {
		return
	}
	w.stopped.Do(func() {
		close(w.quit)
		w.cancel()
		<-w.done
		if w.spare != nil {
			w.spare.end()
		}
	})
}

// errHostSilent ends a step whose host has not acknowledged a word for
// longer than confirm_timeout.
var errHostSilent = errors.New("the host stopped answering")

// wordEvery is how often the deployer speaks to a host: a few times per
// confirm_timeout, at least once a second.
func (d *Deployer) wordEvery() time.Duration {
	return min(max(d.confirmTimeout()/4, 100*time.Millisecond), time.Second)
}
