package reachability

import (
	"fmt"
	"strings"
	"time"
)

// Warning is the warning for a record that needs a reviewer's eye:
// unreachable, failing below the threshold, stale, reachable with
// credentials unchecked for three intervals, or never probed. It names the executor,
// host, reason, message, when the record was last checked (so a reviewer
// tells a cached record from a fresh probe) and the age of the last success.
// ok is false when the record needs no warning.
func Warning(name string, r Record, now time.Time, interval time.Duration) (summary, detail string, ok bool) {
	var lines []string
	switch {
	case r.State == StateUnreachable:
		summary = fmt.Sprintf("Executor %q is unreachable (%s)", name, r.Reason)
		lines = append(lines, fmt.Sprintf("%s is unreachable after %d failed probe(s): %s", r.Host, r.ConsecutiveFailures, r.Message))
	case r.Failing():
		summary = fmt.Sprintf("Executor %q failed its last probe (%s)", name, r.Reason)
		lines = append(lines, fmt.Sprintf("%s failed %d of the %d probes in a row that make it unreachable: %s",
			r.Host, r.ConsecutiveFailures, FailureThreshold, r.Message))
	case r.Stale(now, interval):
		summary = fmt.Sprintf("Executor %q has a stale record", name)
	case r.AuthUnconfirmed(now, interval):
		summary = fmt.Sprintf("Executor %q has no authenticated probe yet", name)
		if !r.LastSuccessAt.IsZero() {
			summary = fmt.Sprintf("Executor %q has not authenticated for %s", name, Age(now.Sub(r.LastSuccessAt)))
		}
		since := "yet"
		if !r.LastSuccessAt.IsZero() {
			since = fmt.Sprintf("for more than three probe intervals (%s)", interval)
		}
		lines = append(lines, fmt.Sprintf("%s answered with its pinned host key at the last check, but no probe has checked its credentials %s: "+
			"a refresh cannot use write-only credentials, nor those an import does not know. Credentials given in the provider block are checked at every refresh.", r.Host, since))
	case r.State == StateUnknown && r.CheckedAt.IsZero():
		summary = fmt.Sprintf("Executor %q has not been probed yet", name)
		lines = append(lines, fmt.Sprintf("%s has not been probed since it was created or its connection changed (an interrupted apply, say); nothing is known of it.", r.Host))
	default:
		return "", "", false
	}
	if r.Stale(now, interval) {
		lines = append(lines, fmt.Sprintf("The record of %s is stale: last checked %s ago, more than three probe intervals (%s).",
			r.Host, Age(now.Sub(r.CheckedAt)), interval))
	}
	lines = append(lines, "Last checked: "+LastChecked(r, now)+". Last successful probe: "+LastSuccess(r, now)+".")
	return summary, strings.Join(lines, "\n"), true
}

// LastChecked is when the record was last observed, "2m0s ago
// (2026-11-29T12:00:00Z)", or "never".
func LastChecked(r Record, now time.Time) string {
	if r.CheckedAt.IsZero() {
		return "never"
	}
	return Age(now.Sub(r.CheckedAt)) + " ago (" + r.CheckedAt.UTC().Format(time.RFC3339) + ")"
}

// LastSuccess is the age of the last success, "3h12m ago", or "never".
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
