package sshtest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// echoServer answers each line with itself, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

// roundTrip writes a line over c and waits up to wait for it to come back.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, wait time.Duration) error {
	t.Helper()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		t.Fatalf("echoed %q", line)
	}
	return err
}

func dialLink(t *testing.T, l *Link) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// A held direction keeps its bytes until the hold ends, for the
// connections it covers; a refused or black-holed new connection never
// reaches the backend; a reset ends the connections open.
func TestLinkFaults(t *testing.T) {
	t.Parallel()
	l := NewLink(t, echoServer(t))
	c, r := dialLink(t, l)
	if err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("healthy link: %v", err)
	}
	for _, d := range []Direction{Up, Down} {
		f := LinkFault{}
		f.Hold[d] = true
		l.Set(f)
		if err := roundTrip(t, c, r, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("held %s: the line came back (%v)", d, err)
		}
		l.Heal()
		// The held line arrives once healed, not lost.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("healed %s: %q, %v", d, line, err)
		}
		_ = c.SetReadDeadline(time.Time{})
	}

	// OnlyOpen: the open connection is held, a new one flows.
	l.Set(LinkFault{Hold: [2]bool{true, true}, OnlyOpen: true})
	if err := roundTrip(t, c, r, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("held open connection: the line came back (%v)", err)
	}
	c2, r2 := dialLink(t, l)
	if err := roundTrip(t, c2, r2, 5*time.Second); err != nil {
		t.Fatalf("a connection opened after an OnlyOpen hold: %v", err)
	}
	l.Heal()

	// A refusal is a reset: it reaches the dial itself when it comes
	// before the dialler looks (a busy machine), or the first read.
	l.Set(LinkFault{New: NewRefuse})
	if c3, err := net.Dial("tcp", l.Addr); err == nil {
		t.Cleanup(func() { _ = c3.Close() })
		if err := roundTrip(t, c3, bufio.NewReader(c3), 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a refused connection was not reset: %v", err)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a refused connection: %v", err)
	}
	l.Set(LinkFault{New: NewBlackHole})
	c4, r4 := dialLink(t, l)
	if err := roundTrip(t, c4, r4, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a black-holed connection: %v", err)
	}
	l.Heal()

	l.ResetOpen()
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r2.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after a reset the connection still reads: %v", err)
	}
}
