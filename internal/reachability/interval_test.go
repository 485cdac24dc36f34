package reachability

import (
	"strings"
	"testing"
	"time"
)

func TestClampInterval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		seconds  int64
		want     int64
		warnings []string // substrings the warning must hold; nil means no warning
	}{
		{"negative gives the default with a warning", -5, 60, []string{"probe_interval = -5", "using 60"}},
		{"minus one gives the default with a warning", -1, 60, []string{"probe_interval = -1", "using 60"}},
		{"zero turns probing off silently", 0, 0, nil},
		{"one is raised to 15", 1, 15, []string{"probe_interval = 1 ", "using 15"}},
		{"fourteen is raised to 15", 14, 15, []string{"probe_interval = 14 ", "using 15"}},
		{"fifteen is kept", 15, 15, nil},
		{"sixty is kept", 60, 60, nil},
		{"3600 is kept", 3600, 3600, nil},
		{"3601 is lowered to 3600", 3601, 3600, []string{"probe_interval = 3601 ", "using 3600"}},
		{"a day is lowered to 3600", 86400, 3600, []string{"probe_interval = 86400 ", "using 3600"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ClampInterval(tc.seconds, "probe_interval")
			if got.Seconds != tc.want {
				t.Fatalf("ClampInterval(%d).Seconds = %d, want %d", tc.seconds, got.Seconds, tc.want)
			}
			checkWarning(t, got.Warning, tc.warnings)
		})
	}
}

func TestIntervalFromEnv(t *testing.T) {
	t.Parallel()
	const env = "FLEET_PROBE_INTERVAL"
	tests := []struct {
		name     string
		value    string
		present  bool
		want     int64
		warnings []string
	}{
		{"absent gives the default silently", "", false, 60, nil},
		{"absent ignores a stray value", "5", false, 60, nil},
		{"empty gives the default silently", "", true, 60, nil},
		{"blank gives the default silently", "  ", true, 60, nil},
		{"negative gives the default with a warning", "-1", true, 60, []string{env + " = -1", "using 60"}},
		{"fractional gives the default with a warning", "1.5", true, 60, []string{env + ` = "1.5"`, "using 60"}},
		{"letters give the default with a warning", "abc", true, 60, []string{env + ` = "abc"`, "using 60"}},
		{"a duration string gives the default with a warning", "60s", true, 60, []string{env + ` = "60s"`, "using 60"}},
		{"five is raised to 15 with a warning", "5", true, 15, []string{env + " = 5 ", "using 15"}},
		{"zero turns probing off silently", "0", true, 0, nil},
		{"120 is kept", "120", true, 120, nil},
		{"surrounding spaces are ignored", " 120 ", true, 120, nil},
		{"above the maximum is lowered with a warning", "7200", true, 3600, []string{env + " = 7200 ", "using 3600"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := IntervalFromEnv(env, tc.value, tc.present)
			if got.Seconds != tc.want {
				t.Fatalf("IntervalFromEnv(%q, %v).Seconds = %d, want %d", tc.value, tc.present, got.Seconds, tc.want)
			}
			checkWarning(t, got.Warning, tc.warnings)
		})
	}
}

func TestIntervalDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		seconds int64
		want    time.Duration
	}{
		{0, 0},
		{15, 15 * time.Second},
		{3600, time.Hour},
	}
	for _, tc := range tests {
		t.Run(time.Duration(tc.seconds*int64(time.Second)).String(), func(t *testing.T) {
			if got := (Interval{Seconds: tc.seconds}).Duration(); got != tc.want {
				t.Fatalf("Duration() = %v, want %v", got, tc.want)
			}
		})
	}
}

// checkWarning asserts no warning when want is nil, else one holding every substring.
func checkWarning(t *testing.T, got string, want []string) {
	t.Helper()
	if want == nil {
		if got != "" {
			t.Fatalf("unexpected warning %q", got)
		}
		return
	}
	if got == "" {
		t.Fatalf("no warning, want one containing %q", want)
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("warning %q does not contain %q", got, w)
		}
	}
}
