package reachability

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

var (
	condT0 = time.Date(2026, 9, 7, 9, 0, 0, 0, time.UTC)
	condT1 = time.Date(2026, 9, 7, 9, 1, 0, 0, time.UTC)
	condT2 = time.Date(2026, 9, 7, 9, 2, 0, 0, time.UTC)
)

var web1 = sshdial.Endpoint{Host: "web1", Port: 22}

func successOutcome() sshdial.Outcome {
	return sshdial.Outcome{Target: web1, HostKey: sshdial.HostKeyVerified, Auth: sshdial.AuthAccepted}
}

func networkOutcome() sshdial.Outcome {
	return sshdial.Outcome{Target: web1, Reason: sshdial.ReasonNetwork, Message: "web1:22: connect: connection refused",
		HostKey: sshdial.HostKeyNotSeen, Auth: sshdial.AuthNotAttempted}
}

// observe runs one probe through Observe and ObservedConditions, as the resource does.
func observe(t *testing.T, prev []conditions.Condition, rec Record, o sshdial.Outcome, gen int64, now time.Time) (Record, []conditions.Condition) {
	t.Helper()
	o.CheckedAt = now
	if obs, ok := ObservationOf(o); ok {
		rec = Observe(rec, obs)
	}
	conds, err := ObservedConditions(prev, rec, o, gen, now)
	if err != nil {
		t.Fatalf("ObservedConditions: %v", err)
	}
	return rec, conds
}

// allTrue is the condition list after a first successful probe at condT0.
func allTrue(t *testing.T) (Record, []conditions.Condition) {
	t.Helper()
	return observe(t, nil, Reset("web1"), successOutcome(), 1, condT0)
}

func types(conds []conditions.Condition) []string {
	var out []string
	for _, c := range conds {
		out = append(out, c.Type)
	}
	return out
}

func mustFind(t *testing.T, conds []conditions.Condition, typ string) conditions.Condition {
	t.Helper()
	c, ok := conditions.Find(conds, typ)
	if !ok {
		t.Fatalf("condition %s missing from %+v", typ, conds)
	}
	return c
}

func TestObservedConditionsSuccess(t *testing.T) {
	t.Parallel()
	_, conds := allTrue(t)
	want := []conditions.Condition{
		{Type: ConditionHostKeyVerified, Status: conditions.True, Reason: ReasonHostKeyMatchesPin,
			Message: "web1:22 presented the pinned host key", LastTransitionTime: condT0, ObservedGeneration: 1},
		{Type: ConditionAuthenticated, Status: conditions.True, Reason: ReasonCredentialsAccepted,
			Message: "web1:22 accepted the credentials", LastTransitionTime: condT0, ObservedGeneration: 1},
		{Type: ConditionReachable, Status: conditions.True, Reason: ReasonProbeSucceeded,
			Message: "web1:22 answered the SSH handshake", LastTransitionTime: condT0, ObservedGeneration: 1},
	}
	if !reflect.DeepEqual(conds, want) {
		t.Fatalf("conditions =\n%+v\nwant\n%+v", conds, want)
	}
}

