package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
)

// StepName names a step of a node's deploy, as logs and messages say it.
type StepName string

// The steps, in the order a node goes through them.
const (
	StepConnect     StepName = "connect"
	StepLock        StepName = "lock"
	StepRead        StepName = "read"
	StepBuild       StepName = "build"
	StepCopy        StepName = "copy"
	StepProfile     StepName = "profile"
	StepActivate    StepName = "activate"
	StepDryActivate StepName = "dry-activate"
	StepVerdict     StepName = "verdict"
	StepConfirm     StepName = "confirm"
	StepFinalise    StepName = "finalise"
	StepRollback    StepName = "rollback"
)

// step is one named unit of a node's deploy: what it does, the condition
// its outcome belongs to, the phase the node is in meanwhile, and what an
// interrupt in it (or just before it) leaves on the host. One runner
// (nodeRun.step) owns what every step shares: cancellation, the
// classification of an interrupt or an expired deadline, the record and
// the log line. A step's own code is only its work.
type step struct {
	name  StepName
	does  string
	cond  Condition
	phase Phase // empty: the phase stays
	run   func(ctx context.Context, nr *nodeRun) error
	// leaves says what the host is left with when the deploy stops in
	// this step (during) or just before it.
	leaves func(nr *nodeRun, during bool) string
}

// errFinished ends a node's sequence early with the record a step set
// (the host already ran the system).
var errFinished = errors.New("finished")

// failure is a step that failed: the node's exit status and record, and
// whether the activation must be switched back.
type failure struct {
	exit     int
	reason   string
	message  string
	hint     string
	rollback bool
	phase    Phase // empty: Failed
}

func (f *failure) Error() string { return f.message }

func fail(exit int, reason, message, hint string) *failure {
	return &failure{exit: exit, reason: reason, message: message, hint: hint}
}

// nodeRun is one node's deploy in progress: what the steps learnt and
// what they hold.
type nodeRun struct {
	d *Deployer
	n Target
	r Result
	// begun is called once the next node may start: this node's copy
	// has ended or has run for copyHeadStart, its wait for another
	// deployment's lock has begun, or its sequence has stopped short of
	// the copy. It may be called more than once.
	begun func()

	c    *Conn
	lock *agreement.Lease
	// activationSaid is the last of what a failed activation printed.
	activationSaid string
	read           []string // what the take read of the host
	copy           *copyJob
	builds         *localBuilds // the rollout's builds on this machine

	container, systemd bool
	watch              bool // the host's watchdog switches an unconfirmed activation back
	activation         activationState
	attempt            int       // the activation's attempt (act.<attempt> on the host)
	attemptAt          time.Time // when the attempt's command was sent
	exit               int       // the activation's exit status; -1 while not known
	sshWorks           bool      // the host still takes logins (false once the verdict's new login failed)
	silent             bool      // the host stopped answering while the activation was judged: its outcome is settled
	bootedBefore       string    // what the host booted when read (BootEntryOnly: the system it no longer boots)
	keysOnly           bool      // the system stands: the deploy puts the keys in place and activates nothing
	keys               keysHeld  // what the host said of the node's keys
	wroteKeys          []string  // the keys written, each with why ("db (missing on the host)")
	wroteUnits         []string  // the units to restart: of the keys written, and those the host had waiting
	restarted          []string  // the units restarted
	removedKeys        []string  // the keys removed from the host
	keptKeys           []string  // the keys left on the host, each with why
	booted             bool      // the host booted the new system, which no verdict judged yet: a failure boots it back
	judged             bool      // a verdict passed on the booted host: nothing undoes its boot entry
	entrySet           bool      // a rebooting deploy pointed the system profile (and the boot entry) at the new system
	leftAlone          bool      // another run (or something else) changed the host since this deploy's lease ended: it is left as it is
	bootAttempt        int       // the last boot.N action of the run (finalise's attempts, then the entry put back)
	runs               []string  // the runs of this deploy's leases, in order
	stepNow            StepName  // the step running
	stepAt             *step     // the step running, for what it leaves
	keysStale          bool      // the host keeps keys the deployment wrote there that the node no longer has
	entryBackBegun     bool      // the undo of a boot entry began pointing it back
	rebootAskedAt      time.Time // when the deploy asked the host to reboot
	rebooting          bool      // the new system is booted into, not activated live
	rebootWhy          string    // why ("kernel, initrd changed", "reboot = always")
	bootIDBefore       string    // the host's boot id before the reboot
	bootIDAfter        string    // its boot id once it answered again (awaitBoot)
	profileBackTo      string    // the system to point the profile back at once the steps end (see lost)
}

