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
	"syscall"
	"time"
)

// Session is one login to a node, kept from its read to the plan's
// questions about it (Preview): the ssh that logged in is the node's
// master connection, other commands ride it, and its own command, once it
// has printed what a read finds, waits for its standard input to close.
// A plan that reads a node and then previews its switch logs in once.
//
// The session needs no goroutine while it waits: its ssh's streams are
// files. When the process holding it ends (the provider at the end of a
// walk), the standard input closes and the session ends on the host.
type Session struct {
	Current Current
	conn    *Conn
	cmd     *exec.Cmd
	stdin   *os.File
	errFile *os.File
	dir     string // the control directory it made; removed by Close
	ended   sync.Once
	closed  sync.Once
}

// sessionEnd is what the session's command prints after the read, before
// it waits.
const sessionEnd = "fleet-session-read"

// OpenSession logs in to node s, reads its current system as ReadCurrent
// does and keeps the login for Preview. The session's control socket is
// in a private directory of its own, so that it outlives the deployer
// that opened it; Close removes it. ctx bounds the login and the read
// only.
func (d *Deployer) OpenSession(ctx context.Context, s Settings) (*Session, error) {
	dir, err := NewControlDir()
	if err != nil {
		return nil, err
	}
	t := *d.Transport
	t.ControlDir = dir
	c, err := t.Open(ctx, s)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	sess := &Session{conn: c, dir: dir}
	fail := func(err error) (*Session, error) {
		sess.Close()
		return nil, err
	}
	args := c.recording(c.args("ControlMaster=yes", "ControlPath="+c.control, "ControlPersist=no"))
	script := remote(readCurrentScript + "\necho " + sessionEnd + "\nexec cat >/dev/null")
	// Not ctx: the session lives on after the read; Close ends it.
	sess.cmd = t.command(context.Background(), t.ssh(), append(args, "--", script)...)
	sess.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var in, out, w *os.File
	if in, sess.stdin, err = os.Pipe(); err != nil {
		return fail(err)
	}
	if out, w, err = os.Pipe(); err != nil {
		_ = in.Close()
		return fail(err)
	}
	if sess.errFile, err = os.CreateTemp(dir, "session-*"); err != nil {
		_ = in.Close()
		_ = out.Close()
		_ = w.Close()
		return fail(err)
	}
	sess.cmd.Stdin, sess.cmd.Stdout, sess.cmd.Stderr = in, w, sess.errFile
	err = sess.cmd.Start()
	_ = in.Close()
	_ = w.Close()
	if err != nil {
		sess.cmd = nil
		_ = out.Close()
		return fail(err)
	}
	lines, err := readUntil(ctx, out, sessionEnd)
	_ = out.Close()
	if err != nil {
		if ctx.Err() != nil {
			// Interrupted: the login is not waited for.
			_ = syscall.Kill(-sess.cmd.Process.Pid, syscall.SIGKILL)
			return fail(fmt.Errorf("%s before the host was read", cause(ctx)))
		}
		sess.end() // the ssh has ended: its error output is complete
		defer sess.Close()
		b, _ := os.ReadFile(sess.errFile.Name())
		_, msg := exitOf(sess.waitErr(), string(b))
		if hostKeyRefused(msg) {
			msg, hint, _ := d.hostKeyMismatch(ctx, c, s)
			return nil, fmt.Errorf("%s. Fix: %s", msg, hint)
		}
		return nil, errors.New(orStr(msg, "the login ended before the host was read"))
	}
	sess.Current = parseCurrent(strings.Join(lines, "\n"))
	sess.Current.HostKey = c.SeenKey(ctx)
	return sess, nil
}

// readUntil reads lines from f until one is end, ctx ends, or f does.
func readUntil(ctx context.Context, f *os.File, end string) ([]string, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = f.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })
	defer stop()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == end {
			return lines, nil
		}
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("ended before the host was read")
}

// Conn is the session's connection: commands over it ride its login.
func (s *Session) Conn() *Conn { return s.conn }

// waitErr is how the session's ssh ended, once Close has waited for it.
func (s *Session) waitErr() error {
	if s.cmd == nil || s.cmd.ProcessState == nil || s.cmd.ProcessState.Success() {
		return nil
	}
	return &exec.ExitError{ProcessState: s.cmd.ProcessState}
}

// Close ends the session: its command ends when its standard input
// closes, and the master once the commands riding it have ended. A
// session that does not end within a few seconds is killed.
func (s *Session) Close() {
	s.end()
	s.closed.Do(func() {
		if s.errFile != nil {
			_ = s.errFile.Close()
		}
		s.conn.Close()
		_ = os.RemoveAll(s.dir)
	})
}

// end ends the session's ssh and waits for it, keeping its files.
func (s *Session) end() {
	s.ended.Do(func() {
		if s.stdin != nil {
			_ = s.stdin.Close()
		}
		if s.cmd != nil {
			done := make(chan struct{})
			timer := time.AfterFunc(sessionCloseWait, func() {
				_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			})
			go func() {
				_ = s.cmd.Wait()
				close(done)
			}()
			<-done
			timer.Stop()
		}
	})
}

// sessionCloseWait bounds how long Close waits for a session to end.
const sessionCloseWait = 5 * time.Second

func orStr(s, def string) string {
	if strings.TrimSpace(s) != "" {
		return s
	}
	return def
}
