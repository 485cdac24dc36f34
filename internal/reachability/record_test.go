package reachability

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// base is the first probe time; probe i happens i minutes later.
var base = time.Date(2026, 9, 7, 12, 0, 0, 0, time.UTC)

func at(minute int) time.Time { return base.Add(time.Duration(minute) * time.Minute) }

// step is one probe of a sequence and the record expected after it.
type step struct {
	reason      sshdial.Reason
	state       State
	failures    int
	lastSuccess time.Time // zero means "never succeeded"
	// quiet says the probe finds what the record says: it returns the
	// record exactly as it was, times included.
	quiet bool
}

// same is a probe that confirms the record.
func same(r sshdial.Reason) step { return step{reason: r, quiet: true} }

// ok is a successful probe; fail is a failed one.
func ok(state State, lastSuccess time.Time) step {
	return step{reason: sshdial.ReasonNone, state: state, lastSuccess: lastSuccess}
}

func fail(r sshdial.Reason, state State, failures int, lastSuccess time.Time) step {
	return step{reason: r, state: state, failures: failures, lastSuccess: lastSuccess}
}

func msgFor(r sshdial.Reason) string {
	if r == sshdial.ReasonNone {
		return ""
	}
	return fmt.Sprintf("web1:22: %s failure", r)
}

// reachableSince is a record whose last probe succeeded at minute 0.
func reachableSince() Record {
	return Record{State: StateReachable, Host: "web1", CheckedAt: at(0), LastSuccessAt: at(0)}
}

// unreachableAfter is a record unreachable after two network failures,
// having last succeeded at minute 0.
func unreachableAfter() Record {
	return Record{State: StateUnreachable, Reason: sshdial.ReasonNetwork, Message: msgFor(sshdial.ReasonNetwork),
		ConsecutiveFailures: 2, Host: "web1", CheckedAt: at(0), LastSuccessAt: at(0)}
}

