package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// The invariants of the host agreement (ssh-deployment.md), checked once a
// schedule's parties have stopped, against the host's event log
// (nixtest.Target.Events): every switch-to-configuration call, the unit it
// ran in, what it found running and what it changed; and each reboot,
// which kills every call still running and after which the host runs its
// boot entry. A reboot empties /run: what a run kept there (its watchdog's
// decision, the fate of its boot entry) is not known after it.

// hostStateDir is where the deploy keeps its runs on a host.
const hostStateDir = "/run/fleet-deploy"

// settle waits for the host and this machine to let go of everything the
// parties took, as a host left alone does: watchdogs decide, activations
// end, the lock and the guard come free, master connections end. What is
// still there after the bound was left behind (invariant 5).
func settle(t *testing.T, tg *nixtest.Target, parties []*party, s schedule, keeperKilled bool) []string {
	t.Helper()
	// A watchdog decides confirm_timeout after the last word it heard,
	// once its activation has ended; its rollback is an activation too.
	// Then a master persists its MasterPersist. A busy machine gets room.
	deadline := time.Now().Add(s.ConfirmTimeout + 30*time.Second)
	var left []string
	for {
		// Until the bound, the first kind of leftover found is enough:
		// the looks cost processes and reads of /proc.
		all := time.Now().After(deadline)
		left = left[:0]
		for _, p := range tg.Leftovers() {
			left = append(left, "on the host: "+p)
		}
		for _, f := range []string{deploy.LockFile, deploy.GuardFile} {
			if (all || len(left) == 0) && !flockFree(tg, f) {
				left = append(left, "on the host: "+f+" is held")
			}
		}
		if all || len(left) == 0 {
			for _, p := range partyProcesses(parties) {
				left = append(left, "here: "+p)
			}
		}
		if len(left) == 0 || all {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var out []string
	for _, l := range left {
		out = append(out, "nothing is left behind: "+l)
	}
	for _, f := range []string{deploy.HolderFile, agreement.LeaseFile} {
		// A keeper killed (SIGKILL) leaves its files; the lock is free,
		// and the next take replaces them.
		if keeperKilled && flockFree(tg, deploy.LockFile) {
			break
		}
		if tg.Exists(f) {
			b, _ := os.ReadFile(tg.Path(f))
			out = append(out, fmt.Sprintf("nothing is left behind: on the host: %s (%q) once every party has stopped", f, strings.TrimSpace(string(b))))
		}
	}
	return out
}

// flockFree says whether nobody holds a lock on the host's file.
func flockFree(tg *nixtest.Target, file string) bool {
	argv := tg.NS.Command("flock", "-n", "-x", file, "true")
	return exec.Command(argv[0], argv[1:]...).Run() == nil
}

// partyProcesses lists this machine's processes that belong to a party's
// deploy: any that names its control directory (ssh, its masters).
func partyProcesses(parties []*party) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		for _, pt := range parties {
			if strings.Contains(cmdline, pt.controlDir) {
				out = append(out, fmt.Sprintf("party %s's %d %s", partyName(pt.i), pid, cmdline))
			}
		}
	}
	return out
}

// call is one switch-to-configuration call on the host.
type call struct {
	action, system, before, unit string
	first, last                  int // its first and last events' places in the log
	ended                        bool
	rc                           int
	startTime, endTime           time.Time
	owner                        int    // the party it belongs to; -1 for none known
	rollback                     bool   // a watchdog's switch back
	run                          string // the run it acts for: its unit's, or (a boot entry) the run whose directory its output went to
	lease                        string // the run whose lease the lock was under as it started
	output                       string // the file its output went to, as "<run>/boot.1.output"; empty for another
	cut                          bool   // a reboot killed it (ended, rc -1)
	rebootedAfter                bool   // a reboot came after its start: its run's files on the host are gone
}

// hostState is what a host runs and boots.
type hostState struct{ current, boot string }

