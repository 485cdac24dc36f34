package nixtest

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// The reboot stand-in: `systemctl reboot` on a target asks the harness
// (the stand-in writes reboot-request in the state directory; unless the
// target refuses, see SetRebootRefusal), which reboots it as a host
// reboots: for a while nothing seems to happen (SetRebootLinger: a
// shutting-down host still takes logins, its sessions and processes carry
// on, its boot id and /run are unchanged), then new connections are reset, every
// process but its sshd's listener is killed (the sessions drop, the
// deploy lock's keeper and any unit with them), /run is emptied (keys, the
// agreement's lease and runs, /run/current-system), and after
// Target.SetRebootDown it boots its boot entry: /run/current-system and
// /run/booted-system point at it (what the system's activation leaves,
// such as failed units, is set as a boot would), the boot id changes, and
// new connections are taken again. Each boot is logged (Boots).

// Boot is one reboot of a target: when it went away and came back (zero
// when it never did), the boot id and the system it booted.
type Boot struct {
	Down, Up time.Time
	ID       string
	System   string
}

// BootID is the target's boot id now.
func (t *Target) BootID() string { return strings.TrimSpace(t.readFile("boot-id")) }

// BootedSystem is what /run/booted-system points at.
func (t *Target) BootedSystem() string { return t.readlink("/run/booted-system") }

// SetRebootDown sets how long a reboot keeps the target away (new
// connections reset) before it boots its boot entry; zero means a second.
func (t *Target) SetRebootDown(d time.Duration) {
	t.rebootMu.Lock()
	defer t.rebootMu.Unlock()
	t.rebootDown = d
}

// DefaultRebootLinger is how long a new target goes on as before once a
// reboot is asked for (see SetRebootLinger): a real host takes logins for
// seconds while it shuts down, and a deployer must not take a login then
// for the host being back.
const DefaultRebootLinger = time.Second

// SetRebootLinger sets how long the target goes on as before once a
// reboot is asked for by systemctl reboot on it (Reboot, a power cut,
// does not linger): sshd takes
// new logins, sessions and processes carry on, the boot id and /run are
// unchanged; only then does the reboot proceed (connections reset,
// processes killed, /run emptied, the boot entry booted with a new boot
// id). WaitUp counts a lingering reboot as under way. Zero reboots at
// once; a new target lingers DefaultRebootLinger.
func (t *Target) SetRebootLinger(d time.Duration) {
	t.rebootMu.Lock()
	defer t.rebootMu.Unlock()
	t.rebootLinger = d
}

// SetOnBoot makes f run at each boot of the target, once it has booted
// its boot entry (new boot id, /run/current-system set) and before it
// takes new connections through its gate (Host:Port, which resets them
// meanwhile): f may act on the target through SSHD.Port, which bypasses
// the gate, as another deployer that got there first would. Nil: none.
func (t *Target) SetOnBoot(f func()) {
	t.rebootMu.Lock()
	defer t.rebootMu.Unlock()
	t.onBoot = f
}

// RebootRefusal is how a target answers `systemctl reboot` (see
// SetRebootRefusal).
type RebootRefusal string

const (
	// RebootAccepted: systemctl reboot exits 0 and the target reboots
	// (after its linger). The default.
	RebootAccepted RebootRefusal = ""
	// RebootInhibited: a block inhibitor holds the reboot back, as
	// logind refuses it: systemctl prints why on standard error (see
	// RebootInhibitedMessage) and exits 1; nothing happens. systemctl
	// reboot -i (--ignore-inhibitors, --check-inhibitors=no) reboots
	// all the same, as the real one does.
	RebootInhibited RebootRefusal = "inhibited"
	// RebootFails: systemctl cannot reach logind (RebootFailsMessage on
	// standard error), exits 1; nothing happens.
	RebootFails RebootRefusal = "fails"
	// RebootHangs: systemctl exits 0 as if the reboot were under way,
	// but the shutdown hangs: the target never goes down, keeps its boot
	// id, and its sessions carry on.
	RebootHangs RebootRefusal = "hangs"
)

// What systemctl reboot prints on standard error on a target that
// refuses (its first line, for RebootInhibited).
const (
	RebootInhibitedMessage = `Call to Reboot failed: Operation inhibited by "nixtest" (PID 1 "sleep", user root), reason is "a test holds a block inhibitor".`
	RebootFailsMessage     = `Failed to reboot system via logind: Transport endpoint is not connected`
)

