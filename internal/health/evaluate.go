package health

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// ConnectTimeout bounds reaching a node over SSH, before its checks start.
const ConnectTimeout = sshdial.ProbeTimeout

// scriptGrace is how much longer than the probe timeout the provider waits
// for a node's script: the script itself returns at the probe timeout, so
// this covers only starting the shell and the round trip.
const scriptGrace = 5 * time.Second

// Counters count what evaluations did, for tests and benchmarks.
type Counters struct {
	connections atomic.Int64 // SSH connections opened
	sessions    atomic.Int64 // SSH sessions (remote commands) run
	channels    atomic.Int64 // forwarded channels opened by dial checks
	probes      atomic.Int64 // checks started (script or dial)
}

// Snapshot returns connections, sessions, channels and probes so far.
func (c *Counters) Snapshot() (connections, sessions, channels, probes int64) {
	return c.connections.Load(), c.sessions.Load(), c.channels.Load(), c.probes.Load()
}

// Evaluator runs nodes' checks. One per provider process: it remembers
// evaluations still running, so a node whose previous evaluation hangs is
// not evaluated again on top of it.
type Evaluator struct {
	Dialer *sshdial.Dialer
	// Slots is the process-wide probe semaphore: a node's evaluation takes
	// one slot.
	Slots *semaphore.Weighted
	Clock clock.Clock
	// LocalShell runs local nodes' scripts; /bin/sh -s when empty.
	LocalShell []string
	// ConnectTimeout caps an SSH connect (ConnectTimeout when zero); the
	// policy's probe timeout bounds it when shorter.
	ConnectTimeout time.Duration
	// Interrupt, when it ends, cancels every evaluation (Ctrl-C).
	Interrupt context.Context
	Counters  Counters

	mu       sync.Mutex
	inflight map[string]*inflight // node → the evaluation of it running now
}

func (e *Evaluator) now() time.Time {
	if e.Clock != nil {
		return e.Clock.Now().UTC()
	}
	return time.Now().UTC()
}

// Evaluate evaluates the named nodes of p (every node when names is nil),
// each in a probe slot, and returns their reports in the order of names.
// A cancelled evaluation returns ctx's error: an interrupted run observed
// nothing and must record nothing.
func (e *Evaluator) Evaluate(ctx context.Context, p *Policy, names []string) ([]Report, error) {
	if names == nil {
		names = slices.Sorted(maps.Keys(p.Nodes))
	}
	if e.Interrupt != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		stop := context.AfterFunc(e.Interrupt, cancel)
		defer func() { stop(); cancel() }()
	}
	out := make([]Report, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		if err := e.Slots.Acquire(ctx, 1); err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer e.Slots.Release(1)
			out[i] = e.contained(ctx, p, name)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("node health evaluation interrupted: %w", err)
	}
	return out, nil
}

// contained evaluates one node with a panic in its evaluation recovered: a
// bug in the provider costs the checks it hit (unhealthy, the panic in
// their detail), never the other nodes of the pass nor the process. Checks
// already decided keep their results.
func (e *Evaluator) contained(ctx context.Context, p *Policy, name string) (r Report) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		r.Node, r.EvaluatedAt = name, e.now()
		if len(r.Planned) == 0 {
			// Nothing says which checks the node has: it was not evaluated.
			r.Reached = false
			r.Unreachable = &sshdial.Outcome{Reason: sshdial.ReasonUnknown, Message: panicDetail(v)}
			return
		}
		r.Reached, r.Unreachable = true, nil
		for i := range r.Results {
			if r.Results[i] == (Result{}) {
				r.Results[i] = panicResult(v)
			}
		}
	}()
	e.node(ctx, p, name, &r)
	return r
}

// guarded runs one check's own code (a probe, the reading of its output)
// with a panic in it contained: that check is unhealthy, the panic in its
// detail, and the node's other checks go on.
func guarded(f func() Result) (res Result, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			res, panicked = panicResult(v), true
		}
	}()
	return f(), false
}

func panicResult(v any) Result { return Result{Tier: TierProbe, Detail: panicDetail(v)} }

func panicDetail(v any) string {
	return sshdial.Sanitize(fmt.Sprintf("the probe panicked (a bug in the provider; please report it): %v", v))
}

