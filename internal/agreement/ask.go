package agreement

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fate is what became of one of a run's actions on the host.
type Fate string

// The fates of an action.
const (
	FateNone      Fate = ""          // it never arrived (and was not cancelled)
	FateStarted   Fate = "started"   // it passed the fence and ran, or runs
	FateCancelled Fate = "cancelled" // its deployer cancelled it: it never runs
)

// View is what a host said of itself and of a run, when asked.
type View struct {
	Current   string // what it runs
	Profile   string // what the system profile points at
	Succeeded string // the last system a run finished there with a passing verdict
	Leased    bool   // the run's lease is the current one
	Fates     map[string]Fate
	// Acting names the actions whose command still runs on the host
	// (act.<attempt>: its session may have dropped, not the command).
	Acting map[string]bool
	// Activated is the activation's exit status, when it has ended: its
	// last attempt's, the one that did not meet a held switch lock.
	Activated *int
	// Attempts are the exit statuses of the activation's attempts that
	// ended, by attempt.
	Attempts map[int]int
	Output   string // the activation's last lines
	Decision string // DecisionConfirm, DecisionRollback, or "" when undecided
	Watchdog string // waiting, confirmed, rolling-back, done, refused; "" when none started
	// RolledBack is how the watchdog's switch back ended: its exit status,
	// or "kept <system>" when the host no longer ran the run's system.
	RolledBack string
	Booted     map[int]int // the boot entry's exit status, by attempt
	// Released says no actor of any run holds the guard: the run's
	// activation and watchdog have ended.
	Released bool
	// Lost says the host has no records of the run: it rebooted (or /run
	// was emptied) since the run's lease began. Whatever the run had
	// switched, the host runs what it booted (Current), and nothing of the
	// run can start there any more (its lease went too).
	Lost bool
}

// Fate is the fate of action (act.1, boot.2, profile).
func (v View) Fate(action string) Fate { return v.Fates[action] }

// Attempt is the exit status of the activation's attempt, if it ended.
func (v View) Attempt(attempt int) (int, bool) {
	rc, ok := v.Attempts[attempt]
	return rc, ok
}

// Settlement is what became of a run's activation on the host, as a view
// shows it once the host has settled it (see View.Settled).
type Settlement int

// The settlements of an activation.
const (
	// Unsettled: the watchdog has not finished (nor started: its
	// activation may still run, or wait for its decision).
	Unsettled Settlement = iota
	// NeverStarted: its act was cancelled before it started, or its
	// watchdog refused to run (the act never passed the fence): nothing
	// was activated.
	NeverStarted
	// Confirmed: a confirmation reached the host; the system stays.
	Confirmed
	// SwitchedBack: the watchdog switched the host back (exit 0).
	SwitchedBack
	// LeftAlone: the watchdog found the host running a system neither the
	// run's nor the one before (someone switched it since) and switched
	// nothing (View.Kept says what ran).
	LeftAlone
	// SwitchBackFailed: the watchdog's switch back failed (View.RolledBack
	// holds its exit status).
	SwitchBackFailed
	// Lost: the host rebooted since the run's lease began (View.Lost): it
	// runs what it booted, whatever the activation did.
	Lost
)

// Settled is what became of the activation whose act is act (act.<attempt>
// of its latest attempt): the one place that reads a host's answer into
// the outcome a record states.
func (v View) Settled(act string) Settlement {
	switch {
	case v.Lost:
		return Lost
	case v.Fate(act) == FateCancelled || v.Watchdog == "refused":
		return NeverStarted
	case v.Decision == DecisionConfirm:
		return Confirmed
	case v.RolledBack == "0":
		return SwitchedBack
	case strings.HasPrefix(v.RolledBack, "kept"):
		return LeftAlone
	case v.RolledBack != "":
		return SwitchBackFailed
	}
	return Unsettled
}

// Kept is the system a watchdog that left the host alone found it running.
func (v View) Kept() string {
	return strings.TrimSpace(strings.TrimPrefix(v.RolledBack, "kept"))
}

// askScript prints what Ask reads. cancel names actions to cancel first,
// if they have not started.
func askScript(run string, cancel []string) string {
	return Remote(render(askTmpl, struct {
		hostNames
		Dir       string
		Cancel    []string
		Cancelled Fate
	}{hostNames: theHost, Dir: StateDir + "/" + run, Cancel: cancel, Cancelled: FateCancelled}))
}

