package agreement_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// hostLog reads run's log on the target.
func hostLog(t *testing.T, tg *nixtest.Target, run string) []agreement.LogLine {
	t.Helper()
	b, err := os.ReadFile(tg.Path(agreement.StateDir + "/" + run + "/" + agreement.LogName))
	if err != nil {
		t.Fatalf("run %s's log: %v", run, err)
	}
	lines, err := agreement.ParseLog(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// bootedWithSystem is a target booted into a system that succeeds, with a
// second system of behaviour b in its store, and a host that reaches it.
func bootedWithSystem(t *testing.T, b nixtest.Behaviour) (*nixtest.Target, string, string, sshHost) {
	t.Helper()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, b)
	copyTo(t, tg, sys)
	return tg, old, sys, newHost(t, tg, tg.Port)
}

// inOrder says whether log holds each of want (a line without its time),
// in that order, other lines between; it returns the first it misses.
func inOrder(log []agreement.LogLine, want ...string) (string, bool) {
	i := 0
	for _, l := range log {
		if i < len(want) && strings.TrimSpace(strings.Join(append([]string{l.What}, l.Args...), " ")) == want[i] {
			i++
		}
	}
	if i < len(want) {
		return want[i], false
	}
	return "", true
}

func logText(log []agreement.LogLine) string {
	var b strings.Builder
	for _, l := range log {
		b.WriteString(l.String() + "\n")
	}
	return b.String()
}

// The host logs, as it happens, what it heard, decided and did for a run:
// a confirmed activation says the words it heard and the deployer's
// confirmation before the decision; one whose deployer went silent says
// the watchdog decided (lapsed) and switched back; a boot entry says its
// end before the records it wrote; a refused action says why. The times
// are the host's, in order.
func TestTheHostLogsWhatItHeardDecidedAndDid(t *testing.T) {
	t.Parallel()
	tg, old, sys, h := bootedWithSystem(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	ctx := context.Background()
	timing := agreement.Timing{Confirm: 3 * time.Second, Lease: 10 * time.Second, Activation: time.Minute}

	// Confirmed.
	run := agreement.NewRun()
	l, _, err := agreement.Take(ctx, h, run, "first", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Watch(true)
	a := agreement.Activation{Run: run, System: sys, Previous: old, Attempt: 1, SetProfile: true, Watch: true, Systemd: true, Timing: timing}
	if out, err := h.Output(ctx, a.Script(), false); err != nil {
		t.Fatalf("the activation: %v\n%s", err, out)
	}
	time.Sleep(1500 * time.Millisecond) // a word or more reaches the watchdog
	if d, err := l.Decide(ctx, agreement.DecisionConfirm); d != agreement.DecisionConfirm {
		t.Fatalf("the confirmation: %q, %v", d, err)
	}
	if out, err := h.Output(ctx, agreement.BootScript(run, sys, 1, 30, true), false); err != nil {
		t.Fatalf("the boot entry: %v\n%s", err, out)
	}
	l.Release()
	// A boot entry that arrives after the lease ended is refused, and the
	// log says why.
	if _, err := h.Output(ctx, agreement.BootScript(run, sys, 2, 30, true), false); exitOf(err) != agreement.FencedExit {
		t.Fatalf("a boot entry after the release: %v, want refused", err)
	}
	log := hostLog(t, tg, run)
	if miss, ok := inOrder(log, "leased", "fenced act.1", "watchdog guarded", "started unit.1", "ended unit.1 0", "over activated",
		"heard w lock", "heard c lock", "decided confirm word",
		"fenced boot.1", "ended boot.1 0", "recorded boot-default "+sys, "recorded succeeded "+sys,
		"lease-ended", "refused boot.2 no-lease"); !ok {
		t.Errorf("the confirmed run's log lacks %q in its place:\n%s", miss, logText(log))
	}
	// The watchdog's word comes once it saw the decision, whose line the
	// words loop may write after it; lines of one process are in order,
	// and two processes' at most a moment apart (each reads the clock,
	// then appends).
	if _, ok := inOrder(log, "watchdog confirmed"); !ok {
		t.Errorf("the confirmed run's log lacks the watchdog's confirmed:\n%s", logText(log))
	}
	for i := 1; i < len(log); i++ {
		if log[i].Uptime < log[i-1].Uptime-time.Second {
			t.Errorf("the log's times go back a second at line %d:\n%s", i+1, logText(log))
		}
	}
	for _, l := range log {
		if l.What == "decided" && (len(l.Args) != 2 || l.Args[1] != "word") {
			t.Errorf("a decision the watchdog made on a confirmed run: %s\n%s", l, logText(log))
		}
	}

	// Silent: the watchdog decides, and switches back.
	run2 := agreement.NewRun()
	l2, _, err := agreement.Take(ctx, h, run2, "second", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release()
	sys2 := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	copyTo(t, tg, sys2)
	a2 := agreement.Activation{Run: run2, System: sys2, Previous: sys, Attempt: 1, SetProfile: true, Watch: true, Systemd: true, Timing: timing}
	if out, err := h.Output(ctx, a2.Script(), false); err != nil {
		t.Fatalf("the second activation: %v\n%s", err, out)
	}
	deadline := time.Now().Add(timing.HostGivesUp() + 30*time.Second)
	for tg.CurrentSystem() != sys && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	v, answered := agreement.Await(ctx, h, run2, 10*time.Second, 30*time.Second, func(v agreement.View) bool { return v.RolledBack != "" })
	if !answered || v.RolledBack != "0" {
		t.Fatalf("the silent run: %+v (answered %v); want switched back", v, answered)
	}
	log2 := hostLog(t, tg, run2)
	if miss, ok := inOrder(log2, "fenced act.1", "watchdog guarded", "started unit.1", "ended unit.1 0", "over activated",
		"decided rollback lapsed", "watchdog rolling-back began=1 locked=", "switching-back "+sys2, "switched-back 0"); !ok {
		t.Errorf("the silent run's log lacks %q in its place:\n%s", miss, logText(log2))
	}
	for _, l := range log2 {
		if l.What == "heard" && l.Args[0] != "h" {
			t.Errorf("the silent run's log says the host heard %s:\n%s", l, logText(log2))
		}
	}
	// The watchdog decided once the activation was over, and
	// confirm_timeout after it began to wait (it heard no word), by the
	// host's clock: not sooner.
	at := map[string]time.Duration{}
	for _, l := range log2 {
		if _, seen := at[l.What]; !seen {
			at[l.What] = l.Uptime
		}
	}
	if at["decided"] < at["over"] || at["decided"]-at["watchdog"] < timing.Confirm-100*time.Millisecond {
		t.Errorf("the watchdog decided %s after it began to wait and %s after the activation was over, want confirm_timeout (%s) or more, and after:\n%s",
			at["decided"]-at["watchdog"], at["decided"]-at["over"], timing.Confirm, logText(log2))
	}
}

// A log's lines parse, and a line the host's scripts would not write is
// an error.
func TestParseLog(t *testing.T) {
	t.Parallel()
	lines, err := agreement.ParseLog("12.34 heard w lock\n12.40 decided confirm word\n")
	if err != nil || len(lines) != 2 || lines[0].Uptime != 12340*time.Millisecond || lines[1].What != "decided" || strings.Join(lines[1].Args, " ") != "confirm word" {
		t.Errorf("ParseLog: %+v, %v", lines, err)
	}
	if lines, err := agreement.ParseLog(""); err != nil || len(lines) != 0 {
		t.Errorf("an empty log: %+v, %v", lines, err)
	}
	for _, bad := range []string{"heard w lock\n", "12.3\n", "-1 heard w\n", "12.3 heard\n\n"} {
		if _, err := agreement.ParseLog(bad); err == nil {
			t.Errorf("ParseLog(%q) is no error", bad)
		}
	}
}

// A deployer lost while its activation runs (its session cut, its lease
// let go): the watchdog's clock starts only once the activation has
// ended, and its switch back is the run's last switch; the host ends on
// the system it ran before, never on the unjudged one. The attempt's pid,
// which tells the watchdog it still runs, is written as systemd runs the
// unit's command line (the stand-in turns "$$" into "$", as systemd
// does: a pid written as $$ would be "$", and the watchdog would take
// the attempt for ended).
func TestALostDeployersActivationEndsBeforeItsWatchdogSwitchesBack(t *testing.T) {
	t.Parallel()
	tg, old, sys, h := bootedWithSystem(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 10 * time.Second})
	timing := agreement.Timing{Confirm: 2 * time.Second, Lease: 10 * time.Second, Activation: time.Minute}
	run := agreement.NewRun()
	l, _, err := agreement.Take(context.Background(), h, run, "lost", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Watch(true)
	a := agreement.Activation{Run: run, System: sys, Previous: old, Attempt: 1, SetProfile: true, Watch: true, Systemd: true, Timing: timing}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _, _ = h.Output(ctx, a.Script(), false) }()
	deadline := time.Now().Add(30 * time.Second)
	for !tg.Exists(agreement.StateDir+"/"+run+"/unit.1.stc") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if b, err := os.ReadFile(tg.Path(agreement.StateDir + "/" + run + "/unit.1.pid")); err != nil || strings.Trim(string(b), "0123456789\n") != "" {
		t.Errorf("the attempt's pid file holds %q (%v), want its pid", b, err)
	}
	// The deployer is gone: its session cut, its lease let go.
	cancel()
	<-done
	l.Release()
	v, answered := agreement.Await(context.Background(), h, run, 10*time.Second, time.Minute, func(v agreement.View) bool { return v.RolledBack != "" && v.Released })
	log := hostLog(t, tg, run)
	if !answered || v.RolledBack == "" {
		t.Fatalf("the watchdog did not switch back: %+v\n%s", v, logText(log))
	}
	if miss, ok := inOrder(log, "started unit.1", "lease-ended", "ended unit.1 0", "decided rollback lapsed", "switched-back 0"); !ok {
		t.Errorf("the log lacks %q in its place:\n%s", miss, logText(log))
	}
	// The watchdog's clock ran once the attempt had ended (whichever way
	// it saw that: the activation's status, or its lease gone and no
	// attempt running).
	ended, over := -1, -1
	for i, l := range log {
		switch {
		case l.What == "ended" && ended < 0:
			ended = i
		case l.What == "over" && over < 0:
			over = i
		}
	}
	if over < 0 || over < ended {
		t.Errorf("the watchdog's clock ran while the attempt did:\n%s", logText(log))
	}
	if tg.CurrentSystem() != old {
		t.Errorf("the host runs %s, want %s (the unjudged %s must not stay)\n%s", tg.CurrentSystem(), old, sys, logText(log))
	}
}

// The host logs only what happened, once it happened: a refused action is
// never said fenced; a cancel is said only of an action it cancelled; a
// decision is said once, however often it is asked for; a word for no run
// (not a run's name) is written nowhere; words are logged with the
// shell's builtins alone (they come every second); and a record that
// could not be written is never said recorded.
func TestTheHostLogsOnlyWhatHappened(t *testing.T) {
	t.Parallel()
	tg, _, sys, h := bootedWithSystem(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	ctx := context.Background()
	run := agreement.NewRun()
	l, _, err := agreement.Take(ctx, h, run, "first", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	boot := func(attempt int) int {
		_, err := h.Output(ctx, agreement.BootScript(run, sys, attempt, 30, true), false)
		return exitOf(err)
	}
	if rc := boot(1); rc != 0 {
		t.Fatalf("boot.1: exit %d", rc)
	}
	// boot.1 ran: an ask that names it cancels nothing; boot.2 is
	// cancelled, and refused when it comes.
	if _, err := agreement.Ask(ctx, h, run, "boot.1", "boot.2"); err != nil {
		t.Fatal(err)
	}
	if rc := boot(2); rc != agreement.FencedExit {
		t.Fatalf("boot.2, cancelled: exit %d, want refused", rc)
	}
	// Two confirmations: one decision.
	for range 2 {
		if d, err := l.Decide(ctx, agreement.DecisionConfirm); d != agreement.DecisionConfirm {
			t.Fatalf("the confirmation: %q, %v", d, err)
		}
	}
	// Words with no PATH: the words loop logs them with builtins alone.
	// And a word whose run is not a run's name (a path out of the state
	// directory, to a directory that exists) is written nowhere.
	if err := os.MkdirAll(tg.Path("/run/fleet-elsewhere"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(ctx, "PATH=/nonexistent; export PATH; "+agreement.WordLoop(false), false)
	cmd.Stdin = strings.NewReader("w " + run + "\nh " + run + "\nh ../fleet-elsewhere\nw ..\n")
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), "ack") != 2 {
		t.Fatalf("the words loop without PATH: %v, %q; want two acks", err, out)
	}
	if tg.Exists("/run/fleet-elsewhere/"+agreement.LogName) || tg.Exists("/run/"+agreement.LogName) {
		t.Error("a word for no run was logged outside the state directory")
	}
	// A record that cannot be written: a directory where it goes.
	for _, f := range []string{agreement.BootDefaultFile, agreement.SucceededFile} {
		if err := os.Remove(tg.Path(f)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(tg.Path(f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if rc := boot(3); rc != 1 {
		t.Errorf("boot.3, its records unwritable: exit %d, want 1", rc)
	}

	log := hostLog(t, tg, run)
	count := func(line string) int {
		n := 0
		for _, l := range log {
			if strings.TrimSpace(strings.Join(append([]string{l.What}, l.Args...), " ")) == line {
				n++
			}
		}
		return n
	}
	for line, want := range map[string]int{
		"fenced boot.1": 1, "cancelled boot.1": 0, "cancelled boot.2": 1, "fenced boot.2": 0, "refused boot.2 fate cancelled": 1,
		"decided confirm word": 1, "stands confirm": 1, "heard w spare": 1, "heard h spare": 1,
		"fenced boot.3": 1, "ended boot.3 0": 1, "recorded boot-default " + sys: 1, "recorded succeeded " + sys: 1,
	} {
		if got := count(line); got != want {
			t.Errorf("the log says %q %d times, want %d:\n%s", line, got, want, logText(log))
		}
	}
}

// A log that cannot be written (a directory where it goes) changes no
// action: the boot entry, its records and the mark succeed, and say so.
func TestAnUnwritableLogChangesNoAction(t *testing.T) {
	t.Parallel()
	tg, _, sys, h := bootedWithSystem(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	ctx := context.Background()
	run := agreement.NewRun()
	l, _, err := agreement.Take(ctx, h, run, "first", 0, timing, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	log := tg.Path(agreement.StateDir + "/" + run + "/" + agreement.LogName)
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(log, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{agreement.BootScript(run, sys, 1, 30, true), agreement.FencedMarkScript(run, sys), agreement.Remote(agreement.LoggedMarkScript(run, sys))} {
		if out, err := h.Output(ctx, script, false); err != nil {
			t.Fatalf("an action with an unwritable log: %v\n%s", err, out)
		}
	}
	if b, _ := os.ReadFile(tg.Path(agreement.SucceededFile)); strings.TrimSpace(string(b)) != sys || tg.BootEntry() != sys {
		t.Errorf("succeeded %q, boot entry %s; want %s", b, tg.BootEntry(), sys)
	}
}
