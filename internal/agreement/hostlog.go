package agreement

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A LogLine is one line of a run's log on its host (StateDir/<run>/log,
// written by the host's scripts through fleet_log as it happens): what the
// host heard, decided or did, and when by the host's clock (its uptime).
// The lines a run's log holds, their first word (What) and the rest
// (Args):
//
//   - heard <word> lock|spare: a deployer's word for the run ("h", "w",
//     "c", "r", "b") and the session that carried it.
//   - decided confirm|rollback word|lapsed: the decision on the run's
//     activation, made once: by a deployer's word, or by its watchdog,
//     whose clock ran out. stands <decision>: a word that came once the
//     run was decided.
//   - leased, lease-silent, lease-ended: the run's lease began (its
//     keeper holds the lock), went silent (no word for
//     remote_exec_timeout: its keeper ends it) and ended. released: a
//     "b" word ended it.
//   - fenced <action>: the host's fence let an action through (act.N,
//     boot.N, profile, keys..., reboot, mark); refused <action> <why>
//     [<what>]: it did not (guard, no-lease, lease <the current run>, fate
//     <its fate>, decided <the decision>). cancelled <action>: an ask
//     cancelled an action that had not started.
//   - started unit.N, ended unit.N <exit>, ended boot.N <exit>: an
//     activation's attempt and a boot entry.
//   - watchdog guarded|refused|confirmed|rolling-back began=[1]
//     locked=[1]; over activated|timeout|lease-ended|cancelled (the
//     activation is over: the watchdog's clock runs); switching-back
//     <the system the host runs>, switched-back <exit>, profile-back
//     <exit>, kept <the system the host runs>: what the watchdog did.
//   - recorded boot-default|succeeded <system>: a record the host keeps
//     across reboots (RecordDir), once it is written.
type LogLine struct {
	Uptime time.Duration
	What   string
	Args   []string
}

// String is the line as the host wrote it, its time in seconds.
func (l LogLine) String() string {
	return strings.Join(append([]string{strconv.FormatFloat(l.Uptime.Seconds(), 'f', 2, 64), l.What}, l.Args...), " ")
}

// ParseLog reads a run's log. A line that is not "<uptime> <what> ..."
// is an error: the host's scripts write no other.
func ParseLog(text string) ([]LogLine, error) {
	var out []LogLine
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line == "" && text == "" {
			break
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return out, fmt.Errorf("the host's log, line %d: %q is not <uptime> <what>", i+1, line)
		}
		sec, err := strconv.ParseFloat(f[0], 64)
		if err != nil || sec < 0 {
			return out, fmt.Errorf("the host's log, line %d: %q does not start with the host's uptime", i+1, line)
		}
		out = append(out, LogLine{Uptime: time.Duration(sec * float64(time.Second)), What: f[1], Args: f[2:]})
	}
	return out, nil
}
