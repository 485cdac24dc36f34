package nixtest

import (
	"context"
	"errors"
	"fmt"
	"github.com/fleetops/terraform-provider-fleet/internal/shell"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// deployer does what a deployer with the system OpenSSH client and
// Debian's nix-bin does: ssh with the target's host key pinned, and
// nix-copy-closure --to with the same options in NIX_SSHOPTS.
type deployer struct {
	t    *testing.T
	tg   *Target
	opts []string
}

func newDeployer(t *testing.T, tg *Target, extra ...string) *deployer {
	t.Helper()
	for tool, pkg := range map[string]string{"ssh": "openssh-client", "nix-copy-closure": "nix-bin"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install Debian package %s", tool, pkg)
		}
	}
	return &deployer{t: t, tg: tg, opts: append(tg.SSHOptions(t), extra...)}
}

const commandTimeout = 60 * time.Second

// ssh runs remote on the target and returns its combined output and exit
// status (255: ssh itself failed).
func (d *deployer) ssh(stdin, remote string) (string, int) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", append(slices.Clone(d.opts), d.tg.Destination(), remote)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	return string(out), exitCode(d.t, remote, err, out)
}

// must runs remote and fails the test unless it exits 0.
func (d *deployer) must(remote string) string {
	d.t.Helper()
	out, code := d.ssh("", remote)
	if code != 0 {
		d.t.Fatalf("ssh %s: exit %d\n%s\nsshd log:\n%s", remote, code, out, d.tg.SSHD.Log())
	}
	return out
}

// copy runs nix-copy-closure --to, as the deployment's copy step does.
func (d *deployer) copy(path string) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nix-copy-closure", "--to", "--gzip", "--use-substitutes", d.tg.Destination(), path)
	cmd.Env = append(DeployerEnv(), "NIX_SSHOPTS="+strings.Join(d.opts, " "))
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		d.t.Fatalf("nix-copy-closure --to %s %s: %v\n%s\nsshd log:\n%s", d.tg.Destination(), path, err, out, d.tg.SSHD.Log())
	}
}

// setProfile runs nix-env --set on the target, as the profile step does.
func (d *deployer) setProfile(system string) {
	d.t.Helper()
	d.must("nix-env -p " + ProfilePath + " --set " + system)
}

// switchTo runs <system>/bin/switch-to-configuration action over ssh.
func (d *deployer) switchTo(system, action string) (string, int) {
	d.t.Helper()
	return d.ssh("", system+"/bin/switch-to-configuration "+action)
}

func exitCode(t *testing.T, what string, err error, out []byte) int {
	t.Helper()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	}
	t.Fatalf("%s: %v\n%s", what, err, out)
	return -1
}

// booted is a target running a succeeding system, and a second system with
// behaviour b copied to it and set as its profile: ready to activate.
func booted(t *testing.T, b Behaviour, opts ...Option) (tg *Target, d *deployer, old, next string) {
	t.Helper()
	tg = NewTarget(t, opts...)
	old = Closure(t, Behaviour{Kind: Succeed})
	tg.Boot(t, old)
	next = Closure(t, b)
	d = newDeployer(t, tg)
	d.copy(next)
	d.setProfile(next)
	return tg, d, old, next
}

func wantCalls(t *testing.T, tg *Target, want ...string) {
	t.Helper()
	if got := tg.Calls(); !slices.Equal(got, want) {
		t.Errorf("Calls() = %q, want %q", got, want)
	}
}

func wantExit(t *testing.T, what string, out string, code, want int) {
	t.Helper()
	if code != want {
		t.Errorf("%s: exit %d, want %d\n%s", what, code, want, out)
	}
}

