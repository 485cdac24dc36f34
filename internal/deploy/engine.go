package deploy

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
)

// Goal is what a deployment does with a node's new system.
type Goal string

// The goals, as nixos-rebuild and colmena name them.
const (
	GoalSwitch      Goal = "switch"       // activate, judge, make it the boot default
	GoalBoot        Goal = "boot"         // make it the boot default only
	GoalTest        Goal = "test"         // activate and judge; the boot default stays
	GoalDryActivate Goal = "dry-activate" // show what activation would do
)

// Phase is where a node's deploy is, or how it ended.
type Phase string

// The phases of a node.
const (
	PhasePending    Phase = "Pending"
	PhaseCopying    Phase = "Copying"
	PhaseActivating Phase = "Activating"
	PhaseVerifying  Phase = "Verifying"
	PhaseFinalizing Phase = "Finalizing"
	PhaseSucceeded  Phase = "Succeeded"
	PhaseFailed     Phase = "Failed"
	PhaseRolledBack Phase = "RolledBack"
	PhaseSkipped    Phase = "Skipped"
	// PhaseUnknown: the deployer cannot know how the deploy ended (the
	// host stopped answering between its decision and its answer, and
	// could not be asked); the next refresh reads the host and settles it.
	PhaseUnknown Phase = "Unknown"
)

// Condition is a condition type of a node: what one or more steps
// establish.
type Condition string

// A node's conditions, in the order of its sequence.
const (
	CondReachable  Condition = "Reachable"
	CondCopied     Condition = "ClosureCopied"
	CondActivated  Condition = "Activated"
	CondVerdict    Condition = "VerdictPassed"
	CondBootloader Condition = "BootloaderFinalized"
)

// Outcome is what a step established for its condition: passed, or why
// not.
type Outcome struct {
	Passed  bool
	Reason  string
	Message string
}

// HTTPCheck is a URL the verdict requests from the deployer.
type HTTPCheck struct {
	URL          string
	ExpectStatus int
}

// VerdictSpec is the deployment's verdict settings.
type VerdictSpec struct {
	ConfirmTimeout time.Duration
	SettleTimeout  time.Duration
	Rules          VerdictRules
	HTTP           []HTTPCheck
	TCP            []int    // ports on the node's host, from the deployer
	Command        []string // remote commands that must exit 0
}

// Options are a deployment's settings.
type Options struct {
	Goal Goal
	Keep bool // on_failure = "keep": a failing verdict leaves the new system active
	// Reboot says when a switch boots its host into the new system
	// instead of activating it live (goal switch); RebootTimeout bounds
	// how long the host may take to come back (default 10 minutes).
	Reboot            RebootPolicy
	RebootTimeout     time.Duration
	BootLockAttempts  int
	BootLockInterval  time.Duration
	ActivationTimeout time.Duration
	LockTimeout       time.Duration
	Verdict           VerdictSpec
	// Parallelism is how many nodes deploy at once (at least 1); nodes
	// start in list order, each once the one before it has its lock and
	// has copied its closure (see Deploy).
	Parallelism int
	// MaxFailures stops starting nodes once more than this many failed;
	// nil: no limit, every node is tried (FR-002).
	MaxFailures *int
	// Holder names this deployment to another one waiting for the lock.
	Holder string
	// Deployment is the deployment's identity on its hosts: the name of
	// its record of the keys it wrote there (agreement.KeyRecord), so
	// that it removes only those, and another deployment's stand.
	Deployment string
	// NixCopyClosure is the nix-copy-closure binary; on PATH when empty.
	NixCopyClosure string
	// Nix is the nix binary; on PATH when empty.
	Nix string
	// Env is added to the environment of local commands (NIX_CONFIG).
	Env []string
	// Builder is the Nix that builds the systems this machine's store
	// lacks; Env is its environment too.
	Builder nixos.Nix
	// DryActivations is a private directory where previews keep what a
	// dry activation said, for the apply's own plan (see
	// dryActivationFresh); none kept when empty.
	DryActivations string
	// Log receives every node's start and end and every step's start and
	// end (tflog in the provider; tests also act on them).
	Log func(Event)
}

// EventKind is what an Event reports.
type EventKind string

// The events of a deploy.
const (
	EventNodeStarted EventKind = "node-started" // DEPLOYING <name>
	EventStepStarted EventKind = "step-started"
	EventStepEnded   EventKind = "step-ended"
	EventNote        EventKind = "note"
	EventNodeEnded   EventKind = "node-ended"
)

// Event is one line of a deploy's log.
type Event struct {
	Kind    EventKind
	Node    string
	Step    StepName // the step it happened in; empty for the node as a whole
	Message string
	// Outcome is how a step ended (StepDone, StepFailed, StepInterrupted,
	// StepSkipsRest) or the phase a node ended in; empty for other events.
	Outcome string
	// Took is how long the step or the node took, for the events that end
	// one.
	Took time.Duration
}

