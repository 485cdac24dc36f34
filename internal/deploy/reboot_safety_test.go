package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Issue 47: no record contradicts the host after a reboot. Every failure
// after the boot entry was made boots the host back, every key comes back
// after any reboot, and the record says what the host runs and boots.

var rebootOpts = deploy.Options{Reboot: deploy.RebootAlways, RebootTimeout: 30 * time.Second,
	Verdict: deploy.VerdictSpec{ConfirmTimeout: 5 * time.Second, SettleTimeout: 2 * time.Second}}

// After a boot back, every key of the node is back (after-verdict ones
// too), and KeysUploaded says what the host holds.
func TestRebootBootBackPutsEveryKeyBack(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	d := deployer(t, rebootOpts)
	after := key("api", "/run/keys/api", "api.service")
	after.Upload = deploy.UploadAfterVerdict
	keys := []deploy.Key{key("db", "/run/keys/db", "db.service"), after}
	res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, old, keys...)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	n := targetOf(tg, "n1", bad)
	n.Keys = keys
	res = d.Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseRolledBack, "db.service", "the host rebooted into it")
	if len(tg.Boots()) != 2 || tg.CurrentSystem() != old || tg.BootEntry() != old {
		t.Fatalf("boots %d, runs %s, boots %s", len(tg.Boots()), tg.CurrentSystem(), tg.BootEntry())
	}
	for _, k := range keys {
		if !tg.Exists(k.Path) {
			t.Errorf("%s is not on the host after the boot back", k)
		}
	}
	if o := res[0].Outcomes[deploy.CondKeys]; !o.Passed {
		t.Errorf("KeysUploaded %+v", o)
	}
}

// A key that cannot be put back once the host booted the new system
// boots the host back into the system before, as a failing verdict does,
// and the record says what it runs and boots; an interrupt in that step
// says the host runs and boots the new system, which no verdict judged.
func TestRebootKeyFailureAfterTheRebootBootsBack(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	t.Run("failure", func(t *testing.T) {
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		d := deployer(t, rebootOpts)
		// Once the host is back, something takes the key's destination:
		// the key cannot be put back.
		afterReboot(d, func() {
			if err := os.MkdirAll(tg.Path("/run/keys/db"), 0o755); err != nil {
				t.Error(err)
			}
		})
		n := targetOf(tg, "n1", good)
		n.Keys = []deploy.Key{key("db", "/run/keys/db")}
		res := d.Deploy(context.Background(), []deploy.Target{n}, nil)
		wantPhase(t, res[0], deploy.PhaseRolledBack, "a directory is at it", "the boot entry was put back to "+old+" and the host rebooted into it")
		if strings.Contains(res[0].Message, "was not activated") {
			t.Errorf("the record says the new system was not activated, which the host booted: %s", res[0].Message)
		}
		if tg.CurrentSystem() != old || tg.BootEntry() != old || len(tg.Boots()) != 2 {
			t.Errorf("runs %s, boots %s, %d boots; want %s, and two boots", tg.CurrentSystem(), tg.BootEntry(), len(tg.Boots()), old)
		}
		if res[0].CurrentSystem != old || res[0].BootSystem != old {
			t.Errorf("record: runs %s, boots %s", res[0].CurrentSystem, res[0].BootSystem)
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		t.Parallel()
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		d := deployer(t, rebootOpts)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		afterReboot(d, cancel)
		n := targetOf(tg, "n1", good)
		n.Keys = []deploy.Key{key("db", "/run/keys/db")}
		res := d.Deploy(ctx, []deploy.Target{n}, nil)
		if !res[0].Interrupted {
			t.Fatalf("not interrupted: %s", res[0].Message)
		}
		if !strings.Contains(res[0].Message, "the host runs and boots "+good+", which no verdict judged") || strings.Contains(res[0].Message, "nothing was activated") {
			t.Errorf("the record of an interrupt after the reboot: %s", res[0].Message)
		}
		if tg.CurrentSystem() != good {
			t.Errorf("the host runs %s", tg.CurrentSystem())
		}
	})
}

// afterReboot calls f as the deploy puts the node's keys back, once the
// host is back from its reboot: the second keys step.
func afterReboot(d *deploy.Deployer, f func()) {
	log := d.Options.Log
	seen := 0
	d.Options.Log = func(e deploy.Event) {
		log(e)
		if e.Kind == deploy.EventStepStarted && e.Step == deploy.StepKeys {
			if seen++; seen == 2 {
				f()
			}
		}
	}
}

// A host rebooted by hand while the deploy puts its keys in place: the
// node fails naming the reboot (not a failed read of its kernel), and its
// Rebooted condition says the host rebooted, not what an earlier deploy's
// reboot did; KeysUploaded says the keys are not known to be in place.
func TestRebootByHandDuringTheKeys(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	tg.SetRebootDown(200 * time.Millisecond)
	d := deployer(t, rebootOpts)
	onStep(d, deploy.StepKeys, false, func() {
		tg.Reboot(200 * time.Millisecond)
		for end := time.Now().Add(10 * time.Second); len(tg.Boots()) == 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		}
		tg.WaitUp(10 * time.Second)
	})
	n := targetOf(tg, "n1", good)
	n.Keys = []deploy.Key{key("db", "/run/keys/db")}
	res := d.Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseFailed, "the host rebooted")
	if o := res[0].Outcomes[deploy.CondRebooted]; o.Passed || o.Reason != "HostRebooted" || !res[0].RebootSeen {
		t.Errorf("Rebooted %+v (seen %v), want the host's own reboot", o, res[0].RebootSeen)
	}
	if o := res[0].Outcomes[deploy.CondKeys]; o.Passed {
		t.Errorf("KeysUploaded passed after a reboot emptied /run/keys: %+v", o)
	}
	if tg.CurrentSystem() != old {
		t.Errorf("the host runs %s", tg.CurrentSystem())
	}
}

