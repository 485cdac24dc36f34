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

// rebootStartBound bounds how long a host asked to reboot may go on
// answering logins with its old boot id before the reboot is taken not to
// happen (inhibited, failed, or a shutdown that hangs): a real host goes
// on taking logins for seconds while it shuts down, not for minutes. Half
// of reboot_timeout, at least ten seconds (a busy host's logins take
// their time) and at most two minutes. A host that answered with its old
// boot id all the way to reboot_timeout did not reboot either.
func (d *Deployer) rebootStartBound() time.Duration {
	return min(max(d.rebootTimeout()/2, 10*time.Second), 2*time.Minute)
}

// rebootSteps are the steps after the reboot check of a node booted into
// its new system: the profile and the boot entry (the previous system
// kept as the fallback entry), the reboot, the wait for the host's return
// (its lock taken again), the node's keys put back (a reboot empties
// /run/keys) and their units restarted, and the verdict over a new login
// on the booted host; then the rest (the after-verdict keys). A failure
// after the boot entry was made, before a verdict passed on the booted
// host, undoes it (see undoBoot).
func (nr *nodeRun) rebootSteps(rest []*step) []*step {
	out := []*step{profileStep, finaliseStep, rebootStep, returnStep}
	if nr.r.KeysTouched {
		out = append(out, rebootKeysStep, keyUnitsStep)
	}
	out = append(out, bootVerdictStep)
	return append(out, withoutSwitch(rest)...)
}

// bootedSteps are the steps after the reboot check of a node whose host
// booted the new system already, which no verdict judged (an earlier
// deploy that rebooted it was interrupted): its keys' units restarted
// (the keys step put them back), the verdict on the booted host, then the
// rest (the after-verdict keys). A failure boots it back (undoBoot).
func (nr *nodeRun) bootedSteps(rest []*step) []*step {
	var out []*step
	if nr.r.KeysTouched {
		out = append(out, keyUnitsStep)
	}
	out = append(out, bootVerdictStep)
	return append(out, withoutSwitch(rest)...)
}

