package reachability

import (
	"fmt"
	"strings"
	"time"
)

// Seen is what the run that reads a record knows beyond it.
type Seen struct {
	Now      time.Time
	Interval time.Duration
	// Probed says this run probed the host: the record is as of now
	// (unchanged when the probe confirmed it).
	Probed bool
	// AuthWithheldSince is when the probes stopped checking
	// authentication (its condition's transition), zero while they check
	// it.
	AuthWithheldSince time.Time
}

// Warning is the warning for a record that needs a reviewer's eye:
// unreachable, failing below the threshold, stale, reachable with
// credentials unchecked for three intervals, or never probed. It names the
// executor, host, reason, message, whether this run probed the host (a
// record kept from an earlier run tells nothing of now) and how old the
// record and its last success are. ok is false when the record needs no
// warning.
func Warning(name string, r Record, s Seen) (summary, detail string, ok bool) {
	var lines []string
	now := s.Now
	switch {
	case r.State == StateUnreachable:
		summary = fmt.Sprintf("Executor %q is unreachable (%s)", name, r.Reason)
		lines = append(lines, fmt.Sprintf("%s is unreachable: %s", r.Host, r.Message))
	case r.Failing():
		summary = fmt.Sprintf("Executor %q failed its last probe (%s)", name, r.Reason)
		lines = append(lines, fmt.Sprintf("%s failed %d of the %d probes in a row that make it unreachable: %s",
			r.Host, r.ConsecutiveFailures, FailureThreshold, r.Message))
	case r.Stale(now, s.Interval, s.Probed):
		summary = fmt.Sprintf("Executor %q has a stale record", name)
	case r.AuthUnconfirmed(now, s.Interval, s.AuthWithheldSince):
		summary = fmt.Sprintf("Executor %q has no authenticated probe yet", name)
		since := "yet"
		if !r.LastSuccessAt.IsZero() {
			summary = fmt.Sprintf("Executor %q has not authenticated for %s", name, Age(now.Sub(s.AuthWithheldSince)))
			since = fmt.Sprintf("since %s, when the probes began to run without them, more than three probe intervals (%s) ago", s.AuthWithheldSince.UTC().Format(time.RFC3339), s.Interval)
		}
		lines = append(lines, fmt.Sprintf("%s answered with its pinned host key at the last check, but no probe has checked its credentials %s: "+
			"a refresh cannot use write-only credentials, nor those an import does not know. Credentials given in the provider block are checked at every refresh.", r.Host, since))
	case r.State == StateUnknown && r.CheckedAt.IsZero():
		summary = fmt.Sprintf("Executor %q has not been probed yet", name)
		lines = append(lines, fmt.Sprintf("%s has not been probed since it was created or its connection changed (an interrupted apply, say); nothing is known of it.", r.Host))
	default:
		return "", "", false
	}
	if r.Stale(now, s.Interval, s.Probed) {
		lines = append(lines, fmt.Sprintf("The record of %s is stale: this run did not probe it, and it last changed %s ago, more than three probe intervals (%s).",
			r.Host, Age(now.Sub(r.CheckedAt)), s.Interval))
	}
	lines = append(lines, "Last checked: "+LastChecked(r, s)+". Last successful probe: "+LastSuccess(r, now)+".")
	return summary, strings.Join(lines, "\n"), true
}

// LastChecked says whether this run probed the host ("now, by this run;
// the record last changed 2m0s ago (2026-11-29T12:00:00Z)"), else how old
// the record is, or "never".
func LastChecked(r Record, s Seen) string {
	if r.CheckedAt.IsZero() {
		return "never"
	}
	changed := Age(s.Now.Sub(r.CheckedAt)) + " ago (" + r.CheckedAt.UTC().Format(time.RFC3339) + ")"
	if s.Probed {
		return "now, by this run; the record last changed " + changed
	}
	return "not by this run; the record last changed " + changed
}

// LastSuccess is the age of the last success that changed the record
// (the host became reachable, or recovered), "3h12m ago", or "never".
func LastSuccess(r Record, now time.Time) string {
	if r.LastSuccessAt.IsZero() {
		return "never"
	}
	return Age(now.Sub(r.LastSuccessAt)) + " ago"
}

// Age renders a duration the way a person reads it at a glance: "45s",
// "3h12m", "2d4h".
func Age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
