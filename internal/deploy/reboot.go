package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// RebootPolicy says when a switch reboots its host into the new system.
type RebootPolicy string

const (
	// RebootNever: the new system is activated live (a change of kernel,
	// initrd or modules fails the verdict with exit 100, unless
	// verdict.allow_reboot_required).
	RebootNever RebootPolicy = "never"
	// RebootWhenRequired: a new system whose kernel, initrd or kernel
	// modules differ from the booted system's is booted into instead.
	RebootWhenRequired RebootPolicy = "when-required"
	// RebootAlways: every new system is booted into.
	RebootAlways RebootPolicy = "always"
)

// CondRebooted is the condition of a node whose deploy rebooted its host
// (or meant to): True once it came back booted into the new system. Only
// such a node has it.
const CondRebooted Condition = "Rebooted"

// The steps of a deploy that reboots its host.
const (
	StepRebootCheck StepName = "reboot-check"
	StepReboot      StepName = "reboot"
	StepReturn      StepName = "return"
	StepBootVerdict StepName = "boot-verdict"
)

// defaultRebootTimeout bounds how long a host may take to come back.
const defaultRebootTimeout = 10 * time.Minute

func (d *Deployer) rebootTimeout() time.Duration {
	if d.Options.RebootTimeout > 0 {
		return d.Options.RebootTimeout
	}
	return defaultRebootTimeout
}

// rebootSteps are the steps after the reboot check of a node booted into
// its new system: the profile and the boot entry (the previous system
// kept as the fallback entry), the reboot, the wait for the host's
// return, and the verdict over a new login on the booted host; then the
// rest (the after-verdict keys).
// A node with keys gets its before-activation keys again once the host is
// back (a reboot empties /run/keys), and its keys' restart_units are
// restarted, before the verdict.
func (nr *nodeRun) rebootSteps(rest []*step) []*step {
	out := []*step{profileStep, finaliseStep, rebootStep, returnStep}
	if nr.r.KeysTouched {
		out = append(out, keysStep, keyUnitsStep)
	}
	out = append(out, bootVerdictStep)
	for _, s := range rest {
		switch s {
		case activateStep, verdictStep, confirmStep, finaliseStep:
		default:
			out = append(out, s)
		}
	}
	return out
}

// keyUnitsStep restarts, fenced, the units of the keys the deploy put back
// once the host was back from its reboot (their services started without
// them).
var keyUnitsStep = &step{
	name: StepRestart, does: "restarting the units of the keys put back after the reboot", cond: CondKeys, phase: PhaseVerifying,
	run: func(ctx context.Context, nr *nodeRun) error {
		if len(nr.wroteUnits) == 0 {
			return nil
		}
		out, err := output(nr.c.Command(ctx, agreement.RestartScript(nr.run(), nr.wroteUnits)))
		if err != nil && ctx.Err() == nil {
			_, msg := exitOf(err, out)
			nr.d.note(nr.n.Name, StepRestart, "restarting %s after the reboot failed: %s (the verdict judges the host as it is)", strings.Join(nr.wroteUnits, ", "), msg)
		}
		return ctx.Err()
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "the host booted " + nr.n.System + ", which no verdict judged; its keys are back"
	},
}

// rebootCheckStep decides whether the node's new system is booted into:
// always, or when its kernel, initrd or kernel modules differ from those
// of the system the host booted (read on the host).
var rebootCheckStep = &step{
	name: StepRebootCheck, does: "deciding whether the new system needs a reboot", cond: CondActivated,
	run: func(ctx context.Context, nr *nodeRun) error {
		// One round trip: the booted system, then each part of the booted
		// and the new system ("part|booted|new", empty where one has none).
		var b strings.Builder
		b.WriteString("readlink -e /run/booted-system || echo\n")
		for _, part := range rebootParts {
			fmt.Fprintf(&b, "echo \"%s|$(readlink -e /run/booted-system/%s)|$(readlink -e %s/%s)\"\n", part, part, shell.Quote(nr.n.System), part)
		}
		out, err := output(nr.c.Command(ctx, remote(b.String())))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			_, msg := exitOf(err, out)
			return fail(1, "RebootCheckFailed", "reading the booted system's kernel, initrd and modules failed: "+msg, "")
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if strings.TrimSpace(lines[0]) == nr.n.System {
			nr.d.note(nr.n.Name, StepRebootCheck, "the host booted %s already: activated without a reboot", nr.n.System)
			return nil
		}
		if nr.d.Options.Reboot == RebootAlways {
			nr.rebootWhy = "reboot = always"
			nr.rebooting = true
			return nil
		}
		// A part the new system has and the booted one has otherwise (a
		// new system without kernel or initrd, a container's, boots
		// nothing of its own: as the plan's preview judges it).
		var changed []string
		for _, line := range lines[1:] {
			f := strings.Split(strings.TrimSpace(line), "|")
			if len(f) == 3 && f[2] != "" && f[1] != f[2] {
				changed = append(changed, f[0])
			}
		}
		if len(changed) == 0 {
			nr.d.note(nr.n.Name, StepRebootCheck, "the new system's kernel, initrd and modules are the booted system's: activated without a reboot")
			return nil
		}
		nr.rebootWhy = strings.Join(changed, ", ") + " changed"
		nr.rebooting = true
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "nothing was changed on the running system; the host runs " + orNone(nr.r.PreviousSystem)
	},
}

