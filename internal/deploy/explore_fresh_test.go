package deploy_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Fresh schedules (issue 37). The regression seeds replay the schedules
// they found (drawRegression); every other seed draws here, so that a
// schedule spends its faults where the agreement is at stake:
//
//   - on what the parties and the host really reach: a step a deployer
//     begins, or a file the host writes for a party's run (its lease
//     begun, its activation claimed, an attempt ended, the activation
//     ended, the decision made, the switch back ended, the boot entry
//     claimed), seen by a watcher of the host's files;
//   - for as long as the agreement's clocks make it matter: around
//     SpareAfter, confirm_timeout, HostGivesUp, a lease's end, or for good;
//   - on the link (held either way or both, for the open connections or
//     all, new ones refused or black-holed, reset, delayed) or on the host
//     (the keeper killed, every session dropped, sshd restarted: its
//     sessions dropped and new ones refused a while; the host rebooted:
//     every process on it killed, /run emptied, new connections reset
//     while it is away, then it runs its boot entry);
//   - with the host's behaviours drawn too: a verdict that fails (exit 4),
//     the switch lock held at the first attempt, an activation that hangs
//     past activation_timeout or outlasts confirm_timeout, a system that
//     cuts SSH, a boot entry that fails, a busy systemd that starts units
//     late, a logind that kills a closed session's processes, a deploy
//     that reboots the host into its system (reboot = "always"); goals
//     switch, test and boot; on_failure rollback or keep; one to three
//     deployers;
//   - fitted to the moment where one is planned: a sweep's cell or a
//     clock's race comes with a system that reaches it and makes it
//     matter (an activation in flight is mostly a slow one, a retry's
//     attempt outlasts confirm_timeout, a watchdog raced exists, a
//     confirmation's answer is held from before it is sent, a killed
//     deployer's late unit meets a rival's lease).

// Host events a trigger may wait for: the file of a party's run on the
// host (under agreement.StateDir/<run>/) whose appearance is the event, or
// "lease", the party's run named in agreement.LeaseFile.
var hostEventFiles = map[string]string{
	"act":           "act.1.fate",
	"unit":          "unit.1.fate",
	"attempt":       "activated.1",
	"activated":     "activated",
	"decided":       "decision",
	"switched back": "rolledback",
	"boot":          "boot.1.fate",
}

// exploreRebootSteps are the steps a trigger of a deploy that reboots
// picks from besides exploreSteps' (but the activation's): the reboot, the
// wait for the host's return, the verdict on the booted host (and a boot
// back after it fails), weighted as they matter.
var exploreRebootSteps = []deploy.StepName{deploy.StepReboot, deploy.StepReboot, deploy.StepReturn, deploy.StepBootVerdict, deploy.StepBootVerdict}

// hostEvents are their names, in the order a run reaches them.
var hostEvents = []string{"lease", "act", "unit", "attempt", "activated", "decided", "switched back", "boot"}

// Host-side faults a faultPlan's Host names.
const (
	hostKillKeeper   = "the keeper killed"
	hostDropSessions = "every session dropped"
	hostRestartSSHD  = "sshd restarted"
	hostReboot       = "the host rebooted"
)

