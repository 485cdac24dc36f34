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
func Observe(r Record, o Observation) Record {
	if o.Partial && o.Reason == sshdial.ReasonNone && r.Reason == sshdial.ReasonAuth {
		return r
	}
	r.Host = o.Host
	r.CheckedAt = o.CheckedAt.UTC()
	if o.Reason == sshdial.ReasonNone {
		r.State = StateReachable
		r.Reason, r.Message = sshdial.ReasonNone, ""
		r.ConsecutiveFailures = 0
		if !o.Partial {
			r.LastSuccessAt = r.CheckedAt
		}
		return r
	}
	r.Reason, r.Message = o.Reason, o.Message
	r.ConsecutiveFailures++
	if o.Reason.Sticky() || r.ConsecutiveFailures >= FailureThreshold {
		r.State = StateUnreachable
	}
	return r
}

// Failing reports whether the last probe failed, whatever the state.
func (r Record) Failing() bool { return r.Reason != sshdial.ReasonNone }

// Stale reports whether the record is older than three intervals at now. With
// probing off (interval 0) there is no cadence to fall behind, so nothing is
// stale; a record never checked is not stale either, it is unknown.
func (r Record) Stale(now time.Time, interval time.Duration) bool {
	if interval <= 0 || r.CheckedAt.IsZero() {
		return false
	}
	return now.Sub(r.CheckedAt) > 3*interval
}

// AuthUnconfirmed reports whether a reachable record rests on probes that
// did not check authentication (Observation.Partial) for more than three
// intervals: the host answers with its pinned key, and nothing says it still
// accepts the credentials. With probing off nothing is due, so nothing is
// unconfirmed either.
func (r Record) AuthUnconfirmed(now time.Time, interval time.Duration) bool {
	if interval <= 0 || r.State != StateReachable || r.Failing() || !r.CheckedAt.After(r.LastSuccessAt) {
		return false
	}
	return r.LastSuccessAt.IsZero() || now.Sub(r.LastSuccessAt) > 3*interval
}

// Due reports whether a refresh should probe: probing is on and the record
// is at least one interval old (or was never checked).
func (r Record) Due(now time.Time, interval time.Duration) bool {
	if interval <= 0 {
		return false
	}
	return r.CheckedAt.IsZero() || now.Sub(r.CheckedAt) >= interval
}
