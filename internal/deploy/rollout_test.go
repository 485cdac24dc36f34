package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// activations records, from the engine's events, when each node started
// and when its activation step ran (until the node's next step began), so
// a test can tell how many ran at once.
type activations struct {
	mu      sync.Mutex
	started []string // nodes, in the order they started
	open    map[string]time.Time
	spans   [][2]time.Time
}

func watchActivations(d *deploy.Deployer) *activations {
	a := &activations{open: map[string]time.Time{}}
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		a.see(e)
	}
	return a
}

func (a *activations) see(e deploy.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if from, ok := a.open[e.Node]; ok && (e.Kind == deploy.EventStepStarted || e.Kind == deploy.EventNodeEnded) {
		a.spans = append(a.spans, [2]time.Time{from, now})
		delete(a.open, e.Node)
	}
	switch {
	case e.Kind == deploy.EventNodeStarted:
		a.started = append(a.started, e.Node)
	case e.Kind == deploy.EventStepStarted && e.Step == deploy.StepActivate:
		a.open[e.Node] = now
	}
}

// most is the largest number of activations that ran at one moment.
func (a *activations) most() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	most := 0
	for _, s := range a.spans {
		n := 0
		for _, o := range a.spans {
			if !o[0].After(s[0]) && o[1].After(s[0]) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

func fleetOf(t *testing.T, n int, old string) []*nixtest.Target {
	t.Helper()
	tgs := make([]*nixtest.Target, n)
	for i := range tgs {
		tgs[i] = nixtest.NewTarget(t)
		tgs[i].Boot(t, old)
	}
	return tgs
}

// Rollout (issue 14): with parallelism p, up to p nodes deploy at once,
// never more; nodes start in list order; each keeps its own two SSH
// connections, lock, verdict and record.
func TestDeployWithParallelism(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (six hosts): make test runs it")
	}
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 2 * time.Second})
	tgs := fleetOf(t, 6, old)
	d := deployer(t, deploy.Options{Parallelism: 3, Verdict: deploy.VerdictSpec{ConfirmTimeout: 5 * time.Second, SettleTimeout: 2 * time.Second}})
	acts := watchActivations(d)
	var nodes []deploy.Target
	for i, tg := range tgs {
		nodes = append(nodes, targetOf(tg, fmt.Sprintf("n%d", i+1), sys))
	}
	res := d.Deploy(context.Background(), nodes, nil)
	for i, r := range res {
		if r.Name != nodes[i].Name {
			t.Errorf("result %d is %s, want %s: results come in list order", i, r.Name, nodes[i].Name)
		}
		wantPhase(t, r, deploy.PhaseSucceeded)
		if got := tgs[i].CurrentSystem(); got != sys {
			t.Errorf("%s runs %s, want %s", r.Name, got, sys)
		}
		if n := tgs[i].AcceptedConnections(); n != 2 {
			t.Errorf("%s: %d SSH connections, want 2 (the master and the verdict's new login)", r.Name, n)
		}
	}
	if fmt.Sprint(acts.started) != "[n1 n2 n3 n4 n5 n6]" {
		t.Errorf("nodes started in the order %v, want list order", acts.started)
	}
	if most := acts.most(); most > 3 || most < 2 {
		t.Errorf("at most %d activations ran at once, want 2 or 3 with parallelism 3", most)
	}
}

