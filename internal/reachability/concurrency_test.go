package reachability

import "testing"

func TestClampConcurrency(t *testing.T) {
	tests := []struct {
		name     string
		n        int64
		want     int64
		warnings []string
	}{
		{"negative gives the default with a warning", -3, 4, []string{"probe_concurrency = -3", "using 4"}},
		{"zero gives the default with a warning", 0, 4, []string{"probe_concurrency = 0", "using 4"}},
		{"one is kept", 1, 1, nil},
		{"four is kept", 4, 4, nil},
		{"sixty-four is kept", 64, 64, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ClampConcurrency(tc.n, "probe_concurrency")
			if got.Slots != tc.want {
				t.Fatalf("ClampConcurrency(%d).Slots = %d, want %d", tc.n, got.Slots, tc.want)
			}
			checkWarning(t, got.Warning, tc.warnings)
		})
	}
}

func TestConcurrencyFromEnv(t *testing.T) {
	const env = "FLEET_PROBE_CONCURRENCY"
	tests := []struct {
		name     string
		value    string
		present  bool
		want     int64
		warnings []string
	}{
		{"absent gives the default silently", "", false, 4, nil},
		{"empty gives the default silently", "", true, 4, nil},
		{"blank gives the default silently", " \t", true, 4, nil},
		{"negative gives the default with a warning", "-1", true, 4, []string{env + " = -1", "using 4"}},
		{"zero gives the default with a warning", "0", true, 4, []string{env + " = 0", "using 4"}},
		{"fractional gives the default with a warning", "2.5", true, 4, []string{env + ` = "2.5"`, "using 4"}},
		{"letters give the default with a warning", "many", true, 4, []string{env + ` = "many"`, "using 4"}},
		{"eight is kept", "8", true, 8, nil},
		{"surrounding spaces are ignored", " 2 ", true, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ConcurrencyFromEnv(env, tc.value, tc.present)
			if got.Slots != tc.want {
				t.Fatalf("ConcurrencyFromEnv(%q, %v).Slots = %d, want %d", tc.value, tc.present, got.Slots, tc.want)
			}
			checkWarning(t, got.Warning, tc.warnings)
		})
	}
}

func TestDefaultConcurrencyIsFour(t *testing.T) {
	// The spec's default probe_concurrency.
	if DefaultConcurrency != 4 {
		t.Fatalf("DefaultConcurrency = %d, want 4", DefaultConcurrency)
	}
}