// A reboot that does not happen (systemctl reboot refused by an
// inhibitor, failing, or accepted and then hanging, the host answering
// with its old boot id) puts the boot entry back to the system before,
// well within reboot_timeout: the host never boots the unjudged system
// later, and the record says what it runs and boots.
func TestRebootThatDoesNotHappenPutsTheEntryBack(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	for _, c := range []struct {
		refusal nixtest.RebootRefusal
		says    string
	}{
		{nixtest.RebootInhibited, "Operation inhibited"},
		{nixtest.RebootFails, "Transport endpoint is not connected"},
		{nixtest.RebootHangs, "went on answering with the same boot id"},
	} {
		t.Run(string(c.refusal), func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, old)
			tg.SetRebootRefusal(c.refusal)
			o := rebootOpts
			o.RebootTimeout = 40 * time.Second // the bound: 20 s
			d := deployer(t, o)
			// From the reboot step's start: the steps before it take
			// seconds on a busy machine.
			var start time.Time
			onStep(d, deploy.StepReboot, false, func() { start = time.Now() })
			res := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", good)}, nil)
			wantPhase(t, res[0], deploy.PhaseFailed, c.says, "the boot entry was put back to "+old+": the host runs and boots it")
			if took := time.Since(start); start.IsZero() || took > 35*time.Second {
				t.Errorf("took %s from the reboot step: the deploy waited for reboot_timeout", took)
			}
			if tg.CurrentSystem() != old || tg.BootEntry() != old || tg.ProfileSystem() != old || len(tg.Boots()) != 0 {
				t.Errorf("runs %s, boot entry %s, profile %s, %d boots; want %s and no boot", tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem(), len(tg.Boots()), old)
			}
			if res[0].CurrentSystem != old || res[0].BootSystem != old {
				t.Errorf("record: runs %s, boots %s", res[0].CurrentSystem, res[0].BootSystem)
			}
		})
	}
}

// A host that takes logins for seconds after it was asked to reboot (a
// real one shutting down) is not taken for back: the verdict judges the
// booted host, once it answers with a new boot id.
func TestRebootAHostThatTakesLoginsWhileItShutsDown(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	tg.SetRebootLinger(4 * time.Second)
	before := tg.BootID()
	res := deployer(t, rebootOpts).Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", good)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "by a reboot")
	if tg.BootID() == before || len(tg.Boots()) != 1 || tg.BootedSystem() != good {
		t.Errorf("boot id changed %v, %d boots, booted %s", tg.BootID() != before, len(tg.Boots()), tg.BootedSystem())
	}
}

// Another deployment that switched the host while this one waited for it
// to come back (it got the lock first) is left as it is: this deploy's
// boot back would undo a switch another deployer confirmed. The record
// says so, naming the other run, and what the host runs and boots.
func TestRebootLeavesAnotherDeployersSwitch(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})
	theirs := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	other := deployer(t, deploy.Options{Verdict: rebootOpts.Verdict, Holder: "the other deployment"})
	var theirsRes []deploy.Result
	tg.SetOnBoot(func() {
		tg.SetOnBoot(nil)
		n := targetOf(tg, "n1", theirs)
		n.SSHOpts = []string{"Port=" + strconv.Itoa(tg.SSHD.Port), "IdentitiesOnly=yes"}
		theirsRes = other.Deploy(context.Background(), []deploy.Target{n}, nil)
	})
	res := deployer(t, rebootOpts).Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", bad)}, nil)
	if len(theirsRes) != 1 || theirsRes[0].Phase != deploy.PhaseSucceeded {
		t.Fatalf("the other deployment: %+v", theirsRes)
	}
	wantPhase(t, res[0], deploy.PhaseFailed, "acted on it after this deploy's lease ended: it is left as it is", "it runs "+theirs+" and boots "+theirs)
	if tg.CurrentSystem() != theirs || tg.BootEntry() != theirs || len(tg.Boots()) != 1 {
		t.Errorf("runs %s, boots %s, %d boots: the other deployer's switch was undone", tg.CurrentSystem(), tg.BootEntry(), len(tg.Boots()))
	}
	if res[0].RolledBack || res[0].CurrentSystem != theirs {
		t.Errorf("record: rolled back %v, runs %s", res[0].RolledBack, res[0].CurrentSystem)
	}
}

