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
// (the stand-in writes reboot-request in the state directory), which
// reboots it as a host reboots: new connections are reset at once, every
// process but its sshd's listener is killed (the sessions drop, the
// deploy lock's keeper and any unit with them), /run is emptied (keys, the
// agreement's lease and runs, /run/current-system), and after
// Target.RebootDown it boots its boot entry: /run/current-system and
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
			req := filepath.Join(t.StateDir, "reboot-request")
			if err := os.Rename(req, req+".taken"); err != nil {
				continue
			}
			t.reboot(done)
		}
	})
	tb.Cleanup(func() { close(done); wg.Wait() })
}

// reboot reboots the target (see Boot); it ends early when done closes.
func (t *Target) reboot(done <-chan struct{}) {
	down := time.Now()
	_ = os.WriteFile(filepath.Join(t.StateDir, "ssh-cut"), []byte(string(CutReset)+"\n"), 0o644)
	t.killAllButSSHD()
	t.inNamespace(`find /run -mindepth 1 -maxdepth 1 ! -name sshd ! -name nixtest ! -name systemd -exec rm -rf {} +; rm -rf /run/systemd/*; mkdir -p /run/systemd/system`)
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
		_, _ = fmt.Fprintf(f, "%s %s %s %s\n", strconv.FormatFloat(float64(down.UnixNano())/1e9, 'f', 3, 64), upAt, id, system)
		_ = f.Close()
	}
	entry := strings.TrimSpace(t.readFileQuiet("boot-entry"))
	if t.RebootNever {
		log(time.Time{}, "-", orDash(entry))
		return
	}
	wait := t.RebootDown
	if wait == 0 {
		wait = time.Second
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
	if entry != "" {
		t.inNamespace("ln -sfn " + shell.Quote(entry) + " /run/current-system && ln -sfn " + shell.Quote(entry) + " /run/booted-system && " +
			shell.Quote(entry+"/bin/switch-to-configuration") + " nixtest-boot")
	} else {
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