func TestObserveSequences(t *testing.T) {
	t.Parallel()
	var never time.Time
	tests := []struct {
		name  string
		start Record
		steps []step // probe i (1-based) is checked at minute i
	}{
		{"unknown + transient network stays unknown with reason shown",
			Reset("web1"), []step{fail(sshdial.ReasonNetwork, StateUnknown, 1, never)}},
		{"unknown + two transient failures is unreachable on the second",
			Reset("web1"), []step{
				fail(sshdial.ReasonTimeout, StateUnknown, 1, never),
				fail(sshdial.ReasonTimeout, StateUnreachable, 2, never),
			}},
		{"unknown + two different transient reasons is unreachable on the second",
			Reset("web1"), []step{
				fail(sshdial.ReasonNetwork, StateUnknown, 1, never),
				fail(sshdial.ReasonAuth, StateUnreachable, 2, never),
			}},
		{"unknown + sticky config is unreachable at once",
			Reset("web1"), []step{fail(sshdial.ReasonConfig, StateUnreachable, 1, never)}},
		{"unknown + sticky host_key is unreachable at once",
			Reset("web1"), []step{fail(sshdial.ReasonHostKey, StateUnreachable, 1, never)}},
		{"reachable + sticky host_key is unreachable at once keeping last success",
			reachableSince(), []step{fail(sshdial.ReasonHostKey, StateUnreachable, 1, at(0))}},
		{"reachable + sticky config is unreachable at once keeping last success",
			reachableSince(), []step{fail(sshdial.ReasonConfig, StateUnreachable, 1, at(0))}},
		{"unknown + one success is reachable",
			Reset("web1"), []step{ok(StateReachable, at(1))}},
		{"unreachable + one success recovers",
			unreachableAfter(), []step{ok(StateReachable, at(1))}},
		{"unknown failing once + success is reachable with streak reset",
			Reset("web1"), []step{
				fail(sshdial.ReasonNetwork, StateUnknown, 1, never),
				ok(StateReachable, at(2)),
			}},
		{"reachable + transient network stays reachable with streak 1",
			reachableSince(), []step{fail(sshdial.ReasonNetwork, StateReachable, 1, at(0))}},
		{"reachable + transient timeout stays reachable with streak 1",
			reachableSince(), []step{fail(sshdial.ReasonTimeout, StateReachable, 1, at(0))}},
		{"reachable + transient auth stays reachable with streak 1",
			reachableSince(), []step{fail(sshdial.ReasonAuth, StateReachable, 1, at(0))}},
		{"reachable + transient unknown stays reachable with streak 1",
			reachableSince(), []step{fail(sshdial.ReasonUnknown, StateReachable, 1, at(0))}},
		{"reachable + network network is unreachable on the second, last success kept; the streak stops at the threshold",
			reachableSince(), []step{
				fail(sshdial.ReasonNetwork, StateReachable, 1, at(0)),
				fail(sshdial.ReasonNetwork, StateUnreachable, 2, at(0)),
				same(sshdial.ReasonNetwork),
				fail(sshdial.ReasonTimeout, StateUnreachable, 2, at(0)),
				same(sshdial.ReasonTimeout),
			}},
		{"day two: a success that confirms a reachable record writes nothing",
			reachableSince(), []step{same(sshdial.ReasonNone), same(sshdial.ReasonNone)}},
		{"day two: a recovery is written, then confirmed quietly",
			unreachableAfter(), []step{ok(StateReachable, at(1)), same(sshdial.ReasonNone), fail(sshdial.ReasonNetwork, StateReachable, 1, at(1))}},
		{"streak resets on success so one later failure does not flip",
			reachableSince(), []step{
				fail(sshdial.ReasonNetwork, StateReachable, 1, at(0)),
				ok(StateReachable, at(2)),
				fail(sshdial.ReasonNetwork, StateReachable, 1, at(2)),
				ok(StateReachable, at(4)),
			}},
		{"unreachable + another transient failure stays unreachable, its reason shown",
			unreachableAfter(), []step{fail(sshdial.ReasonUnknown, StateUnreachable, 2, at(0))}},
		{"sticky host_key after one transient failure flips at once with streak 2",
			reachableSince(), []step{
				fail(sshdial.ReasonTimeout, StateReachable, 1, at(0)),
				fail(sshdial.ReasonHostKey, StateUnreachable, 2, at(0)),
			}},
		{"sticky config after one transient from unknown flips with streak 2",
			Reset("web1"), []step{
				fail(sshdial.ReasonAuth, StateUnknown, 1, never),
				fail(sshdial.ReasonConfig, StateUnreachable, 2, never),
			}},
		{"transient after a sticky failure stays unreachable",
			reachableSince(), []step{
				fail(sshdial.ReasonHostKey, StateUnreachable, 1, at(0)),
				fail(sshdial.ReasonNetwork, StateUnreachable, 2, at(0)),
			}},
		{"recovery after a sticky failure takes one success",
			reachableSince(), []step{
				fail(sshdial.ReasonHostKey, StateUnreachable, 1, at(0)),
				ok(StateReachable, at(2)),
			}},
		{"flap: fail, succeed, fail, fail",
			Reset("web1"), []step{
				fail(sshdial.ReasonNetwork, StateUnknown, 1, never),
				ok(StateReachable, at(2)),
				fail(sshdial.ReasonUnknown, StateReachable, 1, at(2)),
				fail(sshdial.ReasonUnknown, StateUnreachable, 2, at(2)),
				ok(StateReachable, at(5)),
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.start
			for i, s := range tc.steps {
				checked := at(i + 1)
				before := r
				r = Observe(r, Observation{Reason: s.reason, Message: msgFor(s.reason), Host: "web1", CheckedAt: checked})
				if s.quiet {
					if r != before {
						t.Fatalf("after probe %d (%q), which confirms the record:\n got %+v\nwant it unchanged %+v", i+1, s.reason, r, before)
					}
					continue
				}
				want := Record{
					State: s.state, Reason: s.reason, Message: msgFor(s.reason),
					ConsecutiveFailures: s.failures, Host: "web1",
					CheckedAt: checked, LastSuccessAt: s.lastSuccess,
				}
				if r != want {
					t.Fatalf("after probe %d (%q):\n got %+v\nwant %+v", i+1, s.reason, r, want)
				}
			}
		})
	}
}

func TestObserveEveryTransientReason(t *testing.T) {
	t.Parallel()
	for _, reason := range []sshdial.Reason{sshdial.ReasonNetwork, sshdial.ReasonTimeout, sshdial.ReasonAuth, sshdial.ReasonUnknown} {
		t.Run(string(reason), func(t *testing.T) {
			r := Reset("web1")
			r = Observe(r, Observation{Reason: reason, Message: "m1", Host: "web1", CheckedAt: at(1)})
			if r.State != StateUnknown || r.ConsecutiveFailures != 1 || r.Reason != reason || r.Message != "m1" {
				t.Fatalf("after first %s: %+v, want unknown, streak 1, reason shown", reason, r)
			}
			r = Observe(r, Observation{Reason: reason, Message: "m2", Host: "web1", CheckedAt: at(2)})
			if r.State != StateUnreachable || r.ConsecutiveFailures != 2 || r.Reason != reason || r.Message != "m2" {
				t.Fatalf("after second %s: %+v, want unreachable, streak 2", reason, r)
			}
		})
	}
}

