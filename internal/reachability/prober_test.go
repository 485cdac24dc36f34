package reachability_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

func named(name string, s *sshtest.Server) reachability.Named {
	key := s.ClientKey
	pin := sshdial.Pin{}
	if s.HostKey != nil {
		pin = sshdial.PinKey(s.HostKey.Public)
	}
	return reachability.Named{Name: name, Target: sshdial.Target{
		Endpoint:    sshdial.Endpoint{Host: s.Host, Port: s.Port, User: "root"},
		Pin:         pin,
		Credentials: sshdial.Credentials{PrivateKey: key.PEM()},
	}}
}

func blackHoled(t *testing.T, name string, client *sshtest.Key) reachability.Named {
	s := sshtest.NewServer(t, sshtest.BlackHole)
	n := named(name, &sshtest.Server{Host: s.Host, Port: s.Port, ClientKey: client})
	n.Target.Pin = sshdial.PinKey(sshtest.NewKey(t).Public)
	return n
}

// Outcomes come back in input order whatever the dispatch order, and each
// names its own target.
func TestProbeAllKeepsInputOrder(t *testing.T) {
	t.Parallel()
	client := sshtest.NewKey(t)
	var targets []reachability.Named
	for _, name := range []string{"delta", "alpha", "charlie", "bravo"} {
		targets = append(targets, named(name, sshtest.NewServerWithKeys(t, sshtest.Healthy, nil, client)))
	}
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(2), Timeout: 2 * time.Second}
	out, err := p.ProbeAll(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if !o.Reachable() || o.Target.Port != targets[i].Target.Port {
			t.Errorf("outcome %d = %+v, want reachable %s", i, o, targets[i].Target.Addr())
		}
	}
}

func TestProbeAllRefusesDuplicateNames(t *testing.T) {
	t.Parallel()
	s := sshtest.NewServer(t, sshtest.Healthy)
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(2)}
	_, err := p.ProbeAll(context.Background(), []reachability.Named{named("a", s), named("b", s), named("a", s)})
	want := `target name "a" is given twice, by targets[0] and targets[2]: names must be unique`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if err := reachability.CheckNames([]string{"a", "b", "a"}); err == nil || err.Error() != want {
		t.Fatalf("CheckNames = %v, want %q", err, want)
	}
	if s.Accepted() != 0 {
		t.Errorf("a refused pass dialled %d times", s.Accepted())
	}
}

// A pass over n black-holed hosts with c slots costs ceil(n/c) probe
// timeouts: the slots bound it from below, and it is far from the n
// timeouts of probes run one after the other.
func TestProbeAllCostIsBoundedBySlots(t *testing.T) {
	t.Parallel()
	client := sshtest.NewKey(t)
	const timeout = 500 * time.Millisecond
	const n, slots = 8, 4
	var targets []reachability.Named
	for i := range n {
		targets = append(targets, blackHoled(t, fmt.Sprintf("h%d", i), client))
	}
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(slots), Timeout: timeout}
	begin := time.Now()
	out, err := p.ProbeAll(context.Background(), targets)
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		if o.Reason != sshdial.ReasonTimeout {
			t.Fatalf("outcome %+v, want timeout", o)
		}
	}
	// ceil(8/4) = 2 rounds; fewer would mean the limit was not held. The
	// upper bound is generous (late timers under -race) yet below the 8
	// rounds of probes serialised.
	if took < 2*timeout || took > 6*timeout {
		t.Errorf("pass took %s, want about 2 probe timeouts (%s), far from %d", took, 2*timeout, n)
	}
}

// A pass cancelled while probes wait for a slot reports them cancelled
// (not observed), and returns promptly.
func TestProbeAllCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	client := sshtest.NewKey(t)
	var targets []reachability.Named
	for i := range 3 {
		targets = append(targets, blackHoled(t, fmt.Sprintf("h%d", i), client))
	}
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(1), Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	out, err := p.ProbeAll(ctx, targets)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("cancelled pass took %s", took)
	}
	for i, o := range out {
		if !o.Canceled || o.Reason != sshdial.ReasonNone {
			t.Errorf("outcome %d = %+v, want cancelled with no reason", i, o)
		}
	}
}

// Probe takes a slot: with the only slot held elsewhere it waits, and gives
// up as cancelled when its context ends first.
func TestProbeWaitsForASlot(t *testing.T) {
	t.Parallel()
	s := sshtest.NewServer(t, sshtest.Healthy)
	slots := semaphore.NewWeighted(1)
	if err := slots.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: slots}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if o := p.Probe(ctx, named("a", s).Target); !o.Canceled {
		t.Fatalf("probe without a free slot = %+v, want cancelled", o)
	}
	if s.Accepted() != 0 {
		t.Errorf("probe dialled without a slot")
	}
	slots.Release(1)
	if o := p.Probe(context.Background(), named("a", s).Target); !o.Reachable() {
		t.Fatalf("probe with a free slot = %+v, want reachable", o)
	}
}