// drawFresh draws the schedule of a fresh seed.
func drawFresh(seed uint64) schedule {
	rng := rand.New(rand.NewPCG(seed, 0xf4e5))
	pick := rng.IntN
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+pick(hi-lo+1)) * time.Millisecond }
	s := schedule{Seed: seed, ConfirmTimeout: []time.Duration{2 * time.Second, 3 * time.Second, 8 * time.Second}[pick(3)], RemoteExecTimeout: 5 * time.Second}
	s.Shell = []nixtest.Shell{nixtest.ShellDefault, nixtest.ShellBash, nixtest.ShellDash}[rand.New(rand.NewPCG(seed, 0x5e11)).IntN(3)]
	// A busy systemd, one schedule in five: units start up to 2.5 s late.
	if late := rand.New(rand.NewPCG(seed, 0x1a7e)); late.IntN(5) == 0 {
		s.StartLate = time.Duration(5+late.IntN(21)) * 100 * time.Millisecond
	}
	t := specClocksOf(s)
	// How long a fault lasts, each around a clock of the agreement.
	leaseEnds := s.RemoteExecTimeout * 5 / 4
	durations := []time.Duration{
		ms(100, 600),                                    // shorter than a spare's wait
		t.SpareAfter() + ms(200, 800),                   // a spare's turn
		s.ConfirmTimeout + ms(100, 900),                 // past the watchdog's patience, before the deployer's
		t.HostGivesUp() + ms(500, 2000),                 // past the deployer's
		leaseEnds + ms(1000, 3000),                      // past a lease's end
		2*s.RemoteExecTimeout + leaseEnds + ms(0, 2000), // long past it: the lease's liveness is checked
		0, // for good
	}
	// A deploy that reboots the host into its system, one party in
	// eight where its system and goal allow (a stream of its own).
	rebooting := rand.New(rand.NewPCG(seed, 0xb007))
	n := 1
	switch r := pick(10); {
	case r >= 8:
		n = 3
	case r >= 3:
		n = 2
	}
	// The host's events of a party, and the steps it reaches, by what it
	// deploys.
	// A trigger comes mostly right at its moment; at an early one, or a
	// step's start, sometimes any time in the next 1.5 s (a late moment,
	// the party may have ended by then).
	trig := func(of int, p partyPlan) trigger {
		var t trigger
		if pick(2) == 0 {
			evs := p.hostEvents()
			t = trigger{Of: of, Host: evs[pick(len(evs))]}
		} else {
			steps := p.steps()
			t = trigger{Of: of, Step: steps[pick(len(steps))]}
		}
		t.After = ms(0, 100)
		if confirmAt := (trigger{Step: deploy.StepConfirm}).position(); pick(3) == 0 && t.position() < confirmAt {
			t.After = ms(0, 1500)
		}
		return t
	}
	// benign turns a fault that is not a party's last into one that
	// mostly lets its deploy go on to the next: held or slowed a while.
	benign := func(f *faultPlan) {
		f.Host, f.Reset, f.Fault = "", false, sshtest.LinkFault{}
		switch pick(4) {
		case 0:
			f.Fault.Hold = [2]bool{true, true}
		case 1:
			f.Fault.Hold, f.Fault.OnlyOpen = [2]bool{true, true}, true
		case 2:
			f.Fault.Hold = [2]bool{false, true}
		default:
			f.Fault.Delay = ms(100, 800)
		}
		f.For = durations[pick(3)]
	}
	for i := range n {
		h := hostPlan{Goal: deploy.GoalSwitch, ActivationTimeout: time.Minute, Delay: ms(0, 1200).Round(100 * time.Millisecond)}
		p := partyPlan{Kind: nixtest.Succeed, LockTimeout: time.Duration(1+pick(3)) * 15 * time.Second, Host: &h}
		switch r := pick(20); {
		case r < 4:
			p.Kind = nixtest.FailUnits
		case r < 9:
			h.LockedOnce = true
		case r < 10:
			p.Kind = nixtest.Hang
		case r < 11:
			p.Kind = nixtest.CutSSH
		case r < 12:
			p.Kind = nixtest.BootloaderFails
		}
		switch pick(8) {
		case 0:
			h.Goal = deploy.GoalTest
		case 1:
			if !h.LockedOnce { // the switch lock is held for the activation
				h.Goal = deploy.GoalBoot
			}
		}
		// on_failure "keep" is about a verdict that fails: with no
		// watchdog, nothing on the host stops a hung activation whose
		// deployer is gone (a container's RuntimeMaxSec aside), so a hang
		// is never kept.
		h.Keep = pick(6) == 0 && p.Kind != nixtest.Hang
		if rebooting.IntN(8) == 0 && h.Goal == deploy.GoalSwitch && !h.LockedOnce &&
			(p.Kind == nixtest.Succeed || p.Kind == nixtest.FailUnits || p.Kind == nixtest.BootloaderFails) {
			h.Reboot = true
		}
		if pick(4) == 0 {
			h.Delay = s.ConfirmTimeout + time.Duration(1+pick(3))*time.Second
		}
		// A verdict with a check on the node that takes a while.
		if pick(6) == 0 {
			h.CheckTakes = ms(500, 3000).Round(100 * time.Millisecond)
		}
		// A short activation_timeout: a hung activation, or one slower
		// than it, is stopped by the deployer and, while its watchdog
		// switches back, by the watchdog.
		if p.Kind == nixtest.Hang || pick(10) == 0 {
			h.ActivationTimeout = time.Duration(4+pick(3)) * time.Second
			if p.Kind != nixtest.Hang {
				h.Delay = h.ActivationTimeout + s.ConfirmTimeout + time.Duration(2+pick(3))*time.Second
			}
		}
		if i > 0 {
			// Another deployer mostly races the first from its start,
			// waiting for the lock; else it comes at an early step or
			// host event of the first (which the first mostly reaches).
			t := trigger{Of: 0, After: ms(0, 300)}
			for pick(3) == 0 {
				if e := trig(0, s.Parties[0]); e.position() <= (trigger{Host: "unit"}).position() {
					t = e
					break
				}
			}
			p.Start = &t
			p.LockTimeout = time.Duration(3+pick(2)) * 15 * time.Second
		}
		faults := pick(3)
		if i == 0 {
			faults = 1 + pick(3)
		}
		for range faults {
			f := faultPlan{At: trig(i, p), For: durations[pick(len(durations))]}
			switch r := pick(22); {
			case r < 6: // silence: every byte held both ways
				f.Fault.Hold = [2]bool{true, true}
				if pick(2) == 0 {
					f.Fault.New, f.Fault.OnlyOpen = sshtest.NewBlackHole, true
				}
			case r < 9: // the open connections stall, new ones flow
				f.Fault.Hold, f.Fault.OnlyOpen = [2]bool{true, true}, true
			case r < 10:
				f.Fault.Hold = [2]bool{true, false}
			case r < 12: // answers lost
				f.Fault.Hold = [2]bool{false, true}
				f.Fault.OnlyOpen = pick(2) == 0
			case r < 13:
				f.Reset = true
			case r < 14:
				f.Reset, f.Fault.New = true, sshtest.NewRefuse
			case r < 15:
				f.Reset, f.Fault.Hold, f.Fault.OnlyOpen = true, [2]bool{true, true}, true
			case r < 16:
				f.Fault.Delay = ms(100, 800)
			case r < 17:
				f.Host = hostKillKeeper
			case r < 18:
				f.Host = hostDropSessions
			case r < 20:
				f.Host = hostRestartSSHD
				f.For = durations[pick(4)]
			default: // away as long as a fault's drawn length, up to past a lease's end
				f.Host = hostReboot
				f.For = durations[pick(5)]
			}
			if f.For == 0 && f.Fault == (sshtest.LinkFault{}) && f.Host != hostKillKeeper && f.Host != hostDropSessions {
				f.For = durations[pick(len(durations)-1)]
			}
			p.Faults = append(p.Faults, f)
		}
		// In the order the party reaches them; all but the last short,
		// so that the earlier ones mostly leave the deploy going on to
		// the later ones.
		slices.SortStableFunc(p.Faults, func(a, b faultPlan) int { return a.At.position() - b.At.position() })
		for k := range p.Faults[:max(len(p.Faults)-1, 0)] {
			benign(&p.Faults[k])
		}
		// A kill or an interrupt comes after the party's faults.
		var end *trigger
		switch pick(10) {
		case 0:
			p.Kill = &trigger{}
			end = p.Kill
		case 1:
			p.Interrupt = &trigger{}
			end = p.Interrupt
		}
		if end != nil {
			*end = trig(i, p)
			if n := len(p.Faults); n > 0 && end.position() < p.Faults[n-1].At.position() {
				*end = p.Faults[n-1].At
				end.After += ms(100, 1500)
			}
		}
		if h.LockedOnce && pick(3) != 0 {
			s.Parties = append(s.Parties, p)
			retries(&s, &s.Parties[i], rng)
			continue
		}
		s.Parties = append(s.Parties, p)
	}
	// Even seeds sweep the coverage table's cells, odd ones race a clock.
	// The cells are taken 19 apart (coprime with their 303): consecutive
	// even seeds plan another kind of fault at another column each time,
	// and 303 of them plan every cell once.
	if seed%2 == 0 {
		sweep(&s, sweptCell(seed), rng, benign)
	} else {
		raceClock(&s, rng, benign)
	}
	return s
}

