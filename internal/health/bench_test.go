package health_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/health"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// The node health benchmarks report ratios, never absolute times alone:
// absolute times depend on the machine. Every one of them runs real shells
// (locally or through a real sshd on 127.0.0.1) and fails unless the
// evaluation found what it should, so no wrong answer is ever timed.
//
//   - RoundTrips: SSH connections and sessions per evaluation of n nodes.
//   - Dedup:      probes run against the distinct checks a node needs.
//   - Eval:       an evaluation of n nodes in benchSlots slots against its
//     bound ceil(n / slots) * probe_timeout.
//   - HungPaths:  an evaluation of one node with k hung paths against one
//     probe timeout.

const (
	// benchProbeTimeout is the probe timeout of healthy fleets: their
	// checks take milliseconds, so it only sets the bound.
	benchProbeTimeout = 2 * time.Second
	// hungProbeTimeout is the probe timeout of the hung-path benchmark,
	// which waits for it at every first evaluation.
	hungProbeTimeout = time.Second
	// benchSlots is the probe semaphore of the timed evaluations.
	benchSlots = 4
	// roundTripSlots is the probe semaphore of the counting benchmarks.
	roundTripSlots = 8
	// benchConnectTimeout bounds an SSH connect to the local sshd.
	benchConnectTimeout = 5 * time.Second
	// releaseWait bounds waiting for released probes to finish.
	releaseWait = 10 * time.Second
)

// benchEnv is one real sshd and the private directory that every shell of
// the benchmark, local or remote, keeps its probe markers in ($TMPDIR), so
// no marker is left in the machine's /tmp.
type benchEnv struct {
	tmp    string
	sshd   *sshtest.SSHD
	target sshdial.Target
}

func newBenchEnv(b *testing.B) *benchEnv {
	// Made before sshd: cleanups run last-in first-out, so the directory is
	// removed after sshd has stopped.
	tmp := b.TempDir()
	sshd := sshtest.StartSSHD(b, sshtest.WithConfigLines(`SetEnv "TMPDIR=`+tmp+`"`))
	return &benchEnv{tmp: tmp, sshd: sshd, target: sshdial.Target{
		Endpoint:    sshdial.Endpoint{Host: sshd.Host, Port: sshd.Port, User: sshd.User},
		Pin:         sshdial.PinKey(sshd.HostKeys[0].Public),
		Credentials: sshdial.Credentials{PrivateKey: sshd.ClientKey.PEM()},
	}}
}

// markerDir is health.MarkerDir as the benchmark's shells expand it.
func (env *benchEnv) markerDir() string {
	return filepath.Join(env.tmp, "fleet-node-health."+strconv.Itoa(os.Getuid()))
}

func (env *benchEnv) evaluator(slots int64) *health.Evaluator {
	return &health.Evaluator{
		Dialer:         &sshdial.Dialer{},
		Slots:          semaphore.NewWeighted(slots),
		LocalShell:     []string{"/usr/bin/env", "TMPDIR=" + env.tmp, "/bin/sh", "-s"},
		ConnectTimeout: benchConnectTimeout,
	}
}

func (env *benchEnv) node(local bool, roles ...string) health.Node {
	if local {
		return health.Node{Roles: roles, Local: true}
	}
	return health.Node{Roles: roles, Target: env.target}
}

// fleetPolicy declares n nodes, each in a role of its own hosting an object
// type of its own that needs 3 path checks and 1 command check on
// directories of its own.
func fleetPolicy(b *testing.B, env *benchEnv, n int, local bool) *health.Policy {
	root := b.TempDir()
	p := &health.Policy{
		StorageRoot:  root,
		ProbeTimeout: benchProbeTimeout,
		Checks:       map[string]health.CheckDecl{},
		ObjectTypes:  map[string]health.ObjectType{},
		Roles:        map[string]health.Role{},
		Nodes:        map[string]health.Node{},
	}
	for i := range n {
		name := fmt.Sprintf("node%03d", i)
		var checks []string
		for _, d := range []string{"blobs", "images", "volumes"} {
			dir := filepath.Join(name, d)
			if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
				b.Fatal(err)
			}
			key := name + "_" + d
			p.Checks[key] = health.CheckDecl{Spec: health.Spec{Kind: "path", Settings: map[string]any{"path": dir}}}
			checks = append(checks, key)
		}
		key := name + "_agent"
		p.Checks[key] = health.CheckDecl{Spec: health.Spec{Kind: "command", Settings: map[string]any{
			"command": "test -d '" + filepath.Join(root, name) + "'",
		}}}
		checks = append(checks, key)
		p.ObjectTypes["type_"+name] = health.ObjectType{Checks: checks}
		p.Roles["role_"+name] = health.Role{Hosts: []string{"type_" + name}}
		p.Nodes[name] = env.node(local, "role_"+name)
	}
	if errs := p.Validate(); len(errs) > 0 {
		b.Fatalf("benchmark policy: %v", errs)
	}
	return p
}

