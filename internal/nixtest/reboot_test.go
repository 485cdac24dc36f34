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

// A host that is asked to reboot goes on as before for a while, as a real
// one shutting down does: a login right after `systemctl reboot` gets in
// and reads the old boot id, /run is as it was and WaitUp says a reboot
// is under way; only after the linger does it go down, and a login once
// it is back reads a new boot id.
func TestRebootLingers(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	d := newDeployer(t, tg)
	tg.SetRebootLinger(2 * time.Second)
	tg.SetRebootDown(500 * time.Millisecond)
	before := tg.BootID()
	d.must("echo x > /run/marker")
	asked := time.Now()
	if out, code := d.ssh("", "systemctl reboot && sleep 0.5 && echo still here"); code != 0 || !strings.Contains(out, "still here") {
		t.Fatalf("systemctl reboot, then a moment in the same session: exit %d, %q; want 0 and the session going on", code, out)
	}
	if got := strings.TrimSpace(d.must("cat /proc/sys/kernel/random/boot_id; cat /run/marker")); got != before+"\nx" {
		t.Errorf("a login while the reboot lingers read %q, want the old boot id %s and /run as it was", got, before)
	}
	if time.Since(asked) < 2*time.Second && tg.WaitUp(0) {
		t.Error("WaitUp: up while a reboot lingers")
	}
	if len(tg.Boots()) != 0 {
		t.Errorf("booted during the linger: %+v", tg.Boots())
	}
	if !tg.WaitUp(15 * time.Second) {
		t.Fatal("WaitUp: the target is not back")
	}
	b := tg.Boots()
	if len(b) != 1 || b[0].ID == before || b[0].Down.Sub(asked) < 2*time.Second {
		t.Fatalf("boots %+v: want one, with a new id, gone down 2s after it was asked at %s", b, asked.Format("15:04:05.000"))
	}
	if got := strings.TrimSpace(d.must("cat /proc/sys/kernel/random/boot_id; ls /run/marker 2>&1 || true")); !strings.HasPrefix(got, b[0].ID+"\n") || !strings.Contains(got, "No such file") {
		t.Errorf("a login after the reboot read %q, want the new boot id %s and /run emptied", got, b[0].ID)
	}
	// The event log: asked (by systemctl), then the reboot itself.
	var kinds []string
	var askedAt, rebootAt time.Time
	for _, e := range tg.Events() {
		kinds = append(kinds, e.Kind+" "+e.Action)
		switch e.Kind {
		case "reboot-asked":
			askedAt = e.Time
		case "reboot":
			rebootAt = e.Time
		}
	}
	if strings.Join(kinds, ",") != "reboot-asked systemctl,reboot systemctl" || rebootAt.Sub(askedAt) < 2*time.Second {
		t.Errorf("events %q (asked %s, reboot %s); want reboot-asked, then reboot 2s later, both by systemctl", kinds, askedAt, rebootAt)
	}

	// No linger: the reboot goes at once.
	tg.SetRebootLinger(0)
	at := time.Now()
	tg.Reboot(300 * time.Millisecond)
	if !eventually(30*time.Second, func() bool { return len(tg.Boots()) == 2 }) {
		t.Fatal("the second reboot did not happen")
	}
	// At once: well before the linger above would have let it (a
	// generous bound: the machine may be busy).
	if down := tg.Boots()[1].Down.Sub(at); down >= 2*time.Second {
		t.Errorf("without a linger the target went down %s after it was asked", down)
	}
}

// A target that refuses systemctl reboot: an inhibitor (and -i past it),
// logind out of reach, a shutdown that hangs. Nothing happens but the
// event log's word; Target.Reboot is not refused.
func TestRebootRefusals(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	d := newDeployer(t, tg)
	tg.SetRebootLinger(0)
	tg.SetRebootDown(200 * time.Millisecond)
	before := tg.BootID()
	d.must("echo x > /run/marker")
	refused := func() []RebootRefusal {
		var out []RebootRefusal
		for _, e := range tg.Events() {
			if e.Kind == "reboot-refused" {
				out = append(out, e.Refusal)
			}
		}
		return out
	}
	nothingHappened := func(what string) {
		t.Helper()
		time.Sleep(500 * time.Millisecond)
		if !tg.WaitUp(0) || len(tg.Boots()) != 0 || tg.BootID() != before || !tg.Exists("/run/marker") {
			t.Errorf("%s: up %v, boots %+v, boot id %s (was %s), /run/marker there %v; want nothing to happen", what, tg.WaitUp(0), tg.Boots(), tg.BootID(), before, tg.Exists("/run/marker"))
		}
		for _, e := range tg.Events() {
			if e.Kind == "reboot-asked" || e.Kind == "reboot" {
				t.Errorf("%s: event %+v", what, e)
			}
		}
	}

	tg.SetRebootRefusal(RebootInhibited)
	out, code := d.ssh("", "systemctl reboot")
	if code != 1 || !strings.HasPrefix(out, RebootInhibitedMessage+"\n") {
		t.Errorf("inhibited: exit %d, %q; want 1, %q", code, out, RebootInhibitedMessage)
	}
	nothingHappened("inhibited")

	tg.SetRebootRefusal(RebootFails)
	out, code = d.ssh("", "systemctl reboot")
	if code != 1 || strings.TrimSpace(out) != RebootFailsMessage {
		t.Errorf("fails: exit %d, %q; want 1, %q", code, out, RebootFailsMessage)
	}
	nothingHappened("fails")

	// A hung shutdown: accepted, and the session goes on, on the same
	// boot.
	tg.SetRebootRefusal(RebootHangs)
	out, code = d.ssh("", "systemctl reboot && sleep 1 && cat /proc/sys/kernel/random/boot_id")
	if code != 0 || strings.TrimSpace(out) != before {
		t.Errorf("hangs: exit %d, %q; want 0 and the session going on on boot %s", code, out, before)
	}
	nothingHappened("hangs")
	if got := refused(); len(got) != 3 || got[0] != RebootInhibited || got[1] != RebootFails || got[2] != RebootHangs {
		t.Errorf("refusals in the event log %q, want inhibited, fails, hangs", got)
	}

	// Past an inhibitor, as root may.
	tg.SetRebootRefusal(RebootInhibited)
	// The session ends as systemctl's does (0), or, on a busy machine,
	// is cut by the power cut after the linger (ssh's 255), as a real
	// host's would be.
	if out, code := d.ssh("", "systemctl reboot -i"); code != 0 && (code != 255 || !strings.Contains(out, "closed by remote host")) {
		t.Errorf("systemctl reboot -i on an inhibited target: exit %d, %q", code, out)
	}
	if !eventually(30*time.Second, func() bool { return len(tg.Boots()) == 1 }) || !tg.WaitUp(30*time.Second) {
		t.Fatal("systemctl reboot -i did not reboot an inhibited target")
	}
	// The harness's own reboot is never refused.
	tg.SetRebootRefusal(RebootHangs)
	tg.Reboot(200 * time.Millisecond)
	if !eventually(30*time.Second, func() bool { return len(tg.Boots()) == 2 }) {
		t.Error("Target.Reboot was refused")
	}
	if got := refused(); len(got) != 3 {
		t.Errorf("refusals in the event log %q, want still 3", got)
	}
}
