package systemdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

const sshTimeout = 60 * time.Second

// ssh runs remote on the target over real SSH with its host key pinned
// and returns the combined output and exit status (255: ssh failed).
func ssh(t *testing.T, tg *Target, remote string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sshTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", append(tg.SSHOptions(t), tg.Destination(), remote)...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return string(out), exit.ExitCode()
	}
	t.Fatalf("ssh %s: %v\n%s", remote, err, out)
	return "", -1
}

// copyTo runs nix-copy-closure --to over SSH, as the deployment's copy
// step does.
func copyTo(t *testing.T, tg *Target, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sshTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nix-copy-closure", "--to", "--gzip", "--use-substitutes", tg.Destination(), path)
	cmd.Env = append(nixtest.DeployerEnv(), "NIX_SSHOPTS="+strings.Join(tg.SSHOptions(t), " "))
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nix-copy-closure --to %s %s: %v\n%s", tg.Destination(), path, err, out)
	}
}

// booted is a target running a Succeed system, and a second system with
// behaviour b copied to it over SSH: ready to activate.
func booted(t *testing.T, b Behaviour) (tg *Target, old, next string) {
	t.Helper()
	tg = NewTarget(t)
	old = Closure(t, Behaviour{Kind: Succeed, Unit: b.Unit})
	tg.Boot(t, old)
	next = Closure(t, b)
	copyTo(t, tg, next)
	return tg, old, next
}

// The container is a real systemd host: systemd runs and settles, it
// knows itself a systemd-nspawn container, and its sshd takes the
// harness's key with the host key pinned.
func TestTargetIsARealSystemdHost(t *testing.T) {
	t.Parallel()
	start := time.Now()
	tg := NewTarget(t)
	t.Logf("booted %s to %q in %s", tg.Machine, tg.SystemState(t), time.Since(start).Round(time.Millisecond))
	if got := tg.DetectVirt(t); got != "systemd-nspawn" {
		t.Errorf("systemd-detect-virt --container says %q, want systemd-nspawn", got)
	}
	out, code := ssh(t, tg, "systemctl is-system-running; readlink /proc/1/exe; test -d /run/systemd/system && echo systemd-runs; cat /etc/nix/nix.conf")
	if code != 0 {
		t.Fatalf("over SSH: exit %d\n%s", code, out)
	}
	for _, want := range []string{"running\n", "/systemd\n", "systemd-runs\n", "substituters =\n", "require-sigs = false\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("over SSH the host says %q, which lacks %q", out, want)
		}
	}
	if tg.Port == 22 || tg.Host != "127.0.0.1" || tg.User != "root" {
		t.Errorf("target at %s@%s:%d", tg.User, tg.Host, tg.Port)
	}
}

// A Succeed closure's activation installs its unit and starts it with
// the real systemctl; test leaves the boot entry alone, boot moves it.
func TestClosureSucceed(t *testing.T) {
	t.Parallel()
	tg, old, next := booted(t, Behaviour{Kind: Succeed})
	if got := tg.Service(t, DefaultUnit); got.ActiveState != "active" || got.System != old {
		t.Errorf("after Boot: %s is %+v, want active from %s", DefaultUnit, got, old)
	}
	if tg.CurrentSystem() != old || tg.BootEntry() != old || tg.ProfileSystem() != old || len(tg.Calls()) != 0 {
		t.Errorf("after Boot: current %s, boot %s, profile %s, calls %q", tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem(), tg.Calls())
	}
	if !tg.HasPath(t, next) {
		t.Fatalf("nix-copy-closure did not put %s in the target's store", next)
	}
	if out, code := ssh(t, tg, next+"/bin/switch-to-configuration test"); code != 0 {
		t.Fatalf("switch-to-configuration test: exit %d\n%s", code, out)
	}
	if got := tg.Service(t, DefaultUnit); got.ActiveState != "active" || got.System != next {
		t.Errorf("after test: %s is %+v, want active from %s", DefaultUnit, got, next)
	}
	if tg.CurrentSystem() != next || tg.BootEntry() != old || tg.SystemState(t) != "running" {
		t.Errorf("after test: current %s, boot %s, state %s", tg.CurrentSystem(), tg.BootEntry(), tg.SystemState(t))
	}
	if out, code := ssh(t, tg, next+"/bin/switch-to-configuration boot"); code != 0 || tg.BootEntry() != next {
		t.Errorf("switch-to-configuration boot: exit %d, boot entry %s\n%s", code, tg.BootEntry(), out)
	}
	if want := []string{"test " + next, "boot " + next}; !slices.Equal(tg.Calls(), want) {
		t.Errorf("Calls() = %q, want %q", tg.Calls(), want)
	}
	acts := tg.Activations()
	if len(acts) != 2 || acts[0].Exit != 0 || acts[0].SystemState != "running" || len(acts[0].FailedUnits) != 0 || acts[0].Unit != "ssh.service" {
		t.Errorf("activations %+v", acts)
	}
}

