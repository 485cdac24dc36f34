package deploy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// deployment names the deployment's record of its keys on the host.
	deployment string
	cmd        *exec.Cmd
	stdin      *os.File
	errFile    *os.File
	ended      sync.Once
	closed     sync.Once
}

// sessionEnd is what the session's command prints after the read, before
// it waits.
const sessionEnd = "fleet-session-read"

// OpenSession logs in to node s, reads its current system and the key it
// showed (a key other than its pin or recorded key is refused with both
// named), and keeps the login for Preview. The session's control socket
// and files are in the process's session directory (sessionDir), so that
// they outlive the deployer that opened it; Close removes them. ctx
// bounds the login and the read only, and so does a deadline of their
// own: ConnectTimeout for the login and remote_exec_timeout for the read,
// so that a host that takes logins and then hangs holds no probe slot.
func (d *Deployer) OpenSession(ctx context.Context, s Settings) (*Session, error) {
	bound := connectTimeoutSeconds*time.Second + d.Transport.remoteExecTimeout()
	ctx, cancel := context.WithTimeoutCause(ctx, bound, fmt.Errorf("the host did not answer within %s (ConnectTimeout %ds, then remote_exec_timeout %s)",
		bound, connectTimeoutSeconds, d.Transport.remoteExecTimeout()))
	defer cancel()
	dir, err := sessionDir()
	if err != nil {
		return nil, err
	}
	t := *d.Transport
	t.ControlDir = dir
	c, err := t.Open(ctx, s)
	if err != nil {
		return nil, err
	}
	// A socket of its own: two sessions to one host and user (two
	// deployments of one host) must not share a master.
	if c.control, err = pathOption("ControlPath", filepath.Join(dir, fmt.Sprintf("s%d", sessionCount.Add(1))), ""); err != nil {
		c.Close()
		return nil, err
	}
	sess := &Session{conn: c, deployment: d.Options.Deployment}
	fail := func(err error) (*Session, error) {
		sess.Close()
		return nil, err
	}
	args := c.recording(c.args("ControlMaster=yes", c.control, "ControlPersist=no"))
	script := remote(agreement.ReadCurrentScript + "\necho " + sessionEnd + "\n" + waitForEOF)
	// Not ctx: the session lives on after the read; Close ends it.
	sess.cmd = t.command(context.Background(), t.ssh(), append(args, "--", script)...)
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
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// ctx's deadline, or its end: the file's deadline may come a
			// moment before ctx is done.
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, err
	}
	return nil, errors.New("ended before the host was read")
}

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
			_ = os.Remove(s.errFile.Name())
		}
		s.conn.Close()
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

// sessionDir is the provider process's directory for its sessions'
// sockets and temporary files, made once (0700, a name no one could have
// taken first, holding the process's pid). A session closed removes its
// files; a process that ends with sessions open (a refresh no plan
// followed) cannot, so making the directory removes those of processes
// that have ended.
func sessionDir() (string, error) {
	sessionDirOnce.Do(func() {
		const pattern = "fsshs"
		base, err := controlBase(pattern)
		if err != nil {
			sessionDirErr = err
			return
		}
		pruneEndedDirs(base, pattern)
		if sessionDirPath, sessionDirErr = os.MkdirTemp(base, pattern); sessionDirErr == nil {
			sessionDirErr = os.WriteFile(filepath.Join(sessionDirPath, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600)
		}
	})
	return sessionDirPath, sessionDirErr
}

var (
	sessionDirOnce sync.Once
	sessionDirPath string
	sessionDirErr  error
	sessionCount   atomic.Int64
)

// pruneEndedDirs removes the directories named pattern* (session and
// control directories) that this user's ended processes left in base:
// each names its process in its file pid.
func pruneEndedDirs(base, pattern string) {
	dirs, _ := filepath.Glob(filepath.Join(base, pattern+"*"))
	for _, dir := range dirs {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || perr != nil || pid <= 0 {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(dir)
		}
	}
}

// sessionCloseWait bounds how long Close waits for a session to end.
const sessionCloseWait = 5 * time.Second

func orStr(s, def string) string {
	if strings.TrimSpace(s) != "" {
		return s
	}
	return def
}