// bootID reads the host's boot id over c.
func bootID(ctx context.Context, c *Conn, fresh bool) (string, error) {
	cmd := c.Command(ctx, "cat /proc/sys/kernel/random/boot_id")
	if fresh {
		cmd = c.FreshCommand(ctx, "cat /proc/sys/kernel/random/boot_id")
	}
	out, err := output(cmd)
	if err != nil {
		_, msg := exitOf(err, out)
		return "", errors.New(msg)
	}
	return strings.TrimSpace(out), nil
}

var rebootStep = &step{
	name: StepReboot, does: "rebooting the host into the new system", cond: CondRebooted, phase: PhaseActivating,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(); err != nil {
			return err
		}
		id, err := bootID(ctx, nr.c, false)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fail(1, "RebootFailed", "reading the host's boot id failed: "+err.Error(), "")
		}
		nr.bootIDBefore, nr.r.RebootTried = id, true
		nr.d.note(nr.n.Name, StepReboot, "rebooting into %s (%s); boot id %s", nr.n.System, nr.rebootWhy, id)
		out, err := output(nr.c.Command(ctx, agreement.RebootScript(nr.run())))
		if err != nil && ctx.Err() == nil {
			exit, msg := exitOf(err, out)
			if why, ok := fenced(exit, out); ok {
				return leaseLost("to reboot", why, "the boot entry points at "+nr.n.System+", which the host boots at its next reboot")
			}
			if exit != 255 {
				return fail(exit, "RebootFailed", "systemctl reboot failed: "+msg, "the boot entry points at "+nr.n.System+": reboot the host, or apply again")
			}
			// 255: the session went with the host, as it should.
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The lease went with the host's sessions.
		nr.lock.Release()
		return nil
	},
	leaves: func(nr *nodeRun, during bool) string {
		return "the boot entry points at " + nr.n.System + ", which the host boots at its next reboot (it may be rebooting now); the host ran " + orNone(nr.r.PreviousSystem)
	},
}

// awaitBoot waits, within reboot_timeout, for the host to answer a new
// login with another boot id than before (any, for before ""), then takes
// its deploy lock as a new run over a new master connection. It returns
// the system the host runs, read as the lock is taken.
func (nr *nodeRun) awaitBoot(ctx context.Context, before string) (string, error) {
	deadline := time.Now().Add(nr.d.rebootTimeout())
	for {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		id, err := bootID(lctx, nr.c, true)
		cancel()
		if err == nil && id != before {
			nr.bootIDAfter = id
			break
		}
		if time.Now().After(deadline) {
			return "", errHostAway
		}
		if !sleep(ctx, time.Second) {
			return "", ctx.Err()
		}
	}
	nr.c.Close()
	c, err := nr.d.Transport.Open(ctx, nr.n.Settings)
	if err != nil {
		return "", err
	}
	nr.c = c
	if exit, msg := nr.d.startMaster(ctx, c); exit != 0 {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", errors.New("logging in again: " + msg)
	}
	l, lines, err := nr.d.takeLock(ctx, nr.c, max(nr.d.Options.LockTimeout, nr.d.Transport.remoteExecTimeout()+5*time.Second), nil)
	if err != nil {
		return "", err
	}
	nr.lock = l
	nr.d.note(nr.n.Name, StepReturn, "the host is back; run %s holds its deploy lock", l.Run())
	if len(lines) > 0 {
		return strings.TrimSpace(lines[0]), nil
	}
	return "", nil
}