// sweptCell is the coverage table's cell an even seed sweeps.
func sweptCell(seed uint64) exploreCell {
	cells := plannedCells()
	return cells[(seed/2*19)%uint64(len(cells))]
}

// sweep makes cell one the schedule exercises: the first party's last
// fault (or its kill, its interrupt, the second party's start) is cell's
// kind at cell's step or host event, and the first party's system and
// settings reach it; what the first party had planned after it goes.
func sweep(s *schedule, cell exploreCell, rng *rand.Rand, benign func(*faultPlan)) {
	a := &s.Parties[0]
	h := a.Host
	col := string(cell.Step)
	ev, isEvent := strings.CutPrefix(col, "host: ")
	at := trigger{Of: 0, Step: cell.Step, After: time.Duration(rng.IntN(101)) * time.Millisecond}
	if isEvent {
		at.Step, at.Host = "", ev
	}
	// What the first party deploys, so that it reaches the moment.
	activates := func() {
		if h.Goal == deploy.GoalBoot {
			h.Goal = deploy.GoalSwitch
		}
	}
	ends := func() {
		activates()
		if a.Kind == nixtest.Hang {
			a.Kind = nixtest.Succeed
		}
		if h.Delay > h.ActivationTimeout {
			h.ActivationTimeout = time.Minute
		}
	}
	// A deploy that reboots (reboot = "always") reaches its reboot and the
	// verdict on the booted host, and no activation.
	switch col {
	case string(deploy.StepReboot), string(deploy.StepBootVerdict):
		h.Goal, h.LockedOnce, h.Reboot = deploy.GoalSwitch, false, true
		if a.Kind != nixtest.FailUnits {
			a.Kind = nixtest.Succeed
		}
	case "", string(deploy.StepLock), string(deploy.StepCopy), string(deploy.StepFinalise), "host: lease", "host: boot":
	default:
		h.Reboot = false
	}
	switch col {
	case string(deploy.StepRollback), "host: switched back":
		ends()
		a.Kind, h.LockedOnce, h.Keep = nixtest.FailUnits, false, false
	case string(stepRetry):
		ends()
		a.Kind, h.LockedOnce = nixtest.Succeed, true
		retries(s, a, rng)
	case string(deploy.StepConfirm), "host: decided":
		ends()
		a.Kind, h.Keep = nixtest.Succeed, false
	case string(deploy.StepFinalise), "host: boot":
		ends()
		if a.Kind != nixtest.BootloaderFails {
			a.Kind = nixtest.Succeed
		}
		if h.Goal == deploy.GoalTest {
			h.Goal = deploy.GoalSwitch
		}
	case string(deploy.StepVerdict), "host: activated":
		ends()
	case "host: attempt":
		// The end of an attempt: mostly one that met the switch lock, a
		// retry after it.
		ends()
		if rng.IntN(3) != 0 {
			a.Kind, h.LockedOnce = nixtest.Succeed, true
			retries(s, a, rng)
		}
	case string(deploy.StepActivate), "host: act", "host: unit":
		// An activation in flight: mostly a slow one, longer than
		// confirm_timeout or (a short one) than activation_timeout, so
		// that what comes while it runs meets it running; or one that
		// systemd starts late, so that what comes as it was asked for
		// meets it not started yet.
		activates()
		if s.StartLate == 0 && rng.IntN(3) == 0 {
			s.StartLate = time.Duration(10+rng.IntN(16)) * 100 * time.Millisecond
		}
		switch rng.IntN(3) {
		case 0:
			h.Delay = s.ConfirmTimeout + time.Duration(1+rng.IntN(3))*time.Second
		case 1:
			h.ActivationTimeout = time.Duration(4+rng.IntN(3)) * time.Second
			h.Delay = h.ActivationTimeout + s.ConfirmTimeout + time.Duration(6+rng.IntN(3))*time.Second
			if a.Kind == nixtest.Hang {
				a.Kind = nixtest.Succeed
			}
		}
	}
	if cell.What == "killed" && col == "host: act" && rng.IntN(2) == 0 {
		at.After = lateUnit(s, rng)
	}
	if !h.LockedOnce {
		// The retry's own plans (an interrupt, a kill) go with it.
		dropRetry := func(t **trigger) {
			if *t != nil && (*t).Step == stepRetry {
				*t = nil
			}
		}
		dropRetry(&a.Kill)
		dropRetry(&a.Interrupt)
		a.Faults = slices.DeleteFunc(a.Faults, func(f faultPlan) bool { return f.At.Step == stepRetry })
	}
	// What the first party no longer reaches goes; a party that was to
	// start then starts at the first's start.
	reached := func(t *trigger) bool {
		if t == nil {
			return false
		}
		if t.Host != "" {
			return slices.Contains(a.hostEvents(), t.Host)
		}
		return t.Step == "" || t.Step == stepRetry && h.LockedOnce || slices.Contains(a.steps(), t.Step)
	}
	for i := range s.Parties[1:] {
		if st := s.Parties[1+i].Start; st != nil && st.Of == 0 && !reached(st) {
			st.Step, st.Host = "", ""
		}
	}
	// Nothing of the first party after the moment but what the cell
	// plans.
	before := func(t *trigger) bool { return reached(t) && !t.later(at) }
	a.Faults = slices.DeleteFunc(a.Faults, func(f faultPlan) bool { return !before(&f.At) })
	if !before(a.Kill) {
		a.Kill = nil
	}
	if !before(a.Interrupt) {
		a.Interrupt = nil
	}
	for k := range a.Faults {
		benign(&a.Faults[k])
	}
	switch cell.What {
	case "killed":
		a.Kill, a.Interrupt = &at, nil
	case "interrupt":
		a.Interrupt, a.Kill = &at, nil
	case "another deployer's start":
		if len(s.Parties) < 2 {
			s.Parties = append(s.Parties, partyPlan{Kind: nixtest.Succeed, LockTimeout: 45 * time.Second,
				Host: &hostPlan{Goal: deploy.GoalSwitch, ActivationTimeout: time.Minute, Delay: time.Duration(rng.IntN(13)) * 100 * time.Millisecond}})
		}
		s.Parties[1].Start = &at
	default:
		f := faultOfKind(cell.What, rng)
		f.At = at
		if cell.What == "hold down" && cell.Step == deploy.StepConfirm && rng.IntN(3) != 0 {
			// Mostly from before the confirmation is sent: its answer,
			// which comes a few milliseconds after it, is held.
			f.At.Sync, f.At.After = true, 0
		}
		a.Faults = append(a.Faults, f)
		if a.Kill != nil || a.Interrupt != nil {
			// The kill, the interrupt, after it.
			end := &a.Kill
			if a.Interrupt != nil {
				end = &a.Interrupt
			}
			t := at
			t.After += time.Duration(100+rng.IntN(1401)) * time.Millisecond
			*end = &t
		}
	}
}