// withoutSwitch is rest without the steps of a switch in place (activate,
// verdict, confirm, finalise), which a reboot replaces.
func withoutSwitch(rest []*step) []*step {
	var out []*step
	for _, s := range rest {
		switch s {
		case activateStep, verdictStep, confirmStep, finaliseStep:
		default:
			out = append(out, s)
		}
	}
	return out
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
			exit, msg := exitOf(err, out)
			if exit == 255 {
				return nr.sessionDropped(ctx, "reading the booted system's kernel, initrd and modules", "nothing was activated; the host runs "+orNone(nr.r.PreviousSystem))
			}
			return fail(1, "RebootCheckFailed", "reading the booted system's kernel, initrd and modules failed: "+msg, "")
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if strings.TrimSpace(lines[0]) == nr.n.System {
			if back := nr.r.VerifiedSystem; nr.r.PreviousSystem == nr.n.System && nr.r.BootSystem == nr.n.System && back != "" && back != nr.n.System {
				// Booted into, and never judged (an earlier deploy that
				// rebooted it was interrupted): judged as booted, and
				// booted back into the system that passed its verdict
				// there last, should it fail.
				nr.r.PreviousSystem, nr.rebooting, nr.booted, nr.entrySet = back, true, true, true
				nr.rebootWhy = "booted by an earlier deploy"
				nr.d.note(nr.n.Name, StepRebootCheck, "the host booted %s already, which no verdict judged: judging the booted host (a failure boots it back into %s, the last system that passed its verdict there)", nr.n.System, back)
				return nil
			}
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
		return "the system the host runs was not changed; it runs " + orNone(nr.r.PreviousSystem)
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

// rebootStep asks the host, fenced, to reboot. The lease stays held while
// the host shuts down (a real host takes logins for seconds after it was
// asked): it ends with the host's sessions, and nobody else's lease can
// begin before.
var rebootStep = &step{
	name: StepReboot, does: "rebooting the host into the new system", cond: CondRebooted, phase: PhaseActivating,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(ctx); err != nil {
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
		nr.rebootAskedAt = time.Now()
		stdout, stderr, err := capture(nr.c.Command(ctx, agreement.RebootScript(nr.run())), false)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			exit, msg := exitOf(err, stdout+stderr)
			if why, ok := fenced(exit, stderr); ok {
				return leaseLost("to reboot", why, "the host did not reboot")
			}
			if exit != 255 {
				nr.r.Outcomes[CondRebooted] = Outcome{Reason: "RebootFailed", Message: "systemctl reboot failed: " + msg}
				return fail(exit, "RebootFailed", "systemctl reboot failed: "+msg+": the host did not reboot",
					"check what keeps the host from rebooting (systemd-inhibit --list; journalctl -u systemd-logind), then apply again")
			}
			// 255: the session went with the host, as it should.
		}
		return nil
	},
	leaves: func(nr *nodeRun, during bool) string {
		if !during {
			return "the host was not asked to reboot; it runs " + orNone(nr.r.PreviousSystem) + ", and its boot entry is " + nr.n.System + ", which no verdict judged"
		}
		return "the host was asked to reboot into " + nr.n.System + " (its boot entry, which no verdict judged; the system before, " + orNone(nr.r.PreviousSystem) + ", is the fallback entry): the next refresh reads what it runs"
	},
}

// waitForBoot waits, within reboot_timeout, for the host to answer a new
// login with another boot id than before: errHostAway when it does not;
// errNoReboot when it went on answering with before's id, never going
// away, for rebootStartBound since the reboot was asked.
func (nr *nodeRun) waitForBoot(ctx context.Context, before string) error {
	deadline := time.Now().Add(nr.d.rebootTimeout())
	away := false
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		id, err := bootID(lctx, nr.c, true)
		cancel()
		switch {
		case err == nil && id != before:
			nr.bootIDAfter = id
			return nil
		case err != nil:
			away = true
		case !away && time.Since(nr.rebootAskedAt) > nr.d.rebootStartBound():
			return errNoReboot
		}
		if time.Now().After(deadline) {
			if !away && before != "" {
				return errNoReboot
			}
			return errHostAway
		}
		if !sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// retake takes the host's deploy lock again, as a new run over a new
// master connection, once the lease held until now has ended or is let
// go (a reboot ends it), within lock_timeout or remote_exec_timeout and
// five seconds, whichever is longer. It returns what the take read of the
// host and what other runs changed on it since that lease (see
// othersSince).
func (nr *nodeRun) retake(ctx context.Context) ([]string, others, error) {
	old := ""
	if nr.lock != nil {
		old = nr.lock.Run()
		nr.lock.Release()
	}
	nr.c.Close()
	c, err := nr.d.Transport.Open(ctx, nr.n.Settings)
	if err != nil {
		return nil, others{}, err
	}
	nr.c = c
	if exit, msg := nr.d.startMaster(ctx, c); exit != 0 {
		if ctx.Err() != nil {
			return nil, others{}, ctx.Err()
		}
		return nil, others{}, errors.New("logging in again: " + msg)
	}
	l, lines, err := nr.d.takeLock(ctx, nr.c, max(nr.d.Options.LockTimeout, nr.d.Transport.remoteExecTimeout()+5*time.Second), nil)
	if err != nil {
		return nil, others{}, err
	}
	nr.lock = l
	nr.runs = append(nr.runs, l.Run())
	nr.d.note(nr.n.Name, StepReturn, "run %s holds the host's deploy lock", l.Run())
	o, err := nr.othersSince(ctx, old)
	return lines, o, err
}

// others is what a lease taken again found of other runs since the one
// before ended: what they did (acted: "RUN ACTION"), and what the host
// booted.
type others struct {
	acted  []string
	booted string
}

// othersSince asks the host, under the lease held now, which other runs
// changed what it runs or boots since the lease of run old ended (see
// agreement.SinceScript).
func (nr *nodeRun) othersSince(ctx context.Context, old string) (others, error) {
	out, err := output(nr.c.Command(ctx, agreement.SinceScript(old, nr.runs)))
	if err != nil {
		if ctx.Err() != nil {
			return others{}, ctx.Err()
		}
		_, msg := exitOf(err, out)
		return others{}, errors.New("asking the host which deployments acted on it since: " + msg)
	}
	var o others
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "other "); ok {
			o.acted = append(o.acted, rest)
		} else if rest, ok := strings.CutPrefix(line, "booted "); ok {
			o.booted = strings.TrimSpace(rest)
		}
	}
	return o, nil
}