// activationState is how far the activation got, for the record of an
// interrupt.
type activationState int

const (
	notActivated activationState = iota
	activationSent
	activationEnded
)

// node runs n's sequence, one step after the other; begun is called once
// the next node may start (see nodeRun.begun), at the latest when the
// sequence ends.
func (d *Deployer) node(ctx context.Context, n Target, builds *localBuilds, begun func()) Result {
	nr := &nodeRun{d: d, n: n, begun: begun, builds: builds, exit: -1, sshWorks: true,
		r: Result{Name: n.Name, Host: n.Host, System: n.System, Goal: d.Options.Goal, Phase: PhasePending, Started: time.Now().UTC(), Outcomes: map[Condition]Outcome{}}}
	if d.Options.Goal != GoalDryActivate && n.keyWork() {
		nr.r.KeysTouched, nr.r.HasKeys = true, len(n.Keys) > 0
	}
	steps := nr.sequence()
	for i := 0; i < len(steps); i++ {
		if !nr.step(ctx, steps[i]) {
			break
		}
		switch {
		case steps[i] == readStep && nr.keysOnly:
			steps = append(steps[:i+1:i+1], keysStep, restartStep)
		case steps[i] == readStep:
			if nr.r.BootEntryOnly {
				steps = append(steps[:i+1:i+1], bootEntrySteps(steps[i+1:])...)
			}
			if nr.keysStale && !slices.Contains(steps, keysStep) {
				// Keys the node no longer has go before anything else
				// changes on the host.
				steps = append(steps[:i+1:i+1], append([]*step{keysStep}, steps[i+1:]...)...)
			}
		case steps[i] == rebootCheckStep && nr.booted:
			steps = append(steps[:i+1:i+1], nr.bootedSteps(steps[i+1:])...)
		case steps[i] == rebootCheckStep && nr.rebooting:
			steps = append(steps[:i+1:i+1], nr.rebootSteps(steps[i+1:])...)
		}
	}
	nr.profileBack(ctx)
	nr.r.KeysOnly = nr.keysOnly || n.KeysOnly
	if done := nr.keysDone(); nr.r.Phase == PhaseSucceeded && !nr.keysOnly && done != "" {
		nr.r.Message += "; " + done
	}
	nr.keysSettled(ctx)
	nr.begun()
	nr.release()
	nr.r.Finished = time.Now().UTC()
	return nr.r
}

