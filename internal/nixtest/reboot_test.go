package nixtest

import (
	"strings"
	"testing"
	"time"
)

// The reboot stand-in (issue 39): `systemctl reboot` takes the target away
// (its sessions drop, new connections are reset), empties /run, and boots
// its boot entry with a new boot id: /run/current-system and
// /run/booted-system are the entry's system, and a failing system's units
// are failed again; a target that never comes back stays away.
func TestReboot(t *testing.T) {
	t.Parallel()
	tg, d, old, next := booted(t, Behaviour{Kind: FailUnits, FailedUnits: []string{"db.service"}})
	if _, code := d.switchTo(next, "boot"); code != 0 {
		t.Fatal("boot entry not made")
	}
	d.must("mkdir -p /run/keys && echo x > /run/keys/k")
	before := tg.BootID()
	if got := strings.TrimSpace(d.must("cat /proc/sys/kernel/random/boot_id")); got != before {
		t.Fatalf("the target's boot id is %q, its own %q", got, before)
	}
	tg.SetRebootDown(1500 * time.Millisecond)
	_, _ = d.ssh("", "systemctl reboot; sleep 10")
	if !eventually(5*time.Second, func() bool { return len(tg.Boots()) == 0 && tg.BootID() == before && tg.readFileQuiet("ssh-cut") != "" }) {
		t.Fatal("the target did not go away")
	}
	if _, code := d.ssh("", "true"); code != 255 {
		t.Errorf("a login while the target is away: exit %d, want 255", code)
	}
	if !eventually(10*time.Second, func() bool { return len(tg.Boots()) == 1 }) {
		t.Fatal("the target did not come back")
	}
	b := tg.Boots()[0]
	if b.ID == before || b.System != next || !b.Up.After(b.Down) || b.Up.Sub(b.Down) < time.Second {
		t.Errorf("boot %+v: want a new id, %s, away for 1.5s", b, next)
	}
	if got := strings.TrimSpace(d.must("cat /proc/sys/kernel/random/boot_id")); got != b.ID {
		t.Errorf("boot id after the reboot %q, want %q", got, b.ID)
	}
	if tg.CurrentSystem() != next || tg.BootedSystem() != next {
		t.Errorf("after the reboot: current %s, booted %s, want %s (it ran %s)", tg.CurrentSystem(), tg.BootedSystem(), next, old)
	}
	if tg.Exists("/run/keys/k") {
		t.Error("/run survived the reboot")
	}
	if out, _ := d.ssh("", "systemctl is-system-running"); strings.TrimSpace(out) != "degraded" {
		t.Errorf("a system whose units fail booted %q, want degraded", out)
	}

	// The event log says each reboot, with what the target boots and who
	// asked for it (systemctl on the target, under no deploy lease here).
	reboots := func() []Event {
		var out []Event
		for _, e := range tg.Events() {
			if e.Kind == "reboot" {
				out = append(out, e)
			}
		}
		return out
	}
	if r := reboots(); len(r) != 1 || r[0].System != next || r[0].PID != 0 || r[0].Action != "systemctl" || r[0].Lease != "" {
		t.Errorf("the event log's reboots %+v, want one booting %s, asked by systemctl under no lease", r, next)
	}

	// A reboot the harness asks for (a fault of the explorer's), down
	// for as long as it says; WaitUp waits until it is back.
	asked := time.Now()
	tg.Reboot(2 * time.Second)
	if !tg.WaitUp(15 * time.Second) {
		t.Fatal("WaitUp: the target is not back")
	}
	if took := time.Since(asked); took < 2*time.Second || len(tg.Boots()) != 2 {
		t.Errorf("after a reboot asked for 2s: back after %s, %d boots, want 2s at least, 2 boots", took, len(tg.Boots()))
	}
	if _, code := d.ssh("", "true"); code != 0 {
		t.Errorf("a login once WaitUp returned: exit %d", code)
	}
	if r := reboots(); len(r) != 2 || r[1].Action != "" || r[1].System != next {
		t.Errorf("the event log's reboots %+v, want a second, asked by the harness, booting %s", r, next)
	}

	tg.SetRebootNever(true)
	_, _ = d.ssh("", "systemctl reboot; sleep 10")
	if !eventually(5*time.Second, func() bool { return len(tg.Boots()) == 3 }) {
		t.Fatal("the third reboot was not logged")
	}
	if b := tg.Boots()[2]; !b.Up.IsZero() {
		t.Errorf("a target that never comes back came back: %+v", b)
	}
	time.Sleep(2 * time.Second)
	if _, code := d.ssh("", "true"); code != 255 {
		t.Errorf("a login to a target that never came back: exit %d, want 255", code)
	}
}
