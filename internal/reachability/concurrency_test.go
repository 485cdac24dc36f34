package reachability

import "testing"

func TestClampConcurrency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		n        int64
		want     int64
		warnings []string
	}{
		{"negative gives the default with a warning", -3, 10, []string{"probe_concurrency = -3", "using 10"}},
		{"zero gives the default with a warning", 0, 10, []string{"probe_concurrency = 0", "using 10"}},
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
	t.Parallel()
	const env = "FLEET_PROBE_CONCURRENCY"
	tests := []struct {
		name     string
		value    string
		present  bool
		want     int64
		warnings []string
	}{
		{"absent gives the default silently", "", false, 10, nil},
		{"empty gives the default silently", "", true, 10, nil},
		{"blank gives the default silently", " \t", true, 10, nil},
		{"negative gives the default with a warning", "-1", true, 10, []string{env + " = -1", "using 10"}},
		{"zero gives the default with a warning", "0", true, 10, []string{env + " = 0", "using 10"}},
		{"fractional gives the default with a warning", "2.5", true, 10, []string{env + ` = "2.5"`, "using 10"}},
		{"letters give the default with a warning", "many", true, 10, []string{env + ` = "many"`, "using 10"}},
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

func TestDefaultConcurrencyMatchesTerraformsParallelism(t *testing.T) {
	t.Parallel()
	// Issue 14: as many probes at once as Terraform refreshes resources
	// at once by default (-parallelism=10).
	if DefaultConcurrency != 10 {
		t.Fatalf("DefaultConcurrency = %d, want 10", DefaultConcurrency)
	}
}