// TestDeploySequence is the per-node sequence as a deployer runs it: copy,
// profile, activate (test), finalise (boot), over real ssh with the host
// key pinned, into a target that booted another system.
func TestDeploySequence(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	old := Closure(t, Behaviour{Kind: Succeed})
	tg.Boot(t, old)
	if tg.CurrentSystem() != old || tg.BootEntry() != old || tg.ProfileSystem() != old || tg.ProfileGeneration() != 1 {
		t.Fatalf("after Boot: current %q, boot entry %q, profile %q (%q), want all %q, generation 1",
			tg.CurrentSystem(), tg.BootEntry(), tg.ProfileSystem(), tg.ProfileLink(), old)
	}
	if len(tg.Calls()) != 0 || tg.AcceptedConnections() != 0 {
		t.Fatalf("after Boot: calls %q, %d connections; want none: Boot works without SSH", tg.Calls(), tg.AcceptedConnections())
	}

	next := Closure(t, Behaviour{Kind: Succeed})
	d := newDeployer(t, tg)
	if tg.HasPath(t, next) {
		t.Fatalf("%s is valid on the target before the copy", next)
	}
	d.copy(next)
	if !tg.HasPath(t, next) || !tg.Exists(next+"/bin/switch-to-configuration") {
		t.Fatalf("%s is not on the target after nix-copy-closure --to", next)
	}
	d.setProfile(next)
	if tg.ProfileSystem() != next || tg.ProfileLink() != "system-2-link" || tg.ProfileGeneration() != 2 {
		t.Errorf("after nix-env --set: profile %q -> %q, want system-2-link -> %s", tg.ProfileLink(), tg.ProfileSystem(), next)
	}
	if got := strings.TrimSpace(d.must("readlink /run/current-system")); got != old {
		t.Errorf("remote readlink /run/current-system = %q before activation, want %q", got, old)
	}

	out, code := d.switchTo(next, "test")
	wantExit(t, "switch-to-configuration test", out, code, 0)
	if tg.CurrentSystem() != next || tg.BootEntry() != old {
		t.Errorf("after test: current %q, boot entry %q; want %q and still %q", tg.CurrentSystem(), tg.BootEntry(), next, old)
	}
	if got := strings.TrimSpace(d.must("readlink /run/current-system")); got != next {
		t.Errorf("remote readlink /run/current-system = %q after test, want %q", got, next)
	}
	out, code = d.switchTo(next, "boot")
	wantExit(t, "switch-to-configuration boot", out, code, 0)
	if tg.BootEntry() != next {
		t.Errorf("after boot: boot entry %q, want %q", tg.BootEntry(), next)
	}
	wantCalls(t, tg, "test "+next, "boot "+next)
	if !strings.Contains(tg.Journal(), "updating the boot entry") {
		t.Errorf("journal after boot: %q", tg.Journal())
	}
	// Back to the first system in a transient unit: the event log names it.
	d.must("systemd-run --collect --pipe --quiet --service-type=exec --unit=back " + old + "/bin/switch-to-configuration test")
	var got []string
	for _, e := range tg.Events() {
		got = append(got, strings.TrimSpace(fmt.Sprintf("%s %s %s %s %s", e.Kind, e.Action, e.System, e.Before, e.Unit)))
		if e.Kind == "end" {
			got[len(got)-1] += fmt.Sprintf(" rc=%d", e.RC)
		}
		if time.Since(e.Time) > time.Minute || time.Until(e.Time) > 0 {
			t.Errorf("event %+v: its time is not now", e)
		}
	}
	want := []string{
		"start test " + next + " " + old, "set-current  " + next, "end rc=0",
		"start boot " + next + " " + next, "set-boot  " + next, "end rc=0",
		"start test " + old + " " + next + " back.service", "set-current  " + old, "end rc=0",
	}
	for i := range want {
		want[i] = strings.Join(strings.Fields(want[i]), " ")
	}
	for i := range got {
		got[i] = strings.Join(strings.Fields(got[i]), " ")
	}
	if !slices.Equal(got, want) {
		t.Errorf("Events():\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// copy, nix-env, readlink, test, readlink, boot, the unit's test: a connection each.
	if got := tg.AcceptedConnections(); got != 7 {
		t.Errorf("AcceptedConnections() = %d, want 7 (one per ssh and nix-copy-closure)\n%s", got, tg.SSHD.Log())
	}
}

// TestOneConnection: with an OpenSSH master connection shared through
// NIX_SSHOPTS the whole sequence is one accepted connection, which is what
// AcceptedConnections counts.
func TestOneConnection(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	next := Closure(t, Behaviour{Kind: Succeed})
	// A socket path must be short: a fresh directory under /tmp, not the
	// test's temp dir.
	dir, err := os.MkdirTemp("", "nixtest-cm") //nolint:usetesting // t.TempDir() is too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	control := filepath.Join(dir, "s")
	d := newDeployer(t, tg, "-o", "ControlMaster=auto", "-o", "ControlPath="+control, "-o", "ControlPersist=60")
	t.Cleanup(func() {
		_ = exec.Command("ssh", append(slices.Clone(d.opts), "-O", "exit", tg.Destination())...).Run()
	})
	d.copy(next)
	d.setProfile(next)
	for _, action := range []string{"test", "boot"} {
		out, code := d.switchTo(next, action)
		wantExit(t, action, out, code, 0)
	}
	d.must("readlink /run/current-system")
	if got := tg.AcceptedConnections(); got != 1 {
		t.Errorf("AcceptedConnections() = %d, want 1 (everything over the master)\n%s", got, tg.SSHD.Log())
	}
	if tg.CurrentSystem() != next || tg.BootEntry() != next {
		t.Errorf("current %q, boot entry %q, want both %q", tg.CurrentSystem(), tg.BootEntry(), next)
	}
}

// TestStoreIsSeparate: each target has its own store, empty of what the
// deployer's holds until it is copied, and separate from other targets'.
func TestStoreIsSeparate(t *testing.T) {
	t.Parallel()
	a, b := NewTarget(t), NewTarget(t)
	path := Closure(t, Behaviour{Kind: Succeed})
	if _, err := os.Stat(path + "/bin/switch-to-configuration"); err != nil {
		t.Fatalf("the closure is not in the deployer's store: %v", err)
	}
	for name, tg := range map[string]*Target{"a": a, "b": b} {
		if tg.HasPath(t, path) || tg.Exists(path) {
			t.Errorf("target %s has %s before any copy", name, path)
		}
		if tg.CurrentSystem() != "" || tg.ProfileLink() != "" || tg.BootEntry() != "" {
			t.Errorf("target %s: current %q, profile %q, boot entry %q; want a blank target", name, tg.CurrentSystem(), tg.ProfileLink(), tg.BootEntry())
		}
	}
	newDeployer(t, a).copy(path)
	if !a.HasPath(t, path) {
		t.Errorf("target a lacks %s after the copy", path)
	}
	if b.HasPath(t, path) || b.Exists(path) {
		t.Errorf("target b has %s, copied to a only", path)
	}
	// The host's /run is not the target's.
	if _, err := os.Lstat(stateLink); err == nil {
		t.Errorf("%s exists on the host: the target's /run is not private", stateLink)
	}
}

// TestSessionEnvironment: sessions find the stand-ins first, Nix with no
// substituters, and an empty home; the harness's own environment does not
// leak in.
func TestSessionEnvironment(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t, WithSessionEnv("FLEET_TEST", "yes"))
	d := newDeployer(t, tg)
	out := d.must(`echo "PATH=$PATH"; echo "FLEET_TEST=$FLEET_TEST"; command -v systemctl systemd-run journalctl systemd-detect-virt nix-env nix-store; ls -A ~ | wc -l; ` +
		`nix --extra-experimental-features nix-command show-config | grep -E '^(substituters|require-sigs) '`)
	for _, want := range []string{
		"PATH=" + SessionPath + "\n",
		"FLEET_TEST=yes\n",
		stateLink + "/bin/systemctl\n", stateLink + "/bin/systemd-run\n", stateLink + "/bin/journalctl\n", stateLink + "/bin/systemd-detect-virt\n",
		"/usr/bin/nix-env\n", "/usr/bin/nix-store\n",
		"\n0\n", // nothing in the home directory
		"substituters = \n", "require-sigs = false\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("session output lacks %q:\n%s", want, out)
		}
	}
}