// sequence is the node's steps for the deployment's goal. A system built
// on this machine is built first, before anything takes the host (a long
// build holds no deploy lock, and a failed one leaves nothing on the
// host); one built on the host is built once its derivation is copied.
func (nr *nodeRun) sequence() []*step {
	head := []*step{connectStep, lockStep, readStep, copyStep}
	switch {
	case nr.n.KeysOnly:
		// The keys alone: readStep goes on with them.
		return head[:3]
	case nr.builds.builds(nr.n):
		head = append([]*step{buildStep}, head...)
	case nr.n.buildsThere():
		head = append(head, remoteBuildStep)
	}
	var keys, after []*step
	if nr.r.KeysTouched {
		keys = []*step{keysStep}
		if len(nr.keysFor(UploadAfterVerdict)) > 0 {
			after = []*step{keysAfterStep}
		}
	}
	switch nr.d.Options.Goal {
	case GoalBoot:
		// The running system stands: the units of the keys that changed
		// restart under it.
		if len(keys) > 0 {
			keys = append(keys, keyUnitsStep)
		}
		return slices.Concat(head, keys, []*step{profileStep, finaliseStep}, after)
	case GoalDryActivate:
		return append(head, dryActivateStep)
	case GoalTest:
		return slices.Concat(head, keys, []*step{activateStep, verdictStep, confirmStep}, after)
	case GoalSwitch:
	}
	if r := nr.d.Options.Reboot; r == RebootWhenRequired || r == RebootAlways {
		keys = append(keys, rebootCheckStep)
	}
	return slices.Concat(head, keys, []*step{activateStep, verdictStep, confirmStep, finaliseStep}, after)
}

// bootEntrySteps are the steps after the read of a node whose host runs
// its system after a passing verdict but boots another (goal switch): the
// copy (its closure is there already), the profile and the boot entry,
// and no activation.
func bootEntrySteps(rest []*step) []*step {
	var out []*step
	for _, s := range rest {
		switch s {
		case activateStep, verdictStep, confirmStep:
		case finaliseStep:
			out = append(out, profileStep, finaliseStep)
		default:
			out = append(out, s)
		}
	}
	return out
}

// step runs s and records how it ended; false ends the sequence. An
// interrupt or an expired deadline, before s or during it, ends the node
// as interrupted, whatever the step's commands made of being killed; a
// step that finished its work stands, and the next one is the one
// interrupted.
func (nr *nodeRun) step(ctx context.Context, s *step) bool {
	if ctx.Err() != nil {
		nr.interrupted(ctx, s, false)
		return false
	}
	if s.phase != "" {
		nr.r.Phase = s.phase
	}
	nr.d.emit(Event{Kind: EventStepStarted, Node: nr.n.Name, Step: s.name, Message: s.does})
	nr.stepNow, nr.stepAt = s.name, s
	start := time.Now()
	err := s.run(ctx, nr)
	var f *failure
	switch {
	case err == nil:
		nr.stepEnded(s.name, StepDone, start, "")
		return true
	case errors.Is(err, errFinished):
		nr.stepEnded(s.name, StepSkipsRest, start, nr.r.Message)
		return false
	case ctx.Err() != nil:
		nr.interrupted(ctx, s, true)
		nr.stepEnded(s.name, StepInterrupted, start, nr.r.Message)
		return false
	case !errors.As(err, &f):
		f = fail(1, "Failed", err.Error(), "")
	}
	nr.stepEnded(s.name, StepFailed, start, f.message)
	nr.r.Phase, nr.r.ExitCode, nr.r.Message, nr.r.Hint, nr.r.Step = orPhase(f.phase, PhaseFailed), f.exit, f.message, f.hint, s.name
	nr.r.Outcomes[s.cond] = Outcome{Reason: f.reason, Message: f.message}
	if nr.entrySet && !nr.judged && !nr.leftAlone && f.phase != PhaseUnknown {
		// A failure after the boot entry was made for the new system,
		// before a verdict passed on the booted host: it is undone.
		nr.undoBootAfter(ctx)
		return false
	}
	switch {
	case !f.rollback:
	case nr.watch:
		nr.rollback(ctx)
	case nr.d.Options.Keep:
		nr.r.Message += "; kept active for inspection (on_failure = keep)"
		nr.keepBootEntry(ctx)
	default:
		nr.r.Message += "; nothing to roll back to"
	}
	return false
}

