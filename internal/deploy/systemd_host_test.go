package deploy_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
	"github.com/fleetops/terraform-provider-fleet/internal/systemdtest"
)

// The deployment against a real systemd host (internal/systemdtest): real
// systemctl, systemd-run and journalctl in a systemd-nspawn container, real
// units that start or fail. What the nixtest stand-ins claim, checked.

func systemdTargetOf(tg *systemdtest.Target, name, system string) deploy.Target {
	return deploy.Target{System: system, Settings: deploy.Settings{
		Name: name, Host: tg.Host, User: tg.User, PrivateKeyFile: tg.ClientKeyFile, HostKey: tg.HostKey,
		SSHOpts: []string{"Port=" + strconv.Itoa(tg.Port), "IdentitiesOnly=yes"},
	}}
}

// bootedSystemdHost is a real systemd host running a Succeed system whose
// unit is unit ("" for systemdtest.DefaultUnit).
func bootedSystemdHost(t *testing.T, unit string) (*systemdtest.Target, string) {
	t.Helper()
	tg := systemdtest.NewTarget(t)
	old := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed, Unit: unit})
	tg.Boot(t, old)
	if got := tg.SystemState(t); got != "running" {
		t.Fatalf("the host booted %s %q, want running", old, got)
	}
	return tg, old
}

// activationsOf are the activations of system on tg.
func activationsOf(tg *systemdtest.Target, system string) []systemdtest.Activation {
	var out []systemdtest.Activation
	for _, a := range tg.Activations() {
		if a.System == system {
			out = append(out, a)
		}
	}
	return out
}

// FR-001, FR-009, US1-3 on a real systemd host: the activation runs in a
// transient unit of the real systemd-run, with RuntimeMaxSec=180 since
// systemd-detect-virt says the host is a container; real systemctl judges
// the system settled; the new unit runs and the boot entry moves.
func TestSystemdHostSwitchSucceeds(t *testing.T) {
	t.Parallel()
	tg, old := bootedSystemdHost(t, "")
	if got := tg.DetectVirt(t); got != "systemd-nspawn" {
		t.Fatalf("systemd-detect-virt --container says %q on the host, want systemd-nspawn", got)
	}
	sys := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
	r := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{systemdTargetOf(tg, "web1", sys)}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	for _, cond := range []deploy.Condition{deploy.CondReachable, deploy.CondCopied, deploy.CondActivated, deploy.CondVerdict, deploy.CondBootloader} {
		if !r.Outcomes[cond].Passed {
			t.Errorf("%s: %+v", cond, r.Outcomes[cond])
		}
	}
	if r.PreviousSystem != old || r.CurrentSystem != sys {
		t.Errorf("previous %s, current %s; want %s, %s", r.PreviousSystem, r.CurrentSystem, old, sys)
	}
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys || tg.ProfileSystem() != sys {
		t.Errorf("host: current %s, boot %s, profile %s; want %s", tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem(), sys)
	}
	if got := tg.Service(t, systemdtest.DefaultUnit); got.ActiveState != "active" || got.System != sys {
		t.Errorf("%s is %+v, want active from %s", systemdtest.DefaultUnit, got, sys)
	}
	if got := tg.SystemState(t); got != "running" {
		t.Errorf("system state %q after the switch", got)
	}
	if want := []string{"test " + sys, "boot " + sys}; !slices.Equal(tg.Calls(), want) {
		t.Errorf("switch-to-configuration calls %q, want %q", tg.Calls(), want)
	}
	acts := activationsOf(tg, sys)
	if len(acts) == 0 || acts[0].Action != "test" {
		t.Fatalf("activations of %s: %+v", sys, acts)
	}
	act := acts[0]
	if !strings.HasPrefix(act.Unit, "fleet-activate-") || act.RuntimeMaxSec != "3min" {
		t.Errorf("the activation ran in %q with RuntimeMaxSec %q, want a fleet-activate-* transient unit with 3min (RuntimeMaxSec=180 in a container)", act.Unit, act.RuntimeMaxSec)
	}
	if act.Exit != 0 || act.SystemState != "running" {
		t.Errorf("the activation ended with exit %d, system %q", act.Exit, act.SystemState)
	}
	// The run's log on the host, written by the activation's transient
	// unit and the watchdog's too (systemd keeps their lines as written).
	out, code := tg.Exec(t, "sh", "-c", "cat "+agreement.StateDir+"/*/"+agreement.LogName)
	log, err := agreement.ParseLog(out)
	if code != 0 || err != nil {
		t.Fatalf("the run's log on the host: exit %d, %v:\n%s", code, err, out)
	}
	var said []string
	for _, l := range log {
		said = append(said, strings.Join(append([]string{l.What}, l.Args...), " "))
	}
	// The attempt's pid, as real systemd ran its command line (which
	// turns "$$" into "$"): the watchdog's only way to know it still runs.
	if pid, code := tg.Exec(t, "sh", "-c", "cat "+agreement.StateDir+"/*/unit.1.pid"); code != 0 || strings.Trim(pid, "0123456789\n") != "" || strings.TrimSpace(pid) == "" {
		t.Errorf("the activation's pid file on a real systemd host holds %q (exit %d), want its pid", pid, code)
	}
	for _, want := range []string{"leased", "fenced act.1", "watchdog guarded", "started unit.1", "ended unit.1 0", "over activated", "decided confirm word", "watchdog confirmed", "ended boot.1 0", "recorded succeeded " + sys} {
		if !slices.Contains(said, want) {
			t.Errorf("the run's log on the host lacks %q:\n%s", want, out)
		}
	}
	t.Logf("%s: %s", r.Phase, r.Message)
}

