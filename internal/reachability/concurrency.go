package reachability

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultConcurrency bounds simultaneous probes: few enough to keep
// outbound connections and file descriptors modest, enough to keep a pass
// short. It is Terraform's default -parallelism (and colmena's default
// of hosts at once): ten executors refreshed at once probe at once.
const DefaultConcurrency = 10

// Concurrency is the effective probe concurrency and, when the given value
// was normalised, a warning naming the value given and the value used.
type Concurrency struct {
	Slots   int64
	Warning string
}

// ClampConcurrency normalises a concurrency from any source: below 1 gives
// the default.
func ClampConcurrency(n int64, source string) Concurrency {
	if n >= 1 {
		return Concurrency{Slots: n}
	}
	return Concurrency{Slots: DefaultConcurrency, Warning: fmt.Sprintf(
		"%s = %d is not a positive number of simultaneous probes: using %d", source, n, DefaultConcurrency)}
}

// ConcurrencyFromEnv reads the concurrency from an environment variable's
// value: absent or empty gives the default, anything not a whole number
// gives the default with a warning.
func ConcurrencyFromEnv(name, value string, present bool) Concurrency {
	value = strings.TrimSpace(value)
	if !present || value == "" {
		return Concurrency{Slots: DefaultConcurrency}
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return Concurrency{Slots: DefaultConcurrency, Warning: fmt.Sprintf(
			"%s = %q is not a whole number: using %d", name, value, DefaultConcurrency)}
	}
	return ClampConcurrency(n, name)
}