// othersText names what other runs did (o.acted), for a message.
func (o others) text() string {
	byRun := map[string][]string{}
	var runs []string
	for _, a := range o.acted {
		run, action, _ := strings.Cut(a, " ")
		if byRun[run] == nil {
			runs = append(runs, run)
		}
		byRun[run] = append(byRun[run], action)
	}
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = fmt.Sprintf("run %s (%s)", r, strings.Join(byRun[r], ", "))
	}
	return strings.Join(parts, ", ")
}

// errHostAway: the host did not come back within reboot_timeout.
var errHostAway = errors.New("the host did not come back")

// errNoReboot: the host went on answering with its boot id from before
// the reboot was asked, for rebootStartBound.
var errNoReboot = errors.New("the host did not reboot")

// reasonOtherRun is the reason of a node whose host another deployment's
// run changed while this one's lease had ended: it is left as it is.
const reasonOtherRun = "SwitchedByAnother"

var returnStep = &step{
	name: StepReturn, does: "waiting for the host to come back with a new boot id", cond: CondRebooted, phase: PhaseVerifying,
	run: func(ctx context.Context, nr *nodeRun) error {
		err := nr.waitForBoot(ctx, nr.bootIDBefore)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errHostAway):
			nr.keys.forget(nr.n.Keys, "not known: the host did not come back from its reboot")
			nr.r.CurrentSystem, nr.r.BootSystem, nr.r.VerifiedSystem, nr.r.SystemsUnknown = "", "", "", true
			f := unknown(fmt.Sprintf("the host did not come back within reboot_timeout (%s) after its reboot into %s: what it runs and boots is not known (the boot entry points at %s, the system before, %s, is its fallback entry)",
				nr.d.rebootTimeout(), nr.n.System, nr.n.System, orNone(nr.r.PreviousSystem)))
			f.reason = "DidNotReturn"
			return f
		case errors.Is(err, errNoReboot):
			nr.r.Outcomes[CondRebooted] = Outcome{Reason: "DidNotReboot", Message: "the host did not reboot"}
			return fail(1, "DidNotReboot", fmt.Sprintf("the host was asked to reboot into %s, but went on answering with the same boot id for %s: the reboot did not happen (inhibited, failed or hung)",
				nr.n.System, min(nr.d.rebootStartBound(), nr.d.rebootTimeout())), "check what keeps the host from rebooting (systemd-inhibit --list; journalctl -u systemd-logind), then apply again")
		}
		nr.keys.forget(nr.n.Keys, "not read since the host rebooted")
		nr.booted = true
		lines, o, err := nr.retake(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			nr.r.CurrentSystem, nr.r.BootSystem, nr.r.VerifiedSystem, nr.r.SystemsUnknown = "", "", "", true
			f := unknown("the host came back from its reboot, but " + err.Error() + ": what it runs is not judged")
			f.reason = "ReturnFailed"
			return f
		}
		if len(lines) > 0 {
			nr.r.CurrentSystem = strings.TrimSpace(lines[0])
		}
		if len(lines) > 4 {
			nr.r.BootSystem = strings.TrimSpace(lines[4])
		}
		if len(o.acted) > 0 {
			return nr.leftToOthers(o, "came back from its reboot")
		}
		nr.pass(CondRebooted, "Rebooted", fmt.Sprintf("the host rebooted (%s)", nr.rebootWhy))
		// The keys put back now restart their units (keyUnitsStep); the
		// host says which still wait (those written before the reboot).
		nr.wroteUnits = nil
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "the host was rebooting into " + nr.n.System + " (its boot entry; the system before is the fallback entry): the next refresh reads what it runs"
	},
}

