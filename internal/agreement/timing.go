package agreement

import (
	"fmt"
	"math"
	"time"
)

// Timing is the agreement's clocks, from the deployment's settings. Each
// rule is written here once, for both halves: the host's scripts get their
// numbers from it, and the deployer counts with it.
type Timing struct {
	Confirm    time.Duration // verdict.confirm_timeout: a watchdog's patience
	Lease      time.Duration // remote_exec_timeout: a lease's patience
	Activation time.Duration // activation_timeout
}

// Check says whether t's clocks keep their order, the one place it is
// stated. Seen from the last word a host heard:
//
//	WordEvery < SpareAfter < SpareAfter+WordEvery < HostGivesUp
//
// a deployer speaks at least twice before it opens a spare, and a spare
// speaks at least once before the host's watchdog may decide; and
// HostGivesUp is at least confirm_timeout and a tick of the watchdog's
// clock, so the deployer never takes a host for decided before its
// watchdog could have decided. AskFor, counted from when the deployer
// starts asking, lets at least one login's ConnectTimeout pass. The
// keeper's clock (a lease ends after 1 to 1.25 remote_exec_timeout of
// silence, leaseCheck times leaseMisses or one more look) and ssh's
// keepalive (about remote_exec_timeout) end the lock session on both sides
// alike; confirm_timeout may be shorter or longer than it.
func (t Timing) Check() error {
	switch {
	case t.WordEvery() >= t.SpareAfter():
		return fmt.Errorf("words every %s, a spare after %s: a spare must wait for two words at least", t.WordEvery(), t.SpareAfter())
	case t.SpareAfter()+t.WordEvery() >= t.HostGivesUp():
		return fmt.Errorf("a spare after %s leaves no word before the host gives up (%s)", t.SpareAfter(), t.HostGivesUp())
	case t.HostGivesUp() < t.Confirm+watchdogTick:
		return fmt.Errorf("the deployer takes the host for decided after %s, before its watchdog could decide (%s and a tick)", t.HostGivesUp(), t.Confirm)
	case t.AskFor() < askAtLeast:
		return fmt.Errorf("asking for %s leaves no login its ConnectTimeout (%s)", t.AskFor(), askAtLeast)
	case t.Lease > 0 && time.Duration(leaseMisses)*t.leaseCheck() < t.Lease:
		return fmt.Errorf("a lease ends after %s of silence, before remote_exec_timeout (%s)", time.Duration(leaseMisses)*t.leaseCheck(), t.Lease)
	}
	return nil
}

// watchdogTick is how often a waiting watchdog looks at its clock (it
// also wakes at once for a word, a decision and the activation's end).
const watchdogTick = time.Second

// WordEvery is how often the deployer speaks to a host it holds: a few
// times per confirm_timeout, at least once a second.
func (t Timing) WordEvery() time.Duration {
	return min(max(t.Confirm/4, 100*time.Millisecond), time.Second)
}

// SpareAfter is how long a session may leave words unanswered before the
// deployer opens a spare one: a third of confirm_timeout (at least two
// words), which leaves the spare time to log in and speak before the
// watchdog gives up.
func (t Timing) SpareAfter() time.Duration {
	return max(2*t.WordEvery(), t.Confirm/3)
}

// HostGivesUp is how long after the last word a host heard its watchdog
// has decided, at the latest (once the activation has ended):
// confirm_timeout and a tick of its clock.
func (t Timing) HostGivesUp() time.Duration { return t.Confirm + watchdogTick }

// AskFor is how long the deployer keeps asking a host that went silent
// what became of a run, before it records that it does not know: as long
// again as confirm_timeout (the watchdog's switch back, a path that comes
// back), and at least one full login's ConnectTimeout.
func (t Timing) AskFor() time.Duration { return max(t.Confirm, askAtLeast) }

// askAtLeast is ssh's ConnectTimeout: one login's chance.
const askAtLeast = 10 * time.Second

// centis is d in hundredths of a second, rounded up: the watchdog reads
// its clock from /proc/uptime, in hundredths.
func centis(d time.Duration) int {
	return int(math.Ceil(float64(d) / float64(10*time.Millisecond)))
}

// watchdogWaitsForActivation is how long a watchdog waits for its
// activation to end before its own clock may run: activation_timeout and
// the few seconds the deployer takes to stop a hung one.
func (t Timing) watchdogWaitsForActivation() time.Duration { return t.Activation + 5*time.Second }

// leaseChecks is how often the keeper looks at the lease's words, and
// leaseMisses how many looks without a new word end the lease: about
// remote_exec_timeout of silence.
func (t Timing) leaseCheck() time.Duration { return max(t.Lease, time.Second) / leaseMisses }

const leaseMisses = 4
