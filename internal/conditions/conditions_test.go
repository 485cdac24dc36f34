package conditions

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	t0 = time.Date(2026, 9, 7, 10, 0, 0, 0, time.UTC)
	t1 = time.Date(2026, 9, 7, 10, 5, 0, 0, time.UTC)
)

// testTypes is a three-type resource, like an executor's.
var testTypes = Types{"HostKeyVerified", "Authenticated", "Reachable"}

func cond(typ string, st Status, reason, msg string, at time.Time, gen int64) Condition {
	return Condition{Type: typ, Status: st, Reason: reason, Message: msg, LastTransitionTime: at, ObservedGeneration: gen}
}

func TestTypesSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []Condition
		set  Condition
		now  time.Time
		want []Condition
	}{
		{
			name: "new type is added with now as transition time",
			in:   nil,
			set:  Condition{Type: "Reachable", Status: True, Reason: "ProbeSucceeded", Message: "web1:22 answered", ObservedGeneration: 1},
			now:  t0,
			want: []Condition{cond("Reachable", True, "ProbeSucceeded", "web1:22 answered", t0, 1)},
		},
		{
			name: "same status keeps transition time and replaces reason message generation",
			in:   []Condition{cond("Reachable", True, "ProbeSucceeded", "old", t0, 1)},
			set:  Condition{Type: "Reachable", Status: True, Reason: "ConnectionFailed", Message: "new", ObservedGeneration: 2},
			now:  t1,
			want: []Condition{cond("Reachable", True, "ConnectionFailed", "new", t0, 2)},
		},
		{
			name: "status change moves transition time to now",
			in:   []Condition{cond("Reachable", True, "ProbeSucceeded", "old", t0, 1)},
			set:  Condition{Type: "Reachable", Status: False, Reason: "ConnectionFailed", Message: "refused", ObservedGeneration: 1},
			now:  t1,
			want: []Condition{cond("Reachable", False, "ConnectionFailed", "refused", t1, 1)},
		},
		{
			name: "caller's LastTransitionTime is ignored on a new type",
			in:   nil,
			set:  Condition{Type: "Reachable", Status: Unknown, Reason: "NotYetProbed", LastTransitionTime: t1},
			now:  t0,
			want: []Condition{cond("Reachable", Unknown, "NotYetProbed", "", t0, 0)},
		},
		{
			name: "caller's LastTransitionTime is ignored on a status change",
			in:   []Condition{cond("Reachable", Unknown, "NotYetProbed", "", t0, 0)},
			set:  Condition{Type: "Reachable", Status: True, Reason: "ProbeSucceeded", LastTransitionTime: t0.Add(-time.Hour)},
			now:  t1,
			want: []Condition{cond("Reachable", True, "ProbeSucceeded", "", t1, 0)},
		},
		{
			name: "now in another zone is stored as UTC",
			in:   nil,
			set:  Condition{Type: "Reachable", Status: True, Reason: "ProbeSucceeded"},
			now:  t0.In(time.FixedZone("CEST", 2*3600)),
			want: []Condition{cond("Reachable", True, "ProbeSucceeded", "", t0, 0)},
		},
		{
			name: "reverse-ordered input comes out in Types order",
			in: []Condition{
				cond("Reachable", True, "ProbeSucceeded", "", t0, 1),
				cond("Authenticated", True, "CredentialsAccepted", "", t0, 1),
			},
			set: Condition{Type: "HostKeyVerified", Status: True, Reason: "HostKeyMatchesPin", ObservedGeneration: 1},
			now: t1,
			want: []Condition{
				cond("HostKeyVerified", True, "HostKeyMatchesPin", "", t1, 1),
				cond("Authenticated", True, "CredentialsAccepted", "", t0, 1),
				cond("Reachable", True, "ProbeSucceeded", "", t0, 1),
			},
		},
		{
			name: "fully reversed input is sorted when an existing type is updated",
			in: []Condition{
				cond("Reachable", True, "ProbeSucceeded", "", t0, 1),
				cond("Authenticated", True, "CredentialsAccepted", "", t0, 1),
				cond("HostKeyVerified", True, "HostKeyMatchesPin", "", t0, 1),
			},
			set: Condition{Type: "Authenticated", Status: True, Reason: "CredentialsAccepted", Message: "again", ObservedGeneration: 2},
			now: t1,
			want: []Condition{
				cond("HostKeyVerified", True, "HostKeyMatchesPin", "", t0, 1),
				cond("Authenticated", True, "CredentialsAccepted", "again", t0, 2),
				cond("Reachable", True, "ProbeSucceeded", "", t0, 1),
			},
		},
		{
			name: "middle type added between existing first and last",
			in: []Condition{
				cond("HostKeyVerified", True, "HostKeyMatchesPin", "", t0, 1),
				cond("Reachable", True, "ProbeSucceeded", "", t0, 1),
			},
			set: Condition{Type: "Authenticated", Status: False, Reason: "AuthenticationFailed", ObservedGeneration: 1},
			now: t1,
			want: []Condition{
				cond("HostKeyVerified", True, "HostKeyMatchesPin", "", t0, 1),
				cond("Authenticated", False, "AuthenticationFailed", "", t1, 1),
				cond("Reachable", True, "ProbeSucceeded", "", t0, 1),
			},
		},
		{
			name: "updating one condition leaves the others untouched",
			in: []Condition{
				cond("HostKeyVerified", True, "HostKeyMatchesPin", "k", t0, 1),
				cond("Authenticated", True, "CredentialsAccepted", "a", t0, 1),
				cond("Reachable", True, "ProbeSucceeded", "r", t0, 1),
			},
			set: Condition{Type: "Reachable", Status: False, Reason: "ProbeTimedOut", Message: "timed out", ObservedGeneration: 2},
			now: t1,
			want: []Condition{
				cond("HostKeyVerified", True, "HostKeyMatchesPin", "k", t0, 1),
				cond("Authenticated", True, "CredentialsAccepted", "a", t0, 1),
				cond("Reachable", False, "ProbeTimedOut", "timed out", t1, 2),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := testTypes.Set(tc.in, tc.set, tc.now)
			if err != nil {
				t.Fatalf("Set: unexpected error %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Set =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestTypesSetDoesNotMutateInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  Condition
	}{
		{"status change of an existing type", Condition{Type: "Reachable", Status: False, Reason: "ConnectionFailed"}},
		{"same status of an existing type", Condition{Type: "Reachable", Status: True, Reason: "Other", Message: "m"}},
		{"new type that sorts first", Condition{Type: "HostKeyVerified", Status: True, Reason: "HostKeyMatchesPin"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Out of order and with spare capacity, so an in-place sort or append would show.
			in := make([]Condition, 2, 8)
			in[0] = cond("Reachable", True, "ProbeSucceeded", "r", t0, 1)
			in[1] = cond("Authenticated", True, "CredentialsAccepted", "a", t0, 1)
			snapshot := []Condition{in[0], in[1]}
			if _, err := testTypes.Set(in, tc.set, t1); err != nil {
				t.Fatalf("Set: %v", err)
			}
			if !reflect.DeepEqual(in, snapshot) {
				t.Fatalf("input mutated: %+v, was %+v", in, snapshot)
			}
			if got := in[:3][2]; got != (Condition{}) {
				t.Fatalf("Set wrote past the input's length into its backing array: %+v", got)
			}
		})
	}
}

func TestTypesSetErrors(t *testing.T) {
	t.Parallel()
	valid := Condition{Type: "Reachable", Status: True, Reason: "ProbeSucceeded", Message: "ok"}
	tests := []struct {
		name    string
		mutate  func(*Condition)
		errPart string
	}{
		{"type not in Types", func(c *Condition) { c.Type = "Ready" }, `condition type "Ready" is not one of HostKeyVerified, Authenticated, Reachable`},
		{"empty type", func(c *Condition) { c.Type = "" }, `condition type "" is not one of`},
		{"status lower-case true", func(c *Condition) { c.Status = "true" }, `status "true" is not True, False or Unknown`},
		{"empty status", func(c *Condition) { c.Status = "" }, `status "" is not True, False or Unknown`},
		{"empty reason", func(c *Condition) { c.Reason = "" }, `reason "" is not CamelCase`},
		{"snake_case reason", func(c *Condition) { c.Reason = "host_key" }, `reason "host_key" is not CamelCase`},
		{"lowerCamel reason", func(c *Condition) { c.Reason = "lowerCamel" }, `reason "lowerCamel" is not CamelCase`},
		{"reason with a space", func(c *Condition) { c.Reason = "Has Space" }, `reason "Has Space" is not CamelCase`},
		{"1025-char reason", func(c *Condition) { c.Reason = "R" + strings.Repeat("a", 1024) }, "longer than 1024 characters"},
		{"message holding a PEM header", func(c *Condition) {
			c.Message = "dial failed: -----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaA"
		}, "message holds key material"},
		{"message with bare PRIVATE KEY words", func(c *Condition) { c.Message = "RSA PRIVATE KEY" }, "message holds key material"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid
			tc.mutate(&c)
			in := []Condition{cond("Reachable", True, "ProbeSucceeded", "ok", t0, 1)}
			got, err := testTypes.Set(in, c, t1)
			if err == nil {
				t.Fatalf("Set(%+v) = %+v, want an error", c, got)
			}
			if !strings.Contains(err.Error(), tc.errPart) {
				t.Fatalf("error %q does not contain %q", err, tc.errPart)
			}
			if got != nil {
				t.Fatalf("Set returned %+v alongside its error, want nil", got)
			}
		})
	}
}

func TestValidateReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reason string
		ok     bool
	}{
		{"ProbeSucceeded", true},
		{"A", true},
		{"HostKeyMismatch", true},
		{"Http2Failed", true},
		{"ABC", true},
		{"R" + strings.Repeat("a", 1023), true}, // exactly 1024 characters
		{"", false},
		{"host_key", false},
		{"lowerCamel", false},
		{"Has Space", false},
		{"Host_Key", false},
		{"Host:Key", false},
		{"Host,Key", false},
		{"Host-Key", false},
		{"9Lives", false},
		{"Ünicode", false},
		{"Trailing\n", false},
		{"R" + strings.Repeat("a", 1024), false}, // 1025 characters
	}
	for _, tc := range tests {
		name := tc.reason
		if len(name) > 20 {
			name = fmt.Sprintf("%s..._len_%d", name[:10], len(tc.reason))
		}
		t.Run(name, func(t *testing.T) {
			err := ValidateReason(tc.reason)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateReason(%q) = %v, want ok=%v", tc.reason, err, tc.ok)
			}
		})
	}
}

func TestStatusValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s  Status
		ok bool
	}{
		{True, true}, {False, true}, {Unknown, true},
		{"true", false}, {"", false}, {"Maybe", false},
	}
	for _, tc := range tests {
		t.Run(string(tc.s)+"_valid", func(t *testing.T) {
			if got := tc.s.Valid(); got != tc.ok {
				t.Fatalf("Status(%q).Valid() = %v, want %v", tc.s, got, tc.ok)
			}
		})
	}
}

func TestTypesInitial(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		gen     int64
		reason  string
		message string
		want    []Condition
		wantErr string
	}{
		{
			name: "every type Unknown in Types order",
			gen:  3, reason: "NotYetProbed", message: "web1 has not been probed",
			want: []Condition{
				cond("HostKeyVerified", Unknown, "NotYetProbed", "web1 has not been probed", t0, 3),
				cond("Authenticated", Unknown, "NotYetProbed", "web1 has not been probed", t0, 3),
				cond("Reachable", Unknown, "NotYetProbed", "web1 has not been probed", t0, 3),
			},
		},
		{name: "invalid reason is an error", gen: 1, reason: "not_yet", wantErr: `reason "not_yet" is not CamelCase`},
		{name: "key material in message is an error", gen: 1, reason: "NotYetProbed", message: "PRIVATE KEY", wantErr: "key material"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := testTypes.Initial(tc.gen, tc.reason, tc.message, t0)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Initial error = %v, want one containing %q", err, tc.wantErr)
				}
				if got != nil {
					t.Fatalf("Initial returned %+v with its error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Initial: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Initial =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestFind(t *testing.T) {
	t.Parallel()
	conds := []Condition{
		cond("HostKeyVerified", True, "HostKeyMatchesPin", "k", t0, 1),
		cond("Reachable", False, "ConnectionFailed", "r", t1, 2),
	}
	tests := []struct {
		name   string
		conds  []Condition
		typ    string
		want   Condition
		wantOK bool
	}{
		{"first present", conds, "HostKeyVerified", conds[0], true},
		{"last present", conds, "Reachable", conds[1], true},
		{"absent type", conds, "Authenticated", Condition{}, false},
		{"nil list", nil, "Reachable", Condition{}, false},
		{"type match is case-sensitive", conds, "reachable", Condition{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Find(tc.conds, tc.typ)
			if ok != tc.wantOK || got != tc.want {
				t.Fatalf("Find(%q) = %+v, %v; want %+v, %v", tc.typ, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestPhase(t *testing.T) {
	t.Parallel()
	// A ladder over a session, like the seed's determinePhase: terminal phases first.
	ladder := []Rung{
		{Phase: "Failed", Type: "Failed", Status: True},
		{Phase: "Completed", Type: "Completed", Status: True},
		{Phase: "Running", Type: "RunnerStarted", Status: True},
		{Phase: "Creating", Type: "JobCreated", Status: True},
	}
	c := func(typ string, st Status) Condition { return cond(typ, st, "R", "", t0, 1) }
	tests := []struct {
		name   string
		conds  []Condition
		ladder []Rung
		want   string
	}{
		{"no conditions falls back", nil, ladder, "Pending"},
		{"empty ladder falls back", []Condition{c("Failed", True)}, nil, "Pending"},
		{"only job created", []Condition{c("JobCreated", True)}, ladder, "Creating"},
		{"runner started outranks job created", []Condition{c("JobCreated", True), c("RunnerStarted", True)}, ladder, "Running"},
		{"completed outranks running", []Condition{c("RunnerStarted", True), c("Completed", True)}, ladder, "Completed"},
		{"failed outranks completed and running", []Condition{c("RunnerStarted", True), c("Completed", True), c("Failed", True)}, ladder, "Failed"},
		{"failed False does not hold, running does", []Condition{c("Failed", False), c("RunnerStarted", True)}, ladder, "Running"},
		{"all False falls back", []Condition{c("Failed", False), c("Completed", False), c("RunnerStarted", False), c("JobCreated", False)}, ladder, "Pending"},
		{"Unknown status does not satisfy a True rung", []Condition{c("RunnerStarted", Unknown)}, ladder, "Pending"},
		{
			"a rung on False status holds",
			[]Condition{c("Reachable", False)},
			[]Rung{{Phase: "Ready", Type: "Reachable", Status: True}, {Phase: "Degraded", Type: "Reachable", Status: False}},
			"Degraded",
		},
		{
			"a rung naming a reason holds only with that reason",
			[]Condition{cond("Ready", False, "RolledBack", "", t0, 1)},
			[]Rung{{Phase: "Gone", Type: "Ready", Status: False, Reason: "Gone"}, {Phase: "RolledBack", Type: "Ready", Status: False, Reason: "RolledBack"}, {Phase: "Failed", Type: "Ready", Status: False}},
			"RolledBack",
		},
		{
			"a rung naming another reason falls through to the next",
			[]Condition{cond("Ready", False, "DeployFailed", "", t0, 1)},
			[]Rung{{Phase: "RolledBack", Type: "Ready", Status: False, Reason: "RolledBack"}, {Phase: "Failed", Type: "Ready", Status: False}},
			"Failed",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Phase(tc.conds, tc.ladder, "Pending"); got != tc.want {
				t.Fatalf("Phase = %q, want %q", got, tc.want)
			}
		})
	}
}