// lateUnit plans a race of the first party's activation with its lease's
// end: the party is killed (after the returned time past its act command's
// start) while its activation waits for a busy systemd, with a rival
// waiting for the lock, on a host that kills a closed session's processes.
// The killed one's connections close, its lease ends at once, its act
// command dies with its session (else it would hold the guard until the
// unit ended), the rival takes the lock, and then the activation's unit
// starts; it must not switch (its lease is gone). "keep": no watchdog
// holds the guard, so that the rival's lease begins before the unit
// starts, and the unit's own lease check is all that stands in its way.
func lateUnit(s *schedule, rng *rand.Rand) time.Duration {
	a := &s.Parties[0]
	h := a.Host
	h.Reboot = false
	if h.Goal == deploy.GoalBoot {
		h.Goal = deploy.GoalSwitch
	}
	h.Keep, h.LockedOnce, h.SessionsKilled = true, false, true
	if a.Kind == nixtest.Hang {
		a.Kind = nixtest.Succeed
	}
	if h.Delay > h.ActivationTimeout {
		h.ActivationTimeout = time.Minute
	}
	s.StartLate = time.Duration(20+rng.IntN(6)) * 100 * time.Millisecond
	if len(s.Parties) < 2 {
		s.Parties = append(s.Parties, partyPlan{Kind: nixtest.Succeed,
			Host: &hostPlan{Goal: deploy.GoalSwitch, ActivationTimeout: time.Minute, Delay: time.Duration(rng.IntN(13)) * 100 * time.Millisecond}})
	}
	b := &s.Parties[1]
	b.Start, b.LockTimeout, b.Kill, b.Interrupt = &trigger{Of: 0, After: time.Duration(rng.IntN(301)) * time.Millisecond}, 45*time.Second, nil, nil
	// Once the act command has set the profile and asked for the unit
	// (a few hundred milliseconds), well before the unit starts.
	return time.Duration(300+rng.IntN(401)) * time.Millisecond
}