// An interrupt during the boot back, once the boot entry points back at
// the system before, says so: not that the host boots the new system.
func TestRebootInterruptDuringTheBootBackSaysWhatTheHostBoots(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	tg.SetRebootDown(3 * time.Second)
	d := deployer(t, rebootOpts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	onStep(d, deploy.StepUndoBoot, false, func() {
		go func() {
			for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if tg.BootEntry() == old {
					cancel()
					return
				}
			}
		}()
	})
	res := d.Deploy(ctx, []deploy.Target{targetOf(tg, "n1", bad)}, nil)
	// The host says where its entry points (within the moment an
	// interrupted deploy gives it), or the record says it is not known.
	switch res[0].BootSystem {
	case old:
		if !strings.Contains(res[0].Message, "the boot entry points back at "+old) {
			t.Errorf("an interrupt once the boot entry was put back: %s", res[0].Message)
		}
	case "":
		if !strings.Contains(res[0].Message, "may point at it or still at "+bad) {
			t.Errorf("an interrupt once the boot entry was put back: %s", res[0].Message)
		}
	default:
		t.Errorf("record: boots %s, want %s (or not known): %s", res[0].BootSystem, old, res[0].Message)
	}
	if strings.Contains(res[0].Message, "runs and boots "+bad) {
		t.Errorf("the record says the host boots the new system, whose entry was put back: %s", res[0].Message)
	}
}

// From the independent review of issue 47.

// The host reboots again (a crash, a watchdog, an operator) as the boot
// verdict judges it, emptying /run/keys once more: KeysUploaded says what
// the host holds once the deploy ends, never what it held before.
func TestRebootAgainDuringTheBootVerdictKeysNotAssumed(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	for _, c := range []struct {
		name     string
		keep     bool
		fellBack bool // the host comes back into the system before (its older entry chosen at the boot menu)
	}{
		{name: "same entry"},
		{name: "keep", keep: true},
		{name: "fell back", fellBack: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, old)
			tg.SetRebootDown(200 * time.Millisecond)
			o := rebootOpts
			o.Keep = c.keep
			d := deployer(t, o)
			onStep(d, deploy.StepBootVerdict, false, func() {
				if c.fellBack {
					if err := os.WriteFile(filepath.Join(tg.StateDir, "boot-entry"), []byte(old+"\n"), 0o644); err != nil {
						t.Error(err)
					}
				}
				n := len(tg.Boots())
				tg.Reboot(200 * time.Millisecond)
				for end := time.Now().Add(30 * time.Second); len(tg.Boots()) == n && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				}
				tg.WaitUp(30 * time.Second)
			})
			n := targetOf(tg, "n1", good)
			n.Keys = []deploy.Key{key("db", "/run/keys/db")}
			res := d.Deploy(context.Background(), []deploy.Target{n}, nil)
			if o := res[0].Outcomes[deploy.CondKeys]; o.Passed && !tg.Exists("/run/keys/db") {
				t.Errorf("KeysUploaded passed (%s), but the host does not hold /run/keys/db: %s", o.Message, res[0].Message)
			}
			if res[0].Phase == deploy.PhaseSucceeded {
				t.Errorf("recorded Succeeded after a reboot the verdict did not see through: %s", res[0].Message)
			}
		})
	}
}

// Something other than a deployment switched the host (by hand, after its
// reboot) as the deploy judged it: the boot back leaves it as it is.
func TestRebootLeavesAHostSwitchedByHand(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	byHand := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	d := deployer(t, rebootOpts)
	// An operator switches it (nixos-rebuild switch) as the verdict
	// begins: the verdict then finds another system running.
	onStep(d, deploy.StepBootVerdict, false, func() { tg.Boot(t, byHand) })
	res := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", good)}, nil)
	wantPhase(t, res[0], deploy.PhaseFailed, "neither the new system nor the one before: something else switched it, and it is left as it is")
	if tg.CurrentSystem() != byHand || len(tg.Boots()) != 1 {
		t.Errorf("runs %s after %d boots: the switch by hand was undone", tg.CurrentSystem(), len(tg.Boots()))
	}
}