// evaluate runs one evaluation of every node of p and fails the benchmark
// unless each was reached and found healthy with want checks.
func evaluate(b *testing.B, ev *health.Evaluator, p *health.Policy, want int) time.Duration {
	start := time.Now()
	reports, err := ev.Evaluate(b.Context(), p, nil)
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if len(reports) != len(p.Nodes) {
		b.Fatalf("%d reports for %d nodes", len(reports), len(p.Nodes))
	}
	for _, r := range reports {
		if r.State() != health.StateHealthy || len(r.Planned) != want {
			b.Fatalf("node %s: %s with %d checks planned, want healthy with %d: %s", r.Node, r.State(), len(r.Planned), want, r.Reason(p))
		}
	}
	return took
}

// BenchmarkNodeHealthRoundTrips counts what an evaluation of n nodes, all
// on one real sshd, costs on the wire: a node is one connection and one
// session (one round trip) however many script checks it has.
func BenchmarkNodeHealthRoundTrips(b *testing.B) {
	env := newBenchEnv(b)
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			p := fleetPolicy(b, env, n, false)
			ev := env.evaluator(roundTripSlots)
			var took time.Duration
			for b.Loop() {
				took += evaluate(b, ev, p, 4)
			}
			conns, sessions, channels, probes := ev.Counters.Snapshot()
			evals := float64(b.N)
			b.ReportMetric(ms(took)/evals, "eval_ms")
			b.ReportMetric(float64(conns)/evals, "connections/eval")
			b.ReportMetric(float64(sessions)/evals, "sessions/eval")
			b.ReportMetric(float64(channels)/evals, "channels/eval")
			b.ReportMetric(float64(conns)/evals/float64(n), "connections_per_node")
			b.ReportMetric(float64(sessions)/evals/float64(n), "sessions_per_node")
			b.ReportMetric(float64(probes)/evals/float64(n), "probes_per_node")
		})
	}
}