// leftToOthers fails the node whose host another deployment's run changed
// while this one's lease had ended (as the host came back, when): the
// host is left as it is, and the record says what it runs and boots.
func (nr *nodeRun) leftToOthers(o others, when string) *failure {
	nr.leftAlone = true
	f := fail(1, reasonOtherRun, fmt.Sprintf("the host %s, but %s acted on it after this deploy's lease ended: it is left as it is (it runs %s and boots %s)",
		when, o.text(), orNone(nr.r.CurrentSystem), orNone(nr.r.BootSystem)),
		"another deployment of this host ran meanwhile: check which system it should run, then apply again")
	return f
}

// rebootKeysStep puts the node's keys back once the host is back from its
// reboot (a reboot empties /run/keys): a failure boots the host back.
var rebootKeysStep = &step{
	name: StepKeys, does: "putting the node's keys back after the reboot", cond: CondKeys, phase: PhaseVerifying,
	run: func(ctx context.Context, nr *nodeRun) error {
		return nr.putKeys(ctx, "keys", nr.keysFor(UploadBeforeActivation), false)
	},
	leaves: func(nr *nodeRun, _ bool) string { return nr.bootedLeaves() },
}

// bootedLeaves says what a host that booted the new system, which no
// verdict judged yet, is left with when the deploy stops.
func (nr *nodeRun) bootedLeaves() string {
	return fmt.Sprintf("the host runs and boots %s, which no verdict judged (the system before, %s, is the fallback entry): the next apply judges it", nr.n.System, orNone(nr.r.PreviousSystem))
}

// bootVerdictStep judges the booted host: /run/booted-system and
// /run/current-system must be the new system, then the usual verdict; the
// host's record of the system that passed it is written, fenced. A
// failing verdict is a failure after the reboot: the node's steps end,
// and undoBoot boots the host back.
var bootVerdictStep = &step{
	name: StepBootVerdict, does: "judging the booted host: the booted and current system, a new SSH login, systemd settled, the verdict's checks", cond: CondVerdict, phase: PhaseVerifying,
	run: func(ctx context.Context, nr *nodeRun) error {
		booted, _ := output(nr.c.Command(ctx, "readlink -e /run/booted-system"))
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
		if !v.Passed {
			return fail(1, v.Reason, v.Message, v.Hint)
		}
		nr.judged = true
		nr.pass(CondVerdict, v.Reason, v.Message)
		nr.r.BootSystem = nr.n.System
		stdout, stderr, err := capture(nr.c.Command(ctx, agreement.FencedMarkScript(nr.run(), nr.n.System)), false)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			exit, msg := exitOf(err, stdout+stderr)
			if why, ok := fenced(exit, stderr); ok {
				msg = "this deployer's lease had ended: " + why
			}
			return fail(exit, "RecordFailed", fmt.Sprintf("the host runs and boots %s, which passed its verdict there, but its record of that was not written (%s): the next apply judges it again", nr.n.System, msg), "")
		}
		nr.r.Phase, nr.r.VerifiedSystem = PhaseSucceeded, nr.n.System
		nr.r.Message = fmt.Sprintf("switched to %s by a reboot (%s)", nr.n.System, nr.rebootWhy)
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string { return nr.bootedLeaves() },
}

