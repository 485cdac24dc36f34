package reachability

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

func TestWarning(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 9, 7, 15, 12, 0, 0, time.UTC)
	success := now.Add(-(3*time.Hour + 12*time.Minute)) // renders "3h12m"
	const refused = "web1.example.org:22: connect: connection refused"
	tests := []struct {
		name        string
		r           Record
		interval    time.Duration
		probed      bool      // this run probed the host
		withheld    time.Time // authentication unchecked since
		wantOK      bool
		summary     string
		detailParts []string
		notInDetail []string
	}{
		{
			name: "unreachable names host, reason, message and last success",
			r: Record{State: StateUnreachable, Reason: sshdial.ReasonNetwork, Message: refused, ConsecutiveFailures: 2,
				Host: "web1.example.org", CheckedAt: now.Add(-time.Minute), LastSuccessAt: success},
			interval: time.Minute, wantOK: true,
			summary: `Executor "web1" is unreachable (network)`,
			detailParts: []string{"web1.example.org is unreachable: " + refused,
				"Last checked: not by this run; the record last changed 1m0s ago (2026-09-07T15:11:00Z). Last successful probe: 3h12m ago."},
		},
		{
			name: "unreachable, probed by this run, says so",
			r: Record{State: StateUnreachable, Reason: sshdial.ReasonNetwork, Message: refused, ConsecutiveFailures: 2,
				Host: "web1.example.org", CheckedAt: now.Add(-2 * time.Hour), LastSuccessAt: success},
			interval: time.Minute, probed: true, wantOK: true,
			summary:     `Executor "web1" is unreachable (network)`,
			detailParts: []string{"Last checked: now, by this run; the record last changed 2h0m ago (2026-09-07T13:12:00Z)."},
			notInDetail: []string{"stale"},
		},
		{
			name: "unreachable never succeeded says never",
			r: Record{State: StateUnreachable, Reason: sshdial.ReasonHostKey, Message: "host key mismatch", ConsecutiveFailures: 1,
				Host: "web1.example.org", CheckedAt: now},
			interval: time.Minute, wantOK: true,
			summary:     `Executor "web1" is unreachable (host_key)`,
			detailParts: []string{"web1.example.org", "host key mismatch", "the record last changed 0s ago (2026-09-07T15:12:00Z). Last successful probe: never."},
		},
		{
			name: "reachable failing below threshold warns",
			r: Record{State: StateReachable, Reason: sshdial.ReasonTimeout, Message: "web1.example.org:22: timed out", ConsecutiveFailures: 1,
				Host: "web1.example.org", CheckedAt: now, LastSuccessAt: success},
			interval: time.Minute, wantOK: true,
			summary: `Executor "web1" failed its last probe (timeout)`,
			detailParts: []string{"web1.example.org failed 1 of the 2 probes in a row that make it unreachable: web1.example.org:22: timed out",
				"Last successful probe: 3h12m ago."},
		},
		{
			name: "unknown failing below threshold warns with never",
			r: Record{State: StateUnknown, Reason: sshdial.ReasonAuth, Message: "ssh: unable to authenticate", ConsecutiveFailures: 1,
				Host: "web1.example.org", CheckedAt: now},
			interval: time.Minute, wantOK: true,
			summary:     `Executor "web1" failed its last probe (auth)`,
			detailParts: []string{"web1.example.org failed 1 of the 2", "ssh: unable to authenticate", "Last successful probe: never."},
		},
		{
			name: "stale healthy record warns, naming host and age",
			r: Record{State: StateReachable, Host: "web1.example.org",
				CheckedAt: now.Add(-4 * time.Minute), LastSuccessAt: now.Add(-4 * time.Minute)},
			interval: time.Minute, wantOK: true,
			summary: `Executor "web1" has a stale record`,
			detailParts: []string{"web1.example.org",
				"The record of web1.example.org is stale: this run did not probe it, and it last changed 4m0s ago, more than three probe intervals (1m0s).",
				"Last successful probe: 4m0s ago."},
		},
		{
			name: "an old healthy record this run probed needs no warning: the probe confirmed it",
			r: Record{State: StateReachable, Host: "web1.example.org",
				CheckedAt: now.Add(-48 * time.Hour), LastSuccessAt: now.Add(-48 * time.Hour)},
			interval: time.Minute, probed: true, wantOK: false,
		},
		{
			name: "unreachable and stale says both",
			r: Record{State: StateUnreachable, Reason: sshdial.ReasonNetwork, Message: refused, ConsecutiveFailures: 2,
				Host: "web1.example.org", CheckedAt: now.Add(-10 * time.Minute), LastSuccessAt: success},
			interval: time.Minute, wantOK: true,
			summary: `Executor "web1" is unreachable (network)`,
			detailParts: []string{"web1.example.org is unreachable: " + refused,
				"this run did not probe it, and it last changed 10m0s ago", "Last successful probe: 3h12m ago."},
		},
		{
			name: "healthy record needs no warning",
			r: Record{State: StateReachable, Host: "web1.example.org",
				CheckedAt: now.Add(-time.Minute), LastSuccessAt: now.Add(-time.Minute)},
			interval: time.Minute, wantOK: false,
		},
		{
			name: "healthy record exactly three intervals old needs no warning",
			r: Record{State: StateReachable, Host: "web1.example.org",
				CheckedAt: now.Add(-3 * time.Minute), LastSuccessAt: now.Add(-3 * time.Minute)},
			interval: time.Minute, wantOK: false,
		},
		{
			name: "old healthy record with probing off needs no warning",
			r: Record{State: StateReachable, Host: "web1.example.org",
				CheckedAt: now.Add(-48 * time.Hour), LastSuccessAt: now.Add(-48 * time.Hour)},
			interval: 0, wantOK: false,
		},
		{
			name:     "a record never probed says so",
			r:        Reset("web1.example.org"),
			interval: time.Minute, wantOK: true,
			summary:     `Executor "web1" has not been probed yet`,
			detailParts: []string{"web1.example.org has not been probed since it was created or its connection changed", "Last checked: never. Last successful probe: never."},
		},
		{
			name: "reachable without authentication for over three intervals says since when",
			r: Record{State: StateReachable, Host: "web1.example.org",
				CheckedAt: now.Add(-time.Minute), LastSuccessAt: success},
			interval: time.Minute, probed: true, withheld: success, wantOK: true,
			summary: `Executor "web1" has not authenticated for 3h12m`,
			detailParts: []string{"web1.example.org answered with its pinned host key at the last check, but no probe has checked its credentials since 2026-09-07T12:00:00Z",
				"provider block", "Last checked: now, by this run", "Last successful probe: 3h12m ago."},
		},
		{
			name:     "reachable, never authenticated (an import) says never",
			r:        Record{State: StateReachable, Host: "web1.example.org", CheckedAt: now.Add(-time.Minute)},
			interval: time.Minute, probed: true, withheld: now.Add(-time.Minute), wantOK: true,
			summary:     `Executor "web1" has no authenticated probe yet`,
			detailParts: []string{"web1.example.org answered with its pinned host key at the last check, but no probe has checked its credentials yet", "provider block"},
			// A minute after an import, that is not "for more than three intervals".
			notInDetail: []string{"more than three probe intervals"},
		},
		{
			name: "reachable without authentication for three intervals needs no warning yet",
			r: Record{State: StateReachable, Host: "web1.example.org",
				CheckedAt: now.Add(-time.Minute), LastSuccessAt: now.Add(-3 * time.Minute)},
			interval: time.Minute, probed: true, withheld: now.Add(-3 * time.Minute), wantOK: false,
		},
		{
			name: "unconfirmed authentication with probing off needs no warning",
			r: Record{State: StateReachable, Host: "web1.example.org",
				CheckedAt: now.Add(-time.Minute), LastSuccessAt: success},
			interval: 0, withheld: success, wantOK: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			summary, detail, ok := Warning("web1", tc.r, Seen{Now: now, Interval: tc.interval, Probed: tc.probed, AuthWithheldSince: tc.withheld})
			if ok != tc.wantOK {
				t.Fatalf("Warning ok = %v, want %v (summary %q, detail %q)", ok, tc.wantOK, summary, detail)
			}
			if !ok {
				if summary != "" || detail != "" {
					t.Fatalf("no warning expected but got summary %q detail %q", summary, detail)
				}
				return
			}
			if summary != tc.summary {
				t.Fatalf("summary = %q, want %q", summary, tc.summary)
			}
			for _, p := range tc.detailParts {
				if !strings.Contains(detail, p) {
					t.Fatalf("detail %q does not contain %q", detail, p)
				}
			}
			for _, p := range tc.notInDetail {
				if strings.Contains(detail, p) {
					t.Fatalf("detail %q contains %q", detail, p)
				}
			}
		})
	}
}

