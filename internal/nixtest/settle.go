package nixtest

import (
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
)

// SettleRun makes the target what a host is while a run's watchdog waits
// for its decision: the run's state says "waiting", and a process holds
// the agreement's guard, as a live watchdog does. It returns once the
// guard is held. kill ends that process, as a killed watchdog (its state
// left behind), and returns once the guard is free; the test's cleanup
// calls it too.
func (t *Target) SettleRun(tb TB) (kill func()) {
	tb.Helper()
	run := agreement.StateDir + "/0123456789ab"
	if err := os.MkdirAll(t.Path(run), 0o755); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	if err := os.WriteFile(t.Path(run+"/watchdog"), []byte("waiting\n"), 0o644); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	argv := t.NS.Command("flock", "-s", agreement.GuardFile, "sleep", "300")
	holder := exec.Command(argv[0], argv[1:]...)
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	guardFree := func() bool {
		a := t.NS.Command("flock", "-n", "-x", agreement.GuardFile, "true")
		return exec.Command(a[0], a[1:]...).Run() == nil
	}
	wait := func(free bool) {
		for deadline := time.Now().Add(10 * time.Second); guardFree() != free && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	killed := false
	kill = func() {
		if killed {
			return
		}
		killed = true
		_ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
		_ = holder.Wait()
		wait(true)
	}
	tb.Cleanup(kill)
	wait(false)
	return kill
}