// Each outcome is stamped when its own probe ends, not when the pass does:
// a quick host's result is not dated by a slow one's timeout.
func TestProbeAllStampsEachProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a 3 s probe timeout): make test runs it")
	}
	t.Parallel()
	client := sshtest.NewKey(t)
	// The timeout is long against a quick probe, so that a busy machine's
	// slow handshake does not eat the margin; stamping every outcome at the
	// pass's end would put the two stamps within moments of each other.
	const timeout = 3 * time.Second
	targets := []reachability.Named{
		named("quick", sshtest.NewServerWithKeys(t, sshtest.Healthy, nil, client)),
		blackHoled(t, "slow", client),
	}
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(2), Timeout: timeout, Clock: clock.Real{}}
	begin := time.Now()
	out, err := p.ProbeAll(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	quick, slow := out[0].CheckedAt, out[1].CheckedAt
	if quick.Before(begin) || slow.Sub(quick) < timeout/2 {
		t.Fatalf("quick probe stamped %s, slow one %s: want the quick one most of a timeout (%s) earlier", quick, slow, timeout)
	}
}

// An empty pass is no error: a module with no hosts gets no outcomes.
func TestProbeAllEmpty(t *testing.T) {
	t.Parallel()
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(1)}
	out, err := p.ProbeAll(context.Background(), nil)
	if err != nil || len(out) != 0 {
		t.Fatalf("ProbeAll(nil) = %v, %v; want no outcomes, no error", out, err)
	}
}

// An interrupt of the process cancels the probes in flight and those
// waiting for a slot, whatever their callers' contexts say.
func TestProberInterrupt(t *testing.T) {
	t.Parallel()
	client := sshtest.NewKey(t)
	interrupt, stop := context.WithCancel(context.Background())
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(1), Timeout: 10 * time.Second, Interrupt: interrupt}
	targets := []reachability.Named{blackHoled(t, "a", client), blackHoled(t, "b", client)}
	time.AfterFunc(300*time.Millisecond, stop)
	begin := time.Now()
	out, err := p.ProbeAll(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("an interrupted pass took %s, against a 10s probe timeout", took)
	}
	for i, o := range out {
		if !o.Canceled {
			t.Errorf("outcome %d = %+v, want cancelled", i, o)
		}
	}
	if o := p.Probe(context.Background(), targets[0].Target); !o.Canceled {
		t.Errorf("a probe after the interrupt = %+v, want cancelled", o)
	}
}

// panickingDialer is a dialer whose TCP connect panics for addr, in the
// goroutine that runs the probe, as a bug in the dial path would; every
// other address is dialled as usual.
func panickingDialer(addr string) *sshdial.Dialer {
	return &sshdial.Dialer{NetDialer: &net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		if address == addr {
			panic("injected fault in the dial of " + address)
		}
		return nil
	}}}
}

// A probe that panics is contained: it is an observation of reason unknown
// naming the panic, and the pass goes on to probe the other hosts (before
// and after it in dispatch order) instead of ending the provider process.
func TestProbeAllContainsAPanickingProbe(t *testing.T) {
	t.Parallel()
	client := sshtest.NewKey(t)
	var targets []reachability.Named
	for _, name := range []string{"alpha", "bravo", "charlie"} {
		targets = append(targets, named(name, sshtest.NewServerWithKeys(t, sshtest.Healthy, nil, client)))
	}
	bad := targets[1].Target.Addr()
	p := &reachability.Prober{Dialer: panickingDialer(bad), Slots: semaphore.NewWeighted(1), Timeout: 2 * time.Second}
	out, err := p.ProbeAll(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if !out[i].Reachable() {
			t.Errorf("%s = %+v, want reachable: a panic in another probe must not stop the pass", targets[i].Name, out[i])
		}
	}
	o := out[1]
	if o.Canceled || o.Reason != sshdial.ReasonUnknown || !strings.Contains(o.Message, "panic") ||
		!strings.Contains(o.Message, "injected fault in the dial of "+bad) || o.CheckedAt.IsZero() {
		t.Errorf("panicking probe = %+v, want reason unknown, stamped, with the panic in its message", o)
	}
	if o.Target != targets[1].Target.Endpoint {
		t.Errorf("panicking probe names %+v, want its target %+v", o.Target, targets[1].Target.Endpoint)
	}
	// The slot it held was given back: a single probe still gets one.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if o := p.Probe(ctx, targets[0].Target); !o.Reachable() {
		t.Errorf("probe after the panic = %+v, want reachable (the panicking probe kept its slot?)", o)
	}
	if o := p.Probe(ctx, targets[1].Target); o.Reason != sshdial.ReasonUnknown || !strings.Contains(o.Message, "panic") {
		t.Errorf("single panicking probe = %+v, want reason unknown with the panic", o)
	}
	if obs, ok := reachability.ObservationOf(o); !ok || obs.Reason.Sticky() {
		t.Errorf("ObservationOf(panicked) = %+v, %v; want a transient observation", obs, ok)
	}
}