// raceClock makes the first party's last fault a race with one of the
// agreement's clocks: every byte of its link held from a moment of its
// deploy for a clock's length and a little more (up to a second: a
// watchdog's tick), so that what it held lands just after the clock ran
// out. The clocks: a spare's wait, the watchdog's patience (where the
// verdict and the confirmation are at stake, their moments weighted), the
// deployer's, and a lease's (with a rival waiting for the lock, which
// takes it as the lease ends: what the first sent lands in the rival's
// lease); and a late activation's start against its lease's end (see
// lateUnit: the first party killed then, rather than a fault). What the
// first party had planned after the moment goes.
func raceClock(s *schedule, rng *rand.Rand, benign func(*faultPlan)) {
	a := &s.Parties[0]
	t := specClocksOf(*s)
	clocks := []string{"spare", "watchdog", "watchdog", "deployer", "deployer", "lease", "lease", "activation", "unit start"}
	clock := clocks[rng.IntN(len(clocks))]
	if clock == "unit start" {
		// The activation's start, late, against its lease's end (see
		// lateUnit): the deployer killed as its act command has queued
		// the activation's unit.
		kill := trigger{Of: 0, Host: "act", After: lateUnit(s, rng)}
		a.Faults = slices.DeleteFunc(a.Faults, func(g faultPlan) bool { return g.At.later(kill) })
		a.Kill, a.Interrupt = &kill, nil
		return
	}
	if clock == "watchdog" || clock == "deployer" {
		// A watchdog to race: a goal that activates, no "keep", and an
		// activation that ends.
		h := a.Host
		if h.Goal == deploy.GoalBoot {
			h.Goal = deploy.GoalSwitch
		}
		h.Keep, h.Reboot = false, false
		// Mostly a verdict that passes: a confirmation to race.
		if a.Kind == nixtest.Hang || a.Kind == nixtest.FailUnits && rng.IntN(2) == 0 {
			a.Kind = nixtest.Succeed
		}
		if h.Delay > h.ActivationTimeout {
			h.ActivationTimeout = time.Minute
		}
		// Mostly a verdict that takes a while (a check on the node): a
		// stall in it lets the watchdog decide after the verdict read
		// the new system, before the confirmation.
		if clock == "watchdog" && rng.IntN(3) != 0 {
			h.CheckTakes = time.Duration(15+rng.IntN(16)) * 100 * time.Millisecond
		}
	}
	if clock == "activation" {
		// A slow activation, longer than a short activation_timeout and
		// the few seconds more the watchdog waits for it, whose deployer
		// goes silent for good as it runs: the watchdog stops it and
		// switches back; nothing of it may come after.
		h := a.Host
		if h.Goal == deploy.GoalBoot {
			h.Goal = deploy.GoalSwitch
		}
		h.Keep, h.LockedOnce, h.Reboot = false, false, false
		if a.Kind == nixtest.Hang || a.Kind == nixtest.BootloaderFails {
			a.Kind = nixtest.Succeed
		}
		h.ActivationTimeout = time.Duration(4+rng.IntN(3)) * time.Second
		h.Delay = h.ActivationTimeout + 5*time.Second + time.Duration(2+rng.IntN(3))*time.Second
	}
	var moments []trigger
	for _, st := range a.steps() {
		moments = append(moments, trigger{Of: 0, Step: st})
		switch {
		case clock == "watchdog" && st == deploy.StepVerdict:
			// The verdict weighs most: a confirmation sent as the
			// watchdog's patience runs out lands just after it did.
			moments = append(moments, trigger{Of: 0, Step: st}, trigger{Of: 0, Step: st}, trigger{Of: 0, Step: st}, trigger{Of: 0, Step: st})
		case clock == "deployer" && st == deploy.StepConfirm:
			// The confirmation weighs most: its answer lost for the
			// deployer's patience, once the host took it.
			moments = append(moments, trigger{Of: 0, Step: st}, trigger{Of: 0, Step: st})
		case clock == "lease" && st == deploy.StepFinalise:
			moments = append(moments, trigger{Of: 0, Step: st}, trigger{Of: 0, Step: st})
		}
	}
	for _, ev := range a.hostEvents() {
		moments = append(moments, trigger{Of: 0, Host: ev})
		if ev == "decided" || clock == "lease" && ev == "act" {
			moments = append(moments, trigger{Of: 0, Host: ev})
		}
		if clock == "deployer" && ev == "decided" {
			moments = append(moments, trigger{Of: 0, Host: ev}, trigger{Of: 0, Host: ev})
		}
	}
	if clock == "activation" {
		// As it runs: from its start or its unit's, or a moment of its
		// activate step.
		moments = []trigger{{Of: 0, Host: "act"}, {Of: 0, Host: "unit"}, {Of: 0, Host: "unit"}, {Of: 0, Step: deploy.StepActivate}}
	}
	at := moments[rng.IntN(len(moments))]
	at.After = time.Duration(rng.IntN(101)) * time.Millisecond
	// A step's moment, sometimes later in it; the verdict's, racing the
	// watchdog, mostly once its new login has read the host (its check
	// runs then).
	switch {
	case clock == "watchdog" && at.Step == deploy.StepVerdict && a.Host.CheckTakes > 0:
		at.After = time.Duration(300+rng.IntN(1201)) * time.Millisecond
	case at.Host == "" && rng.IntN(2) == 0:
		at.After = time.Duration(rng.IntN(1501)) * time.Millisecond
	}
	jitter := time.Duration(100+rng.IntN(801)) * time.Millisecond
	f := faultPlan{At: at}
	switch clock {
	case "spare":
		f.For = t.SpareAfter() + jitter
	case "watchdog":
		f.For = s.ConfirmTimeout + jitter
		// Or held until the watchdog has decided, and a little more: what
		// the deployer sent meanwhile lands right after the decision,
		// before the deployer's own patience (HostGivesUp) runs out.
		if rng.IntN(2) == 0 {
			f.Until = &trigger{Of: 0, Host: "decided", After: time.Duration(rng.IntN(301)) * time.Millisecond}
			f.For = t.HostGivesUp() + 2*time.Second
		}
	case "deployer":
		f.For = t.HostGivesUp() + jitter
	case "activation":
		f.For = 0 // for good
	case "lease":
		// A lease ends 1 to 1.25 remote_exec_timeout after its last word.
		f.For = s.RemoteExecTimeout*5/4 + time.Duration(300+rng.IntN(2201))*time.Millisecond
		if len(s.Parties) < 2 {
			s.Parties = append(s.Parties, partyPlan{Kind: nixtest.Succeed, Host: &hostPlan{Goal: deploy.GoalSwitch, ActivationTimeout: time.Minute,
				Delay: time.Duration(rng.IntN(13)) * 100 * time.Millisecond}})
		}
		b := &s.Parties[1]
		b.Start, b.LockTimeout = &trigger{Of: 0, After: time.Duration(rng.IntN(301)) * time.Millisecond}, time.Minute
		b.Kill, b.Interrupt = nil, nil
	}
	// Every byte held, on the open connections and new ones; or new ones
	// black-holed; or, racing the deployer's patience with its answers,
	// new ones flowing, as when a NAT forgot the open ones (the other
	// clocks race a silence, which a new login would end).
	f.Fault.Hold = [2]bool{true, true}
	switch rng.IntN(3) {
	case 0:
		f.Fault.New, f.Fault.OnlyOpen = sshtest.NewBlackHole, true
	case 1:
		if clock == "deployer" {
			f.Fault.OnlyOpen = true
		}
	}
	if clock == "deployer" && at.Step == deploy.StepConfirm && rng.IntN(3) != 0 {
		// Mostly the confirmation's answer lost, not the confirmation:
		// what the host says held from before the confirmation is sent
		// (its answer comes a few milliseconds after it), on every
		// connection, for the deployer's patience; the deployer must ask
		// what the host decided.
		at.Sync, at.After = true, 0
		f.At, f.Fault = at, sshtest.LinkFault{Hold: [2]bool{false, true}}
	}
	a.Faults = slices.DeleteFunc(a.Faults, func(g faultPlan) bool { return g.At.later(at) })
	for k := range a.Faults {
		benign(&a.Faults[k])
	}
	a.Faults = append(a.Faults, f)
	for _, end := range []**trigger{&a.Kill, &a.Interrupt} {
		if *end != nil && (*end).position() < at.position() {
			*end = nil
		}
	}
}