// calls groups the host's events by call and names each call's party:
// an activation's unit is fleet-activate-<run> and runs the party's own
// system; a watchdog's is fleet-watchdog-<run>, the party whose run it is
// (its log names its runs, else its activation does); a boot entry is made
// for the party's own system.
func calls(events []nixtest.Event, parties []*party) []*call {
	owner := func(system string) int {
		for _, pt := range parties {
			if pt.system == system {
				return pt.i
			}
		}
		return -1
	}
	var out []*call
	open := map[int]*call{}
	for i, e := range events {
		switch e.Kind {
		case "reboot":
			for pid, c := range open {
				c.ended, c.cut, c.rc, c.endTime, c.last = true, true, -1, e.Time, i
				delete(open, pid)
			}
			for _, c := range out {
				c.rebootedAfter = true
			}
		case "start":
			c := &call{action: e.Action, system: e.System, before: e.Before, unit: e.Unit, lease: e.Lease, output: e.Output, first: i, last: i, owner: -1, startTime: e.Time}
			open[e.PID] = c
			out = append(out, c)
		default:
			c := open[e.PID]
			if c == nil {
				continue
			}
			c.last = i
			if e.Kind == "end" {
				c.ended, c.rc, c.endTime = true, e.RC, e.Time
				delete(open, e.PID)
			}
		}
	}
	runs := map[string]int{}
	for _, pt := range parties {
		for _, run := range pt.runs {
			runs[run] = pt.i
		}
	}
	for _, c := range out {
		unit := strings.TrimSuffix(c.unit, ".service")
		if run, ok := strings.CutPrefix(unit, "fleet-activate-"); ok {
			c.run, c.owner = run, owner(c.system)
			if _, known := runs[run]; !known {
				runs[run] = c.owner
			}
		}
	}
	for _, c := range out {
		unit := strings.TrimSuffix(c.unit, ".service")
		switch run, ok := strings.CutPrefix(unit, "fleet-watchdog-"); {
		case ok:
			c.run, c.rollback = run, true
			if o, known := runs[run]; known {
				c.owner = o
			}
		case c.unit == "":
			// A boot entry: the party whose run made it (a boot back
			// after a reboot's failing verdict makes the system before
			// the entry), else whose system it is.
			c.owner, c.run = owner(c.system), c.lease
			if run, _, ok := strings.Cut(c.output, "/"); ok {
				c.run = run
			}
			if o, known := runs[c.run]; known && o >= 0 {
				c.owner = o
			}
		}
	}
	return out
}

// fenced says whether the host's fence let call c through for its run: it
// claimed the fate of c's action (boot.1 for a call whose output went to
// "<run>/boot.1.output").
func fenced(tg *nixtest.Target, c *call) bool {
	run, file, ok := strings.Cut(c.output, "/")
	action, isOutput := strings.CutSuffix(file, ".output")
	if !ok || !isOutput {
		return false
	}
	fate, err := os.Readlink(tg.Path(agreement.StateDir + "/" + run + "/" + action + ".fate"))
	return err == nil && fate == "started"
}

// stateAfter replays the log's changes up to and including event last.
func stateAfter(events []nixtest.Event, last int, initial string) hostState {
	st := hostState{initial, initial}
	for i := 0; i <= last && i < len(events); i++ {
		switch events[i].Kind {
		case "set-current", "reboot":
			st.current = events[i].System
		case "set-boot":
			st.boot = events[i].System
		}
	}
	return st
}