func TestObservedConditionsSequences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"network failure below threshold keeps HostKeyVerified and Authenticated, Reachable stays True", func(t *testing.T) {
			rec, prev := allTrue(t)
			_, conds := observe(t, prev, rec, networkOutcome(), 2, condT1)
			if !reflect.DeepEqual(types(conds), []string{ConditionHostKeyVerified, ConditionAuthenticated, ConditionReachable}) {
				t.Fatalf("order = %v", types(conds))
			}
			// Not observed by this probe: unchanged, down to their observed generation.
			if !reflect.DeepEqual(conds[:2], prev[:2]) {
				t.Fatalf("unobserved conditions changed:\n%+v\nwas\n%+v", conds[:2], prev[:2])
			}
			r := mustFind(t, conds, ConditionReachable)
			want := conditions.Condition{Type: ConditionReachable, Status: conditions.True, Reason: ReasonConnectionFailed,
				Message:            "still counted reachable after 1 of 2 failed probes: web1:22: connect: connection refused",
				LastTransitionTime: condT0, ObservedGeneration: 2}
			if r != want {
				t.Fatalf("Reachable = %+v, want %+v", r, want)
			}
		}},
		{"second network failure makes Reachable False at now, others untouched", func(t *testing.T) {
			rec, prev := allTrue(t)
			rec, prev = observe(t, prev, rec, networkOutcome(), 1, condT1)
			_, conds := observe(t, prev, rec, networkOutcome(), 1, condT2)
			if !reflect.DeepEqual(conds[:2], prev[:2]) {
				t.Fatalf("unobserved conditions changed:\n%+v\nwas\n%+v", conds[:2], prev[:2])
			}
			r := mustFind(t, conds, ConditionReachable)
			want := conditions.Condition{Type: ConditionReachable, Status: conditions.False, Reason: ReasonConnectionFailed,
				Message: "web1:22: connect: connection refused", LastTransitionTime: condT2, ObservedGeneration: 1}
			if r != want {
				t.Fatalf("Reachable = %+v, want %+v", r, want)
			}
		}},
		{"first probe failing on the network lists every type, unobserved ones Unknown", func(t *testing.T) {
			_, conds := observe(t, nil, Reset("web1"), networkOutcome(), 1, condT0)
			want := []conditions.Condition{
				{Type: ConditionHostKeyVerified, Status: conditions.Unknown, Reason: ReasonNotYetProbed, Message: "not observed yet", LastTransitionTime: condT0, ObservedGeneration: 1},
				{Type: ConditionAuthenticated, Status: conditions.Unknown, Reason: ReasonNotYetProbed, Message: "not observed yet", LastTransitionTime: condT0, ObservedGeneration: 1},
				{Type: ConditionReachable, Status: conditions.Unknown, Reason: ReasonConnectionFailed,
					Message: "1 of 2 failed probes before unreachable: web1:22: connect: connection refused", LastTransitionTime: condT0, ObservedGeneration: 1},
			}
			if !reflect.DeepEqual(conds, want) {
				t.Fatalf("conditions =\n%+v\nwant\n%+v", conds, want)
			}
		}},
		{"withheld credential turns a previous Authenticated True into Unknown: not re-checked", func(t *testing.T) {
			rec, prev := allTrue(t)
			o := sshdial.Outcome{Target: web1, HostKey: sshdial.HostKeyVerified, Auth: sshdial.AuthWithheld, Withheld: "the inline private_key is write-only"}
			rec, conds := observe(t, prev, rec, o, 1, condT1)
			got := mustFind(t, conds, ConditionAuthenticated)
			if got.Status != conditions.Unknown || got.Reason != ReasonCredentialWithheld || got.LastTransitionTime != condT1 ||
				!strings.Contains(got.Message, "not re-checked: the inline private_key is write-only") || !strings.Contains(got.Message, "provider block") {
				t.Fatalf("Authenticated = %+v, want Unknown CredentialWithheld since %v, saying why and what to do", got, condT1)
			}
			r := mustFind(t, conds, ConditionReachable)
			if r.Status != conditions.True || r.LastTransitionTime != condT0 || !strings.Contains(r.Message, "authentication was not re-checked") {
				t.Fatalf("Reachable = %+v, want True since %v, saying authentication was not re-checked", r, condT0)
			}
			if !rec.LastSuccessAt.Equal(condT0) || !rec.CheckedAt.Equal(condT0) {
				t.Fatalf("record %+v: an unauthenticated probe that confirms a reachable record must leave it as it was", rec)
			}
		}},
		{"withheld credential with no previous Authenticated is Unknown CredentialWithheld", func(t *testing.T) {
			o := sshdial.Outcome{Target: web1, HostKey: sshdial.HostKeyVerified, Auth: sshdial.AuthWithheld, Withheld: "the passphrase is write-only"}
			_, conds := observe(t, nil, Reset("web1"), o, 1, condT0)
			got := mustFind(t, conds, ConditionAuthenticated)
			if got.Status != conditions.Unknown || got.Reason != ReasonCredentialWithheld || got.LastTransitionTime != condT0 {
				t.Fatalf("Authenticated = %+v, want Unknown CredentialWithheld at %v", got, condT0)
			}
		}},
		{"a bastion needing withheld credentials leaves the record and says Reachable was not re-checked", func(t *testing.T) {
			rec, prev := allTrue(t)
			o := sshdial.Outcome{Target: web1, HostKey: sshdial.HostKeyNotSeen, Auth: sshdial.AuthWithheld, Withheld: "the inline private_key is write-only"}
			after, conds := observe(t, prev, rec, o, 1, condT2)
			if after != rec {
				t.Fatalf("record changed to %+v; nothing of the target was observed", after)
			}
			if got := mustFind(t, conds, ConditionHostKeyVerified); got != prev[0] {
				t.Fatalf("HostKeyVerified = %+v, want it kept: the target's key was not seen", got)
			}
			r := mustFind(t, conds, ConditionReachable)
			if r.Status != conditions.Unknown || r.Reason != ReasonCredentialWithheld ||
				!strings.Contains(r.Message, "not re-checked") || !strings.Contains(r.Message, "2026-09-07T09:00:00Z") {
				t.Fatalf("Reachable = %+v, want Unknown CredentialWithheld naming when it was last checked", r)
			}
		}},
		{"host key mismatch makes HostKeyVerified False with HostKeyMismatch", func(t *testing.T) {
			rec, prev := allTrue(t)
			o := sshdial.Outcome{Target: web1, Reason: sshdial.ReasonHostKey, Message: "web1:22: handshake: host key mismatch",
				HostKey: sshdial.HostKeyMismatch, Auth: sshdial.AuthNotAttempted}
			rec, conds := observe(t, prev, rec, o, 1, condT1)
			if rec.State != StateUnreachable {
				t.Fatalf("record state = %s, want unreachable at once", rec.State)
			}
			want := []conditions.Condition{
				{Type: ConditionHostKeyVerified, Status: conditions.False, Reason: ReasonHostKeyMismatch,
					Message: "web1:22: handshake: host key mismatch", LastTransitionTime: condT1, ObservedGeneration: 1},
				prev[1],
				{Type: ConditionReachable, Status: conditions.False, Reason: ReasonHostKeyMismatch,
					Message: "web1:22: handshake: host key mismatch", LastTransitionTime: condT1, ObservedGeneration: 1},
			}
			if !reflect.DeepEqual(conds, want) {
				t.Fatalf("conditions =\n%+v\nwant\n%+v", conds, want)
			}
		}},
		{"refused credentials make Authenticated False with AuthenticationFailed", func(t *testing.T) {
			rec, prev := allTrue(t)
			o := sshdial.Outcome{Target: web1, Reason: sshdial.ReasonAuth, Message: "ssh: unable to authenticate",
				HostKey: sshdial.HostKeyVerified, Auth: sshdial.AuthRefused}
			_, conds := observe(t, prev, rec, o, 1, condT1)
			a := mustFind(t, conds, ConditionAuthenticated)
			if a.Status != conditions.False || a.Reason != ReasonAuthenticationFailed || a.LastTransitionTime != condT1 {
				t.Fatalf("Authenticated = %+v, want False AuthenticationFailed at %v", a, condT1)
			}
			if h := mustFind(t, conds, ConditionHostKeyVerified); h.Status != conditions.True || h.LastTransitionTime != condT0 {
				t.Fatalf("HostKeyVerified = %+v, want True since %v", h, condT0)
			}
			if r := mustFind(t, conds, ConditionReachable); r.Status != conditions.True || r.Reason != ReasonAuthenticationFailed {
				t.Fatalf("Reachable = %+v, want still True below threshold with reason AuthenticationFailed", r)
			}
		}},
		{"previous list is not modified", func(t *testing.T) {
			rec, prev := allTrue(t)
			snapshot := append([]conditions.Condition(nil), prev...)
			observe(t, prev, rec, networkOutcome(), 2, condT1)
			if !reflect.DeepEqual(prev, snapshot) {
				t.Fatalf("prev mutated: %+v", prev)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

func TestConditionReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reason sshdial.Reason
		want   string
	}{
		{sshdial.ReasonNone, ReasonProbeSucceeded},
		{sshdial.ReasonConfig, ReasonInvalidConfiguration},
		{sshdial.ReasonTimeout, ReasonProbeTimedOut},
		{sshdial.ReasonHostKey, ReasonHostKeyMismatch},
		{sshdial.ReasonAuth, ReasonAuthenticationFailed},
		{sshdial.ReasonNetwork, ReasonConnectionFailed},
		{sshdial.ReasonUnknown, ReasonProbeFailed},
		{sshdial.Reason("bogus"), ReasonProbeFailed},
	}
	for _, tc := range tests {
		t.Run("reason_"+string(tc.reason), func(t *testing.T) {
			got := ConditionReason(tc.reason)
			if got != tc.want {
				t.Fatalf("ConditionReason(%q) = %q, want %q", tc.reason, got, tc.want)
			}
			if err := conditions.ValidateReason(got); err != nil {
				t.Fatalf("ConditionReason(%q) = %q is not a valid condition reason: %v", tc.reason, got, err)
			}
		})
	}
}

func TestResetConditions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		gen  int64
		host string
	}{
		{"generation 2 on a new host", 2, "web2.example.org"},
		{"generation 1 on an ipv6 host", 1, "::1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conds, err := ResetConditions(tc.gen, tc.host, condT1)
			if err != nil {
				t.Fatalf("ResetConditions: %v", err)
			}
			if !reflect.DeepEqual(types(conds), []string{ConditionHostKeyVerified, ConditionAuthenticated, ConditionReachable}) {
				t.Fatalf("order = %v", types(conds))
			}
			for _, c := range conds {
				if c.Status != conditions.Unknown || c.Reason != ReasonNotYetProbed || c.ObservedGeneration != tc.gen || !c.LastTransitionTime.Equal(condT1) {
					t.Fatalf("%s = %+v, want Unknown NotYetProbed gen %d at %v", c.Type, c, tc.gen, condT1)
				}
				if !strings.Contains(c.Message, tc.host) {
					t.Fatalf("%s message %q does not name host %q", c.Type, c.Message, tc.host)
				}
			}
		})
	}
}