// TestDeployerEnv: the deployer's Nix has no substituters either.
func TestDeployerEnv(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("nix", "--extra-experimental-features", "nix-command", "show-config")
	cmd.Env = DeployerEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nix show-config: %v", err)
	}
	for _, want := range []string{"\nsubstituters = \n", "\nrequire-sigs = false\n"} {
		if !strings.Contains("\n"+string(out), want) {
			t.Errorf("the deployer's nix config lacks %q", strings.TrimSpace(want))
		}
	}
}

func TestClosureFailUnits(t *testing.T) {
	t.Parallel()
	tg, d, _, next := booted(t, Behaviour{Kind: FailUnits, FailedUnits: []string{"nginx.service", "backup.timer"}})
	out, code := d.switchTo(next, "test")
	wantExit(t, "test", out, code, 4)
	if !strings.Contains(out, "the following units failed: nginx.service backup.timer") {
		t.Errorf("test output: %q", out)
	}
	if tg.CurrentSystem() != next {
		t.Errorf("current %q, want %q: units failed, but the configuration is active", tg.CurrentSystem(), next)
	}
	out, code = d.ssh("", "systemctl is-system-running --wait")
	if code != 1 || out != "degraded\n" {
		t.Errorf("is-system-running: exit %d, %q; want exit 1, degraded", code, out)
	}
	out = d.must("systemctl list-units --failed --plain --no-legend")
	if out != "nginx.service loaded failed failed nginx.service\nbackup.timer loaded failed failed backup.timer\n" {
		t.Errorf("failed units: %q", out)
	}
	if out := d.must("journalctl -b --no-pager"); !strings.Contains(out, "the following units failed") {
		t.Errorf("journalctl: %q", out)
	}
	out, code = d.switchTo(next, "boot")
	wantExit(t, "boot", out, code, 0)
	if tg.BootEntry() != next {
		t.Errorf("boot entry %q, want %q", tg.BootEntry(), next)
	}
	wantCalls(t, tg, "test "+next, "boot "+next)
}