// retries plans what happens while p's retried activation runs (its
// switch lock held at the first attempt): an interrupt, a kill, or every
// byte of its link held a while, from the lock interval (500 ms) after
// the note of the held lock; the attempt it retries mostly outlasts
// confirm_timeout.
func retries(s *schedule, p *partyPlan, rng *rand.Rand) {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	of := slices.IndexFunc(s.Parties, func(q partyPlan) bool { return q.Host == p.Host })
	if rng.IntN(4) != 0 {
		p.Host.Delay = s.ConfirmTimeout + time.Duration(1+rng.IntN(3))*time.Second
	}
	tr := trigger{Of: of, Step: stepRetry, After: 500*time.Millisecond + ms(0, 1500)}
	switch rng.IntN(4) {
	case 0, 1:
		if rng.IntN(2) == 0 {
			p.Interrupt, p.Kill = &tr, nil
		} else {
			p.Kill, p.Interrupt = &tr, nil
		}
		// Only the faults before the retry can come.
		p.Faults = slices.DeleteFunc(p.Faults, func(f faultPlan) bool { return f.At.position() > tr.position() })
	default:
		// Past the watchdog's patience, the deployer's, or a lease's end.
		leaseEnds := s.RemoteExecTimeout * 5 / 4
		long := []time.Duration{s.ConfirmTimeout + ms(100, 900), specClocksOf(*s).HostGivesUp() + ms(500, 2000), leaseEnds + ms(1000, 3000)}
		f := faultPlan{At: tr, Fault: sshtest.LinkFault{Hold: [2]bool{true, true}}, For: long[rng.IntN(len(long))]}
		f.Fault.OnlyOpen = rng.IntN(2) == 0
		if f.Fault.OnlyOpen && rng.IntN(2) == 0 {
			f.Fault.New = sshtest.NewBlackHole
		}
		p.Faults = append(p.Faults, f)
	}
}

// faultOfKind is a fault of the coverage table's kind, drawn by rng for
// how long it lasts, as drawFresh draws a party's last.
func faultOfKind(kind string, rng *rand.Rand) faultPlan {
	var f faultPlan
	durations := []time.Duration{500 * time.Millisecond, 2 * time.Second, 4 * time.Second, 8 * time.Second, 14 * time.Second, 0}
	f.For = durations[rng.IntN(len(durations))]
	switch kind {
	case "hold both ways":
		f.Fault.Hold = [2]bool{true, true}
	case "hold up":
		f.Fault.Hold = [2]bool{true, false}
	case "hold down":
		f.Fault.Hold = [2]bool{false, true}
	case "hold the open":
		f.Fault.Hold, f.Fault.OnlyOpen = [2]bool{true, true}, true
	case "reset":
		f.Reset = true
	case "reset, refuse new":
		f.Reset, f.Fault.New = true, sshtest.NewRefuse
	case "reset, hold the open":
		f.Reset, f.Fault.Hold, f.Fault.OnlyOpen = true, [2]bool{true, true}, true
	case "black-hole new":
		f.Fault.New, f.Fault.Hold, f.Fault.OnlyOpen = sshtest.NewBlackHole, [2]bool{true, true}, rng.IntN(2) == 0
	case "delay":
		f.Fault.Delay = time.Duration(100+rng.IntN(701)) * time.Millisecond
	case hostKillKeeper, hostDropSessions:
		f.Host, f.For = kind, 0
	case hostRestartSSHD, hostReboot:
		f.Host = kind
		f.For = durations[rng.IntN(4)]
	}
	if f.For == 0 && f.Fault == (sshtest.LinkFault{}) && f.Host == "" {
		f.For = 2 * time.Second
	}
	return f
}

// hostEvents are the host events a party's run reaches, when nothing
// stops it.
func (p partyPlan) hostEvents() []string {
	h := p.Host
	if h.Reboot {
		// Its boot entry is made before the reboot, whatever its system.
		return []string{"lease", "boot"}
	}
	var out []string
	for _, ev := range hostEvents {
		switch {
		case h.Goal == deploy.GoalBoot && ev != "lease" && ev != "boot":
		case h.Goal == deploy.GoalTest && ev == "boot":
		case (ev == "switched back" || ev == "decided") && h.Keep: // no watchdog
		case ev == "switched back" && p.Kind == nixtest.Succeed:
		case (ev == "attempt" || ev == "activated" || ev == "boot") && h.Delay > h.ActivationTimeout:
		case ev == "boot" && p.Kind != nixtest.Succeed && p.Kind != nixtest.BootloaderFails:
		case ev == "activated" && p.Kind == nixtest.Hang:
		case ev == "attempt" && p.Kind == nixtest.Hang:
		default:
			out = append(out, ev)
		}
	}
	return out
}