// A FailUnit closure's unit fails to start: exit 4, the unit failed and
// the system degraded, by systemd's own account; switching back to a
// Succeed system restores both.
func TestClosureFailUnit(t *testing.T) {
	t.Parallel()
	tg, old, next := booted(t, Behaviour{Kind: FailUnit})
	out, code := ssh(t, tg, next+"/bin/switch-to-configuration test")
	if code != 4 || !strings.Contains(out, "the following units failed: "+DefaultUnit) {
		t.Fatalf("switch-to-configuration test: exit %d, want 4\n%s", code, out)
	}
	if got := tg.Service(t, DefaultUnit); got.ActiveState != "failed" || got.System != next {
		t.Errorf("%s is %+v, want failed from %s", DefaultUnit, got, next)
	}
	if got := tg.SystemState(t); got != "degraded" {
		t.Errorf("system state %q, want degraded", got)
	}
	if failed, _ := tg.Systemctl(t, "--failed", "--plain", "--no-legend"); !strings.HasPrefix(failed, DefaultUnit+" ") {
		t.Errorf("systemctl --failed: %q", failed)
	}
	acts := tg.Activations()
	if len(acts) != 1 || acts[0].Exit != 4 || acts[0].SystemState != "degraded" || !slices.Equal(acts[0].FailedUnits, []string{DefaultUnit}) {
		t.Errorf("activations %+v", acts)
	}
	if out, code := ssh(t, tg, old+"/bin/switch-to-configuration test"); code != 0 {
		t.Fatalf("back to %s: exit %d\n%s", old, code, out)
	}
	if got := tg.Service(t, DefaultUnit); got.ActiveState != "active" || got.System != old || tg.SystemState(t) != "running" {
		t.Errorf("after switching back: %+v, state %s", got, tg.SystemState(t))
	}
}

// In a transient unit (as the deployment activates), the activation
// records its unit and the unit's RuntimeMaxSec, and systemd-run --pipe
// passes its exit status on.
func TestClosureInTransientUnit(t *testing.T) {
	t.Parallel()
	tg, _, next := booted(t, Behaviour{Kind: FailUnit})
	out, code := ssh(t, tg, "systemd-run --collect --pipe --quiet --service-type=exec --unit=probe-activate -p RuntimeMaxSec=180 "+next+"/bin/switch-to-configuration test")
	if code != 4 {
		t.Errorf("systemd-run --pipe: exit %d, want the activation's 4\n%s", code, out)
	}
	acts := tg.Activations()
	if len(acts) != 1 || acts[0].Unit != "probe-activate.service" || acts[0].RuntimeMaxSec != "3min" {
		t.Errorf("activations %+v, want one in probe-activate.service with RuntimeMaxSec 3min", acts)
	}
	// --collect: the transient unit that failed is gone, and only the
	// closure's unit is listed failed. systemd collects it once the unit
	// has failed, a moment after systemd-run returned (seen late on a
	// busy machine): asked for up to 10 s.
	var failed string
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		failed, _ = tg.Systemctl(t, "--failed", "--plain", "--no-legend")
		if len(lines(failed)) == 1 && strings.HasPrefix(failed, DefaultUnit+" ") || time.Now().After(end) {
			break
		}
	}
	if len(lines(failed)) != 1 || !strings.HasPrefix(failed, DefaultUnit+" ") {
		t.Errorf("systemctl --failed after the collected unit failed: %q, want only %s", failed, DefaultUnit)
	}
}