// SetRebootRefusal makes the target answer systemctl reboot as r says,
// from now on. Each refused (or hung) request is in the event log as an
// Event of kind "reboot-refused" with its Refusal. Reboot, the harness's
// own reboot (an operator's, a power cut), is never refused.
func (t *Target) SetRebootRefusal(r RebootRefusal) {
	switch r {
	case RebootAccepted, RebootInhibited, RebootFails, RebootHangs:
	default:
		t.tb.Fatalf("nixtest: SetRebootRefusal(%q): want RebootAccepted, RebootInhibited, RebootFails or RebootHangs", r)
	}
	if err := os.WriteFile(filepath.Join(t.StateDir, "reboot-refusal"), []byte(string(r)+"\n"), 0o644); err != nil {
		t.tb.Fatalf("nixtest: SetRebootRefusal: %v", err)
	}
}

// SetRebootNever keeps the target away for good at its next reboot, as a
// host that does not come back.
func (t *Target) SetRebootNever(never bool) {
	t.rebootMu.Lock()
	defer t.rebootMu.Unlock()
	t.rebootNever = never
}

// Reboot reboots the target at once, as a host whose power is cut or
// that crashes (no linger: that is a shutdown systemctl asked for), down
// for this long
// (zero: as SetRebootDown says), then it boots its boot entry; it is never
// refused (SetRebootRefusal is systemctl's). Each request is logged in
// the event log as it is made (an Event of kind "reboot-asked"), and
// each reboot (kind "reboot", naming the boot entry the target boots)
// once every process of it has been killed.
func (t *Target) Reboot(down time.Duration) {
	t.appendEvent("0 reboot-asked - - -")
	req := filepath.Join(t.StateDir, "reboot-request")
	if err := os.WriteFile(req+".harness", []byte("down="+strconv.FormatFloat(down.Seconds(), 'f', 3, 64)+"\n"), 0o644); err == nil {
		_ = os.Rename(req+".harness", req)
	}
}

// appendEvent appends a line to the event log, after the time.
func (t *Target) appendEvent(line string) {
	f, err := os.OpenFile(filepath.Join(t.StateDir, "events.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintf(f, "%s %s\n", strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', 9, 64), line)
	_ = f.Close()
}

// WaitUp waits, up to timeout, until the target is up: no reboot asked
// for or under way. It says whether it is.
func (t *Target) WaitUp(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		_, err := os.Stat(filepath.Join(t.StateDir, "reboot-request"))
		if os.IsNotExist(err) && !t.rebooting.Load() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Boots are the target's reboots so far, in order.
func (t *Target) Boots() []Boot {
	var out []Boot
	for _, line := range lines(t.readFile("boots.log")) {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		b := Boot{Down: unixTime(f[0]), Up: unixTime(f[1]), ID: f[2], System: f[3]}
		out = append(out, b)
	}
	return out
}

func unixTime(s string) time.Time {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(v*1e9))
}

// watchReboots serves the target's reboot requests until the test ends.
func (t *Target) watchReboots(tb TB) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			t.rebooting.Store(true)
			asked, down, ok := t.takeRebootRequest()
			if !ok {
				t.rebooting.Store(false)
				continue
			}
			t.rebootMu.Lock()
			linger := t.rebootLinger
			t.rebootMu.Unlock()
			// A host shutting down goes on as before for a while: sshd
			// takes logins, sessions run on, /run and the boot id stay.
			if linger > 0 && asked.by == "systemctl" {
				select {
				case <-done:
					t.rebooting.Store(false)
					return
				case <-time.After(linger):
				}
				// Asked again while it shut down: the same reboot (a
				// later request's down wins).
				if _, d, ok := t.takeRebootRequest(); ok && d > 0 {
					down = d
				}
			}
			t.rebootMu.Lock()
			never := t.rebootNever
			if down == 0 {
				down = t.rebootDown
			}
			t.rebootMu.Unlock()
			t.reboot(done, down, never, asked)
			t.rebooting.Store(false)
		}
	})
	tb.Cleanup(func() { close(done); wg.Wait() })
}

// takeRebootRequest takes the reboot request in the state directory, if
// any: who asked for it, and how long it keeps the target away (zero: as
// SetRebootDown says).
func (t *Target) takeRebootRequest() (asked rebootAsked, down time.Duration, ok bool) {
	req := filepath.Join(t.StateDir, "reboot-request")
	if err := os.Rename(req, req+".taken"); err != nil {
		return asked, 0, false
	}
	// "down=SECONDS" (Reboot), or "asked=systemctl lease=RUN run=RUN"
	// (the stand-in).
	if b, err := os.ReadFile(req + ".taken"); err == nil {
		for _, f := range strings.Fields(string(b)) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "down":
				if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 {
					down = time.Duration(secs * float64(time.Second))
				}
			case "asked":
				asked.by = v
			case "lease":
				asked.lease = v
			case "run":
				asked.run = v
			}
		}
	}
	return asked, down, true
}

// rebootAsked is who asked for a reboot: by "systemctl" on the target,
// under the deploy lease of run lease (empty for none), from the fenced
// script of run (whose reboot the fence let through; empty for none); by
// "" the harness.
type rebootAsked struct{ by, lease, run string }