// Another deployment that gets the host while this one waits for it to
// come back to be booted back (its lease lost as the host rebooted again
// during the verdict; or as it booted back) is left as it is.
func TestRebootUndoLeavesAnotherDeployersSwitch(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	theirs := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	for _, c := range []struct {
		name string
		sys  string
		boot int // the boot at which the other deployment gets the host
	}{
		{"after a lost lease", good, 2},
		{"after the boot back", bad, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, old)
			other := deployer(t, deploy.Options{Verdict: rebootOpts.Verdict, Holder: "the other deployment"})
			var theirsRes []deploy.Result
			boots := 0
			tg.SetOnBoot(func() {
				if boots++; boots != c.boot {
					return
				}
				n := targetOf(tg, "n1", theirs)
				n.SSHOpts = []string{"Port=" + strconv.Itoa(tg.SSHD.Port), "IdentitiesOnly=yes"}
				theirsRes = other.Deploy(context.Background(), []deploy.Target{n}, nil)
			})
			d := deployer(t, rebootOpts)
			if c.sys == good {
				// The host reboots again as the verdict judges it.
				onStep(d, deploy.StepBootVerdict, false, func() { tg.Reboot(200 * time.Millisecond) })
			}
			res := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", c.sys)}, nil)
			if len(theirsRes) != 1 || theirsRes[0].Phase != deploy.PhaseSucceeded {
				t.Fatalf("the other deployment: %+v", theirsRes)
			}
			if res[0].Phase == deploy.PhaseSucceeded || res[0].RolledBack || !strings.Contains(res[0].Message, "acted on it after this deploy's lease ended") {
				t.Errorf("record: %s: %s", res[0].Phase, res[0].Message)
			}
			if tg.CurrentSystem() != theirs || tg.BootEntry() != theirs {
				t.Errorf("runs %s, boots %s: the other deployer's switch was undone", tg.CurrentSystem(), tg.BootEntry())
			}
		})
	}
}

// The boot verdict's record is written under the lease it judged under:
// a lease that ended as it judged (its session killed) fails the node,
// rather than record a system as verified by a deploy that no longer
// holds the host.
func TestRebootVerdictRecordedOnlyUnderItsLease(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	o := rebootOpts
	// The check ends the lease: its keeper's session is killed (the
	// pattern does not match the check's own command line). Only on this
	// target (its mount namespace): the targets share the machine's
	// processes, and a bare pkill ended every other test's leases.
	o.Verdict.Command = []string{"pkill --ns $$ --nslist mnt -TERM -f 'fleet[-]deploy.words' || true; sleep 2"}
	res := deployer(t, o).Deploy(context.Background(), []deploy.Target{targetOf(tg, "n1", good)}, nil)
	wantPhase(t, res[0], deploy.PhaseFailed, "its record of that was not written")
	if tg.Exists(agreement.SucceededFile) {
		if b, _ := os.ReadFile(tg.Path(agreement.SucceededFile)); strings.TrimSpace(string(b)) == good {
			t.Errorf("the host recorded %s as verified, by a deploy whose lease had ended", good)
		}
	}
}

// A deploy interrupted while its host was away rebooting leaves the host
// booted into the new system, unjudged (the new-user trial: the next
// apply then activated it again and found "nothing to roll back to"): the
// next deploy judges the booted host, and, its verdict failing, boots it
// back into the last system that passed its verdict there.
func TestRebootInterruptedThenTheNextDeployJudgesTheBootedHost(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"app.service"}})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	if err := os.MkdirAll(tg.Path(agreement.RecordDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tg.Path(agreement.SucceededFile), []byte(old+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tg.SetRebootDown(2 * time.Second)
	d := deployer(t, rebootOpts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	onStep(d, deploy.StepReturn, false, cancel)
	n := targetOf(tg, "n1", bad)
	n.Keys = []deploy.Key{key("db", "/run/keys/db")}
	res := d.Deploy(ctx, []deploy.Target{n}, nil)
	if !res[0].Interrupted {
		t.Fatalf("not interrupted: %s", res[0].Message)
	}
	if !tg.WaitUp(time.Minute) || tg.CurrentSystem() != bad {
		t.Fatalf("the host runs %s after the interrupted reboot, want %s", tg.CurrentSystem(), bad)
	}
	res = deployer(t, rebootOpts).Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseRolledBack, "app.service", "the boot entry was put back to "+old+" and the host rebooted into it")
	if tg.CurrentSystem() != old || tg.BootEntry() != old || !tg.Exists("/run/keys/db") {
		t.Errorf("runs %s, boots %s, key there %v; want %s and the key", tg.CurrentSystem(), tg.BootEntry(), tg.Exists("/run/keys/db"), old)
	}
}