// undoStep is what a failure after the boot entry was made for the new
// system (rebooting), before a verdict passed on the booted host, runs:
// see undoBoot.
var undoStep = &step{
	name: StepUndoBoot, does: "putting the boot entry back to the system before", cond: CondBootloader,
	leaves: func(nr *nodeRun, during bool) string {
		prev := orNone(nr.r.PreviousSystem)
		if during && nr.entryBackBegun {
			// Where the entry points now, if the host says at once.
			boots, ok := nr.bootsNow()
			if !ok && nr.r.BootSystem != nr.r.PreviousSystem {
				nr.r.BootSystem = ""
				return fmt.Sprintf("the boot entry was being put back to %s, and may point at it or still at %s (the host could not say at once; the next refresh reads it); the host runs %s", prev, nr.n.System, orNone(nr.r.CurrentSystem))
			}
			if ok {
				nr.r.BootSystem = boots
			}
		}
		switch {
		case nr.r.BootSystem == nr.r.PreviousSystem && nr.booted:
			return fmt.Sprintf("the boot entry points back at %s, which the host boots at its next reboot; it may still run %s", prev, nr.n.System)
		case nr.r.BootSystem == nr.r.PreviousSystem:
			return fmt.Sprintf("the boot entry points back at %s; the host runs %s", prev, orNone(nr.r.CurrentSystem))
		case nr.booted:
			return nr.bootedLeaves()
		}
		return fmt.Sprintf("the host runs %s; the system profile and the boot entry may still point at %s, which no verdict judged: a reboot before the next apply would boot it (the next apply deploys the node again)", prev, nr.n.System)
	},
}

// StepUndoBoot names the undoing of a boot entry a failed deploy made.
const StepUndoBoot StepName = "boot-back"

// undoBootAfter runs undoBoot as a step of its own: an interrupt during
// it is recorded beside the failure that asked for it, which stays the
// node's outcome.
func (nr *nodeRun) undoBootAfter(ctx context.Context) {
	if ctx.Err() == nil {
		nr.d.emit(Event{Kind: EventStepStarted, Node: nr.n.Name, Step: StepUndoBoot, Message: undoStep.does})
		start := time.Now()
		nr.undoBoot(ctx)
		if ctx.Err() == nil {
			nr.stepEnded(StepUndoBoot, StepDone, start, "")
			return
		}
		nr.stepEnded(StepUndoBoot, StepInterrupted, start, cause(ctx))
	}
	nr.r.Message += fmt.Sprintf("; %s while the boot entry was put back: %s", cause(ctx), undoStep.leaves(nr, true))
}

