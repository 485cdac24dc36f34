package deploy_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Issue 39: a switch that boots its host into the new system. With
// reboot = always, the boot entry is made, the host reboots (its boot id
// changes), and the verdict on the booted host passes: Succeeded, the
// host running and booted into the new system, rebooted once. A system
// whose units fail after the boot is rolled back by a second reboot into
// the system before: RolledBack, booted into the old one. A host that does
// not come back within reboot_timeout ends Unknown.
func TestDeployRebootsIntoTheNewSystem(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})
	opts := deploy.Options{Reboot: deploy.RebootAlways, RebootTimeout: 20 * time.Second,
		Verdict: deploy.VerdictSpec{ConfirmTimeout: 5 * time.Second, SettleTimeout: 2 * time.Second}}

	t.Run("succeeds", func(t *testing.T) {
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		res := deployer(t, opts).Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", good)}, nil)
		wantPhase(t, res[0], deploy.PhaseSucceeded, "by a reboot (reboot = always)")
		if tg.CurrentSystem() != good || tg.BootedSystem() != good || tg.BootEntry() != good || len(tg.Boots()) != 1 {
			t.Errorf("current %s, booted %s, boot entry %s, boots %d; want %s and one boot", tg.CurrentSystem(), tg.BootedSystem(), tg.BootEntry(), len(tg.Boots()), good)
		}
		if o := res[0].Outcomes[deploy.CondRebooted]; !o.Passed || !res[0].RebootTried {
			t.Errorf("Rebooted %+v", o)
		}
		if res[0].CurrentSystem != good || res[0].BootSystem != good || res[0].VerifiedSystem != good {
			t.Errorf("record: current %s, boot %s, verified %s", res[0].CurrentSystem, res[0].BootSystem, res[0].VerifiedSystem)
		}
		// Asked for by the run's fenced script, under its own lease.
		for _, e := range tg.Events() {
			if e.Kind == "reboot" && (e.Action != "systemctl" || e.Unit == "" || e.Lease != e.Unit) {
				t.Errorf("the reboot was asked by %q, from run %q's script, under run %q's lease; want systemctl, from a run's script, under its lease", e.Action, e.Unit, e.Lease)
			}
		}
		// The host's own record of it is kept where a reboot keeps it.
		if !tg.Exists(agreement.SucceededFile) || strings.HasPrefix(agreement.SucceededFile, "/run/") {
			t.Errorf("the host's record of the verified system is not at %s, which a reboot keeps", agreement.SucceededFile)
		}
		// The lease's keeper ends at its next look (a quarter of
		// remote_exec_timeout at most).
		for end := time.Now().Add(20 * time.Second); len(tg.Leftovers()) > 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		}
		if left := tg.Leftovers(); len(left) > 0 {
			t.Errorf("left on the host: %q", left)
		}
	})
	t.Run("a failing verdict boots back", func(t *testing.T) {
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		res := deployer(t, opts).Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", bad)}, nil)
		wantPhase(t, res[0], deploy.PhaseRolledBack, "db.service", "the boot entry was put back to "+old+" and the host rebooted into it")
		if tg.CurrentSystem() != old || tg.BootedSystem() != old || tg.BootEntry() != old || len(tg.Boots()) != 2 {
			t.Errorf("current %s, booted %s, boot entry %s, boots %d; want %s and two boots", tg.CurrentSystem(), tg.BootedSystem(), tg.BootEntry(), len(tg.Boots()), old)
		}
		if res[0].CurrentSystem != old || res[0].BootSystem != old {
			t.Errorf("record: current %s, boot %s", res[0].CurrentSystem, res[0].BootSystem)
		}
	})
	t.Run("a host that reboots again as the booted host is judged boots back", func(t *testing.T) {
		// (The new-user trial: it once ended Failed, the host running
		// and booting the unjudged system, the profile's switch back
		// tried once while the host was away.)
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		o := opts
		o.Verdict.Command = []string{"sleep 3"}
		d := deployer(t, o)
		var rebooted sync.WaitGroup
		rebooted.Add(1)
		onStep(d, deploy.StepBootVerdict, false, func() {
			go func() {
				defer rebooted.Done()
				time.Sleep(time.Second)
				tg.Reboot(time.Second)
			}()
		})
		res := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", good)}, nil)
		rebooted.Wait()
		wantPhase(t, res[0], deploy.PhaseRolledBack, "the host rebooted again as the verdict judged", "the boot entry was put back to "+old+" and the host rebooted into it")
		if o := res[0].Outcomes[deploy.CondVerdict]; o.Passed || o.Reason != "HostRebooted" {
			t.Errorf("VerdictPassed %+v, want failed, HostRebooted", o)
		}
		if tg.CurrentSystem() != old || tg.BootEntry() != old || len(tg.Boots()) != 3 {
			t.Errorf("current %s, boot entry %s, boots %d; want %s, and three boots (the deploy's, the fault's, the boot back)", tg.CurrentSystem(), tg.BootEntry(), len(tg.Boots()), old)
		}
	})
	t.Run("a host that does not come back", func(t *testing.T) {
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		tg.SetRebootNever(true)
		o := opts
		o.RebootTimeout = 3 * time.Second
		res := deployer(t, o).Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", good)}, nil)
		wantPhase(t, res[0], deploy.PhaseUnknown, "did not come back within reboot_timeout (3s)")
		if res[0].CurrentSystem != "" {
			t.Errorf("the record says the host runs %s", res[0].CurrentSystem)
		}
	})
	t.Run("when required", func(t *testing.T) {
		t.Parallel()
		sys := func(kernel, unit string) string {
			return nixtest.System(t, nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}, Kernel: kernel, Units: map[string]string{"app.service": unit}})
		}
		before, sameKernel, newKernel := sys("6.6.50", "1"), sys("6.6.50", "2"), sys("6.6.58", "2")
		tg := nixtest.NewTarget(t)
		tg.Boot(t, before)
		o := opts
		o.Reboot = deploy.RebootWhenRequired
		d := deployer(t, o)
		res := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", sameKernel)}, nil)
		wantPhase(t, res[0], deploy.PhaseSucceeded)
		if len(tg.Boots()) != 0 || res[0].RebootTried || tg.CurrentSystem() != sameKernel {
			t.Errorf("a system with the booted kernel: %d boots, runs %s", len(tg.Boots()), tg.CurrentSystem())
		}
		res = d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", newKernel)}, nil)
		wantPhase(t, res[0], deploy.PhaseSucceeded, "by a reboot (kernel, initrd, kernel-modules changed)")
		if len(tg.Boots()) != 1 || tg.BootedSystem() != newKernel {
			t.Errorf("a new kernel: %d boots, booted %s", len(tg.Boots()), tg.BootedSystem())
		}
	})
	t.Run("keys come back after the reboot", func(t *testing.T) {
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		n := targetOf(tg, "n1", good)
		n.Keys = []deploy.Key{{Name: "db", Path: "/run/keys/db", User: "root", Group: "root", Mode: "0400", Content: []byte("pw"), ContentKnown: true, RestartUnits: []string{"app.service"}}}
		res := deployer(t, opts).Deploy(context.Background(), []deploy.Target{n}, nil)
		wantPhase(t, res[0], deploy.PhaseSucceeded)
		if !tg.Exists("/run/keys/db") || len(tg.Boots()) != 1 {
			t.Errorf("after the reboot: the key is there %v, %d boots", tg.Exists("/run/keys/db"), len(tg.Boots()))
		}
		// Written before the reboot (no restart: the switch starts what it
		// starts), then again once the host was back, with a restart.
		if r := tg.Restarts(); len(r) != 1 || r[0] != "app.service" {
			t.Errorf("restarts %q, want app.service once, after the reboot", r)
		}
	})
	t.Run("a host booted into the system already is not rebooted again", func(t *testing.T) {
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, good) // booted, never judged: as after an interrupted reboot
		res := deployer(t, opts).Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", good)}, nil)
		wantPhase(t, res[0], deploy.PhaseSucceeded)
		if len(tg.Boots()) != 0 || res[0].RebootTried {
			t.Errorf("rebooted a host that had booted its system: %d boots", len(tg.Boots()))
		}
	})
	t.Run("keys come back after booting back", func(t *testing.T) {
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		n := targetOf(tg, "n1", bad)
		n.Keys = []deploy.Key{{Name: "db", Path: "/run/keys/db", User: "root", Group: "root", Mode: "0400", Content: []byte("pw"), ContentKnown: true, RestartUnits: []string{"app.service"}}}
		res := deployer(t, opts).Deploy(context.Background(), []deploy.Target{n}, nil)
		wantPhase(t, res[0], deploy.PhaseRolledBack)
		if !tg.Exists("/run/keys/db") || len(tg.Boots()) != 2 || tg.BootedSystem() != old {
			t.Errorf("after booting back: the key is there %v, %d boots, booted %s", tg.Exists("/run/keys/db"), len(tg.Boots()), tg.BootedSystem())
		}
		if o := res[0].Outcomes[deploy.CondKeys]; !o.Passed {
			t.Errorf("KeysUploaded after booting back: %+v", o)
		}
		if o := res[0].Outcomes[deploy.CondBootloader]; o.Passed || o.Reason != "BootedBack" {
			t.Errorf("BootloaderFinalized after booting back: %+v", o)
		}
	})
}