// How a step ended, as EventStepEnded reports it.
const (
	StepDone        = "done"
	StepFailed      = "failed"
	StepInterrupted = "interrupted"
	// StepSkipsRest: the step found nothing left to do (the host already
	// runs the system) and the node ends after it.
	StepSkipsRest = "nothing left to do"
)

// Target is one node to deploy.
type Target struct {
	Settings
	System string
	// Derivation is the system's derivation: a system this machine's
	// store lacks is built from it first, where BuildOn says.
	Derivation string
	// Unrecorded says no record tells what the host runs (a new node, or
	// every node of a deployment replaced after its first apply failed):
	// it may run System already, after a passing verdict. Such a node's
	// host is asked before its system is built here, and one that runs
	// it is recorded without a build.
	Unrecorded bool
	// Keys are the node's keys (see Key): each put in place where the
	// host lacks it or holds it otherwise, before the activation or after
	// the verdict as it says. RemovedKeys are paths of keys the node no
	// longer has: removed from the host.
	Keys        []Key
	RemovedKeys []string
	// KeysOnly says the node's system stands: the deploy puts its keys in
	// place (and removes RemovedKeys), restarts the units of the keys it
	// wrote, and activates nothing.
	KeysOnly bool
}

// builds reports whether the deploy builds the target's system on this
// machine: its store lacks the system, and the derivation is known.
func (t Target) buildsHere() bool {
	return t.Derivation != "" && t.BuildOn != BuildTarget && !inStore(t.System)
}

// buildsThere reports whether the deploy builds the target's system on
// its host.
func (t Target) buildsThere() bool {
	return t.Derivation != "" && t.BuildOn == BuildTarget && !inStore(t.System)
}