// undoBoot puts back what a failed deploy that reboots its host into the
// new system left: under the lease (taken again when it had ended, as
// after the reboot), and only on a host no other run changed since and
// that runs the new system or the one before: a host that runs the
// system before gets its system profile and boot entry pointed back at
// it; one that booted the new system, which no verdict judged, gets them
// pointed back and is rebooted into it (on_failure = keep: it keeps
// running the new system until its next reboot), then its keys back. It
// records what the host runs and boots after.
func (nr *nodeRun) undoBoot(ctx context.Context) {
	prev := nr.r.PreviousSystem
	if prev == "" {
		nr.r.Message += "; there is no system before to boot back into"
		return
	}
	current, err := nr.currentOnHost(ctx)
	if err != nil || nr.lock == nil || nr.lock.Lost() {
		// The lease ended (a reboot ends it), or the host went away as
		// the deploy failed: once it answers a new login again, within
		// reboot_timeout, its lock is taken again.
		before := nr.bootIDAfter
		if err := nr.waitForBoot(ctx, ""); err != nil {
			if ctx.Err() == nil {
				nr.r.Phase, nr.r.CurrentSystem, nr.r.BootSystem, nr.r.SystemsUnknown = PhaseUnknown, "", "", true
				nr.r.Message += fmt.Sprintf("; the host went away and did not answer again within reboot_timeout (%s): what it runs and boots is not known (the boot entry pointed at %s)", nr.d.rebootTimeout(), nr.n.System)
			}
			return
		}
		if nr.booted && before != "" && nr.bootIDAfter != before {
			// It rebooted again: why the deploy failed.
			what := "the deploy"
			if nr.r.Step == StepBootVerdict {
				what = "the verdict"
			}
			nr.r.Message = fmt.Sprintf("the host rebooted again as %s judged %s, which it did not finish (%s)", what, nr.n.System, nr.r.Message)
			nr.r.Hint = hintHostRebooted
			if o, ok := nr.r.Outcomes[CondVerdict]; ok && !o.Passed {
				o.Reason = reasonHostRebooted
				nr.r.Outcomes[CondVerdict] = o
			}
		}
		lines, o, err := nr.retake(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			nr.r.Message += fmt.Sprintf("; putting the boot entry back to %s needs the host's deploy lock, which could not be taken again (%v): %s", prev, err, undoStep.leaves(nr, false))
			return
		}
		if len(lines) > 0 {
			nr.r.CurrentSystem = strings.TrimSpace(lines[0])
		}
		if len(lines) > 4 {
			nr.r.BootSystem = strings.TrimSpace(lines[4])
		}
		if len(o.acted) > 0 {
			f := nr.leftToOthers(o, "was to get its boot entry back")
			nr.r.Outcomes[CondBootloader] = Outcome{Reason: f.reason, Message: f.message}
			nr.r.Message += "; " + f.message
			return
		}
		current = nr.r.CurrentSystem
	}
	nr.r.CurrentSystem = current
	if current != nr.n.System && current != prev {
		nr.leftAlone = true
		nr.r.Message += fmt.Sprintf("; the host runs %s, neither the new system nor the one before: something else switched it, and it is left as it is", orNone(current))
		return
	}
	nr.booted = current == nr.n.System
	if err := nr.entryBack(ctx, prev); err != nil {
		if ctx.Err() == nil {
			nr.r.Message += "; " + err.Error()
		}
		return
	}
	if !nr.booted {
		nr.r.Outcomes[CondBootloader] = Outcome{Reason: "PutBack", Message: "the boot entry points back at the system before"}
		nr.r.Message += fmt.Sprintf("; the boot entry was put back to %s: the host runs and boots it", prev)
		return
	}
	if nr.d.Options.Keep {
		nr.r.Message += fmt.Sprintf("; kept running for inspection (on_failure = keep): the boot entry points back at %s, which the host boots at its next reboot", prev)
		return
	}
	nr.bootBack(ctx, prev)
}

// bootsNow reads, within askTimeout (an interrupted deploy ends at once),
// what the host boots next: its system profile's system.
func (nr *nodeRun) bootsNow() (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	out, err := output(nr.c.Command(ctx, "readlink -e "+agreement.ProfilePath))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(out), true
}

// currentOnHost reads what the host runs, over the node's connection.
func (nr *nodeRun) currentOnHost(ctx context.Context) (string, error) {
	out, err := output(nr.c.Command(ctx, "readlink -e /run/current-system"))
	if err != nil {
		_, msg := exitOf(err, out)
		return "", errors.New(msg)
	}
	return strings.TrimSpace(out), nil
}

// entryBack points the system profile and the boot entry back at prev,
// fenced, and records where they point.
func (nr *nodeRun) entryBack(ctx context.Context, prev string) error {
	nr.entryBackBegun = true
	out, err := output(nr.c.Command(ctx, agreement.ProfileBackScript(nr.run(), prev)))
	if err != nil {
		_, msg := exitOf(err, out)
		return fmt.Errorf("pointing the system profile back at %s failed (%s): %s", prev, msg, undoStep.leaves(nr, false))
	}
	nr.bootAttempt++
	out, err = output(nr.c.Command(ctx, agreement.BootScript(nr.run(), prev, nr.bootAttempt, nr.d.bootBound().Seconds(), false)))
	if err != nil {
		_, msg := exitOf(err, out)
		return fmt.Errorf("the system profile points back at %s, but making it the boot entry again failed (%s): the boot entry may still point at %s", prev, msg, nr.n.System)
	}
	nr.r.BootSystem = prev
	nr.r.Outcomes[CondBootloader] = Outcome{Reason: "BootedBack", Message: "the boot entry points back at the system before"}
	return nil
}

