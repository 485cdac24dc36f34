package reachability

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The probe interval, in seconds.
const (
	DefaultIntervalSeconds = 60
	MinIntervalSeconds     = 15
	MaxIntervalSeconds     = 3600
)

// Interval is the effective probe interval and why it differs from what was
// asked for, if it does.
type Interval struct {
	Seconds int64
	// Warning is set when the given value was normalised; it names the value
	// given and the value used.
	Warning string
}

// Duration is the interval as a time.Duration; 0 means probing is off.
func (i Interval) Duration() time.Duration { return time.Duration(i.Seconds) * time.Second }

// ClampInterval normalises a whole number of seconds from any source: below 0
// gives the default, 0 turns refresh probing off, 1 to 14 gives 15, above
// 3600 gives 3600. source names where the value came from, for the warning.
func ClampInterval(seconds int64, source string) Interval {
	used := seconds
	switch {
	case seconds < 0:
		used = DefaultIntervalSeconds
	case seconds == 0:
		return Interval{Seconds: 0}
	case seconds < MinIntervalSeconds:
		used = MinIntervalSeconds
	case seconds > MaxIntervalSeconds:
		used = MaxIntervalSeconds
	}
	if used == seconds {
		return Interval{Seconds: used}
	}
	return Interval{Seconds: used, Warning: fmt.Sprintf(
		"%s = %d is outside the supported range (0 turns probing off, otherwise %d to %d seconds): using %d",
		source, seconds, MinIntervalSeconds, MaxIntervalSeconds, used)}
}

// IntervalFromEnv reads the interval from an environment variable's value.
// An absent or empty value gives the default silently; a negative,
// fractional or unparsable one gives the default with a warning; a whole
// number is then clamped like any other.
func IntervalFromEnv(name, value string, present bool) Interval {
	value = strings.TrimSpace(value)
	if !present || value == "" {
		return Interval{Seconds: DefaultIntervalSeconds}
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return Interval{Seconds: DefaultIntervalSeconds, Warning: fmt.Sprintf(
			"%s = %q is not a whole number of seconds: using %d", name, value, DefaultIntervalSeconds)}
	}
	return ClampInterval(n, name)
}
