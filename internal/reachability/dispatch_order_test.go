package reachability_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// dialRecorder is a dialer that notes the address of every TCP connect, in
// the order they happen.
type dialRecorder struct {
	mu    sync.Mutex
	addrs []string
}

func (r *dialRecorder) dialer() *sshdial.Dialer {
	return &sshdial.Dialer{NetDialer: &net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		r.mu.Lock()
		r.addrs = append(r.addrs, address)
		r.mu.Unlock()
		return nil
	}}}
}

func (r *dialRecorder) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.addrs)
}

// Requirement "the dispatch order of a pass" (reachability seed, The
// poller: a pass sorts by a total order and acquires the shared semaphore
// per host preserving dispatch order; spec: probes are dispatched in order
// of name): with one slot the probes run one after the other, so the
// order of their TCP connects is the dispatch order. Given out of order,
// and not in reverse either, they are dialled by name, while the outcomes
// still come back in input order.
func TestProbeAllDispatchesInNameOrder(t *testing.T) {
	t.Parallel()
	client := sshtest.NewKey(t)
	names := []string{"delta", "alpha", "echo", "charlie", "bravo"}
	var targets []reachability.Named
	addrOf := map[string]string{}
	for _, name := range names {
		n := named(name, sshtest.NewServerWithKeys(t, sshtest.Healthy, nil, client))
		targets = append(targets, n)
		addrOf[name] = n.Target.Addr()
	}
	rec := &dialRecorder{}
	p := &reachability.Prober{Dialer: rec.dialer(), Slots: semaphore.NewWeighted(1), Timeout: 5 * time.Second}
	out, err := p.ProbeAll(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if !o.Reachable() || o.Target.Addr() != targets[i].Target.Addr() {
			t.Errorf("outcome %d = %+v, want %s reachable (input order)", i, o, names[i])
		}
	}
	sorted := slices.Sorted(slices.Values(names))
	var want []string
	for _, name := range sorted {
		want = append(want, addrOf[name])
	}
	if got := rec.order(); !slices.Equal(got, want) {
		byAddr := map[string]string{}
		for name, a := range addrOf {
			byAddr[a] = name
		}
		var dialled []string
		for _, a := range got {
			dialled = append(dialled, byAddr[a])
		}
		t.Errorf("dialled %q, want name order %q", dialled, sorted)
	}
}