// reboot reboots the target (see Boot), down for down (zero: a second),
// or for good; it ends early when done closes.
func (t *Target) reboot(done <-chan struct{}, down time.Duration, never bool, asked rebootAsked) {
	wait := down
	if wait == 0 {
		wait = time.Second
	}
	wentDown := time.Now()
	cut := func() { _ = os.WriteFile(filepath.Join(t.StateDir, "ssh-cut"), []byte(string(CutReset)+"\n"), 0o644) }
	cut()
	t.killAllButSSHD()
	// Cut again once nothing of the host runs: a process killed above (an
	// activation that had just switched, say) may have opened SSH again
	// between the first cut and its end. Then every connection drops, those
	// sshd had not yet forked a session for too. Else a host that is down
	// answers logins with its /run empty (CI: a deploy read "it runs
	// (none)" from a host rebooted as its activation switched).
	cut()
	t.Gate.DropAll()
	t.inNamespace(`find /run -mindepth 1 -maxdepth 1 ! -name sshd ! -name nixtest ! -name systemd -exec rm -rf {} +; rm -rf /run/systemd/*; mkdir -p /run/systemd/system; mkdir -p -m 1777 ` + SessionTmp)
	_ = os.RemoveAll(filepath.Join(t.StateDir, "units"))
	_ = os.MkdirAll(filepath.Join(t.StateDir, "units"), 0o755)
	log := func(up time.Time, id, system string) {
		f, err := os.OpenFile(filepath.Join(t.StateDir, "boots.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return
		}
		upAt := "0"
		if !up.IsZero() {
			upAt = strconv.FormatFloat(float64(up.UnixNano())/1e9, 'f', 3, 64)
		}
		_, _ = fmt.Fprintf(f, "%s %s %s %s\n", strconv.FormatFloat(float64(wentDown.UnixNano())/1e9, 'f', 3, 64), upAt, id, system)
		_ = f.Close()
	}
	entry := strings.TrimSpace(t.readFileQuiet("boot-entry"))
	// The event log's line, once every call it cut short is dead: what
	// the target will boot.
	if f, err := os.OpenFile(filepath.Join(t.StateDir, "events.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		_, _ = fmt.Fprintf(f, "%s 0 reboot %s %s %s %s\n", strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', 9, 64), orDash(entry), orDash(asked.by), orDash(asked.lease), orDash(asked.run))
		_ = f.Close()
	}
	if never {
		log(time.Time{}, "-", orDash(entry))
		return
	}
	select {
	case <-done:
		return
	case <-time.After(wait):
	}
	id := newBootID()
	// Written in place: the bind mount over the kernel's boot_id shows
	// this file's content.
	_ = os.WriteFile(filepath.Join(t.StateDir, "boot-id"), []byte(id+"\n"), 0o644)
	// What a service's runtime directory is made again at boot.
	t.hostileMu.Lock()
	h := t.hostile
	t.hostileMu.Unlock()
	if h != nil {
		h.remakeRuntime()
	}
	t.rebootMu.Lock()
	onBoot := t.onBoot
	t.rebootMu.Unlock()
	hold := filepath.Join(t.StateDir, "hold-cut")
	if onBoot != nil {
		// The gate goes on resetting new connections while f runs.
		_ = os.WriteFile(hold, nil, 0o644)
	}
	if entry != "" {
		t.inNamespace("ln -sfn " + shell.Quote(entry) + " /run/current-system && ln -sfn " + shell.Quote(entry) + " /run/booted-system && " +
			shell.Quote(entry+"/bin/switch-to-configuration") + " nixtest-boot")
	}
	if onBoot != nil {
		onBoot()
		_ = os.Remove(hold)
	}
	if entry == "" || onBoot != nil && t.SSHCut() == CutReset {
		_ = os.Remove(filepath.Join(t.StateDir, "ssh-cut"))
	}
	log(time.Now(), id, orDash(entry))
}

// killAllButSSHD kills every process in the target's namespace but its
// holder and sshd's listener: the sessions sshd serves drop.
func (t *Target) killAllButSSHD() {
	for range 50 {
		var victims []int
		for _, pid := range t.processes() {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if err == nil && strings.Contains(string(b), "[listener]") {
				continue
			}
			victims = append(victims, pid)
		}
		if len(victims) == 0 {
			return
		}
		for _, pid := range victims {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inNamespace runs a shell script in the target's namespace, as its
// harness does, and ignores how it ends (a reboot goes on).
func (t *Target) inNamespace(script string) {
	if out, err := t.command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "nixtest: reboot: %s: %v\n%s\n", script, err, out)
	}
}

func (t *Target) readFileQuiet(rel string) string {
	b, _ := os.ReadFile(filepath.Join(t.StateDir, rel))
	return string(b)
}

// newBootID is a random boot id, as the kernel makes one (a UUID).
func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