// errHostAway: the host did not come back within reboot_timeout.
var errHostAway = errors.New("the host did not come back")

var returnStep = &step{
	name: StepReturn, does: "waiting for the host to come back with a new boot id", cond: CondRebooted, phase: PhaseVerifying,
	run: func(ctx context.Context, nr *nodeRun) error {
		current, err := nr.awaitBoot(ctx, nr.bootIDBefore)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errHostAway):
			nr.r.CurrentSystem, nr.r.BootSystem, nr.r.VerifiedSystem, nr.r.SystemsUnknown = "", "", "", true
			f := unknown(fmt.Sprintf("the host did not come back within reboot_timeout (%s) after its reboot into %s: what it runs and boots is not known (the boot entry points at %s, the system before, %s, is its fallback entry)",
				nr.d.rebootTimeout(), nr.n.System, nr.n.System, orNone(nr.r.PreviousSystem)))
			f.reason = "DidNotReturn"
			return f
		case err != nil:
			return fail(1, "ReturnFailed", "the host came back from its reboot, but "+err.Error(), "the next refresh reads what it runs")
		}
		nr.r.CurrentSystem = current
		nr.pass(CondRebooted, "Rebooted", fmt.Sprintf("the host rebooted (%s)", nr.rebootWhy))
		// The keys put back now restart their units (keyUnitsStep), not
		// those written before the reboot.
		nr.wroteUnits = nil
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "the host was rebooting into " + nr.n.System + " (its boot entry; the system before is the fallback entry): the next refresh reads what it runs"
	},
}

// bootVerdictStep judges the booted host: /run/booted-system and
// /run/current-system must be the new system, then the usual verdict. A
// failure puts the boot entry back to the system before and reboots the
// host into it (on_failure = keep: the entry is put back, and the host
// keeps running the new system until its next reboot).
var bootVerdictStep = &step{
	name: StepBootVerdict, does: "judging the booted host: the booted and current system, a new SSH login, systemd settled, the verdict's checks", cond: CondVerdict, phase: PhaseVerifying,
	run: func(ctx context.Context, nr *nodeRun) error {
		booted, _ := output(nr.c.Command(ctx, "readlink -f /run/booted-system"))
		booted = strings.TrimSpace(booted)
		obs := nr.d.observe(ctx, nr.c, nr.run(), 0, nr.systemd)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if obs.CurrentSystem != "" {
			nr.r.CurrentSystem = obs.CurrentSystem
		}
		v := Decide(nr.n.System, obs, nr.d.Options.Verdict.Rules)
		if v.Passed && booted != nr.n.System {
			v = Verdict{Reason: "BootedAnother", Message: fmt.Sprintf("the host booted %s, not %s", orNone(booted), nr.n.System)}
		}
		if v.Passed {
			if out, err := output(nr.c.Command(ctx, remote(agreement.MarkScript(nr.n.System)))); err != nil {
				_, msg := exitOf(err, out)
				nr.d.note(nr.n.Name, StepBootVerdict, "recording the passing verdict on the host failed: %s", msg)
			}
			nr.pass(CondVerdict, v.Reason, v.Message)
			nr.r.Phase, nr.r.VerifiedSystem, nr.r.BootSystem = PhaseSucceeded, nr.n.System, nr.n.System
			nr.r.Message = fmt.Sprintf("switched to %s by a reboot (%s)", nr.n.System, nr.rebootWhy)
			return nil
		}
		return nr.bootBack(ctx, v)
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "the host booted " + nr.n.System + " (its boot entry), which no verdict judged"
	},
}

