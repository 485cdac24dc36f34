//go:build unix

package deploy

import (
	"context"
	"os/exec"
	"syscall"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// command is a local command that ends, with every process it started,
// when ctx ends: it runs in a process group of its own, killed as a
// whole (nix-copy-closure's ssh, a ProxyCommand), and a terminal's Ctrl-C
// reaches the provider, which decides what an interrupt does, not the
// commands themselves.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	cmd.Env = shell.Environ()
	return cmd
}
