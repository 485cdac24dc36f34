package deploy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// What a node's record says when its lease on the host's deploy lock ended
// between two steps, or an interrupt came there: what the steps before left
// the host with, the system and the keys (from an independent review of
// the lease-lost message, issue 47: the message said "nothing was changed"
// after a switch, a verdict, a key written or removed).

// loseLeaseAfter ends d's lease on tg's host as step ends (its keeper
// killed, every connection to sshd dropped), 2 s before the next step
// begins: the deployer's keeper session sees its end at once.
func loseLeaseAfter(t *testing.T, d *deploy.Deployer, tg *nixtest.Target, step deploy.StepName) {
	onStep(d, step, true, func() {
		hostFault(t, tg, hostKillKeeper, 0)
		hostFault(t, tg, hostDropSessions, 0)
		time.Sleep(2 * time.Second)
	})
}

// bootedOld is a host booted into a system (old), and another to deploy
// (sys).
func bootedOld(t *testing.T) (tg *nixtest.Target, old, sys string) {
	old = nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	sys = nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg = nixtest.NewTarget(t)
	tg.Boot(t, old)
	return tg, old, sys
}

// wantNoNothingChanged fails when the message says nothing changed.
func wantNoNothingChanged(t *testing.T, r deploy.Result, why string) {
	t.Helper()
	if strings.Contains(r.Message, "nothing was changed") || strings.Contains(r.Message, "nothing was done") {
		t.Errorf("the record says nothing changed, but %s: %s", why, r.Message)
	}
}

// Goal boot with a key: the key written and its unit restarted, then the
// lease lost before the profile step.
func TestLeaseLostBeforeTheProfileNamesTheKeysWritten(t *testing.T) {
	t.Parallel()
	tg, old, sys := bootedOld(t)
	n := targetOf(tg, "n1", sys)
	n.Keys = []deploy.Key{key("db", "/run/keys/db", "app.service")}
	d := deployer(t, deploy.Options{Goal: deploy.GoalBoot})
	loseLeaseAfter(t, d, tg, deploy.StepRestart)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	if r.Step != deploy.StepProfile || !tg.Exists("/run/keys/db") {
		t.Fatalf("failed in step %s, key there %v: %s", r.Step, tg.Exists("/run/keys/db"), r.Message)
	}
	wantPhase(t, r, deploy.PhaseFailed, "lost before the profile step", "it runs "+old, "so far this deploy changed the host's keys: keys put in place: db", "restarted app.service")
	wantNoNothingChanged(t, r, "the host holds the new key db and restarted app.service")
}

// A reboot with a key: the key written, the lease lost before the profile.
func TestLeaseLostBeforeARebootsProfileNamesTheKeysWritten(t *testing.T) {
	t.Parallel()
	tg, _, sys := bootedOld(t)
	n := targetOf(tg, "n1", sys)
	n.Keys = []deploy.Key{key("db", "/run/keys/db", "app.service")}
	d := deployer(t, deploy.Options{Reboot: deploy.RebootAlways, RebootTimeout: 20 * time.Second})
	loseLeaseAfter(t, d, tg, deploy.StepRebootCheck)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	if r.Step != deploy.StepProfile || !tg.Exists("/run/keys/db") {
		t.Fatalf("failed in step %s, key there %v: %s", r.Step, tg.Exists("/run/keys/db"), r.Message)
	}
	wantPhase(t, r, deploy.PhaseFailed, "lost before the profile step", "so far this deploy changed the host's keys: keys put in place: db")
	wantNoNothingChanged(t, r, "the host holds the new key db")
}