// inStore reports whether this machine's store has path.
func inStore(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Result is a node's record after its deploy.
type Result struct {
	Name, Host string
	// System is the system the deploy aimed at, and Goal what it did with
	// it.
	System         string
	Goal           Goal
	Phase          Phase
	PreviousSystem string
	CurrentSystem  string
	// VerifiedSystem is the host's own record of the last system a deploy
	// finished there with a passing verdict; empty when none did or the
	// host was not read.
	VerifiedSystem string
	ExitCode       int
	Message, Hint  string
	Started        time.Time
	Finished       time.Time
	Outcomes       map[Condition]Outcome
	RolledBack     bool
	// HostKeySeen is the key the host showed when the deploy logged in
	// ("type base64"); empty when it was not reached or the key it showed
	// cannot be known.
	HostKeySeen string
	// Step is the step the deploy ended in when it failed or was
	// interrupted.
	Step StepName
	// Interrupted says an interrupt or an expired deadline stopped the
	// node (exit 130).
	Interrupted bool
	// AlreadyCurrent says the host already ran the system, which had
	// passed its verdict there, so nothing was activated.
	AlreadyCurrent bool
	// BootSystem is the system the host boots next (its system profile's,
	// Current.Boots) after the deploy; empty when not known: the host was
	// not read, or the deploy may have moved the profile and did not
	// finish.
	BootSystem string
	// BootEntryOnly says the host already ran the system, which had
	// passed its verdict there, but booted another: the deploy made the
	// system its boot entry, and activated nothing.
	BootEntryOnly bool
	// KeysTouched says the deploy had keys to put in place or remove, and
	// HasKeys that the node has keys (its KeysUploaded condition).
	KeysTouched, HasKeys bool
	// RebootSeen says the host rebooted during the deploy (found by the
	// deploy, whether or not it asked): its Rebooted condition says how.
	RebootSeen bool
	// KeysOnly says the deploy put the node's keys in place alone (or
	// would have): its system's conditions stand, but for a step it
	// reached (Reachable).
	KeysOnly bool
	// RebootTried says the deploy rebooted the host into the new system
	// (or began to): its Rebooted condition says how that went.
	RebootTried bool
	// SystemsUnknown says what the host runs, boots and verified is not
	// known (it did not come back from a reboot): the record says none.
	SystemsUnknown bool
}

// Failed reports whether the node's deploy failed, or did not surely
// succeed: a rollback is a failure, and so is an outcome not known.
func (r Result) Failed() bool {
	return r.Phase == PhaseFailed || r.Phase == PhaseRolledBack || r.Phase == PhaseUnknown
}

// Deployer deploys nodes over a transport.
type Deployer struct {
	Transport *Transport
	Options   Options
	// bootTimeout bounds switch-to-configuration boot; the constant of
	// FR-010 when zero. Tests scale it down.
	bootTimeout time.Duration
	// closures are the local closures previews read, by system: nodes
	// switching to the same system share one read.
	closures sync.Map // string -> *localClosure
}

func (d *Deployer) emit(e Event) {
	if d.Options.Log != nil {
		d.Options.Log(e)
	}
}

func (d *Deployer) note(node string, step StepName, format string, args ...any) {
	d.emit(Event{Kind: EventNote, Node: node, Step: step, Message: fmt.Sprintf(format, args...)})
}

// Deploy runs the rollout: nodes start in list order, up to Parallelism at
// once, and a failed node never stops the others (FR-002) until more than
// MaxFailures have failed; then, or once ctx ends (an interrupt, an expired
// deadline), no new node starts and the nodes never started are returned
// Pending. onResult is called after each node, from the goroutine that
// deployed it.
//
// A node starts once the one before it has logged in, holds its host's
// lock and has copied its closure (or has copied for copyHeadStart), or
// has begun waiting for another deployment's lock, or has ended: logins
// come one at a time, as a jump host's sshd wants them (MaxStartups), and
// nodes that start together do not stay in step, all copying at once,
// then all waiting on their activations.
func (d *Deployer) Deploy(ctx context.Context, nodes []Target, onResult func(Result)) []Result {
	out := make([]Result, len(nodes))
	builds := d.startBuilds(ctx, nodes, d.alreadyRun(ctx, nodes))
	defer builds.stop()
	slots := make(chan struct{}, max(1, d.Options.Parallelism))
	var (
		mu       sync.Mutex
		failures int
		wg       sync.WaitGroup
	)
	overBudget := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return d.Options.MaxFailures != nil && failures > *d.Options.MaxFailures
	}
	notStarted := func(i int, why string) {
		out[i] = NotStarted(nodes[i], why)
		if onResult != nil {
			onResult(out[i])
		}
	}
	for i, n := range nodes {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		switch {
		case ctx.Err() != nil:
			notStarted(i, cause(ctx)+" before this node started")
			continue
		case overBudget():
			<-slots
			notStarted(i, fmt.Sprintf("more nodes failed than max_failures (%d) allows", *d.Options.MaxFailures))
			continue
		}
		// Started here, not in its goroutine: nodes start in list order.
		d.emit(Event{Kind: EventNodeStarted, Node: n.Name, Message: "DEPLOYING " + n.Name})
		wg.Add(1)
		begun := make(chan struct{})
		var once sync.Once
		next := func() { once.Do(func() { close(begun) }) }
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer next()
			r := d.node(ctx, n, builds, next)
			d.emit(Event{Kind: EventNodeEnded, Node: n.Name, Step: r.Step, Message: fmt.Sprintf("%s %s: %s", n.Name, r.Phase, r.Message),
				Outcome: string(r.Phase), Took: r.Finished.Sub(r.Started)})
			if r.Failed() {
				mu.Lock()
				failures++
				mu.Unlock()
			}
			out[i] = r
			if onResult != nil {
				onResult(r)
			}
		}()
		select {
		case <-begun:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	return out
}

// NotStarted is the result of a node the deploy never started, for why:
// an interrupt or the failure budget stopped the rollout before it, or the
// deployment could not start at all. It is Pending; nothing was done.
func NotStarted(n Target, why string) Result {
	return Result{Name: n.Name, Host: n.Host, Phase: PhasePending, Message: "not started: " + why,
		KeysOnly: n.KeysOnly, KeysTouched: n.keyWork(), HasKeys: len(n.Keys) > 0}
}

// ExitInterrupted is a node's exit code when an interrupt or an expired
// deadline stopped it, as a shell reports a command ended by Ctrl-C.
const ExitInterrupted = 130

// cause says what ended ctx, in words for a node's message: the cause
// the caller gave (context.WithCancelCause, WithTimeoutCause), else an
// interrupt or an expired deadline.
func cause(ctx context.Context) string {
	err := context.Cause(ctx)
	switch err {
	case nil:
		return "nothing"
	case context.Canceled:
		return "interrupted"
	case context.DeadlineExceeded:
		return "the deadline expired"
	}
	return err.Error()
}

// nix is the nix binary (the copy of a use_sudo node).
func (d *Deployer) nix() string {
	if d.Options.Nix != "" {
		return d.Options.Nix
	}
	return "nix"
}

func (d *Deployer) nixCopyClosure() string {
	if d.Options.NixCopyClosure != "" {
		return d.Options.NixCopyClosure
	}
	return "nix-copy-closure"
}

func (d *Deployer) activationTimeout() time.Duration {
	return orDefault(d.Options.ActivationTimeout, 5*time.Minute)
}
func (d *Deployer) confirmTimeout() time.Duration {
	return orDefault(d.Options.Verdict.ConfirmTimeout, 30*time.Second)
}
func (d *Deployer) settleTimeout() time.Duration {
	return orDefault(d.Options.Verdict.SettleTimeout, 90*time.Second)
}
func (d *Deployer) bootBound() time.Duration {
	return orDefault(d.bootTimeout, bootTimeout)
}
func (d *Deployer) bootLockInterval() time.Duration {
	return orDefault(d.Options.BootLockInterval, 5*time.Second)
}
func (d *Deployer) bootLockAttempts() int {
	if d.Options.BootLockAttempts > 0 {
		return d.Options.BootLockAttempts
	}
	return 60
}

func orDefault(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}