func TestClosureLockHeld(t *testing.T) {
	t.Parallel()
	tg, d, old, next := booted(t, Behaviour{Kind: LockHeld, LockedCalls: 2, LockedAction: "boot"})
	out, code := d.switchTo(next, "test")
	wantExit(t, "test (not locked)", out, code, 0)
	for i := 1; i <= 2; i++ {
		out, code = d.switchTo(next, "boot")
		wantExit(t, "boot "+strconv.Itoa(i), out, code, 11)
		if !strings.Contains(out, "Could not acquire lock") {
			t.Errorf("boot %d: %q", i, out)
		}
		if tg.BootEntry() != old {
			t.Errorf("boot %d (locked): boot entry %q, want still %q", i, tg.BootEntry(), old)
		}
	}
	out, code = d.switchTo(next, "boot")
	wantExit(t, "boot 3", out, code, 0)
	if tg.BootEntry() != next {
		t.Errorf("boot entry %q, want %q", tg.BootEntry(), next)
	}
	wantCalls(t, tg, "test "+next, "boot "+next, "boot "+next, "boot "+next)

	// Without LockedAction each action is held, counted apart.
	both := Closure(t, Behaviour{Kind: LockHeld, LockedCalls: 1})
	d.copy(both)
	for _, step := range []struct {
		action string
		want   int
	}{{"test", 11}, {"test", 0}, {"boot", 11}, {"boot", 0}} {
		out, code := d.switchTo(both, step.action)
		wantExit(t, step.action, out, code, step.want)
	}
	if tg.CurrentSystem() != both || tg.BootEntry() != both {
		t.Errorf("current %q, boot entry %q, want both %q", tg.CurrentSystem(), tg.BootEntry(), both)
	}
}

func TestClosureHang(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a hung activation): make test runs it")
	}
	t.Parallel()
	tg, d, old, next := booted(t, Behaviour{Kind: Hang})

	// Directly: the ssh command does not return; the system stays as it was.
	cmd := exec.Command("ssh", append(slices.Clone(d.opts), tg.Destination(), next+"/bin/switch-to-configuration test")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if !eventually(10*time.Second, func() bool { return len(tg.Calls()) == 1 }) {
		t.Fatalf("switch-to-configuration was not called within 10s")
	}
	select {
	case err := <-done:
		t.Fatalf("switch-to-configuration test returned: %v", err)
	case <-time.After(time.Second):
	}
	_ = cmd.Process.Kill()
	<-done
	if tg.CurrentSystem() != old {
		t.Errorf("current %q while hanging, want still %q", tg.CurrentSystem(), old)
	}
	if !strings.Contains(tg.Journal(), "activating the configuration") {
		t.Errorf("journal while hanging: %q", tg.Journal())
	}

	// Through systemd-run in a container: RuntimeMaxSec ends it.
	start := time.Now()
	out2, code := d.ssh("", "systemd-run --collect --pipe --quiet --no-ask-password --service-type=exec --unit=fleet-activate -p RuntimeMaxSec=1 "+
		next+"/bin/switch-to-configuration test")
	took := time.Since(start)
	wantExit(t, "systemd-run with RuntimeMaxSec=1", out2, code, 1)
	if took > 10*time.Second {
		t.Errorf("the hung activation ended after %v, want about RuntimeMaxSec=1s", took)
	}
	if j := tg.UnitJournal("fleet-activate"); !strings.Contains(j, "runtime time limit") || !strings.Contains(j, "Failed with result 'timeout'") {
		t.Errorf("unit journal: %q", j)
	}
	if tg.CurrentSystem() != old {
		t.Errorf("current %q after the timeout, want still %q", tg.CurrentSystem(), old)
	}
	if got := tg.SystemdRunProps(); !slices.Equal(got, []string{"RuntimeMaxSec=1"}) {
		t.Errorf("SystemdRunProps() = %q", got)
	}
	wantCalls(t, tg, "test "+next, "test "+next)
}

func TestClosureRebootRequired(t *testing.T) {
	t.Parallel()
	tg, d, old, next := booted(t, Behaviour{Kind: RebootRequired})
	out, code := d.switchTo(next, "test")
	wantExit(t, "test", out, code, 100)
	if !strings.Contains(out, "reboot is required") {
		t.Errorf("test output: %q", out)
	}
	if tg.CurrentSystem() != next || tg.BootEntry() != old {
		t.Errorf("current %q, boot entry %q; want %q active, boot entry still %q", tg.CurrentSystem(), tg.BootEntry(), next, old)
	}
	wantCalls(t, tg, "test "+next)
}

