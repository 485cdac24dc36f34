package health

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// Host is where a node's checks run.
type Host interface {
	// RunScript runs a shell script (given on standard input) and returns
	// its standard output.
	RunScript(ctx context.Context, script string) (string, error)
	// Dial connects from the node's network position.
	Dial(ctx context.Context, network, addr string) (net.Conn, error)
}

// LocalHost runs checks on the machine the provider runs on.
type LocalHost struct {
	// Shell is the command reading the script on standard input;
	// /bin/sh -s when empty. Tests prefix it to enter a mount namespace.
	Shell []string
}

// RunScript implements Host. The shell gets its own process group, which
// is killed when ctx ends; probes the script left running in the
// background (hung in the kernel, say) are not in its way: they write to
// files, not to the shell's output.
func (h LocalHost) RunScript(ctx context.Context, script string) (string, error) {
	argv := h.Shell
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-s"}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(script)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String(), ctx.Err()
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", argv[0], err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// Dial implements Host.
func (LocalHost) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// sshHost runs checks over one SSH connection: the script in one session,
// dial checks as forwarded channels.
type sshHost struct {
	client   *sshdial.Client
	counters *Counters
}

func (h sshHost) RunScript(ctx context.Context, script string) (string, error) {
	s, err := h.client.NewSession()
	if err != nil {
		return "", fmt.Errorf("open a session: %w", err)
	}
	h.counters.sessions.Add(1)
	defer s.Close()
	var out, errOut bytes.Buffer
	s.Stdin = strings.NewReader(script)
	s.Stdout, s.Stderr = &out, &errOut
	var runErr error
	done := make(chan struct{})
	go func() { runErr = s.Run("sh -s"); close(done) }()
	select {
	case <-done:
		err = runErr
	case <-ctx.Done():
		// Closing the connection ends the session (with an error whose
		// cause is ctx's); the caller closes it again, harmlessly.
		_ = h.client.Close()
		<-done
		return out.String(), ctx.Err()
	}
	if err != nil {
		return out.String(), fmt.Errorf("run the checks: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

func (h sshHost) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	h.counters.channels.Add(1)
	return h.client.DialContext(ctx, network, addr)
}