// node evaluates one node into r.
func (e *Evaluator) node(ctx context.Context, p *Policy, name string, r *Report) {
	n := p.Nodes[name]
	*r = Report{Node: name, Roles: sorted(n.Roles)}
	r.Planned = p.Plan(name)
	r.Results = make([]Result, len(r.Planned))
	if len(r.Planned) == 0 {
		r.Reached, r.EvaluatedAt = true, e.now()
		return
	}
	// An evaluation of the same node still running in this process (the
	// data source and the resource at once) is waited for, up to this one's
	// bound; one that outlives it is hung, and none is started beside it.
	since, ok := e.begin(ctx, name, p.probeTimeout()+scriptGrace)
	if !ok {
		r.Reached, r.EvaluatedAt = true, e.now()
		for i := range r.Results {
			r.Results[i] = Result{Tier: TierProbe, Outstanding: true, OutstandingSince: since,
				Detail: "previous probe still outstanding since " + since.Format(time.RFC3339)}
		}
		return
	}
	defer e.end(name)

	var host Host = LocalHost{Shell: e.LocalShell}
	if !n.Local {
		// Reaching the node is bounded like a probe: by the policy's probe
		// timeout, and never longer than the connect timeout.
		timeout := e.ConnectTimeout
		if timeout <= 0 {
			timeout = ConnectTimeout
		}
		timeout = min(timeout, p.probeTimeout())
		client, o := e.Dialer.Connect(ctx, n.Target, timeout)
		if client == nil {
			r.EvaluatedAt = e.now()
			r.Unreachable = &o
			return
		}
		e.Counters.connections.Add(1)
		defer func() { _ = client.Close() }()
		host = sshHost{client: client, counters: &e.Counters}
	}
	if err := e.run(ctx, p, name, host, r); err != nil {
		r.EvaluatedAt = e.now()
		r.Unreachable, r.ShellRefused = &sshdial.Outcome{Reason: sshdial.ReasonConfig, Message: err.Error()}, true
		return
	}
	r.Reached, r.EvaluatedAt = true, e.now()
}

// begin marks node as being evaluated, waiting up to wait for an
// evaluation of it already running in this process. It reports false, with
// when that one started, when it is still running after wait.
func (e *Evaluator) begin(ctx context.Context, node string, wait time.Duration) (time.Time, bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		e.mu.Lock()
		cur, busy := e.inflight[node]
		if !busy {
			if e.inflight == nil {
				e.inflight = map[string]*inflight{}
			}
			e.inflight[node] = &inflight{since: e.now(), done: make(chan struct{})}
			e.mu.Unlock()
			return time.Time{}, true
		}
		e.mu.Unlock()
		select {
		case <-cur.done:
		case <-timer.C:
			return cur.since, false
		case <-ctx.Done():
			return cur.since, false
		}
	}
}

func (e *Evaluator) end(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.inflight[node].done)
	delete(e.inflight, node)
}

// inflight is an evaluation of a node running in this process.
type inflight struct {
	since time.Time
	done  chan struct{}
}

// run runs the planned checks on host: the script checks in one script,
// the dial checks beside it, all under the probe timeout.
func (e *Evaluator) run(ctx context.Context, p *Policy, node string, host Host, r *Report) error {
	timeout := p.probeTimeout()
	var scripted []ScriptCheck
	var at []int
	var wg sync.WaitGroup
	// Deferred: a panic below must not leave dial checks writing results
	// while the node's report is being recovered.
	defer wg.Wait()
	for i, pl := range r.Planned {
		switch c := pl.Check.(type) {
		case ScriptCheck:
			scripted, at = append(scripted, c), append(at, i)
		case DialCheck:
			e.Counters.probes.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				dctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				start := time.Now()
				res, panicked := guarded(func() Result { return c.Probe(dctx, host.Dial) })
				res.Duration = time.Since(start)
				if dctx.Err() != nil && !res.Healthy && !panicked {
					res.TimedOut, res.Detail = true, "probe timed out"
				}
				r.Results[i] = res
			}()
		default:
			r.Results[i] = Result{Tier: TierProbe, Detail: "check kind " + pl.Check.Kind() + " cannot run"}
		}
	}
	if len(scripted) > 0 {
		e.Counters.probes.Add(int64(len(scripted)))
		s := newScript(node, scripted, timeout, p.writeProbeInterval())
		sctx, cancel := context.WithTimeout(ctx, timeout+scriptGrace)
		start := time.Now()
		out, err := host.RunScript(sctx, s.text)
		elapsed := time.Since(start)
		cancel()
		parts, perr := s.parse(out)
		if perr != nil {
			// The node's shell refused to run the checks (a marker
			// directory another user made, no mktemp): nothing was
			// learnt of its storage, so it is not evaluated, not failed.
			wg.Wait()
			clear(r.Results)
			return perr
		}
		interpret := func(c ScriptCheck, exit int, output string) Result {
			res, _ := guarded(func() Result { return c.Interpret(exit, output) })
			return res
		}
		for k, c := range scripted {
			i := at[k]
			switch {
			case parts[k].status == "done":
				res := interpret(c, parts[k].exit, parts[k].output)
				res.Duration = time.Duration(parts[k].ms) * time.Millisecond
				r.Results[i] = res
			case parts[k].status == "outstanding":
				res := interpret(c, -1, "")
				res.Healthy, res.Outstanding, res.OutstandingSince = false, true, parts[k].since
				res.Detail = "previous probe still outstanding since " + parts[k].since.Format(time.RFC3339)
				r.Results[i] = res
			// sctx is cancelled by now: only its deadline means a timeout.
			case parts[k].status == "timeout" || (err != nil && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded)):
				res := interpret(c, -1, parts[k].output)
				res.Healthy, res.TimedOut, res.Detail, res.Duration = false, true, "probe timed out", timeout
				r.Results[i] = res
			case err != nil:
				r.Results[i] = Result{Tier: TierProbe, Detail: "the checks could not run: " + err.Error(), Duration: elapsed}
			default:
				r.Results[i] = Result{Tier: TierProbe, Detail: "the node's shell reported nothing for this check"}
			}
		}
	}
	return nil
}