// TestClosureCutSSH: the activation cuts new connections and the session
// that ran it finishes; a connection opened before (a master) still works,
// and activating a succeeding system over it, as a rollback does, lets new
// connections in again.
func TestClosureCutSSH(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	old := Closure(t, Behaviour{Kind: Succeed})
	tg.Boot(t, old)
	next := Closure(t, Behaviour{Kind: CutSSH})
	dir, err := os.MkdirTemp("", "nixtest-cm") //nolint:usetesting // t.TempDir() is too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	master := newDeployer(t, tg, "-o", "ControlMaster=auto", "-o", "ControlPath="+filepath.Join(dir, "s"), "-o", "ControlPersist=60")
	t.Cleanup(func() {
		_ = exec.Command("ssh", append(slices.Clone(master.opts), "-O", "exit", tg.Destination())...).Run()
	})
	fresh := newDeployer(t, tg)
	master.copy(next)
	master.setProfile(next)

	out, code := master.switchTo(next, "test")
	wantExit(t, "test", out, code, 0)
	if tg.CurrentSystem() != next || tg.SSHCut() != CutReset {
		t.Fatalf("after test: current %q, cut %q; want %q, %q", tg.CurrentSystem(), tg.SSHCut(), next, CutReset)
	}
	start := time.Now()
	out, code = fresh.ssh("", "true")
	if code != 255 || !strings.Contains(out, "reset") {
		t.Errorf("a new connection after the cut: exit %d, %q; want 255, connection reset", code, out)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a reset connection took %v to fail", took)
	}
	master.must("true")

	out, code = master.switchTo(old, "test") // the rollback
	wantExit(t, "rollback", out, code, 0)
	if tg.SSHCut() != "" || tg.CurrentSystem() != old {
		t.Errorf("after the rollback: cut %q, current %q; want open, %q", tg.SSHCut(), tg.CurrentSystem(), old)
	}
	fresh.must("true")
	wantCalls(t, tg, "test "+next, "test "+old)

	// A black hole: ssh waits for its ConnectTimeout.
	tg.CutSSH(t, CutBlackHole)
	// ssh keeps the first value of an option, so this one goes first.
	timeout := &deployer{t: t, tg: tg, opts: append([]string{"-o", "ConnectTimeout=1"}, tg.SSHOptions(t)...)}
	start = time.Now()
	out, code = timeout.ssh("", "true")
	if took := time.Since(start); code != 255 || took < 900*time.Millisecond || took > 5*time.Second {
		t.Errorf("black-holed: exit %d after %v, %q; want 255 after the 1s ConnectTimeout", code, took, out)
	}
	tg.RestoreSSH(t)
	fresh.must("true")
}

func TestClosureBootloaderFails(t *testing.T) {
	t.Parallel()
	tg, d, old, next := booted(t, Behaviour{Kind: BootloaderFails}, WithContainer("lxc"))
	out, code := d.switchTo(next, "test")
	wantExit(t, "test", out, code, 0)
	out, code = d.switchTo(next, "boot")
	wantExit(t, "boot", out, code, 1)
	if !strings.Contains(out, "Failed to install bootloader") {
		t.Errorf("boot output: %q", out)
	}
	if tg.CurrentSystem() != next || tg.BootEntry() != old {
		t.Errorf("current %q, boot entry %q; want %q, boot entry still %q", tg.CurrentSystem(), tg.BootEntry(), next, old)
	}
	out, code = d.switchTo(next, "switch")
	wantExit(t, "switch", out, code, 1)
	wantCalls(t, tg, "test "+next, "boot "+next, "switch "+next)
}

// TestClosureBootHangs: test activates; boot hangs, leaving the boot entry
// alone, until something ends it (here timeout(1), exit 124).
func TestClosureBootHangs(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a hung boot entry): make test runs it")
	}
	t.Parallel()
	tg, d, old, next := booted(t, Behaviour{Kind: BootHangs})
	out, code := d.switchTo(next, "test")
	wantExit(t, "test", out, code, 0)
	start := time.Now()
	out, code = d.ssh("", "timeout 2 "+next+"/bin/switch-to-configuration boot")
	wantExit(t, "boot under timeout 2", out, code, 124)
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("boot ended after %s, before timeout's 2s: it did not hang", took)
	}
	if tg.CurrentSystem() != next || tg.BootEntry() != old {
		t.Errorf("current %q, boot entry %q; want %q, boot entry still %q", tg.CurrentSystem(), tg.BootEntry(), next, old)
	}
	if !strings.Contains(tg.Journal(), "updating the boot entry") {
		t.Errorf("journal: %q", tg.Journal())
	}
	wantCalls(t, tg, "test "+next, "boot "+next)
}