// checkAgreement checks the invariants of the host agreement on what the
// parties recorded and what the host's log says happened.
func checkAgreement(tg *nixtest.Target, parties []*party, s schedule, initial string) []string {
	events := tg.Events()
	cs := calls(events, parties)
	var out []string
	bad := func(invariant, format string, args ...any) {
		out = append(out, invariant+": "+fmt.Sprintf(format, args...))
	}
	name := func(i int) string {
		if i < 0 {
			return "nobody's"
		}
		return partyName(i) + "'s"
	}
	describe := func(c *call) string {
		what := c.action
		if c.rollback {
			what = "switch back"
		}
		return fmt.Sprintf("%s %s to %s (run %q, unit %q)", name(c.owner), what, c.system, c.run, c.unit)
	}

	// 2. One switch at a time: the calls of one run (a lease: a party may
	// take the lock again, as a new run) never overlap another's, and
	// once another run's call has come, no call of the first comes again
	// (its lease had ended). No call is made under another run's lease
	// (the fence: an activation whose unit started late, its lease gone
	// and another's begun, is refused); a boot entry is made under a
	// lease.
	for i, a := range cs {
		for _, b := range cs[i+1:] {
			if a.run != b.run && (!a.ended || a.last > b.first) {
				bad("one switch at a time", "%s ran while %s did", describe(a), describe(b))
			}
		}
	}
	seen := map[string]bool{}
	for i, c := range cs {
		switch {
		case c.lease != "" && c.lease != c.run:
			bad("one switch at a time", "%s was made under run %q's lease", describe(c), c.lease)
		case c.action == "boot" && c.lease == "" && !c.rebootedAfter && !fenced(tg, c):
			// No lease as it started: its own may have ended after the
			// host's fence let it through (which holds the guard, so
			// that no other begins). (Its fate is not known once a
			// reboot has emptied /run.)
			bad("one switch at a time", "%s was made under no lease, and the host's fence had not let it through", describe(c))
		}
		if i > 0 && cs[i-1].run != c.run && seen[c.run] {
			bad("one switch at a time", "%s came after %s: the host let a run switch it after another had", describe(c), describe(cs[i-1]))
		}
		seen[c.run] = true
	}

	// A reboot a deploy asked for (systemctl on the host) is fenced too:
	// its fence let the run through, under that run's lease (or under
	// none: its lease ended as it was asked; the guard its script holds
	// keeps another lease from beginning meanwhile).
	for _, e := range events {
		if e.Kind != "reboot" || e.Action != "systemctl" {
			continue
		}
		switch {
		case e.Unit == "":
			bad("one switch at a time", "the host was rebooted at %s by a run its fence had not let through (under run %q's lease)", e.Time.Format("15:04:05.000"), e.Lease)
		case e.Lease != "" && e.Lease != e.Unit:
			bad("one switch at a time", "run %q rebooted the host at %s under run %q's lease", e.Unit, e.Time.Format("15:04:05.000"), e.Lease)
		}
	}

	// 3. Nobody undoes another's switch: a watchdog switches back only a
	// host that runs the system its own activation activated, or still the
	// one it ran before (an activation cut short).
	for _, c := range cs {
		if !c.rollback {
			continue
		}
		if c.owner < 0 {
			bad("nobody undoes another's switch", "%s: a watchdog whose activation never ran switched the host from %s", describe(c), c.before)
			continue
		}
		own, prev := parties[c.owner].system, c.system
		if c.before != own && c.before != prev {
			bad("nobody undoes another's switch", "%s switched back a host that ran %s, neither its own %s nor the %s it switches back to", describe(c), c.before, own, prev)
		}
	}

	// 1. A record is true.
	for _, pt := range parties {
		r := pt.result
		if r == nil {
			continue
		}
		var own []*call
		for _, c := range cs {
			if c.owner == pt.i {
				own = append(own, c)
			}
		}
		lastEvent, lastEnd := -1, time.Time{}
		for _, c := range own {
			lastEvent = max(lastEvent, c.last)
			if c.endTime.After(lastEnd) {
				lastEnd = c.endTime
			}
			// A call that never said its end and changed nothing (a
			// stopped activation whose end was not logged: killed)
			// cannot make a record untrue, whenever it ended; one that
			// changed something and did not end still runs.
			if !c.ended && changed(events, c) {
				lastEnd = time.Now()
			}
		}
		// What the host ran and booted as the party recorded it: after its
		// last switch, and after any reboot since that came before the
		// record. A reboot within rebootUnseen of the record may have come
		// after the host's last answer to the party: the record may say
		// the host as it was before it.
		st := stateAfter(events, lastEvent, initial)
		unseen := st
		for _, e := range events[lastEvent+1:] {
			if e.Kind != "reboot" || !e.Time.Before(r.Finished) {
				continue
			}
			st.current = e.System
			if e.Time.Before(r.Finished.Add(-rebootUnseen)) {
				unseen.current = e.System
			}
		}
		who := partyName(pt.i)
		switch r.Phase {
		case deploy.PhaseSucceeded:
			goal := pt.plan.goal()
			untrue := func(st hostState) bool {
				return goal != deploy.GoalBoot && st.current != pt.system || goal != deploy.GoalTest && st.boot != pt.system
			}
			if untrue(st) && untrue(unseen) {
				bad("a record is true", "%s recorded Succeeded (goal %s), but after its last switch the host ran %s and booted %s, not %s", who, goal, st.current, st.boot, pt.system)
			}
		case deploy.PhaseRolledBack:
			if len(own) > 0 && st.current != r.PreviousSystem && unseen.current != r.PreviousSystem {
				bad("a record is true", "%s recorded RolledBack, but after its last switch the host ran %s, not %s", who, st.current, r.PreviousSystem)
			}
			if len(own) > 0 && st.boot == pt.system {
				bad("a record is true", "%s recorded RolledBack, but the host boots its system %s", who, pt.system)
			}
		case deploy.PhasePending:
			if len(own) > 0 {
				bad("a record is true", "%s recorded Pending (not started), but %s", who, describe(own[0]))
			}
		case deploy.PhaseFailed:
			// A record that says nothing was activated: no activation of
			// its own changed what the host runs.
			if said := r.Message; strings.Contains(said, "nothing was changed on the host") || strings.Contains(said, "nothing was activated") || strings.Contains(said, "nothing was done on the host") {
				for _, c := range own {
					if c.rollback || c.action == "boot" {
						continue
					}
					for _, e := range events[c.first : c.last+1] {
						if e.PID == events[c.first].PID && e.Kind == "set-current" {
							bad("a record is true", "%s recorded %q, but %s changed what the host runs", who, said, describe(c))
							break
						}
					}
				}
			}
			switch {
			case r.Step == deploy.StepConnect || r.Step == deploy.StepLock || r.Step == deploy.StepRead || r.Step == deploy.StepCopy || r.Step == deploy.StepBuild:
				if len(own) > 0 {
					bad("a record is true", "%s recorded a failure in its %s step, before anything changed, but %s", who, r.Step, describe(own[0]))
				}
			case r.Step == deploy.StepActivate && r.Outcomes[deploy.CondActivated].Reason == "LeaseLost":
				if len(own) > 0 {
					bad("a record is true", "%s recorded that the host refused its activation (its lease had ended), but %s", who, describe(own[0]))
				}
			case r.Step == deploy.StepFinalise && r.Outcomes[deploy.CondBootloader].Reason == "LeaseLost":
				for _, c := range own {
					if c.action == "boot" {
						bad("a record is true", "%s recorded that the host refused its boot entry (its lease had ended), but %s", who, describe(c))
					}
				}
			}
		case deploy.PhaseUnknown:
			// Not known: a refresh settles it, below.
		case deploy.PhaseSkipped, deploy.PhaseCopying, deploy.PhaseActivating, deploy.PhaseVerifying, deploy.PhaseFinalizing:
			// Not how a deploy ends.
		}
		if (r.Phase == deploy.PhaseSucceeded || r.Phase == deploy.PhaseRolledBack) && len(own) > 0 && lastEnd.After(r.Finished) {
			bad("a record is true", "%s recorded %s at %s, before its last switch ended (%s)", who, r.Phase, r.Finished.Format("15:04:05.000"), lastEnd.Format("15:04:05.000"))
		}
	}

	// 4. A host settles on its own: once left alone, it keeps a new
	// system only if a confirmation reached it, and a watchdog that
	// decided to switch back did so.
	final := stateAfter(events, len(events)-1, initial)
	if tg.CurrentSystem() != final.current || tg.BootEntry() != final.boot {
		bad("the host's log", "it says the host runs %s and boots %s; it runs %s and boots %s", final.current, final.boot, tg.CurrentSystem(), tg.BootEntry())
	}
	for _, c := range cs {
		if !strings.HasPrefix(c.unit, "fleet-activate-") || c.rebootedAfter {
			// (A reboot settled it: the host runs its boot entry, which
			// an unconfirmed system is not, and the run's decision is
			// gone with /run.)
			continue
		}
		decision, _ := os.Readlink(tg.Path(hostStateDir + "/" + c.run + "/decision"))
		var back *call
		for _, b := range cs {
			if b.rollback && b.run == c.run {
				back = b
			}
		}
		switch {
		case decision == "" && c.owner >= 0 && parties[c.owner].plan.keep():
			// on_failure "keep": no watchdog, nothing to decide.
		case decision == "":
			bad("a host settles on its own", "%s was never decided (no confirmation, no switch back)", describe(c))
		case decision == "confirm" && back != nil:
			bad("a host settles on its own", "%s was confirmed, and yet switched back", describe(c))
		case decision == "rollback" && back == nil && final.current == c.system:
			bad("a host settles on its own", "%s was decided to be switched back, and the host still runs it", describe(c))
		case back != nil && !back.cut && (!back.ended || back.rc != 0 && (back.rc != 4 || kindOf(parties, back.system) != nixtest.FailUnits)):
			// (A switch back to a system whose units fail exits 4, as
			// switching to it did.)
			bad("a host settles on its own", "%s did not end well (exit %d)", describe(back), back.rc)
		case back != nil && c.last > back.first && !c.rollback:
			// The switch back is the run's last switch: an attempt of its
			// activation still running (a retry after a held switch
			// lock) must not switch the host after it.
			bad("a host settles on its own", "%s went on after its watchdog's switch back began (%s): the host was left on an unconfirmed system", describe(c), describe(back))
		}
	}

	// 4, timed, from the host's own files: a watchdog decides within
	// confirm_timeout and a tick of its clock (and a little room for a
	// busy machine) after the later of the last word it heard (its run's
	// "heard" file) and its activation's end (an activation that does not
	// end counts as ended activation_timeout and a few seconds after it
	// began: the watchdog stops it then). Only a decision it made itself
	// is bound; one its deployer asked for comes sooner.
	for _, c := range cs {
		if !c.rollback || c.owner < 0 {
			continue
		}
		pt := parties[c.owner]
		dir := tg.Path(agreement.StateDir + "/" + c.run)
		decided, err := os.Lstat(dir + "/decision")
		if err != nil {
			continue
		}
		from := time.Time{}
		if heard, err := os.Stat(dir + "/heard"); err == nil {
			from = heard.ModTime()
		}
		for _, a := range cs {
			if a.rollback || a.run != c.run || a.unit == "" {
				continue
			}
			end := a.startTime.Add(pt.plan.activationTimeout() + 5*time.Second)
			if a.ended && a.endTime.Before(end) {
				end = a.endTime
			}
			if end.After(from) {
				from = end
			}
		}
		if from.IsZero() {
			continue
		}
		bound := s.ConfirmTimeout + time.Second + decidesRoom
		if late := decided.ModTime().Sub(from); late > bound {
			bad("a host settles on its own", "the watchdog of run %q decided %s after it last heard a word and its activation had ended (%s), want within confirm_timeout and a tick (%s, and %s for a busy machine)",
				c.run, late.Round(time.Millisecond), from.Format("15:04:05.000"), s.ConfirmTimeout+time.Second, decidesRoom)
		}
	}

	// 4, from below: a watchdog decides on its own ("lapsed": not a
	// deployer's word) only once its activation is over: no attempt of it
	// runs, as the host's log shows, unless activation_timeout and a few
	// seconds have passed since the watchdog began (its "guarded" file),
	// when it stops them. An attempt ran at the decision if it had begun
	// and then ended by a signal (stopped), or a second or more later, or
	// never. (One that ended by itself right after the decision had ended
	// as the host saw it: its log's end comes a few milliseconds after the
	// attempt's exit.) The last word it heard bounds nothing here: the
	// "heard" file says only the last one, which may have come as it
	// decided or since.
	for _, c := range cs {
		if !c.rollback || c.owner < 0 {
			continue
		}
		dir := tg.Path(agreement.StateDir + "/" + c.run)
		decided, err := os.Lstat(dir + "/decision")
		if err != nil || !tg.Exists(agreement.StateDir+"/"+c.run+"/lapsed") {
			continue
		}
		at := decided.ModTime()
		began, err := os.Stat(dir + "/guarded")
		if err != nil || !at.Before(began.ModTime().Add(parties[c.owner].plan.activationTimeout()+5*time.Second-decidesEarly)) {
			continue
		}
		for _, a := range cs {
			if a.rollback || a.run != c.run || a.unit == "" || !a.startTime.Before(at) || a.ended && (a.endTime.Before(at) || a.rc <= 128 && a.endTime.Sub(at) < time.Second) {
				continue
			}
			how := "it never ended"
			if a.ended {
				how = fmt.Sprintf("it ended at %s, exit %d", a.endTime.Format("15:04:05.000"), a.rc)
			}
			bad("a host settles on its own", "the watchdog of run %q decided at %s while %s ran (from %s; %s), before activation_timeout had passed: the activation was not over",
				c.run, at.Format("15:04:05.000"), describe(a), a.startTime.Format("15:04:05.000"), how)
		}
	}

	// The deployer never takes a host for decided before its watchdog
	// could have decided: it gives up on a silent host (its note "the
	// host answered no word") no sooner than HostGivesUp after the host's
	// last answer. Answers came again after the link last healed, once
	// the deployer had had the time to hear one (a spare's wait and a
	// login: a heal with a fault right after it may have brought none),
	// and stopped at the latest when the first fault after that began
	// (less a word's interval: the answer to the word before). A give-up
	// with no fault before it since such a heal (a busy machine's slow
	// host) says nothing.
	t := specClocksOf(s)
	for _, pt := range parties {
		for _, at := range pt.gaveUp {
			var healed, last time.Time
			for _, h := range pt.heals {
				if !h.Before(at) || !h.After(healed) {
					continue
				}
				answered := true
				for _, f := range pt.faults {
					if !f.Before(h) && f.Sub(h) < t.SpareAfter()+time.Second {
						answered = false
					}
				}
				if answered {
					healed = h
				}
			}
			for _, f := range pt.faults {
				if f.Before(at) && f.After(healed) && (last.IsZero() || f.Before(last)) {
					last = f
				}
			}
			if last.IsZero() {
				continue
			}
			if soon := t.HostGivesUp() - t.WordEvery() - 200*time.Millisecond; at.Sub(last) < soon {
				bad("a host decides before its deployer does", "%s took the host for silent %s after the fault that began at %s, before its watchdog could have decided (confirm_timeout and a tick, %s, from the last answer)",
					partyName(pt.i), at.Sub(last).Round(time.Millisecond), last.Format("15:04:05.000"), t.HostGivesUp())
			}
		}
	}

	// A verdict that passed is kept while a path to the host works: a
	// party whose link never kept a new connection from carrying its
	// traffic is not switched back after its verdict passed. A liveness
	// property, it holds when a spare login has its room: it starts once
	// the host's answers have been quiet for SpareAfter, and must speak
	// before confirm_timeout has passed since the host's last word; so it is
	// checked only when this party's logins took a third of that room (a
	// busy machine makes them slower).
	room := s.ConfirmTimeout - specClocksOf(s).SpareAfter()
	for _, pt := range parties {
		r := pt.result
		if r == nil || pt.killed || pt.interrupted || !pt.verdictPassed || pt.login == 0 || pt.login > room/3 {
			continue
		}
		blocked := false
		for _, f := range pt.plan.Faults {
			blocked = blocked || f.blocksNew()
		}
		// A system that cuts SSH, an sshd restarted: every party's new
		// connections are refused a while.
		for _, other := range parties {
			blocked = blocked || other.plan.Kind == nixtest.CutSSH || other.plan.reboot() != deploy.RebootNever
			for _, f := range other.plan.Faults {
				blocked = blocked || f.blocksNew() && f.Host != ""
			}
		}
		if blocked {
			continue
		}
		for _, c := range cs {
			if c.rollback && c.owner == pt.i {
				bad("a passed verdict is kept", "%s's verdict passed and new connections to the host worked throughout, yet %s", partyName(pt.i), describe(c))
			}
		}
	}

	for _, pt := range parties {
		b, _ := os.ReadFile(pt.stderr)
		if text := string(b); strings.Contains(text, "DATA RACE") || strings.Contains(text, "panic:") {
			bad("the deployer", "party %s: %s", partyName(pt.i), text)
		}
	}
	return out
}