// FR-011 on a real systemd host: the new system's unit fails to start;
// switch-to-configuration exits 4 and systemd says degraded; the verdict
// fails naming the unit, the engine rolls the host back to the previous
// system (whose unit runs again, the system running) and the boot entry
// never moved.
func TestSystemdHostFailedUnitRollsBack(t *testing.T) {
	t.Parallel()
	testSystemdHostFailedUnit(t, "")
}

// The same with a unit of the user's whose name starts with fleet-, as
// the deployment's own transient units do: it is the user's, and it
// failed.
func TestSystemdHostFailedUnitNamedFleet(t *testing.T) {
	t.Parallel()
	testSystemdHostFailedUnit(t, "fleet-app.service")
}

func testSystemdHostFailedUnit(t *testing.T, unit string) {
	t.Helper()
	tg, old := bootedSystemdHost(t, unit)
	if unit == "" {
		unit = systemdtest.DefaultUnit
	}
	sys := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.FailUnit, Unit: unit})
	r := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{systemdTargetOf(tg, "web1", sys)}, nil)[0]
	wantPhase(t, r, deploy.PhaseRolledBack, unit, "rolled back to "+old)
	if r.ExitCode != deploy.ExitUnitsFailed {
		t.Errorf("exit code %d, want %d", r.ExitCode, deploy.ExitUnitsFailed)
	}
	acts := activationsOf(tg, sys)
	if len(acts) != 1 || acts[0].Action != "test" || acts[0].Exit != 4 || acts[0].SystemState != "degraded" || !slices.Contains(acts[0].FailedUnits, unit) {
		t.Errorf("activations of %s: %+v, want one test that exited 4 with the system degraded and %s failed", sys, acts, unit)
	}
	if tg.CurrentSystem() != old || tg.ProfileSystem() != old {
		t.Errorf("after the rollback: current %s, profile %s; want %s", tg.CurrentSystem(), tg.ProfileSystem(), old)
	}
	// The boot entry never moved: no boot of the new system was run.
	if tg.BootEntry() != old || slices.Contains(tg.Calls(), "boot "+sys) || slices.Contains(tg.Calls(), "switch "+sys) {
		t.Errorf("boot entry %s, calls %q; want the entry at %s and no boot of %s", tg.BootEntry(), tg.Calls(), old, sys)
	}
	if got := tg.Service(t, unit); got.ActiveState != "active" || got.System != old {
		t.Errorf("after the rollback %s is %+v, want active from %s", unit, got, old)
	}
	if got := tg.SystemState(t); got != "running" {
		t.Errorf("system state %q after the rollback, want running", got)
	}
	// The host's watchdog, a transient unit of its own, switched back.
	if back := activationsOf(tg, old); len(back) != 1 || back[0].Action != "test" || back[0].Exit != 0 || !strings.HasPrefix(back[0].Unit, "fleet-watchdog-") {
		t.Errorf("the rollback's activations of %s: %+v, want one test in a fleet-watchdog-* unit that exited 0", old, back)
	}
}