// TestClosureSwitch: switch installs the boot entry, then activates.
func TestClosureSwitch(t *testing.T) {
	t.Parallel()
	tg, d, _, next := booted(t, Behaviour{Kind: Succeed})
	out, code := d.switchTo(next, "dry-activate")
	wantExit(t, "dry-activate", out, code, 0)
	if tg.CurrentSystem() == next || tg.BootEntry() == next {
		t.Errorf("dry-activate changed the system")
	}
	out, code = d.switchTo(next, "switch")
	wantExit(t, "switch", out, code, 0)
	if tg.CurrentSystem() != next || tg.BootEntry() != next {
		t.Errorf("after switch: current %q, boot entry %q, want both %q", tg.CurrentSystem(), tg.BootEntry(), next)
	}
	// Through the profile, as a rollback calls it: the log names the store path.
	prev := Closure(t, Behaviour{Kind: Succeed})
	d.copy(prev)
	d.setProfile(prev)
	out, code = d.ssh("", ProfilePath+"/bin/switch-to-configuration test")
	wantExit(t, "test through the profile", out, code, 0)
	if tg.CurrentSystem() != prev {
		t.Errorf("after test through the profile: current %q, want %q", tg.CurrentSystem(), prev)
	}
	out, code = d.switchTo(next, "rollback")
	wantExit(t, "an unknown action", out, code, 1)
	wantCalls(t, tg, "dry-activate "+next, "switch "+next, "test "+prev)
}

