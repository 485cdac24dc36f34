//go:build !unix

package deploy

import (
	"context"
	"os/exec"
)

// command is a local command that ends when ctx ends.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = waitDelay
	return cmd
}