func TestObserveFields(t *testing.T) {
	t.Parallel()
	cest := time.FixedZone("CEST", 2*3600)
	tests := []struct {
		name string
		in   Record
		obs  Observation
		want Record
	}{
		{
			name: "success clears reason and message",
			in:   Record{State: StateReachable, Reason: sshdial.ReasonTimeout, Message: "timed out", ConsecutiveFailures: 1, Host: "web1", CheckedAt: at(0), LastSuccessAt: base.Add(-time.Hour)},
			obs:  Observation{Reason: sshdial.ReasonNone, Message: "ignored", Host: "web1", CheckedAt: at(1)},
			want: Record{State: StateReachable, Host: "web1", CheckedAt: at(1), LastSuccessAt: at(1)},
		},
		{
			name: "host is taken from the observation",
			in:   Record{State: StateUnknown, Host: "old"},
			obs:  Observation{Reason: sshdial.ReasonNetwork, Message: "refused", Host: "new", CheckedAt: at(1)},
			want: Record{State: StateUnknown, Reason: sshdial.ReasonNetwork, Message: "refused", ConsecutiveFailures: 1, Host: "new", CheckedAt: at(1)},
		},
		{
			name: "checked_at and last_success_at are stored in UTC",
			in:   Reset("web1"),
			obs:  Observation{Host: "web1", CheckedAt: at(1).In(cest)},
			want: Record{State: StateReachable, Host: "web1", CheckedAt: at(1), LastSuccessAt: at(1)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Observe(tc.in, tc.obs)
			if got != tc.want {
				t.Fatalf("Observe =\n %+v\nwant\n %+v", got, tc.want)
			}
			if got.CheckedAt.Location() != time.UTC {
				t.Fatalf("CheckedAt location = %v, want UTC", got.CheckedAt.Location())
			}
		})
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		host string
	}{
		{"new host name", "web2.example.org"},
		{"ipv6 host", "::1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Reset(tc.host)
			want := Record{State: StateUnknown, Host: tc.host}
			if got != want {
				t.Fatalf("Reset(%q) = %+v, want %+v", tc.host, got, want)
			}
			if got.Failing() {
				t.Fatalf("a reset record reports Failing")
			}
		})
	}
}