// bootBack reboots a host that runs the new system, whose boot entry
// points back at prev, into prev, waits for it, and records what it runs
// after; then its keys go back (every key of the node: the system before
// is the node's too), and their units restart.
func (nr *nodeRun) bootBack(ctx context.Context, prev string) {
	id, err := bootID(ctx, nr.c, false)
	if err == nil {
		nr.rebootAskedAt = time.Now()
		var stdout, stderr string
		stdout, stderr, err = capture(nr.c.Command(ctx, agreement.RebootScript(nr.run())), false)
		if exit, msg := exitOf(err, stdout+stderr); err != nil && exit != 255 {
			err = errors.New(msg)
		} else {
			err = nil // the session went with the host, as it should
		}
	}
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		nr.r.Message += fmt.Sprintf("; the boot entry points back at %s, but rebooting into it failed (%v): the host runs %s until its next reboot", prev, err, nr.n.System)
		return
	}
	switch err := nr.waitForBoot(ctx, id); {
	case ctx.Err() != nil:
		return
	case errors.Is(err, errNoReboot):
		nr.r.Message += fmt.Sprintf("; the boot entry points back at %s, but the host did not reboot into it (it went on answering with the same boot id for %s): it runs %s until its next reboot", prev, nr.d.rebootStartBound(), nr.n.System)
		return
	case err != nil:
		nr.keys.forget(nr.n.Keys, "not known: the host did not come back from its reboot")
		nr.r.CurrentSystem, nr.r.BootSystem, nr.r.VerifiedSystem, nr.r.SystemsUnknown = "", "", "", true
		nr.r.Phase = PhaseUnknown
		nr.r.Message += fmt.Sprintf("; the boot entry was put back to %s and the host rebooted, but it did not come back within reboot_timeout (%s): what it runs is not known", prev, nr.d.rebootTimeout())
		return
	}
	nr.keys.forget(nr.n.Keys, "not read since the host rebooted")
	lines, o, err := nr.retake(ctx)
	if err != nil {
		if ctx.Err() == nil {
			nr.r.Phase = PhaseUnknown
			nr.r.CurrentSystem, nr.r.SystemsUnknown = "", true
			nr.r.Message += fmt.Sprintf("; the boot entry was put back to %s and the host rebooted, but %v: what it runs is not known", prev, err)
		}
		return
	}
	current := ""
	if len(lines) > 0 {
		current = strings.TrimSpace(lines[0])
	}
	nr.r.CurrentSystem, nr.booted = current, false
	if len(lines) > 4 {
		nr.r.BootSystem = strings.TrimSpace(lines[4])
	}
	if len(o.acted) > 0 {
		f := nr.leftToOthers(o, "booted back")
		nr.r.Outcomes[CondBootloader] = Outcome{Reason: f.reason, Message: f.message}
		nr.r.Message += "; " + f.message
		return
	}
	nr.r.Outcomes[CondActivated] = Outcome{Passed: true, Reason: "Booted", Message: "the host booted the new system, then the system before again"}
	if current == prev {
		nr.r.Phase, nr.r.RolledBack = PhaseRolledBack, true
		nr.r.Message += fmt.Sprintf("; the boot entry was put back to %s and the host rebooted into it", prev)
	} else {
		nr.r.Message += fmt.Sprintf("; the boot entry was put back to %s and the host rebooted, but it runs %s", prev, orNone(current))
		return
	}
	if nr.r.KeysTouched {
		nr.wroteUnits = nil
		err := nr.putKeys(ctx, "keys", nr.n.Keys, false)
		if err == nil {
			err = nr.restartUnits(ctx, "restart", StepUndoBoot)
		}
		if err != nil && ctx.Err() == nil {
			nr.r.Outcomes[CondKeys] = Outcome{Reason: "KeyUploadFailed", Message: "after booting back: " + err.Error()}
			nr.r.Message += "; its keys could not all be put back: " + err.Error()
		}
	}
}