// steps are the steps a party reaches, when nothing stops it.
func (p partyPlan) steps() []deploy.StepName {
	h := p.Host
	var out []deploy.StepName
	if h.Reboot {
		activation := []deploy.StepName{deploy.StepActivate, deploy.StepVerdict, deploy.StepConfirm, deploy.StepRollback}
		for _, st := range exploreSteps {
			if !slices.Contains(activation, st) {
				out = append(out, st)
			}
		}
		if p.Kind != nixtest.BootloaderFails {
			out = append(out, exploreRebootSteps...)
		}
		return out
	}
	for _, st := range exploreSteps {
		switch {
		case h.Goal == deploy.GoalBoot && (st == deploy.StepActivate || st == deploy.StepVerdict || st == deploy.StepConfirm || st == deploy.StepRollback):
		case h.Goal == deploy.GoalTest && st == deploy.StepFinalise:
		case p.Kind != nixtest.Succeed && p.Kind != nixtest.BootloaderFails && (st == deploy.StepConfirm || st == deploy.StepFinalise):
		case (p.Kind == nixtest.Succeed || p.Kind == nixtest.BootloaderFails || h.Keep) && st == deploy.StepRollback:
		case (p.Kind == nixtest.Hang || h.Delay > h.ActivationTimeout) && (st == deploy.StepVerdict || st == deploy.StepConfirm || st == deploy.StepFinalise):
		default:
			out = append(out, st)
		}
	}
	return out
}

// hostWatch watches a schedule's host: the lease file and the files of
// each party's runs. It says when each lease began and ended, and calls
// event for each host event of a party's run (once its run is known).
type hostWatch struct {
	tg      *nixtest.Target
	parties []*party
	event   func(of int, ev string)

	mu      sync.Mutex
	leases  []leaseSpan
	current string
	seen    map[string]bool // run + " " + event
	stop    chan struct{}
	done    chan struct{}
}

// leaseSpan is a lease as the host's lease file showed it: To is zero
// while it holds.
type leaseSpan struct {
	Run      string
	From, To time.Time
}

func watchHost(tg *nixtest.Target, parties []*party, event func(of int, ev string)) *hostWatch {
	w := &hostWatch{tg: tg, parties: parties, event: event, seen: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *hostWatch) loop() {
	defer close(w.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		w.look()
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

// look reads the host once.
func (w *hostWatch) look() {
	run := ""
	if b, err := os.ReadFile(w.tg.Path(agreement.LeaseFile)); err == nil {
		run, _, _ = strings.Cut(strings.TrimSpace(string(b)), " ")
	}
	now := time.Now()
	w.mu.Lock()
	if run != w.current {
		if w.current != "" {
			w.leases[len(w.leases)-1].To = now
		}
		if run != "" {
			w.leases = append(w.leases, leaseSpan{Run: run, From: now})
		}
		w.current = run
	}
	w.mu.Unlock()
	var fire [][2]string
	for _, pt := range w.parties {
		pt.mu.Lock()
		runs := append([]string(nil), pt.runs...)
		pt.mu.Unlock()
		for _, r := range runs {
			for _, ev := range hostEvents {
				key := r + " " + ev
				w.mu.Lock()
				seen := w.seen[key]
				w.mu.Unlock()
				if seen {
					continue
				}
				happened := false
				if ev == "lease" {
					happened = w.leased(r)
				} else {
					_, err := os.Lstat(w.tg.Path(agreement.StateDir + "/" + r + "/" + hostEventFiles[ev]))
					happened = err == nil
				}
				if happened {
					w.mu.Lock()
					w.seen[key] = true
					w.mu.Unlock()
					fire = append(fire, [2]string{strconv.Itoa(pt.i), ev})
				}
			}
		}
	}
	for _, f := range fire {
		i, _ := strconv.Atoi(f[0])
		w.event(i, f[1])
	}
}

// leased says whether run's lease has begun.
func (w *hostWatch) leased(run string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.leases {
		if l.Run == run {
			return true
		}
	}
	return false
}

// Stop ends the watch, after a last look, and returns the leases seen.
func (w *hostWatch) Stop() []leaseSpan {
	close(w.stop)
	<-w.done
	w.look()
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]leaseSpan(nil), w.leases...)
}

// hostFault does a host-side fault to the target: kill the keeper of the
// current lease, drop every connection to sshd (the gate closes them),
// restart sshd (drop them, and refuse new connections until the caller
// restores SSH), or reboot the host (away for down).
func hostFault(t *testing.T, tg *nixtest.Target, what string, down time.Duration) {
	switch what {
	case hostKillKeeper:
		b, err := os.ReadFile(tg.Path(agreement.LeaseFile))
		if err != nil {
			return
		}
		fields := strings.Fields(string(b))
		if len(fields) < 2 {
			return
		}
		if pid, err := strconv.Atoi(fields[1]); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	case hostDropSessions:
		tg.Gate.SetMode(sshtest.GateOpen)
	case hostRestartSSHD:
		tg.CutSSH(t, nixtest.CutReset)
		tg.Gate.SetMode(sshtest.GateOpen)
	case hostReboot:
		tg.Reboot(down)
	}
}

// Silences says whether the fault leaves the deployer no path to the host
// that carries its words: every byte it sends is held, on the
// connections open and on new ones.
func (f faultPlan) Silences() bool {
	return f.Host == "" && f.Fault.Hold[0] && (!f.Fault.OnlyOpen || f.Fault.New == sshtest.NewBlackHole)
}

// silences records when each party's link carried none of its words.
type silences struct {
	mu   sync.Mutex
	open map[int]time.Time
	done []silenceSpan
}

type silenceSpan struct {
	Of       int
	From, To time.Time
}

func (s *silences) begin(of int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[int]time.Time{}
	}
	if _, ok := s.open[of]; !ok {
		s.open[of] = time.Now()
	}
}

func (s *silences) end(of int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from, ok := s.open[of]; ok {
		s.done = append(s.done, silenceSpan{Of: of, From: from, To: time.Now()})
		delete(s.open, of)
	}
}

func (s *silences) spans() []silenceSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]silenceSpan(nil), s.done...)
}

// leaseEndsWithin is how long a lease may hold after its deployer's last
// word could have reached the host: remote_exec_timeout and a quarter
// (the keeper's looks), a look more, and room for a busy machine.
func leaseEndsWithin(s schedule) time.Duration {
	return s.RemoteExecTimeout*5/4 + s.RemoteExecTimeout/4 + 3*time.Second
}