func TestFailing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    Record
		want bool
	}{
		{"reset record", Reset("web1"), false},
		{"reachable after success", reachableSince(), false},
		{"reachable with one failure", Record{State: StateReachable, Reason: sshdial.ReasonNetwork, ConsecutiveFailures: 1}, true},
		{"unreachable", unreachableAfter(), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Failing(); got != tc.want {
				t.Fatalf("Failing() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStale(t *testing.T) {
	t.Parallel()
	checked := base
	tests := []struct {
		name     string
		checked  time.Time
		now      time.Time
		interval time.Duration
		want     bool
	}{
		{"interval 0 is never stale", checked, checked.Add(1000 * time.Hour), 0, false},
		{"negative interval is never stale", checked, checked.Add(1000 * time.Hour), -time.Minute, false},
		{"never checked is not stale", time.Time{}, checked.Add(1000 * time.Hour), time.Minute, false},
		{"just checked", checked, checked, time.Minute, false},
		{"two intervals old", checked, checked.Add(2 * time.Minute), time.Minute, false},
		{"exactly three intervals old is not stale", checked, checked.Add(3 * time.Minute), time.Minute, false},
		{"one nanosecond over three intervals is stale", checked, checked.Add(3*time.Minute + time.Nanosecond), time.Minute, true},
		{"three intervals and a second is stale", checked, checked.Add(3*time.Minute + time.Second), time.Minute, true},
		{"one hour interval, 3h old", checked, checked.Add(3 * time.Hour), time.Hour, false},
		{"one hour interval, 3h1m old", checked, checked.Add(3*time.Hour + time.Minute), time.Hour, true},
		{"checked in the future (clock skew) is not stale", checked, checked.Add(-time.Hour), time.Minute, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Record{State: StateReachable, Host: "web1", CheckedAt: tc.checked}
			if got := r.Stale(tc.now, tc.interval, false); got != tc.want {
				t.Fatalf("Stale(now=%v, interval=%v) = %v, want %v", tc.now, tc.interval, got, tc.want)
			}
			if r.Stale(tc.now, tc.interval, true) {
				t.Fatalf("a record the run probed is stale")
			}
		})
	}
}

func TestDue(t *testing.T) {
	t.Parallel()
	checked := base
	tests := []struct {
		name     string
		checked  time.Time
		now      time.Time
		interval time.Duration
		want     bool
	}{
		{"probing off is never due", checked, checked.Add(time.Hour), 0, false},
		{"probing off, never checked, is not due", time.Time{}, checked, 0, false},
		{"never checked is due", time.Time{}, checked, time.Minute, true},
		{"just checked is not due", checked, checked, time.Minute, false},
		{"one second under an interval is not due", checked, checked.Add(59 * time.Second), time.Minute, false},
		{"exactly one interval is due", checked, checked.Add(time.Minute), time.Minute, true},
		{"well over an interval is due", checked, checked.Add(10 * time.Minute), time.Minute, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Record{State: StateReachable, Host: "web1", CheckedAt: tc.checked}
			if got := r.Due(tc.now, tc.interval); got != tc.want {
				t.Fatalf("Due(now=%v, interval=%v) = %v, want %v", tc.now, tc.interval, got, tc.want)
			}
		})
	}
}

func TestFailureThresholdIsTwo(t *testing.T) {
	t.Parallel()
	// The spec fixes the threshold at 2: the smallest that suppresses a one-probe blip.
	if FailureThreshold != 2 {
		t.Fatalf("FailureThreshold = %d, want 2", FailureThreshold)
	}
}

// A partial success (authentication not checked: the credentials were
// withheld) is a success for what it checked, never a success in full.
func TestObservePartial(t *testing.T) {
	t.Parallel()
	var never time.Time
	authFailing := Record{State: StateReachable, Reason: sshdial.ReasonAuth, Message: msgFor(sshdial.ReasonAuth),
		ConsecutiveFailures: 1, Host: "web1", CheckedAt: at(0), LastSuccessAt: at(0)}
	authUnreachable := authFailing
	authUnreachable.State, authUnreachable.ConsecutiveFailures = StateUnreachable, 2
	partial := Observation{Host: "web1", CheckedAt: at(1), Partial: true}
	tests := []struct {
		name  string
		start Record
		want  Record
	}{
		{"reachable stays reachable, the record unchanged: the probe confirmed what it checked", reachableSince(), reachableSince()},
		{"unknown becomes reachable with no success time", Reset("web1"),
			Record{State: StateReachable, Host: "web1", CheckedAt: at(1), LastSuccessAt: never}},
		{"a network failure recovers, last success kept", unreachableAfter(),
			Record{State: StateReachable, Host: "web1", CheckedAt: at(1), LastSuccessAt: at(0)}},
		{"an authentication failure below the threshold is left as it was", authFailing, authFailing},
		{"an authentication failure that made it unreachable is left as it was", authUnreachable, authUnreachable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Observe(tc.start, partial); got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	t.Run("the first full success after partial ones sets the success time", func(t *testing.T) {
		r := Observe(Observe(Reset("web1"), partial), Observation{Host: "web1", CheckedAt: at(2)})
		if !r.LastSuccessAt.Equal(at(2)) || !r.CheckedAt.Equal(at(2)) {
			t.Fatalf("record %+v, want checked and succeeded at %v", r, at(2))
		}
	})
	t.Run("a failure seen without credentials counts as usual", func(t *testing.T) {
		o := Observation{Reason: sshdial.ReasonNetwork, Message: msgFor(sshdial.ReasonNetwork), Host: "web1", CheckedAt: at(1), Partial: true}
		if r := Observe(reachableSince(), o); r.ConsecutiveFailures != 1 || r.Reason != sshdial.ReasonNetwork {
			t.Fatalf("record %+v, want one network failure", r)
		}
	})
}

// An outcome that observed nothing of the target is no observation.
func TestObservationOf(t *testing.T) {
	t.Parallel()
	web := sshdial.Endpoint{Host: "web1", Port: 22}
	for name, c := range map[string]struct {
		o       sshdial.Outcome
		ok      bool
		partial bool
	}{
		"success":   {sshdial.Outcome{Target: web, HostKey: sshdial.HostKeyVerified, Auth: sshdial.AuthAccepted}, true, false},
		"failure":   {sshdial.Outcome{Target: web, Reason: sshdial.ReasonNetwork}, true, false},
		"cancelled": {sshdial.Outcome{Target: web, Canceled: true}, false, false},
		"transport only": {sshdial.Outcome{Target: web, HostKey: sshdial.HostKeyVerified, Auth: sshdial.AuthWithheld,
			Withheld: "write-only"}, true, true},
		"stopped at the bastion": {sshdial.Outcome{Target: web, HostKey: sshdial.HostKeyNotSeen, Auth: sshdial.AuthWithheld,
			Withheld: "write-only"}, false, false},
	} {
		t.Run(name, func(t *testing.T) {
			c.o.CheckedAt = at(3)
			obs, ok := ObservationOf(c.o)
			if ok != c.ok || obs.Partial != c.partial || (ok && (!obs.CheckedAt.Equal(at(3)) || obs.Host != "web1")) {
				t.Fatalf("ObservationOf = %+v, %v; want ok %v, partial %v, stamped %v", obs, ok, c.ok, c.partial, at(3))
			}
		})
	}
}
