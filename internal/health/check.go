// Package health evaluates node resource health: declared dependency checks,
// grouped by the object types that depend on them and the roles that host
// those types, run on a node (over SSH or locally) under one deadline, and
// composed into a node state with a reason a person can act on.
//
// A check is a small value with a stable identity (kind + resolved target).
// A kind is one implementation registered with [Register]; the evaluator
// only ever sees the [Check] interface and its two ways of running:
//
//   - a [ScriptCheck] runs in the node's POSIX shell. All of a node's script
//     checks run in one shell script, one round trip, concurrently, under
//     one deadline; a probe still running at the deadline is left running
//     and marked, so no second probe of the same check starts on that node
//     while it hangs.
//   - a [DialCheck] connects from the node's network position: over the
//     node's SSH connection (a forwarded channel) or, for a local node,
//     directly.
package health

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"
)

// Tiers of a result: which probe decided it.
const (
	TierStatvfs   = "statvfs"   // the cheap path tier, every evaluation
	TierHeartbeat = "heartbeat" // the authoritative path tier: a write + fsync
	TierProbe     = "probe"     // the only tier of every other kind
)

// Result is what one check found.
type Result struct {
	Healthy bool
	// Detail says what was found, in plain words: "mounted read-only",
	// "probe timed out", "exit 3: connection refused".
	Detail   string
	Tier     string
	Duration time.Duration
	// Heartbeat is when the check's path last took a heartbeat write (path
	// checks only; zero when never or unknown).
	Heartbeat time.Time
	// TimedOut is set when the probe did not finish within the deadline;
	// Outstanding when a previous probe of the check is still running, since
	// OutstandingSince, and none was started.
	TimedOut         bool
	Outstanding      bool
	OutstandingSince time.Time
}

// Check is one declared dependency, with a stable identity.
type Check interface {
	// Kind is the registered kind name: "path", "command", ...
	Kind() string
	// Target is the resolved target: an absolute path, a command line,
	// host:port, a URL, a unit name.
	Target() string
}

// ID is a check's identity: kind and resolved target. Two declarations with
// the same identity are one check and run once.
func ID(c Check) string { return c.Kind() + ":" + c.Target() }

// ScriptEnv is what a script check's fragment may use.
type ScriptEnv struct {
	// Key names the check on the node (a hex digest of node and check
	// identity), for markers kept outside the checked path.
	Key string
	// WriteProbeInterval is how long a heartbeat stays good.
	WriteProbeInterval time.Duration
}

// ScriptCheck runs in the node's shell.
type ScriptCheck interface {
	Check
	// Script returns the body of a shell function that runs the probe. Its
	// exit status is the verdict (0 healthy); its output, stdout and stderr
	// together, is given to Interpret. "$M" is a private directory for
	// markers on the node, outside every checked path.
	Script(env ScriptEnv) string
	// Interpret turns the probe's exit status and output into a result.
	// Timeouts and outstanding probes are handled by the evaluator, which
	// still calls Interpret with the partial output so a kind can say which
	// tier hung (exit is -1 then).
	Interpret(exit int, output string) Result
}

// DialFunc connects to an address from the node's network position.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// DialCheck runs in the provider process, connecting from the node.
type DialCheck interface {
	Check
	Probe(ctx context.Context, dial DialFunc) Result
}

// Spec is a check's declaration, kind-neutral: the kind and its settings as
// given (strings, numbers), decoded by the kind's factory.
type Spec struct {
	Kind     string
	Settings map[string]any
}

// Factory builds a check from its settings; storageRoot resolves relative
// paths. It validates the settings and names the one at fault.
type Factory func(settings map[string]any, storageRoot string) (Check, error)

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Factory{}
)

// Register adds a kind. Registering a kind twice panics: kinds are
// registered once, at init.
func Register(kind string, f Factory) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := kinds[kind]; dup {
		panic("health: kind " + kind + " registered twice")
	}
	kinds[kind] = f
}

// Kinds returns the registered kind names, sorted.
func Kinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	return slices.Sorted(maps.Keys(kinds))
}

// Build makes a check from its declaration.
func Build(s Spec, storageRoot string) (Check, error) {
	kindsMu.RLock()
	f, ok := kinds[s.Kind]
	kindsMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown check kind %q (known: %v)", s.Kind, Kinds())
	}
	return f(s.Settings, storageRoot)
}