// The lease lost after the boot entry, before the reboot: the host was not
// asked to reboot, and its boot entry is put back.
func TestLeaseLostBeforeTheRebootSaysItWasNotAsked(t *testing.T) {
	t.Parallel()
	tg, old, sys := bootedOld(t)
	d := deployer(t, deploy.Options{Reboot: deploy.RebootAlways, RebootTimeout: 20 * time.Second})
	loseLeaseAfter(t, d, tg, deploy.StepFinalise)
	r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", sys)}, nil)[0]
	if r.Step != deploy.StepReboot || tg.CurrentSystem() != old || len(tg.Boots()) != 0 {
		t.Fatalf("failed in step %s; the host runs %s after %d boots: %s", r.Step, tg.CurrentSystem(), len(tg.Boots()), r.Message)
	}
	wantPhase(t, r, deploy.PhaseFailed, "lost before the reboot step", "the host was not asked to reboot; it runs "+old+", and its boot entry is "+sys)
	if tg.BootEntry() == old && !strings.Contains(r.Message, "put back to "+old) {
		t.Errorf("the host boots %s, and the record does not say its entry was put back: %s", old, r.Message)
	}
}

// Goal test: the lease lost after the verdict, before the after-verdict
// keys.
func TestLeaseLostBeforeKeysAfterWithGoalTest(t *testing.T) {
	t.Parallel()
	tg, _, sys := bootedOld(t)
	n := targetOf(tg, "n1", sys)
	after := key("after", "/run/keys/after")
	after.Upload = deploy.UploadAfterVerdict
	n.Keys = []deploy.Key{after}
	d := deployer(t, deploy.Options{Goal: deploy.GoalTest})
	loseLeaseAfter(t, d, tg, deploy.StepConfirm)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	if r.Step != deploy.StepKeysAfter || tg.CurrentSystem() != sys || tg.Exists("/run/keys/after") {
		t.Errorf("step %s, the host runs %s, the key there %v", r.Step, tg.CurrentSystem(), tg.Exists("/run/keys/after"))
	}
	wantPhase(t, r, deploy.PhaseFailed, "lost before the keys-after step", "the new system passed its verdict and stays active; its after-verdict keys were not written")
}

// Keys only: the lease lost between the keys and their units' restart.
func TestLeaseLostBeforeTheRestartOfKeysOnly(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	d := deployer(t, deploy.Options{})
	loseLeaseAfter(t, d, tg, deploy.StepKeys)
	r := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("db", "/run/keys/db", "app.service"))}, nil)[0]
	if r.Step != deploy.StepRestart || !tg.Exists("/run/keys/db") || len(tg.Restarts()) != 0 {
		t.Errorf("step %s, key there %v, restarts %q", r.Step, tg.Exists("/run/keys/db"), tg.Restarts())
	}
	wantPhase(t, r, deploy.PhaseFailed, "lost before the restart step", "the keys are in place; no unit was restarted")
}

// A switch with a key: the lease lost before the activation.
func TestLeaseLostBeforeTheActivation(t *testing.T) {
	t.Parallel()
	tg, old, sys := bootedOld(t)
	n := targetOf(tg, "n1", sys)
	n.Keys = []deploy.Key{key("db", "/run/keys/db", "app.service")}
	d := deployer(t, deploy.Options{})
	loseLeaseAfter(t, d, tg, deploy.StepKeys)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	if r.Step != deploy.StepActivate || tg.CurrentSystem() != old {
		t.Errorf("step %s, the host runs %s", r.Step, tg.CurrentSystem())
	}
	wantPhase(t, r, deploy.PhaseFailed, "lost before the activate step", "nothing was activated; the host runs "+old, "keys put in place: db")
}

// A key the node no longer has (the host keeps the deployment's record of
// it) goes right after the read; then the lease is lost before the build
// on the host.
func TestLeaseLostBeforeTheBuildNamesTheKeyRemoved(t *testing.T) {
	t.Parallel()
	tg, n := builtOnTheTarget(t, good())
	db := key("db", "/run/keys/db")
	old := tg.CurrentSystem()
	res := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, old, db)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	d := deployer(t, deploy.Options{})
	loseLeaseAfter(t, d, tg, deploy.StepCopy)
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	if r.Step != deploy.StepBuild || tg.Exists(db.Path) {
		t.Fatalf("failed in step %s, key there %v: %s", r.Step, tg.Exists(db.Path), r.Message)
	}
	wantPhase(t, r, deploy.PhaseFailed, "lost before the build step", "it runs "+old, "so far this deploy changed the host's keys: keys removed: /run/keys/db")
	wantNoNothingChanged(t, r, "the deploy removed the key db from the host")
}