// Rollout (issue 14): nodes of a parallel rollout start one after the
// other, each once the node before it has logged in and its host's lock
// has answered: logins come one at a time (a jump host's sshd drops
// unauthenticated connections beyond MaxStartups), and the nodes do not
// run in step. A node whose host's lock is held by another deployment
// does not hold back the next: the lock's first answer is "held by".
func TestDeployStartsEachNodeOnceTheOneBeforeHasItsLock(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (four hosts, waits out lock_timeout): make test runs it")
	}
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tgs := fleetOf(t, 4, old)
	tgs[0].HoldDeployLock(t, "apply A")
	d := deployer(t, deploy.Options{Parallelism: 4, LockTimeout: 4 * time.Second,
		Verdict: deploy.VerdictSpec{ConfirmTimeout: 5 * time.Second, SettleTimeout: 2 * time.Second}})
	var (
		mu     sync.Mutex
		events []string
	)
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Kind == deploy.EventNodeStarted:
			events = append(events, e.Node+" started")
		case e.Kind == deploy.EventNodeEnded:
			events = append(events, e.Node+" ended")
		case e.Kind == deploy.EventStepEnded && e.Step == deploy.StepLock:
			events = append(events, e.Node+" lock step ended")
		case e.Kind == deploy.EventNote && e.Step == deploy.StepLock:
			events = append(events, e.Node+" waits")
		}
	}
	var nodes []deploy.Target
	for i, tg := range tgs {
		nodes = append(nodes, targetOf(tg, fmt.Sprintf("n%d", i+1), sys))
	}
	res := d.Deploy(context.Background(), nodes, nil)
	if res[0].Phase != deploy.PhaseFailed || !strings.Contains(res[0].Message, "apply A") {
		t.Errorf("n1: %s %q, want Failed naming the lock's holder", res[0].Phase, res[0].Message)
	}
	for _, r := range res[1:] {
		wantPhase(t, r, deploy.PhaseSucceeded)
	}
	index := func(ev string) int {
		for i, e := range events {
			if e == ev {
				return i
			}
		}
		t.Fatalf("no %q in %v", ev, events)
		return -1
	}
	mu.Lock()
	defer mu.Unlock()
	if index("n2 started") > index("n1 lock step ended") {
		t.Errorf("n2 started after n1 stopped waiting for its host's lock: a node waiting held the rollout back: %v", events)
	}
	if index("n2 started") < index("n1 waits") {
		t.Errorf("n2 started before n1's host answered: %v", events)
	}
	for _, pair := range [][2]string{{"n2", "n3"}, {"n3", "n4"}} {
		if index(pair[1]+" started") < index(pair[0]+" lock step ended") {
			t.Errorf("%s started before %s held its host's lock: %v", pair[1], pair[0], events)
		}
	}
}

// Rollout (issue 14): a node starts once the node before it has copied
// its closure, or has been copying for half a second: copies, which
// compress on this machine, do not all start at once, and a long copy does
// not hold the rollout back. Here every copy takes 3 s more: each node
// starts half a second after the one before it began copying, long
// before that copy ends.
func TestDeployStartsEachNodeOnceTheOneBeforeHasCopiedOrHalfASecond(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (three hosts, slow copies): make test runs it")
	}
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tgs := fleetOf(t, 3, old)
	d := deployer(t, deploy.Options{Parallelism: 3, NixCopyClosure: slowCopy(t, 3),
		Verdict: deploy.VerdictSpec{ConfirmTimeout: 5 * time.Second, SettleTimeout: 2 * time.Second}})
	var (
		mu sync.Mutex
		at = map[string]time.Time{}
	)
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Kind == deploy.EventNodeStarted:
			at[e.Node+" started"] = time.Now()
		case e.Kind == deploy.EventStepStarted && e.Step == deploy.StepCopy:
			at[e.Node+" copying"] = time.Now()
		case e.Kind == deploy.EventStepEnded && e.Step == deploy.StepCopy:
			at[e.Node+" copied"] = time.Now()
		}
	}
	var nodes []deploy.Target
	for i, tg := range tgs {
		nodes = append(nodes, targetOf(tg, fmt.Sprintf("n%d", i+1), sys))
	}
	for _, r := range d.Deploy(context.Background(), nodes, nil) {
		wantPhase(t, r, deploy.PhaseSucceeded)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, pair := range [][2]string{{"n1", "n2"}, {"n2", "n3"}} {
		copying, copied, next := at[pair[0]+" copying"], at[pair[0]+" copied"], at[pair[1]+" started"]
		if copying.IsZero() || copied.IsZero() || next.IsZero() {
			t.Fatalf("events missing: %v", at)
		}
		if gap := next.Sub(copying); gap < 500*time.Millisecond {
			t.Errorf("%s started %s after %s began copying, want at least half a second", pair[1], gap, pair[0])
		}
		if !next.Before(copied) {
			t.Errorf("%s started only once %s's 3 s copy had ended (%s after it began): a long copy held the rollout back", pair[1], pair[0], next.Sub(copying))
		}
	}
}

