package reachability

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// Prober runs probes under one limit on simultaneous probes. The limit is
// shared by every probe of the process, whoever asks: refreshes, the data
// source, node health and plan-time deployment probes.
type Prober struct {
	Dialer  *sshdial.Dialer
	Slots   *semaphore.Weighted
	Timeout time.Duration // per probe; sshdial.ProbeTimeout when zero
	// Clock stamps each outcome's CheckedAt when its probe ends; the wall
	// clock when nil.
	Clock clock.Clock
	// Interrupt, when it ends, cancels every probe in flight or waiting for
	// a slot, as a cancellation of the caller's context would: the process
	// was interrupted. Nil when only callers cancel.
	Interrupt context.Context
}

// withInterrupt is ctx, also cancelled when Interrupt ends.
func (p *Prober) withInterrupt(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if p.Interrupt == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(p.Interrupt, cancel)
	return ctx, func() { stop(); cancel() }
}

// Named is a target with the name it is reported under.
type Named struct {
	Name   string
	Target sshdial.Target
}

func (p *Prober) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return sshdial.ProbeTimeout
}

// Probe probes one target once a slot is free. A cancellation while waiting
// for the slot is a cancelled outcome, like one during the dial.
func (p *Prober) Probe(ctx context.Context, t sshdial.Target) sshdial.Outcome {
	ctx, cancel := p.withInterrupt(ctx)
	defer cancel()
	if err := p.Slots.Acquire(ctx, 1); err != nil {
		return sshdial.Outcome{Target: t.Endpoint, Canceled: true}
	}
	defer p.Slots.Release(1)
	return p.probe(ctx, t)
}

// probe runs one probe in a slot the caller holds and stamps when it ended.
func (p *Prober) probe(ctx context.Context, t sshdial.Target) sshdial.Outcome {
	o := p.contained(ctx, t)
	if p.Clock != nil {
		o.CheckedAt = p.Clock.Now()
	} else {
		o.CheckedAt = time.Now().UTC()
	}
	return o
}

// contained is the dial of one probe, with a panic in it recovered: a bug
// in the dial path costs that probe (an observation of reason unknown that
// names the panic), never the pass nor the provider process.
func (p *Prober) contained(ctx context.Context, t sshdial.Target) (o sshdial.Outcome) {
	defer func() {
		if v := recover(); v != nil {
			o = sshdial.Outcome{Target: t.Endpoint, Reason: sshdial.ReasonUnknown,
				HostKey: sshdial.HostKeyNotSeen, Auth: sshdial.AuthNotAttempted,
				Message: sshdial.Sanitize(fmt.Sprintf("%s: the probe panicked (a bug in the provider; please report it): %v", t.Addr(), v))}
		}
	}()
	return p.Dialer.Probe(ctx, t, p.timeout())
}

// ProbeAll probes every target and returns the outcomes in input order.
// Probes are dispatched in order of name (a total order: duplicate names are
// refused), each when a slot frees, so a pass costs at most
// ceil(n / slots) probe timeouts.
func (p *Prober) ProbeAll(ctx context.Context, targets []Named) ([]sshdial.Outcome, error) {
	order := make([]int, len(targets))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case targets[a].Name < targets[b].Name:
			return -1
		case targets[a].Name > targets[b].Name:
			return 1
		}
		return 0
	})
	for k := 1; k < len(order); k++ {
		if targets[order[k]].Name == targets[order[k-1]].Name {
			return nil, duplicateName(targets[order[k]].Name, min(order[k-1], order[k]), max(order[k-1], order[k]))
		}
	}
	ctx, cancel := p.withInterrupt(ctx)
	defer cancel()
	out := make([]sshdial.Outcome, len(targets))
	var wg sync.WaitGroup
	for _, i := range order {
		// Acquiring here, not in the goroutine, keeps dispatch in name order.
		if err := p.Slots.Acquire(ctx, 1); err != nil {
			out[i] = sshdial.Outcome{Target: targets[i].Target.Endpoint, Canceled: true}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.Slots.Release(1)
			out[i] = p.probe(ctx, targets[i].Target)
		}()
	}
	wg.Wait()
	return out, nil
}

// CheckNames refuses a list of target names with a duplicate: a pass
// dispatches in name order, which must be a total order.
func CheckNames(names []string) error {
	seen := make(map[string]int, len(names))
	for i, n := range names {
		if first, ok := seen[n]; ok {
			return duplicateName(n, first, i)
		}
		seen[n] = i
	}
	return nil
}

func duplicateName(name string, first, second int) error {
	return fmt.Errorf("target name %q is given twice, by targets[%d] and targets[%d]: names must be unique", name, first, second)
}

// ObservationOf turns a probe outcome into the observation the transition
// rule takes. ok is false when the outcome observed nothing of the target
// (cancelled, or stopped at a bastion that needs withheld credentials):
// such an outcome must not touch a record.
func ObservationOf(o sshdial.Outcome) (obs Observation, ok bool) {
	if o.Canceled || o.Unchecked() {
		return Observation{}, false
	}
	return Observation{Reason: o.Reason, Message: o.Message, Host: o.Target.Host, CheckedAt: o.CheckedAt,
		Partial: o.Auth == sshdial.AuthWithheld}, true
}
