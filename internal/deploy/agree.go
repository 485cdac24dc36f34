package deploy

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
)

// The deploy's side of the host agreement (package agreement): the node's
// connection as the agreement reaches the host, the deployment's clocks,
// and what a take's outcome means for the node.

// host is a node's connection, as the agreement runs its scripts.
type host struct{ c *Conn }

func (h host) Command(ctx context.Context, script string, fresh bool) *exec.Cmd {
	if fresh {
		return h.c.FreshCommand(ctx, script)
	}
	return h.c.Command(ctx, script)
}

func (h host) Output(ctx context.Context, script string, fresh bool) (string, error) {
	return output(h.Command(ctx, script, fresh))
}

// timing is the agreement's clocks, from the deployment's settings.
func (d *Deployer) timing() agreement.Timing {
	return agreement.Timing{Confirm: d.confirmTimeout(), Lease: d.Transport.remoteExecTimeout(), Activation: d.activationTimeout()}
}

// takeLock takes the host's deploy lock for a new run, waiting up to wait
// (lock_timeout) for another deployment to let go of it, or until ctx ends.
// onWait, when not nil, is called once another deployment is found to
// hold the lock and the wait has begun. It returns the lease and what the
// host runs (see agreement.Take).
func (d *Deployer) takeLock(ctx context.Context, c *Conn, wait time.Duration, onWait func()) (*agreement.Lease, []string, error) {
	var noted time.Time
	l, lines, err := agreement.Take(ctx, host{c}, agreement.NewRun(), d.Options.Holder, wait, d.timing(), func(holder string) {
		if time.Since(noted) < lockWaitNoteEvery {
			return
		}
		noted = time.Now()
		d.note(c.s.Name, StepLock, "waiting for the host's deploy lock, held by %s (up to %s)", orNone(holder), wait)
		if onWait != nil {
			onWait()
		}
	})
	var (
		busy    *agreement.Busy
		ended   *agreement.EndedWhileWaiting
		atOnce  *agreement.EndedAtOnce
		refused *agreement.Refused
	)
	switch {
	case err == nil:
		return l, lines, nil
	case ctx.Err() != nil:
		return nil, nil, ctx.Err()
	case errors.As(err, &atOnce):
		// The script ended before its first line: it could not even
		// open the lock, which is what root's rights are needed for.
		return nil, nil, c.rightsFailure(errors.New("the lock session ended: " + orNone(atOnce.Stderr)))
	case errors.As(err, &ended):
		return nil, nil, fail(255, "LockFailed", fmt.Sprintf("the connection to the host ended while this deployment waited for its deploy lock: the host stopped answering for remote_exec_timeout (%s), or dropped the connection%s",
			d.Transport.remoteExecTimeout(), said(ended.Stderr)), "check the host; the next apply retries this node")
	case errors.As(err, &busy):
		hint := "another deployment of this host is running: retry once it ends, or give this deployment a lock_timeout long enough to wait for it"
		if agreement.GuardHolder(busy.Holder) {
			// No deployment holds the lock: an activation or a watchdog
			// of one that stopped before they ended (interrupted, or
			// gone), which end within confirm_timeout of that deploy's
			// last word once the activation has.
			hint = "it ends once that activation has ended and its deployer has confirmed it or said nothing for its verdict.confirm_timeout: retry then, or give this deployment a lock_timeout at least that long"
		}
		message := fmt.Sprintf("the host's deploy lock is held by %s and was not released within lock_timeout (%s)", orNone(busy.Holder), wait)
		if agreement.GuardHolder(busy.Holder) {
			message = fmt.Sprintf("no deployment holds the host's deploy lock, but %s, did not end within lock_timeout (%s): the newest run's directory under %s says what it is doing",
				busy.Holder, wait, agreement.StateDir)
		}
		return nil, nil, &failure{exit: 3, reason: "DeployLockBusy", message: message, hint: hint}
	case errors.As(err, &refused):
		return nil, nil, fail(1, "LockFailed", "cannot take the host's deploy lock: "+refused.Said, "")
	}
	return nil, nil, fail(1, "ReadFailed", "cannot read the current system: "+err.Error(), "")
}

// lockWaitNoteEvery is how often the log says who holds the lock a node
// waits for.
const lockWaitNoteEvery = 30 * time.Second

// fenced says whether a command's output says the host refused it (the
// run's lease had ended), and why.
func fenced(exit int, out string) (string, bool) {
	if exit != agreement.FencedExit {
		return "", false
	}
	_, why, ok := strings.Cut(out, agreement.FencedMarker)
	if !ok {
		return "", false
	}
	why, _, _ = strings.Cut(why, "\n")
	return strings.TrimSpace(why), true
}

// leaseLost is the failure of an action the host refused: whatever the
// deploy did not do, it was not done by it.
func leaseLost(what, why, leaves string) *failure {
	return fail(agreement.FencedExit, "LeaseLost", fmt.Sprintf("the host refused %s: %s; %s", what, why, leaves),
		"the lock session ended first: its connection dropped or was reset, or the host heard nothing from this deployer for remote_exec_timeout, or another deployment took its deploy lock: the next apply retries this node")
}

// errHostSilent ends a step whose host has answered no word for
// agreement.Timing.HostGivesUp.
var errHostSilent = errors.New("the host stopped answering")