// keepBootEntry points the system profile back at the system before, for
// a node whose failed system stays active (on_failure = keep, goal
// switch): the act command pointed it at the new system, from which a
// boot entry made later (by anyone) would install it, and a reboot would
// bring back a system whose verdict failed. Fenced, as any action of the
// run.
func (nr *nodeRun) keepBootEntry(ctx context.Context) {
	if nr.d.Options.Goal != GoalSwitch || nr.activation == notActivated || nr.r.PreviousSystem == "" || ctx.Err() != nil {
		return
	}
	out, err := output(nr.c.Command(ctx, agreement.ProfileScript(nr.run(), nr.r.PreviousSystem)))
	if err != nil {
		_, msg := exitOf(err, out)
		nr.r.Message += fmt.Sprintf("; the system profile may still point at %s, from which a boot entry made later would boot it (pointing it back at %s failed: %s)", nr.n.System, nr.r.PreviousSystem, msg)
		return
	}
	nr.r.BootSystem = nr.r.PreviousSystem
	nr.r.Message += fmt.Sprintf("; the system profile points back at %s, which the host boots", nr.r.PreviousSystem)
}

// rollback switches a failed activation back, as a step of its own: an
// interrupt before or during it is recorded beside the failure that
// asked for it, which stays the node's outcome.
func (nr *nodeRun) rollback(ctx context.Context) {
	if ctx.Err() == nil {
		nr.d.emit(Event{Kind: EventStepStarted, Node: nr.n.Name, Step: StepRollback, Message: rollbackStep.does})
		start := time.Now()
		err := rollbackStep.run(ctx, nr)
		switch {
		case err == nil:
			nr.stepEnded(StepRollback, StepDone, start, "")
			return
		case ctx.Err() == nil:
			nr.stepEnded(StepRollback, StepFailed, start, err.Error())
			return
		}
		nr.stepEnded(StepRollback, StepInterrupted, start, cause(ctx))
	}
	nr.r.Message += fmt.Sprintf("; %s during the rollback: %s", cause(ctx), rollbackStep.leaves(nr, true))
}

// stepEnded logs how a step ended and how long it took, with why when it
// did not just finish.
func (nr *nodeRun) stepEnded(name StepName, outcome string, start time.Time, why string) {
	took := time.Since(start)
	msg := fmt.Sprintf("%s %s in %s", name, outcome, took.Round(time.Millisecond))
	if why != "" {
		msg += ": " + why
	}
	nr.d.emit(Event{Kind: EventStepEnded, Node: nr.n.Name, Step: name, Message: msg, Outcome: outcome, Took: took})
}

// interrupted records the node as stopped by what ended ctx, in step s:
// exit 130, the step, and what the host is doing now.
func (nr *nodeRun) interrupted(ctx context.Context, s *step, during bool) {
	where := "before"
	if during {
		where = "during"
	}
	reason := "Interrupted"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		reason = "DeadlineExceeded"
	}
	msg := fmt.Sprintf("%s %s the %s step (%s): %s", cause(ctx), where, s.name, s.does, nr.left(s, during))
	nr.r.Phase, nr.r.ExitCode, nr.r.Message, nr.r.Step, nr.r.Interrupted = PhaseFailed, ExitInterrupted, msg, s.name, true
	nr.r.Hint = "the next apply retries this node"
	nr.r.Outcomes[s.cond] = Outcome{Reason: reason, Message: msg}
}

// pass records a step's success for its condition.
func (nr *nodeRun) pass(c Condition, reason, message string) {
	nr.r.Outcomes[c] = Outcome{Passed: true, Reason: reason, Message: message}
}

// release lets go of what the steps hold: the copy, the host's deploy
// lock and the master connection, each bounded so that an interrupted
// deploy ends at once.
func (nr *nodeRun) release() {
	var wg sync.WaitGroup
	if nr.copy != nil {
		wg.Go(nr.copy.abandon)
	}
	if nr.lock != nil {
		wg.Go(nr.lock.Release)
	}
	wg.Wait()
	if nr.c != nil {
		nr.c.Close()
	}
}

func orPhase(p, def Phase) Phase {
	if p == "" {
		return def
	}
	return p
}
