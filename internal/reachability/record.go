// Package reachability keeps the answer to "is this SSH host still reachable,
// why not, and since when": the record of one host, the asymmetric
// hysteresis that moves it between states, staleness, the probe interval,
// and a bounded pass that probes many hosts under a shared limit.
package reachability

import (
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// State is the reachability state of a host.
type State string

// The states. unknown is never inferred: it is the state of a host not yet
// probed, or whose record was reset.
const (
	StateUnknown     State = "unknown"
	StateReachable   State = "reachable"
	StateUnreachable State = "unreachable"
)

// FailureThreshold is the transient failure streak at which a host becomes
// unreachable: the smallest value that suppresses a single-probe blip.
const FailureThreshold = 2

// Record is what is known about one host.
type Record struct {
	State               State
	Reason              sshdial.Reason // empty after a success
	Message             string
	ConsecutiveFailures int
	Host                string    // always the target, never the bastion
	CheckedAt           time.Time // zero until the first observation
	LastSuccessAt       time.Time // zero until the first success; cleared only by Reset
}

// Observation is one probe result, as the transition rule needs it.
type Observation struct {
	Reason    sshdial.Reason
	Message   string
	Host      string
	CheckedAt time.Time
	// Partial says authentication was not checked (the credentials were
	// withheld from the probe): a partial success proves transport and host
	// key, nothing more.
	Partial bool
}

// Reset is the record of a host whose connection changed: unknown, with the
// new host, and nothing else. A reset invalidates observations; it is not one.
func Reset(host string) Record {
	return Record{State: StateUnknown, Host: host}
}

// Observe applies one observation to a record (asymmetric hysteresis):
//
//   - a success makes the host reachable at once, from any state;
//   - a sticky failure (config, host_key) makes it unreachable at once;
//   - a transient failure (network, timeout, auth, unknown) makes it
//     unreachable on the probe where the streak reaches FailureThreshold, and
//     until then leaves the state exactly as it was: a failure never promotes
//     unknown to reachable, while reason and message already show it;
//   - a partial success (authentication not checked) is a success for what
//     it checked, but never moves LastSuccessAt, which means a success in
//     full; and it leaves a record whose last failure was authentication
//     exactly as it was, since it learnt nothing about that failure.
//
// The record is quiet (the day-two rule): an observation that finds what
// the record already says returns it unchanged, its times included, so a
// refresh that observes nothing new leaves state exactly as it was.
// CheckedAt is therefore when the record last changed, and LastSuccessAt
// when a success last changed it; and the streak counts up to the
// threshold, where the state turns unreachable, and stays there (how long
// a host has been unreachable is its Reachable condition's transition
// time).
func Observe(r Record, o Observation) Record {
	if o.Partial && o.Reason == sshdial.ReasonNone && r.Reason == sshdial.ReasonAuth {
		return r
	}
	next := r
	next.Host = o.Host
	next.CheckedAt = o.CheckedAt.UTC()
	if o.Reason == sshdial.ReasonNone {
		next.State = StateReachable
		next.Reason, next.Message = sshdial.ReasonNone, ""
		next.ConsecutiveFailures = 0
		if !o.Partial {
			next.LastSuccessAt = next.CheckedAt
		}
	} else {
		next.Reason, next.Message = o.Reason, o.Message
		next.ConsecutiveFailures = min(next.ConsecutiveFailures+1, FailureThreshold)
		if o.Reason.Sticky() || next.ConsecutiveFailures >= FailureThreshold {
			next.State = StateUnreachable
		}
	}
	if !r.CheckedAt.IsZero() && r.Same(next) && (o.Partial || !r.LastSuccessAt.IsZero() || o.Reason != sshdial.ReasonNone) {
		return r
	}
	return next
}

// Same reports whether two records say the same thing of their host,
// whenever it was observed.
func (r Record) Same(o Record) bool {
	return r.State == o.State && r.Reason == o.Reason && r.Message == o.Message &&
		r.ConsecutiveFailures == o.ConsecutiveFailures && r.Host == o.Host
}

// Failing reports whether the last probe failed, whatever the state.
func (r Record) Failing() bool { return r.Reason != sshdial.ReasonNone }

// Stale reports whether a record the run reading it did not bring up to
// date (it did not probe the host) last changed more than three intervals
// before now: the run cannot tell how the host is now, nor when it was
// last looked at, since a probe that confirms a record writes nothing.
// With probing off (interval 0) there is no cadence to fall behind, so
// nothing is stale; a record never checked is not stale either, it is
// unknown.
func (r Record) Stale(now time.Time, interval time.Duration, probedNow bool) bool {
	if probedNow || interval <= 0 || r.CheckedAt.IsZero() {
		return false
	}
	return now.Sub(r.CheckedAt) > 3*interval
}

// AuthUnconfirmed reports whether a reachable record rests on probes that
// did not check authentication (Observation.Partial) since withheldSince
// (when they stopped checking it: the Authenticated condition's
// transition), for more than three intervals: the host answers with its
// pinned key, and nothing says it still accepts the credentials. With
// probing off nothing is due, so nothing is unconfirmed either.
func (r Record) AuthUnconfirmed(now time.Time, interval time.Duration, withheldSince time.Time) bool {
	if interval <= 0 || r.State != StateReachable || r.Failing() || withheldSince.IsZero() {
		return false
	}
	return r.LastSuccessAt.IsZero() || now.Sub(withheldSince) > 3*interval
}

// Due reports whether a refresh should probe: probing is on and the record
// last changed at least one interval ago (or was never checked). After a
// change, refreshes leave the host alone for an interval; then each one
// probes, and writes only what changed.
func (r Record) Due(now time.Time, interval time.Duration) bool {
	if interval <= 0 {
		return false
	}
	return r.CheckedAt.IsZero() || now.Sub(r.CheckedAt) >= interval
}