// TestCleanupKillsDetached: what a target's units left running is killed
// when the test that made the target ends.
func TestCleanupKillsDetached(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("target", func(t *testing.T) {
		tg := NewTarget(t)
		d := newDeployer(t, tg)
		d.must("systemd-run --unit=left-behind sleep 600")
		var err error
		eventually(10*time.Second, func() bool {
			var b []byte
			if b, err = os.ReadFile(filepath.Join(tg.StateDir, "units/left-behind.service/pid")); err == nil {
				pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			return err == nil
		})
		if err != nil {
			t.Fatalf("the unit's pid: %v", err)
		}
		if !slices.Contains(tg.processes(), pid) {
			t.Fatalf("pid %d is not in the target's namespace (%v)", pid, tg.processes())
		}
	})
	if pid == 0 {
		t.FailNow()
	}
	// Dead: gone, or a zombie that init has yet to reap.
	var stat []byte
	gone := eventually(5*time.Second, func() bool {
		var err error
		stat, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if errors.Is(err, os.ErrNotExist) {
			return true
		}
		i := strings.LastIndexByte(string(stat), ')')
		return err == nil && i > 0 && strings.HasPrefix(string(stat[i+1:]), " Z")
	})
	if !gone {
		t.Errorf("the unit's process %d is alive after the target's test ended: %s", pid, stat)
	}
}

func TestClosureBadBehaviour(t *testing.T) {
	t.Parallel()
	for _, b := range []Behaviour{
		{Kind: FailUnits},
		{Kind: Succeed, FailedUnits: []string{"a.service"}},
		{Kind: FailUnits, FailedUnits: []string{"a b"}},
		{Kind: LockHeld},
		{Kind: LockHeld, LockedCalls: 1, LockedAction: "reboot"},
		{Kind: CutSSH, Cut: "sometimes"},
		{Kind: Succeed, Cut: CutReset},
		{Kind: Kind(99)},
	} {
		if err := b.check(); err == nil {
			t.Errorf("%+v: no error", b)
		}
	}
}

// TestSystemdRun: the stand-in records how it was called, pipes stdin and
// stdout, passes the exit status on, refuses a unit name in use, and runs
// a unit detached from the SSH session.
func TestSystemdRun(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits for a long unit): make test runs it")
	}
	t.Parallel()
	tg := NewTarget(t)
	d := newDeployer(t, tg)
	out, code := d.ssh("hello\n", `systemd-run --collect --pipe --quiet --no-ask-password --service-type=exec --unit=fleet-x -p RuntimeMaxSec=180 -- sh -c 'read l; echo "got $l"; exit 3'`)
	if code != 3 || out != "got hello\n" {
		t.Errorf("--pipe: exit %d, %q; want 3, %q", code, out, "got hello\n")
	}
	runs := tg.SystemdRuns()
	if len(runs) != 1 {
		t.Fatalf("SystemdRuns() = %+v, want one", runs)
	}
	want := SystemdRun{
		Unit:  "fleet-x.service",
		Flags: []string{"--collect", "--pipe", "--quiet", "--no-ask-password", "--service-type=exec"},
		Props: []string{"RuntimeMaxSec=180"},
		Argv:  []string{"sh", "-c", `read l; echo "got $l"; exit 3`},
	}
	if r := runs[0]; r.Unit != want.Unit || !slices.Equal(r.Flags, want.Flags) || !slices.Equal(r.Props, want.Props) || !slices.Equal(r.Argv, want.Argv) {
		t.Errorf("SystemdRuns()[0] = %+v, want %+v", r, want)
	}
	if j := tg.UnitJournal("fleet-x"); !strings.Contains(j, "code=exited, status=3") {
		t.Errorf("unit journal: %q", j)
	}

	// A unit's environment is its own, not the caller's.
	out, code = d.ssh("", `CALLER=yes systemd-run --pipe --quiet -E FOO='bar baz' sh -c 'echo "$FOO/$CALLER/$PATH"'`)
	if want := "bar baz//" + SessionPath + "\n"; code != 0 || out != want {
		t.Errorf("environment: exit %d, %q; want %q", code, out, want)
	}
	// systemd substitutes ${NAME} in a unit's command line before it runs
	// it: a command holding one is refused, not run otherwise than written.
	if out, code = d.ssh("", `systemd-run --pipe --quiet sh -c 'echo "${HOME}"'`); code == 0 || !strings.Contains(out, "would substitute") {
		t.Errorf("a command line holding ${...}: exit %d, %q; want a refusal", code, out)
	}

	// Detached: the unit outlives the ssh client that started it.
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "ssh", append(slices.Clone(d.opts), tg.Destination(),
		"systemd-run --pipe --unit=fleet-long sh -c 'sleep 4; echo done > "+stateLink+"/long-done'")...)
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool { return fileExists(filepath.Join(tg.StateDir, "units/fleet-long.service/pid")) }) {
		t.Fatal("fleet-long did not start")
	}
	cancel()
	_ = cmd.Wait()
	out = d.must("systemctl is-active fleet-long; systemd-run --unit=fleet-long true; echo rc=$?")
	if !strings.HasPrefix(out, "active\n") || !strings.Contains(out, "already loaded") || !strings.Contains(out, "rc=1") {
		t.Errorf("while it runs: %q; want active, and a second unit of that name refused", out)
	}
	if !eventually(20*time.Second, func() bool { return fileExists(filepath.Join(tg.StateDir, "long-done")) }) {
		t.Fatalf("the unit did not finish after its ssh client was killed\n%s", tg.UnitJournal("fleet-long"))
	}

	// Without --pipe: back at once, output to the unit's journal.
	out, code = d.ssh("", "systemd-run --unit=fleet-bg sh -c 'echo from the unit'")
	if code != 0 || !strings.Contains(out, "Running as unit: fleet-bg.service") {
		t.Errorf("no --pipe: exit %d, %q", code, out)
	}
	if !eventually(10*time.Second, func() bool {
		return strings.Contains(tg.UnitJournal("fleet-bg"), "Deactivated successfully")
	}) {
		t.Errorf("fleet-bg journal: %q", tg.UnitJournal("fleet-bg"))
	}
	if out := d.must("journalctl -u fleet-bg --no-pager"); !strings.Contains(out, "from the unit") {
		t.Errorf("journalctl -u fleet-bg: %q", out)
	}

	// systemctl stop ends a unit.
	d.must("systemd-run --unit=fleet-sleep sleep 60")
	out = d.must("systemctl is-active fleet-sleep; systemctl stop fleet-sleep; systemctl is-active fleet-sleep || true")
	if out != "active\ninactive\n" {
		t.Errorf("stop: %q, want active then inactive", out)
	}

	// A unit holds none of its caller's descriptors: not a lock the
	// caller took.
	out = d.must(`exec 8>>/tmp/nixtest-lock && flock -s 8 && systemd-run --pipe --quiet sh -c 'if [ -e /proc/$$/fd/8 ]; then echo held; else echo none; fi'`)
	if out != "none\n" {
		t.Errorf("the caller's descriptor 8 (a lock) in the unit: %q, want none", out)
	}

	// A busy systemd: the command starts late, and a stop meanwhile
	// cancels it.
	tg.SetUnitStartDelay(t, 2*time.Second)
	start := time.Now()
	if out = d.must("systemd-run --pipe --quiet sh -c 'echo late'"); out != "late\n" || time.Since(start) < 2*time.Second {
		t.Errorf("a late start: %q after %v, want %q after 2s", out, time.Since(start), "late\n")
	}
	out = d.must("systemd-run --unit=fleet-never sh -c 'echo ran > " + stateLink + "/never'; systemctl stop fleet-never; systemctl is-active fleet-never || true")
	if !strings.HasSuffix(out, "\ninactive\n") || !strings.Contains(tg.UnitJournal("fleet-never"), "start job canceled") {
		t.Errorf("a stop before the start: %q, journal %q", out, tg.UnitJournal("fleet-never"))
	}
	time.Sleep(2500 * time.Millisecond)
	if fileExists(filepath.Join(tg.StateDir, "never")) {
		t.Errorf("a unit stopped before it started ran its command")
	}
	tg.SetUnitStartDelay(t, 0)
}