// Drift on a real systemd host: after a deploy, the host switched by hand
// (nixos-rebuild switch on it) is read as such by ReadCurrent, and not as
// a system a deploy finished.
func TestSystemdHostReadCurrentSeesDrift(t *testing.T) {
	t.Parallel()
	tg, _ := bootedSystemdHost(t, "")
	sys := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
	n := systemdTargetOf(tg, "web1", sys)
	d := deployer(t, deploy.Options{})
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{n}, nil)[0], deploy.PhaseSucceeded)
	got, err := d.ReadCurrent(context.Background(), n.Settings)
	if err != nil || got.System != sys || !got.Runs(sys) || got.HostKey != keyOf(tg.HostKey) {
		t.Fatalf("ReadCurrent after the deploy = %+v, %v; want %s, done, key %s", got, err, sys, keyOf(tg.HostKey))
	}
	byHand := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
	if out, code := tg.Switch(t, byHand); code != 0 {
		t.Fatalf("switch by hand: exit %d\n%s", code, out)
	}
	got, err = d.ReadCurrent(context.Background(), n.Settings)
	if err != nil || got.System != byHand {
		t.Fatalf("ReadCurrent after the switch by hand = %+v, %v; want %s", got, err, byHand)
	}
	if got.Succeeded != sys || got.Runs(byHand) {
		t.Errorf("ReadCurrent = %+v: want the last deployed system %s recorded, and %s not taken as deployed", got, sys, byHand)
	}
}

// The SSH session drops while the real systemd-run runs the activation
// (every connection to the host is closed): the transient unit runs on
// without its client, records its exit status, and the engine decides from
// what the host recorded, never from the lost exit status.
func TestSystemdHostSessionDroppedMidActivation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		kind   systemdtest.Kind
		phase  deploy.Phase
		exit   int
		reason string
	}{
		{"the activation succeeds", systemdtest.Succeed, deploy.PhaseSucceeded, 0, "ActivatedAfterSessionDropped"},
		{"the activation fails its unit", systemdtest.FailUnit, deploy.PhaseRolledBack, deploy.ExitUnitsFailed, "UnitsFailedAfterSessionDropped"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg, old := bootedSystemdHost(t, "")
			sys := systemdtest.Closure(t, systemdtest.Behaviour{Kind: c.kind, Delay: 2 * time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var dropped sync.WaitGroup
			dropped.Add(1)
			go func() {
				defer dropped.Done()
				for ctx.Err() == nil && !slices.Contains(tg.Calls(), "test "+sys) {
					time.Sleep(50 * time.Millisecond)
				}
				// Closes every established connection; new ones still pass.
				tg.Gate.SetMode(sshtest.GateOpen)
			}()
			r := deployer(t, deploy.Options{}).Deploy(ctx, []deploy.Target{systemdTargetOf(tg, "web1", sys)}, nil)[0]
			cancel()
			dropped.Wait()
			wantPhase(t, r, c.phase)
			if got := r.Outcomes[deploy.CondActivated]; got.Reason != c.reason || !strings.Contains(got.Message, fmt.Sprintf("the host recorded exit %d", c.exit)) {
				t.Errorf("activation step %+v, want reason %s and the host's exit %d", got, c.reason, c.exit)
			}
			acts := activationsOf(tg, sys)
			if len(acts) == 0 || acts[0].Action != "test" || acts[0].Exit != c.exit || !strings.HasPrefix(acts[0].Unit, "fleet-activate-") {
				t.Errorf("activations of %s: %+v, want first a test in its fleet-activate-* unit that exited %d", sys, acts, c.exit)
			}
			want := old
			if c.phase == deploy.PhaseSucceeded {
				want = sys
			}
			if tg.CurrentSystem() != want || tg.BootEntry() != want {
				t.Errorf("host: current %s, boot %s; want both %s", tg.CurrentSystem(), tg.BootEntry(), want)
			}
			if got := tg.Service(t, systemdtest.DefaultUnit); got.ActiveState != "active" || got.System != want {
				t.Errorf("%s is %+v, want active from %s", systemdtest.DefaultUnit, got, want)
			}
		})
	}
}