// An interrupt as a step ends: the record says what the next, not
// started, leaves.
func interruptAfter(t *testing.T, opts deploy.Options, n deploy.Target, step deploy.StepName) deploy.Result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := deployer(t, opts)
	onStep(d, step, true, cancel)
	return d.Deploy(ctx, []deploy.Target{n}, nil)[0]
}

func TestInterruptedBeforeTheRebootSaysItWasNotAsked(t *testing.T) {
	t.Parallel()
	tg, old, sys := bootedOld(t)
	r := interruptAfter(t, deploy.Options{Reboot: deploy.RebootAlways, RebootTimeout: 20 * time.Second}, targetOf(tg, "n1", sys), deploy.StepFinalise)
	if r.Step != deploy.StepReboot || tg.CurrentSystem() != old || tg.BootEntry() != sys || len(tg.Boots()) != 0 {
		t.Errorf("step %s; the host runs %s, boots %s, after %d boots", r.Step, tg.CurrentSystem(), tg.BootEntry(), len(tg.Boots()))
	}
	wantPhase(t, r, deploy.PhaseFailed, "before the reboot step", "the host was not asked to reboot; it runs "+old+", and its boot entry is "+sys)
}

func TestInterruptedBeforeKeysAfterSaysTheyWereNotWritten(t *testing.T) {
	t.Parallel()
	tg, _, sys := bootedOld(t)
	n := targetOf(tg, "n1", sys)
	after := key("after", "/run/keys/after")
	after.Upload = deploy.UploadAfterVerdict
	n.Keys = []deploy.Key{after}
	r := interruptAfter(t, deploy.Options{}, n, deploy.StepFinalise)
	if r.Step != deploy.StepKeysAfter || tg.CurrentSystem() != sys || tg.Exists("/run/keys/after") {
		t.Errorf("step %s, the host runs %s, the key there %v", r.Step, tg.CurrentSystem(), tg.Exists("/run/keys/after"))
	}
	wantPhase(t, r, deploy.PhaseFailed, "before the keys-after step", "its after-verdict keys were not written")
}

// An interrupt after the keys, before the activation, names the key
// written (the interrupt's record, as the lease-lost one).
func TestInterruptedBeforeTheActivationNamesTheKeysWritten(t *testing.T) {
	t.Parallel()
	tg, old, sys := bootedOld(t)
	n := targetOf(tg, "n1", sys)
	n.Keys = []deploy.Key{key("db", "/run/keys/db", "app.service")}
	r := interruptAfter(t, deploy.Options{}, n, deploy.StepKeys)
	if r.Step != deploy.StepActivate || tg.CurrentSystem() != old || !tg.Exists("/run/keys/db") {
		t.Errorf("step %s, the host runs %s, the key there %v", r.Step, tg.CurrentSystem(), tg.Exists("/run/keys/db"))
	}
	wantPhase(t, r, deploy.PhaseFailed, "before the activate step", "so far this deploy changed the host's keys: keys put in place: db")
}

// An interrupt once the host is back from its reboot, before its keys are
// put back: the reboot emptied /run/keys, and the record does not say the
// key written before it is in place (independent review).
func TestInterruptedAfterTheRebootDoesNotSayAGoneKeyIsInPlace(t *testing.T) {
	t.Parallel()
	tg, _, sys := bootedOld(t)
	n := targetOf(tg, "n1", sys)
	n.Keys = []deploy.Key{key("db", "/run/keys/db", "app.service")}
	r := interruptAfter(t, deploy.Options{Reboot: deploy.RebootAlways, RebootTimeout: 20 * time.Second}, n, deploy.StepReturn)
	if tg.Exists("/run/keys/db") {
		t.Fatalf("the key is there after the reboot (step %s): the test needs it gone", r.Step)
	}
	if strings.Contains(r.Message, "keys put in place: db") {
		t.Errorf("the record says db was put in place, but the reboot took it: %s", r.Message)
	}
}