// bootBack puts the boot entry back to the system before, after the
// failing verdict v on the booted new system, and reboots the host into
// it (but under on_failure = keep), and records what the host runs and
// boots after.
func (nr *nodeRun) bootBack(ctx context.Context, v Verdict) error {
	prev := nr.r.PreviousSystem
	f := fail(1, v.Reason, v.Message, v.Hint)
	if prev == "" {
		f.message += "; there is no system before to boot back into"
		return f
	}
	out, err := output(nr.c.Command(ctx, agreement.ProfileScript(nr.run(), prev)))
	if exit, _ := exitOf(err, out); err != nil && exit == 255 && ctx.Err() == nil {
		// The host went away as its verdict judged it (rebooted again,
		// or its connection dropped): once it answers a new login again,
		// within reboot_timeout, its lock is taken again and the boot
		// back goes on. A new boot id says it rebooted.
		before := nr.bootIDAfter
		nr.d.note(nr.n.Name, StepBootVerdict, "the host went away as its verdict judged it: waiting for it, to boot it back into %s", prev)
		nr.lock.Release()
		if _, aerr := nr.awaitBoot(ctx, ""); aerr == nil {
			if nr.bootIDAfter != before {
				v.Message = fmt.Sprintf("the host rebooted again as the verdict judged %s, which it did not finish (%s)", nr.n.System, v.Message)
				f.reason, f.hint, f.message = reasonHostRebooted, hintHostRebooted, v.Message
			}
			out, err = output(nr.c.Command(ctx, agreement.ProfileScript(nr.run(), prev)))
		} else if ctx.Err() == nil {
			err = aerr
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		_, msg := exitOf(err, out)
		f.message += fmt.Sprintf("; pointing the system profile back at %s failed (%s): the host runs and boots %s", prev, msg, nr.n.System)
		return f
	}
	out, err = output(nr.c.Command(ctx, agreement.BootScript(nr.run(), prev, 1, nr.d.bootBound().Seconds(), false)))
	if err != nil {
		_, msg := exitOf(err, out)
		f.message += fmt.Sprintf("; making %s the boot entry again failed (%s): the host runs %s, and its boot entry may still be it", prev, msg, nr.n.System)
		return f
	}
	nr.r.BootSystem = prev
	if nr.d.Options.Keep {
		f.message += fmt.Sprintf("; kept running for inspection (on_failure = keep): the boot entry points back at %s, which the host boots at its next reboot", prev)
		return f
	}
	id, err := bootID(ctx, nr.c, false)
	if err == nil {
		var out string
		out, err = output(nr.c.Command(ctx, agreement.RebootScript(nr.run())))
		if exit, _ := exitOf(err, out); exit == 255 {
			err = nil // the session went with the host, as it should
		}
	}
	if err != nil {
		f.message += fmt.Sprintf("; the boot entry points back at %s, but rebooting into it failed (%v): the host runs %s until its next reboot", prev, err, nr.n.System)
		return f
	}
	nr.lock.Release()
	current, err := nr.awaitBoot(ctx, id)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		nr.r.CurrentSystem, nr.r.BootSystem, nr.r.VerifiedSystem, nr.r.SystemsUnknown = "", "", "", true
		u := unknown(fmt.Sprintf("%s; the boot entry was put back to %s and the host rebooted, but it did not come back within reboot_timeout (%s): what it runs is not known", v.Message, prev, nr.d.rebootTimeout()))
		return u
	}
	nr.r.CurrentSystem = current
	nr.r.Outcomes[CondBootloader] = Outcome{Reason: "BootedBack", Message: "the boot entry points back at the system before"}
	nr.r.Outcomes[CondActivated] = Outcome{Passed: true, Reason: "Booted", Message: "the host booted the new system, then the system before again"}
	f.phase, f.message = PhaseRolledBack, fmt.Sprintf("%s; the boot entry was put back to %s and the host rebooted into it", v.Message, prev)
	if current != prev {
		f.phase, f.message = PhaseFailed, fmt.Sprintf("%s; the boot entry was put back to %s and the host rebooted, but it runs %s", v.Message, prev, orNone(current))
	}
	// The reboot emptied /run/keys again: the keys go back (those of the
	// system before are the node's too), and their units restart.
	if nr.r.KeysTouched {
		nr.wroteUnits = nil
		if err := nr.putKeys(ctx, "keys", nr.keysFor(UploadBeforeActivation), nil); err != nil {
			nr.r.Outcomes[CondKeys] = Outcome{Reason: "KeyUploadFailed", Message: "after booting back: " + err.Error()}
			f.message += "; its keys could not be put back: " + err.Error()
		} else {
			nr.r.Outcomes[CondKeys] = Outcome{Passed: true, Reason: "Uploaded", Message: KeysInPlace}
			if len(nr.wroteUnits) > 0 {
				if out, err := output(nr.c.Command(ctx, agreement.RestartScript(nr.run(), nr.wroteUnits))); err != nil {
					_, msg := exitOf(err, out)
					f.message += fmt.Sprintf("; its keys are back, but restarting %s failed: %s", strings.Join(nr.wroteUnits, ", "), msg)
				}
			}
		}
	}
	nr.r.RolledBack = f.phase == PhaseRolledBack
	return f
}