// dedupPolicy declares 6 checks with 4 identities: "blobs" and "blob_store"
// resolve to one path, "images" and "image_cache" to another, "scratch" is
// alone and "agent" is a command. Three object types list them, overlapping,
// and every node hosts them through two roles that share one type: 12
// references to 6 declarations of 4 checks, per node.
func dedupPolicy(b *testing.B, env *benchEnv, n int) *health.Policy {
	root := b.TempDir()
	for _, d := range []string{"blobs", "images", "scratch"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	path := func(p string) health.CheckDecl {
		return health.CheckDecl{Spec: health.Spec{Kind: "path", Settings: map[string]any{"path": p}}}
	}
	p := &health.Policy{
		StorageRoot:  root,
		ProbeTimeout: benchProbeTimeout,
		Checks: map[string]health.CheckDecl{
			"blobs":       path("blobs"),
			"blob_store":  path(filepath.Join(root, "blobs")),
			"images":      path("images"),
			"image_cache": path("images/./"),
			"scratch":     path("scratch"),
			"agent":       {Spec: health.Spec{Kind: "command", Settings: map[string]any{"command": "true"}}},
		},
		ObjectTypes: map[string]health.ObjectType{
			"instance": {Checks: []string{"blobs", "images", "agent"}},
			"volume":   {Checks: []string{"blob_store", "scratch", "agent"}},
			"image":    {Checks: []string{"image_cache", "blobs", "images"}},
		},
		Roles: map[string]health.Role{
			"hypervisor": {Hosts: []string{"instance", "image"}},
			"storage":    {Hosts: []string{"volume", "instance"}},
		},
		Nodes: map[string]health.Node{},
	}
	for i := range n {
		p.Nodes[fmt.Sprintf("node%03d", i)] = env.node(false, "hypervisor", "storage")
	}
	if errs := p.Validate(); len(errs) > 0 {
		b.Fatalf("benchmark policy: %v", errs)
	}
	return p
}

// needs counts, without the evaluator's planning, what node of p depends
// on: the check references through its roles' object types, the declared
// checks among them and their distinct identities.
func needs(b *testing.B, p *health.Policy, node string) (refs, decls, distinct int) {
	names, ids := map[string]bool{}, map[string]bool{}
	for _, role := range p.Nodes[node].Roles {
		for _, typ := range p.Roles[role].Hosts {
			for _, name := range p.ObjectTypes[typ].Checks {
				refs++
				names[name] = true
				c, err := health.Build(p.Checks[name].Spec, p.StorageRoot)
				if err != nil {
					b.Fatal(err)
				}
				ids[health.ID(c)] = true
			}
		}
	}
	return refs, len(names), len(ids)
}

// BenchmarkNodeHealthDedup counts the probes run against the distinct
// checks the nodes need, when object types list overlapping checks.
func BenchmarkNodeHealthDedup(b *testing.B) {
	env := newBenchEnv(b)
	const n = 10
	p := dedupPolicy(b, env, n)
	refs, decls, distinct := needs(b, p, "node000")
	ev := env.evaluator(roundTripSlots)
	for b.Loop() {
		evaluate(b, ev, p, distinct)
	}
	_, sessions, _, probes := ev.Counters.Snapshot()
	perNode := float64(probes) / float64(b.N) / n
	b.ReportMetric(float64(refs), "refs_per_node")
	b.ReportMetric(float64(decls), "declared_per_node")
	b.ReportMetric(float64(distinct), "distinct_per_node")
	b.ReportMetric(perNode, "probes_per_node")
	b.ReportMetric(perNode/float64(distinct), "probe_ratio")
	b.ReportMetric(float64(sessions)/float64(b.N)/n, "sessions_per_node")
}

// BenchmarkNodeHealthEval times an evaluation of n healthy nodes in
// benchSlots probe slots against its bound ceil(n / slots) * probe_timeout:
// what it would take if every slot round ran into the timeout.
func BenchmarkNodeHealthEval(b *testing.B) {
	env := newBenchEnv(b)
	for _, c := range []struct {
		where string
		n     []int
	}{{"local", []int{10, 50, 200}}, {"ssh", []int{10, 50}}} {
		for _, n := range c.n {
			b.Run(fmt.Sprintf("%s/nodes=%d", c.where, n), func(b *testing.B) {
				p := fleetPolicy(b, env, n, c.where == "local")
				ev := env.evaluator(benchSlots)
				var took time.Duration
				for b.Loop() {
					took += evaluate(b, ev, p, 4)
				}
				evalMS := ms(took) / float64(b.N)
				rounds := float64(ceilDiv(n, benchSlots))
				boundMS := rounds * ms(benchProbeTimeout)
				b.ReportMetric(benchSlots, "slots")
				b.ReportMetric(evalMS, "eval_ms")
				b.ReportMetric(evalMS/rounds, "round_ms")
				b.ReportMetric(boundMS, "bound_ms")
				b.ReportMetric(evalMS/boundMS, "bound_ratio")
			})
		}
	}
}

// BenchmarkNodeHealthHungPaths times an evaluation of one node whose k path
// checks all hang (each path is a hung mount, in which a heartbeat blocks in
// the kernel, and a heartbeat is written at every evaluation) against one
// probe timeout.
//
// A hung probe is left running, marked on the node under the node's name
// and the check's identity, and an evaluation that finds it outstanding
// starts none and returns at once. So every iteration evaluates a node of a
// fresh name twice: "first" finds nothing outstanding and starts k probes
// that hang; "repeat" finds all k outstanding.
func BenchmarkNodeHealthHungPaths(b *testing.B) {
	env := newBenchEnv(b)
	for _, where := range []string{"ssh", "local"} {
		for _, k := range []int{1, 10, 50} {
			b.Run(fmt.Sprintf("%s/paths=%d", where, k), func(b *testing.B) {
				benchHung(b, env, where, k)
			})
		}
	}
}

func benchHung(b *testing.B, env *benchEnv, where string, k int) {
	root := b.TempDir()
	p := &health.Policy{
		StorageRoot:  root,
		ProbeTimeout: hungProbeTimeout,
		// 0: a heartbeat at every evaluation, so every path's probe hangs.
		WriteProbeInterval: 0,
		Checks:             map[string]health.CheckDecl{},
		ObjectTypes:        map[string]health.ObjectType{},
		Roles:              map[string]health.Role{"storage": {Hosts: []string{"volume"}}},
	}
	var mounts []*sshtest.HungMount
	var checks []string
	for i := range k {
		dir := filepath.Join(root, fmt.Sprintf("mnt%02d", i))
		mounts = append(mounts, sshtest.MountHung(b, dir))
		name := fmt.Sprintf("mnt%02d", i)
		p.Checks[name] = health.CheckDecl{Spec: health.Spec{Kind: "path", Settings: map[string]any{"path": dir}}}
		checks = append(checks, name)
	}
	p.ObjectTypes["volume"] = health.ObjectType{Checks: checks}
	// Whatever happens, no probe is left blocked in a hung mount.
	defer release(b, env, mounts)

	ev := env.evaluator(benchSlots)
	var first, repeat time.Duration
	iter := 0
	for b.Loop() {
		iter++
		name := fmt.Sprintf("hung-%s-%d-%d", where, k, iter)
		p.Nodes = map[string]health.Node{name: env.node(where == "local", "storage")}
		first += evalHung(b, ev, p, name, k, false)
		repeat += evalHung(b, ev, p, name, k, true)
	}
	firstMS, repeatMS := ms(first)/float64(b.N), ms(repeat)/float64(b.N)
	b.ReportMetric(firstMS, "first_ms")
	b.ReportMetric(repeatMS, "repeat_ms")
	b.ReportMetric(ms(hungProbeTimeout), "timeout_ms")
	b.ReportMetric(firstMS/ms(hungProbeTimeout), "ratio")
	b.ReportMetric(repeatMS/ms(hungProbeTimeout), "repeat_ratio")
	// The repeat is the same round trip without the wait: what the first
	// took beyond it is the time spent waiting for the hung probes.
	b.ReportMetric((firstMS-repeatMS)/ms(hungProbeTimeout), "wait_ratio")
	b.ReportMetric(float64(b.N), "fresh_names")
}

// evalHung evaluates the node and fails unless each of its k checks timed
// out (first) or was found outstanding (repeat).
func evalHung(b *testing.B, ev *health.Evaluator, p *health.Policy, name string, k int, repeat bool) time.Duration {
	start := time.Now()
	reports, err := ev.Evaluate(b.Context(), p, []string{name})
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	r := reports[0]
	if !r.Reached || len(r.Results) != k {
		b.Fatalf("node %s: reached %t with %d results, want %d: %s", name, r.Reached, len(r.Results), k, r.Reason(p))
	}
	for i, res := range r.Results {
		if (repeat && !res.Outstanding) || (!repeat && !res.TimedOut) {
			b.Fatalf("node %s, %s (repeat %t): %+v, want it timed out on the first evaluation and outstanding on the repeat",
				name, r.Planned[i].Check.Target(), repeat, res)
		}
	}
	return took
}

// release lets every probe blocked in the hung mounts go and waits until
// the last has finished (its marker directory gone), so that the next
// benchmark's evaluations find no probe of this one outstanding.
func release(b *testing.B, env *benchEnv, mounts []*sshtest.HungMount) {
	for _, m := range mounts {
		m.Release()
	}
	deadline := time.Now().Add(releaseWait)
	for {
		left, err := filepath.Glob(filepath.Join(env.markerDir(), "*.d"))
		if err != nil {
			b.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Errorf("%d probes still running %s after their mounts were released", len(left), releaseWait)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