func TestLastSuccess(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 9, 7, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		last time.Time
		want string
	}{
		{"never succeeded", time.Time{}, "never"},
		{"just now", now, "0s ago"},
		{"3h12m ago", now.Add(-(3*time.Hour + 12*time.Minute + 30*time.Second)), "3h12m ago"},
		{"two days four hours ago", now.Add(-52 * time.Hour), "2d4h ago"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := LastSuccess(Record{LastSuccessAt: tc.last}, now); got != tc.want {
				t.Fatalf("LastSuccess = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-5 * time.Second, "0s"},
		{999 * time.Millisecond, "0s"},
		{59 * time.Second, "59s"},
		{59*time.Second + 999*time.Millisecond, "59s"},
		{time.Minute, "1m0s"},
		{45*time.Minute + 7*time.Second, "45m7s"},
		{59*time.Minute + 59*time.Second, "59m59s"},
		{time.Hour, "1h0m"},
		{3*time.Hour + 12*time.Minute, "3h12m"},
		{3*time.Hour + 12*time.Minute + 59*time.Second, "3h12m"},
		{47*time.Hour + 59*time.Minute, "47h59m"},
		{48 * time.Hour, "2d0h"},
		{52 * time.Hour, "2d4h"},
		{30*24*time.Hour + 5*time.Hour + 30*time.Minute, "30d5h"},
	}
	for _, tc := range tests {
		t.Run(tc.want+"_from_"+tc.d.String(), func(t *testing.T) {
			if got := Age(tc.d); got != tc.want {
				t.Fatalf("Age(%v) = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
}