// Rollout (issue 14): once more nodes than max_failures have failed, no
// new node starts; the nodes not started stay pending, untouched, and say
// which budget stopped them. Nodes already in flight finish.
func TestDeployStopsAtItsFailureBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (twelve hosts): make test runs it")
	}
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	// Slow enough that a failing node beside it fails first.
	slow := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 8 * time.Second})
	bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"app.service"}})
	for _, c := range []struct {
		name        string
		parallelism int
		budget      int
		systems     []string
		want        []deploy.Phase
	}{
		{
			name: "serial, budget 1", parallelism: 1, budget: 1,
			systems: []string{bad, good, bad, good, good},
			want:    []deploy.Phase{deploy.PhaseRolledBack, deploy.PhaseSucceeded, deploy.PhaseRolledBack, deploy.PhasePending, deploy.PhasePending},
		},
		{
			name: "serial, budget 0", parallelism: 1, budget: 0,
			systems: []string{good, bad, good},
			want:    []deploy.Phase{deploy.PhaseSucceeded, deploy.PhaseRolledBack, deploy.PhasePending},
		},
		{
			// The two in flight when the budget is spent both finish.
			name: "parallel, budget 0", parallelism: 2, budget: 0,
			systems: []string{bad, slow, good, good},
			want:    []deploy.Phase{deploy.PhaseRolledBack, deploy.PhaseSucceeded, deploy.PhasePending, deploy.PhasePending},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tgs := fleetOf(t, len(c.systems), old)
			budget := c.budget
			d := deployer(t, deploy.Options{Parallelism: c.parallelism, MaxFailures: &budget,
				Verdict: deploy.VerdictSpec{ConfirmTimeout: 5 * time.Second, SettleTimeout: 2 * time.Second}})
			var nodes []deploy.Target
			for i, tg := range tgs {
				nodes = append(nodes, targetOf(tg, fmt.Sprintf("n%d", i+1), c.systems[i]))
			}
			res := d.Deploy(context.Background(), nodes, nil)
			for i, r := range res {
				if r.Phase != c.want[i] {
					t.Errorf("%s: phase %s, want %s (%s)", r.Name, r.Phase, c.want[i], r.Message)
					continue
				}
				if r.Phase != deploy.PhasePending {
					continue
				}
				wantPhase(t, r, deploy.PhasePending, fmt.Sprintf("more nodes failed than max_failures (%d) allows", c.budget))
				if calls := tgs[i].Calls(); len(calls) != 0 || tgs[i].CurrentSystem() != old || tgs[i].AcceptedConnections() != 0 {
					t.Errorf("%s was touched: calls %v, system %s, %d connections", r.Name, calls, tgs[i].CurrentSystem(), tgs[i].AcceptedConnections())
				}
			}
		})
	}
}

// Rollout (issue 14): an interrupt during a parallel rollout interrupts
// every node in flight with the record a serial rollout keeps (exit 130,
// the step named), starts no other, and ends promptly.
func TestDeployInterruptedWithNodesInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (four hosts): make test runs it")
	}
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	slow := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 20 * time.Second})
	tgs := fleetOf(t, 4, old)
	d := deployer(t, deploy.Options{Parallelism: 2, Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu        sync.Mutex
		active    int
		canceled  time.Time
		loginTook time.Duration
	)
	log := d.Options.Log
	d.Options.Log = func(e deploy.Event) {
		log(e)
		mu.Lock()
		defer mu.Unlock()
		if e.Kind == deploy.EventStepEnded && e.Step == deploy.StepConnect {
			loginTook = max(loginTook, e.Took)
		}
		if e.Kind != deploy.EventStepStarted || e.Step != deploy.StepActivate {
			return
		}
		if active++; active == 2 {
			time.AfterFunc(700*time.Millisecond, func() {
				mu.Lock()
				canceled = time.Now()
				mu.Unlock()
				cancel()
			})
		}
	}
	var nodes []deploy.Target
	for i, tg := range tgs {
		nodes = append(nodes, targetOf(tg, fmt.Sprintf("n%d", i+1), slow))
	}
	res := d.Deploy(ctx, nodes, nil)
	mu.Lock()
	took := time.Since(canceled)
	// As a serial rollout's interrupted node: a few of the machine's SSH
	// round trips, as long as its slowest login took.
	bound := 2*time.Second + 3*loginTook
	mu.Unlock()
	if took > bound {
		t.Errorf("the rollout ended %s after the interrupt, want within %s (its slowest login took %s)", took, bound, loginTook)
	}
	for _, r := range res[:2] {
		if r.ExitCode != deploy.ExitInterrupted || r.Step != deploy.StepActivate {
			t.Errorf("%s in flight: exit %d in step %s, want %d in %s: %s", r.Name, r.ExitCode, r.Step, deploy.ExitInterrupted, deploy.StepActivate, r.Message)
		}
	}
	for i, r := range res[2:] {
		wantPhase(t, r, deploy.PhasePending, "interrupted before this node started")
		if tg := tgs[2+i]; len(tg.Calls()) != 0 || tg.AcceptedConnections() != 0 {
			t.Errorf("%s was touched: %v", r.Name, tg.Calls())
		}
	}
}