// A switch by hand, outside any deployment, moves everything and is
// recorded.
func TestSwitch(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	old, next := Closure(t, Behaviour{Kind: Succeed}), Closure(t, Behaviour{Kind: Succeed})
	tg.Boot(t, old)
	if out, code := tg.Switch(t, next); code != 0 {
		t.Fatalf("Switch: exit %d\n%s", code, out)
	}
	if tg.CurrentSystem() != next || tg.BootEntry() != next || tg.ProfileSystem() != next || !slices.Equal(tg.Calls(), []string{"switch " + next}) {
		t.Errorf("after Switch: current %s, boot %s, profile %s, calls %q", tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem(), tg.Calls())
	}
}

// A stopped target leaves nothing behind: no process, no cgroup, no
// directory, no mount, and the cached root file system unchanged.
func TestStopLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (boots a systemd container): make test runs it")
	}
	t.Parallel()
	var tg *Target
	var nspawn int
	t.Run("target", func(t *testing.T) {
		tg = NewTarget(t)
		nspawn = tg.cmd.Process.Pid
		sys := Closure(t, Behaviour{Kind: Succeed})
		tg.Boot(t, sys)
		// A unit that would outlive a careless stop.
		if out, code := ssh(t, tg, "systemd-run --unit=left-behind sleep 600"); code != 0 {
			t.Fatalf("systemd-run: exit %d\n%s", code, out)
		}
	})
	if tg == nil || t.Failed() {
		t.FailNow()
	}
	for _, pid := range []int{nspawn, tg.PID} {
		if alive(pid) {
			t.Errorf("process %d is alive after the target's test ended", pid)
		}
	}
	for _, cg := range tg.cgroups {
		if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s is left: %v", cg, err)
		}
	}
	// systemd-nspawn's own mount propagation directory on the host.
	if _, err := os.Stat("/run/systemd/nspawn/propagate/" + tg.Machine); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("systemd-nspawn left /run/systemd/nspawn/propagate/%s: %v", tg.Machine, err)
	}
	if _, err := os.Stat(tg.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s is left: %v", tg.Dir, err)
	}
	mounts, err := filepath.Glob("/proc/[0-9]*/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if b, err := os.ReadFile(m); err == nil && strings.Contains(string(b), tg.Dir) {
			t.Errorf("%s still mounts below %s", m, tg.Dir)
		}
	}
	if _, err := os.Stat(filepath.Join(RootFS(t), StateDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cached root file system has %s: the overlay leaked into it (%v)", StateDir, err)
	}
}

// alive reports a process that exists and is no zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || !strings.HasPrefix(string(stat[i+1:]), " Z")
}

// fatalTB records a Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	*testing.T
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// A missing root file system fails the test with the fix, never skips it.
// Serial: the root file system is looked up in the process's FLEET_CACHE_DIR.
func TestRootFSMissing(t *testing.T) {
	t.Setenv("FLEET_CACHE_DIR", t.TempDir())
	f := &fatalTB{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		RootFS(f)
	}()
	<-done
	if !strings.Contains(f.msg, "run make setup") {
		t.Errorf("RootFS without a built tree: %q, want the fix (run make setup)", f.msg)
	}
}