// Issue 22 on a real systemd host: a verdict that takes longer than
// confirm_timeout passes and stays (the watchdog in its transient unit
// waits while the deployer speaks), and the watchdog's unit is gone when
// the node is done.
func TestSystemdHostSlowVerdictPasses(t *testing.T) {
	t.Parallel()
	tg, old := bootedSystemdHost(t, "")
	sys := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 2 * time.Second, SettleTimeout: 20 * time.Second, Command: []string{"sleep 5"}}})
	r := d.Deploy(context.Background(), []deploy.Target{systemdTargetOf(tg, "web1", sys)}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	if out, _ := tg.Systemctl(t, "list-units", "--plain", "--no-legend", "fleet-watchdog-*"); strings.TrimSpace(out) != "" {
		t.Errorf("the watchdog's unit still runs after the node was done: %q", out)
	}
	time.Sleep(3 * time.Second)
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("host: current %s, boot %s; want %s (not %s)", tg.CurrentSystem(), tg.BootEntry(), sys, old)
	}
}

// Issue 22 on a real systemd host: a host that stops answering during its
// activation (every connection to it stalls) is given up on about
// confirm_timeout later, not after activation_timeout; it cannot be asked
// what it did, so its outcome is recorded as not known; its watchdog
// switches it back by itself once the activation ends, and a refresh
// settles the record.
func TestSystemdHostThatStopsAnsweringSwitchesItselfBack(t *testing.T) {
	t.Parallel()
	tg, old := bootedSystemdHost(t, "")
	sys := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed, Delay: 4 * time.Second})
	opts := deploy.Options{ActivationTimeout: time.Minute, Verdict: deploy.VerdictSpec{ConfirmTimeout: 2 * time.Second, SettleTimeout: 20 * time.Second}}
	d := deployer(t, opts)
	log := d.Options.Log
	frozen := make(chan time.Time, 1)
	d.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == deploy.EventStepStarted && e.Step == deploy.StepActivate {
			time.AfterFunc(time.Second, func() {
				tg.Gate.Stall(true)
				frozen <- time.Now()
			})
		}
	}
	t.Cleanup(func() { tg.Gate.Stall(false) })
	r := d.Deploy(context.Background(), []deploy.Target{systemdTargetOf(tg, "web1", sys)}, nil)[0]
	var took time.Duration
	select {
	case at := <-frozen:
		took = time.Since(at)
	default:
		t.Fatalf("the host was never frozen: %+v", r)
	}
	// It cannot be asked what its watchdog did: not known, until a refresh.
	wantPhase(t, r, deploy.PhaseUnknown, "stopped answering", "switches the host back to "+old)
	if took > opts.ActivationTimeout/2 {
		t.Errorf("the deploy ended %s after the host froze, want confirm_timeout (%s) and the time it asks the host, well within activation_timeout (%s)", took, opts.Verdict.ConfirmTimeout, opts.ActivationTimeout)
	}
	tg.Gate.Stall(false)
	deadline := time.Now().Add(30 * time.Second)
	for tg.CurrentSystem() != old && time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
	}
	if tg.CurrentSystem() != old || tg.BootEntry() != old {
		t.Errorf("the host did not switch itself back: current %s, boot %s, want %s", tg.CurrentSystem(), tg.BootEntry(), old)
	}
	cur, err := readOnceBack(t, d, systemdTargetOf(tg, "web1", sys).Settings)
	if err != nil {
		t.Fatal(err)
	}
	if phase, msg := deploy.Settle(deploy.GoalSwitch, sys, r.PreviousSystem, cur); phase != deploy.PhaseRolledBack {
		t.Errorf("settled by a refresh: %s, %s; want RolledBack", phase, msg)
	}
}