// Ask asks host, over a new login, what became of run, after cancelling
// the actions named that have not started: once it has answered, a
// request whose answer was lost can never start later.
func Ask(ctx context.Context, host Host, run string, cancel ...string) (View, error) {
	out, err := host.Output(ctx, askScript(run, cancel), true)
	if err != nil {
		return View{}, fmt.Errorf("%s", orNone(lastLine(out)))
	}
	return parseView(run, out)
}

func parseView(run, out string) (View, error) {
	v := View{Fates: map[string]Fate{}, Acting: map[string]bool{}, Attempts: map[int]int{}, Booted: map[int]int{}}
	complete := false
	var output []string
	for _, line := range strings.Split(out, "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "current":
			v.Current = val
		case "profile":
			v.Profile = val
		case "succeeded":
			v.Succeeded = val
		case "lease":
			v.Leased = val == run
		case "fate":
			a, f, _ := strings.Cut(val, " ")
			v.Fates[a] = Fate(f)
		case "acting":
			v.Acting[val] = true
		case "activated":
			if n, err := strconv.Atoi(val); err == nil {
				v.Activated = &n
			}
		case "watchdog":
			v.Watchdog = val
		case "rolledback":
			v.RolledBack = val
		case "decision":
			v.Decision = val
		case "attempt", "booted":
			a, rc, _ := strings.Cut(val, " ")
			n, err1 := strconv.Atoi(a)
			r, err2 := strconv.Atoi(rc)
			if err1 != nil || err2 != nil {
				continue
			}
			if k == "booted" {
				v.Booted[n] = r
			} else {
				v.Attempts[n] = r
			}
		case "output":
			output = append(output, val)
		case "released":
			v.Released = true
		case "lost":
			v.Lost = true
		case "end":
			complete = true
		}
	}
	if !complete {
		return View{}, fmt.Errorf("the host's answer was cut short")
	}
	v.Output = strings.Join(output, " / ")
	return v, nil
}

// Await asks host what became of run (see Ask, cancel included), again
// and again over new logins, until done says the view is what the
// deployer waits for (or the host lost the run's records: View.Lost), or
// the host has not answered for silent (since the
// first ask, or its last answer), or total has passed, or ctx ends. It
// returns the last view the host gave and whether it ever answered.
//
// A login into a path that stopped forwarding hangs until ConnectTimeout,
// and may never recover when the path does: while an ask goes unanswered,
// another starts every askAgain (at most askAtOnce at a time), so a path
// that comes back is used at once.
func Await(ctx context.Context, host Host, run string, silent, total time.Duration, done func(View) bool, cancel ...string) (View, bool) {
	start := time.Now()
	heard := start
	var wg sync.WaitGroup
	defer wg.Wait()
	actx, stop := context.WithCancel(ctx)
	defer stop()
	views := make(chan View, askAtOnce)
	asking := 0
	ended := make(chan struct{}, askAtOnce)
	ask := func() {
		asking++
		wg.Go(func() {
			defer func() { ended <- struct{}{} }()
			qctx, cancelAsk := context.WithTimeout(actx, askAtLeast+askAgain)
			defer cancelAsk()
			if v, err := Ask(qctx, host, run, cancel...); err == nil {
				select {
				case views <- v:
				case <-actx.Done():
				}
			}
		})
	}
	var last View
	answered := false
	ask()
	next := time.NewTimer(askAgain)
	defer next.Stop()
	for {
		deadline := earlier(heard.Add(silent), start.Add(total))
		if time.Now().After(deadline) {
			return last, answered
		}
		select {
		case <-ctx.Done():
			return last, answered
		case v := <-views:
			last, answered, heard = v, true, time.Now()
			// A host that lost the run's records says nothing more of it.
			if v.Lost || done(v) {
				return v, true
			}
		case <-ended:
			asking--
			if asking == 0 {
				// Answered and not done, or failed at once: again in a
				// moment.
				next.Reset(time.Second)
			}
		case <-next.C:
			if asking < askAtOnce {
				ask()
			}
			next.Reset(askAgain)
		case <-time.After(time.Until(deadline)):
		}
	}
}

// askAgain is how long an ask goes unanswered before another starts
// beside it, and askAtOnce how many may be under way.
const (
	askAgain  = 2 * time.Second
	askAtOnce = 3
)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