// checkSettledByRefresh settles, as a refresh does, the record of every
// party that could not know its outcome, and checks what it settles on.
func checkSettledByRefresh(t *testing.T, tg *nixtest.Target, parties []*party) []string {
	t.Helper()
	var out []string
	for _, pt := range parties {
		r := pt.result
		if r == nil || r.Phase != deploy.PhaseUnknown {
			continue
		}
		cur, err := deployer(t, deploy.Options{}).ReadCurrent(context.Background(), pt.target.Settings)
		if err != nil {
			out = append(out, fmt.Sprintf("a record is true: party %s's outcome was not known, and a refresh could not read the host: %v", partyName(pt.i), err))
			continue
		}
		phase, msg := deploy.Settle(pt.plan.goal(), pt.system, r.PreviousSystem, cur)
		current, boot := tg.CurrentSystem(), tg.BootEntry()
		switch {
		case phase == deploy.PhaseSucceeded && (pt.plan.goal() != deploy.GoalBoot && current != pt.system || pt.plan.goal() != deploy.GoalTest && boot != pt.system),
			phase == deploy.PhaseRolledBack && current != r.PreviousSystem:
			out = append(out, fmt.Sprintf("a record is true: party %s's outcome was not known; a refresh settled it as %s (%s), but the host runs %s and boots %s",
				partyName(pt.i), phase, msg, current, boot))
		}
	}
	return out
}

// kindOf is the kind of a party's system; the initial system succeeds.
func kindOf(parties []*party, system string) nixtest.Kind {
	for _, pt := range parties {
		if pt.system == system {
			return pt.plan.Kind
		}
	}
	return nixtest.Succeed
}

// rebootUnseen is how long before a party's record a reboot may have come
// unseen by it: after the host's last answer (the confirmation's, the
// boot entry's), as the deployer let go of the host.
const rebootUnseen = 3 * time.Second

// decidesRoom is the room a busy machine gets in the timed check of a
// watchdog's decision: its clock ticks once a second.
const decidesRoom = 1500 * time.Millisecond

// decidesEarly is how much sooner than its clocks a watchdog's decision
// may seem, read from the host's files: their times and the watchdog's
// clock (the host's uptime) are read apart.
const decidesEarly = 100 * time.Millisecond

// changed says whether call c changed what the host runs or boots.
func changed(events []nixtest.Event, c *call) bool {
	for _, e := range events[c.first : c.last+1] {
		if e.PID == events[c.first].PID && (e.Kind == "set-current" || e.Kind == "set-boot") {
			return true
		}
	}
	return false
}