// A config failure says the host key is not verified only when the pin is
// what is missing; a bad credential leaves the host key as last observed.
func TestObservedConditionsConfigField(t *testing.T) {
	t.Parallel()
	rec, prev := allTrue(t)
	noPin := sshdial.Outcome{Target: web1, Reason: sshdial.ReasonConfig, Field: "host_key_fingerprint",
		Message: "web1:22: resolve: host_key_fingerprint: no host key pin is set", HostKey: sshdial.HostKeyNotSeen, Auth: sshdial.AuthNotAttempted}
	_, conds := observe(t, prev, rec, noPin, 2, condT1)
	if c := mustFind(t, conds, ConditionHostKeyVerified); c.Status != conditions.False || c.Reason != ReasonInvalidConfiguration {
		t.Errorf("no pin: HostKeyVerified = %s/%s, want False/InvalidConfiguration", c.Status, c.Reason)
	}
	badKey := noPin
	badKey.Field, badKey.Message = "private_key_file", "web1:22: resolve: private_key_file: cannot read /nope"
	_, conds = observe(t, prev, rec, badKey, 2, condT1)
	if c := mustFind(t, conds, ConditionHostKeyVerified); c.Status != conditions.True || !c.LastTransitionTime.Equal(condT0) {
		t.Errorf("bad key file: HostKeyVerified = %+v, want the earlier True untouched", c)
	}
	if c := mustFind(t, conds, ConditionReachable); c.Status != conditions.False || c.Reason != ReasonInvalidConfiguration {
		t.Errorf("bad key file: Reachable = %s/%s, want False/InvalidConfiguration", c.Status, c.Reason)
	}
}