// checkLeasesEnd checks a lease's liveness: a lease whose deployer's link
// carried none of its words for longer than leaseEndsWithin has ended
// within that bound of the silence's start, as the host's lease file
// shows.
func checkLeasesEnd(parties []*party, s schedule, leases []leaseSpan, spans []silenceSpan) []string {
	var out []string
	bound := leaseEndsWithin(s)
	for _, sp := range spans {
		if sp.To.Sub(sp.From) <= bound {
			continue
		}
		pt := parties[sp.Of]
		pt.mu.Lock()
		runs := append([]string(nil), pt.runs...)
		pt.mu.Unlock()
		for _, l := range leases {
			if !slices.Contains(runs, l.Run) || l.From.After(sp.From) || !l.To.IsZero() && !l.To.After(sp.From) {
				continue
			}
			switch {
			case l.To.IsZero():
				out = append(out, fmt.Sprintf("a lease ends: party %s's lease (run %q) never ended, though nothing it sent reached the host for %s from %s (bound %s)",
					partyName(sp.Of), l.Run, sp.To.Sub(sp.From).Round(time.Millisecond), sp.From.Format("15:04:05.000"), bound))
			case l.To.Sub(sp.From) > bound:
				out = append(out, fmt.Sprintf("a lease ends: party %s's lease (run %q) ended %s after nothing it sent reached the host any more (from %s, for %s), want within %s",
					partyName(sp.Of), l.Run, l.To.Sub(sp.From).Round(time.Millisecond), sp.From.Format("15:04:05.000"), sp.To.Sub(sp.From).Round(time.Millisecond), bound))
			}
		}
	}
	return out
}

// column is the coverage table's column of a trigger: its step, or its
// host event.
func (t trigger) column() deploy.StepName {
	if t.Host != "" {
		return deploy.StepName("host: " + t.Host)
	}
	return t.Step
}

// hostBehaviours are what a fresh schedule's systems and settings may do,
// each a row of the coverage table.
var hostBehaviours = []string{
	"host: a verdict that fails", "host: the switch lock held once", "host: an activation longer than confirm_timeout",
	"host: an activation that hangs", "host: an activation longer than activation_timeout", "host: a system that cuts SSH",
	"host: a boot entry that fails", "goal test", "goal boot", `on_failure "keep"`, "two deployers", "three deployers",
	"shells: bash, as NixOS's", "shells: dash", "host: units started late", "host: a verdict check that takes a while",
	"host: a closed session's processes killed", "host: a deploy that reboots into its system",
}

// behaviours are the rows of hostBehaviours a started party exercised.
func (p partyPlan) behaviours(s schedule) []string {
	var out []string
	switch p.Kind {
	case nixtest.FailUnits:
		out = append(out, "host: a verdict that fails")
	case nixtest.Hang:
		out = append(out, "host: an activation that hangs")
	case nixtest.CutSSH:
		out = append(out, "host: a system that cuts SSH")
	case nixtest.BootloaderFails:
		out = append(out, "host: a boot entry that fails")
	case nixtest.Succeed, nixtest.LockHeld, nixtest.RebootRequired, nixtest.BootHangs:
	}
	h := p.Host
	if h == nil {
		return out
	}
	if h.LockedOnce {
		out = append(out, "host: the switch lock held once")
	}
	if h.Delay > s.ConfirmTimeout {
		out = append(out, "host: an activation longer than confirm_timeout")
	}
	if h.Delay > p.activationTimeout() {
		out = append(out, "host: an activation longer than activation_timeout")
	}
	switch p.goal() {
	case deploy.GoalTest:
		out = append(out, "goal test")
	case deploy.GoalBoot:
		out = append(out, "goal boot")
	case deploy.GoalSwitch, deploy.GoalDryActivate:
	}
	if h.Keep {
		out = append(out, `on_failure "keep"`)
	}
	if h.CheckTakes > 0 {
		out = append(out, "host: a verdict check that takes a while")
	}
	if h.SessionsKilled {
		out = append(out, "host: a closed session's processes killed")
	}
	if h.Reboot {
		out = append(out, "host: a deploy that reboots into its system")
	}
	return out
}

// position is where a trigger's moment comes in a run, roughly: steps and
// host events in the order a deploy reaches them.
func (t trigger) position() int {
	order := []string{"", "lock", "lease", "copy", "activate", "act", "unit", string(stepRetry), "attempt", "activated",
		"verdict", "confirm", "decided", "rollback", "switched back", "finalise", "boot",
		string(deploy.StepReboot), string(deploy.StepReturn), string(deploy.StepBootVerdict)}
	key := t.Host
	if key == "" {
		key = string(t.Step)
	}
	if i := slices.Index(order, key); i >= 0 {
		return i
	}
	return len(order)
}

// later says whether t comes after u: at a later step or host event, or
// later past the same one (a fault planned there would replace u's).
func (t trigger) later(u trigger) bool {
	if t.position() != u.position() || t.Host != u.Host || t.Step != u.Step {
		return t.position() > u.position()
	}
	return t.After > u.After
}

// specClocks are the agreement's clocks as ssh-deployment.md states them,
// written here once more rather than taken from agreement.Timing: the
// explorer draws and judges by them, so that a mutation of the code's
// clocks (make mutate-agreement) neither changes the schedules drawn nor
// the bounds they are judged by.
type specClocks struct{ confirm time.Duration }

func specClocksOf(s schedule) specClocks { return specClocks{s.ConfirmTimeout} }

// WordEvery: a word a few times per confirm_timeout, at least once a
// second.
func (c specClocks) WordEvery() time.Duration {
	return min(max(c.confirm/4, 100*time.Millisecond), time.Second)
}

// SpareAfter: a third of confirm_timeout, two words at least.
func (c specClocks) SpareAfter() time.Duration { return max(2*c.WordEvery(), c.confirm/3) }

// HostGivesUp: confirm_timeout and a tick of the watchdog's clock.
func (c specClocks) HostGivesUp() time.Duration { return c.confirm + time.Second }