func TestWithoutSystemd(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t, WithoutSystemd())
	d := newDeployer(t, tg)
	for _, cmd := range []string{"systemd-run --pipe true", "systemctl is-system-running"} {
		out, code := d.ssh("", cmd)
		if code != 1 || !strings.Contains(out, "System has not been booted with systemd") {
			t.Errorf("%s: exit %d, %q", cmd, code, out)
		}
	}
	if out, code := d.ssh("", "test -d /run/systemd/system"); code != 1 {
		t.Errorf("/run/systemd/system exists: exit %d %q", code, out)
	}
	if len(tg.SystemdRuns()) != 0 {
		t.Errorf("SystemdRuns() = %+v, want none: systemd-run could not run", tg.SystemdRuns())
	}
	if with := NewTarget(t); !with.Exists("/run/systemd/system") {
		t.Errorf("a default target has no /run/systemd/system")
	}
}

func TestDetectVirt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts []Option
		out  string
		code int
	}{
		{nil, "none\n", 1},
		{[]Option{WithContainer("lxc")}, "lxc\n", 0},
	} {
		tg := NewTarget(t, c.opts...)
		out, code := newDeployer(t, tg).ssh("", "systemd-detect-virt --container")
		if out != c.out || code != c.code {
			t.Errorf("systemd-detect-virt --container: exit %d, %q; want %d, %q", code, out, c.code, c.out)
		}
	}
}

func TestSystemctlStates(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	d := newDeployer(t, tg)
	if out, code := d.ssh("", "systemctl is-system-running --wait"); out != "running\n" || code != 0 {
		t.Errorf("default: exit %d, %q", code, out)
	}
	tg.SetFailedUnits(t, "a.service")
	if out, code := d.ssh("", "systemctl is-system-running"); out != "degraded\n" || code != 1 {
		t.Errorf("failed units: exit %d, %q", code, out)
	}
	if out := d.must("systemctl is-failed a.service"); out != "failed\n" {
		t.Errorf("is-failed: %q", out)
	}
	tg.SetFailedUnits(t)
	tg.SetSystemState(t, "starting")
	var out strings.Builder
	wait := exec.Command("ssh", append(slices.Clone(d.opts), tg.Destination(), "systemctl is-system-running --wait")...)
	wait.Stdout = &out
	if err := wait.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- wait.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("is-system-running --wait returned while starting: %v, %q", err, out.String())
	case <-time.After(500 * time.Millisecond):
	}
	tg.SetSystemState(t, "")
	if err := <-done; err != nil || out.String() != "running\n" {
		t.Errorf("starting, then running: %v, %q; want running", err, out.String())
	}
	if out, code := d.ssh("", "systemctl frobnicate"); code != 1 || !strings.Contains(out, "Unknown command verb") {
		t.Errorf("unknown verb: exit %d, %q", code, out)
	}
	calls := tg.SystemctlCalls()
	if len(calls) == 0 || calls[0] != "is-system-running --wait" {
		t.Errorf("SystemctlCalls() = %q", calls)
	}
}

func eventually(within time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// WithShell: NixOS's shells (bash for the login shell and for sh), or
// dash for both, besides Debian's default (bash to log in, dash for sh).
func TestTargetShells(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		shell     Shell
		login, sh string
	}{
		{ShellDefault, "bash", "dash"},
		{ShellBash, "bash", "bash"},
		{ShellDash, "dash", "dash"},
	} {
		name := string(c.shell)
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newDeployer(t, NewTarget(t, WithShell(c.shell)))
			which := `if [ -n "${BASH_VERSION:-}" ]; then echo bash; else echo dash; fi`
			if got := strings.TrimSpace(d.must(which)); got != c.login {
				t.Errorf("the login shell is %s, want %s", got, c.login)
			}
			if got := strings.TrimSpace(d.must("sh -c " + shell.Quote(which))); got != c.sh {
				t.Errorf("sh is %s, want %s", got, c.sh)
			}
		})
	}
}
