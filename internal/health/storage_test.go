package health

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Storage faults are real: a tmpfs remounted read-only in a private mount
// namespace, a hung mount in it (a FUSE file system in which every change
// blocks in the kernel, as on a dead hard-NFS mount), a path that is not
// there, and an EIO from statvfs injected where the script calls it. Each runs on a local
// node whose shell enters the namespace, and on a remote node reached
// through a real sshd running inside it.

// storageHost is where a storage fault is observed.
type storageHost struct {
	node  Node     // Local, or a Target for sshd
	shell []string // the evaluator's LocalShell
	ns    *sshtest.MountNamespace
	sshd  *sshtest.SSHD // nil for the local node
	// slack is how much longer than the probe timeout an evaluation may take:
	// starting the shell on a busy machine, and for sshd the connection.
	slack time.Duration
}

func (h storageHost) evaluator() *Evaluator { return newEvaluator(h.shell) }

func (h storageHost) log() string {
	if h.sshd == nil {
		return ""
	}
	return "\nsshd log:\n" + h.sshd.Log()
}

// localHost is a local node whose shell runs inside a new mount namespace.
func localHost(t *testing.T) storageHost {
	ns := sshtest.NewMountNamespace(t)
	return storageHost{node: Node{Local: true}, shell: ns.Command("/bin/sh", "-s"), ns: ns, slack: busy}
}

// sshdHost is a remote node served by a real sshd inside a new mount
// namespace.
func sshdHost(t *testing.T, opts ...sshtest.SSHDOption) storageHost {
	ns := sshtest.NewMountNamespace(t)
	s := sshtest.StartSSHD(t, append([]sshtest.SSHDOption{sshtest.WithMountNamespace(ns)}, opts...)...)
	return storageHost{node: sshdNode(s), ns: ns, sshd: s, slack: busy + 2*time.Second}
}

func TestLocalPathReadOnly(t *testing.T) {
	t.Parallel()
	checkReadOnly(t, localHost(t))
}
func TestSSHDPathReadOnly(t *testing.T) {
	t.Parallel()
	checkReadOnly(t, sshdHost(t))
}

// checkReadOnly: a tmpfs, mounted in the namespace only, is healthy and
// takes the heartbeat; remounted read-only it puts the node in error with a
// reason naming the node, its role, the check and the path; remounted
// read-write it is healthy again.
func checkReadOnly(t *testing.T, h storageHost) {
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	h.ns.MountTmpfs(t, blobs)
	node := uniqueNode(t, "ro")
	p := pathPolicy(root, node, h.node, answers)
	forgetMarkers(t, p, node)
	e := h.evaluator()
	id := "path:" + blobs

	// The heartbeat goes to the tmpfs in the namespace, the checks run
	// there: it touches the tmpfs, not the host's directory under it.
	untouch(t, blobs)
	h.ns.Run(t, "touch", "-d", "@"+strconv.FormatInt(longAgo.Unix(), 10), blobs)

	r, _ := evalNode(t, e, p, node)
	if r.State() != StateHealthy {
		t.Fatalf("before the fault: %s%s", describeReport(r, p), h.log())
	}
	if res := result(t, r, id); res.Tier != TierHeartbeat || res.Detail != "heartbeat written" || res.Heartbeat.IsZero() {
		t.Errorf("before the fault: %+v, want a heartbeat written", res)
	}
	if touched(t, blobs) {
		t.Errorf("host view of %s: touched; want it untouched (the check ran outside the namespace)", blobs)
	}
	if mtime := strings.TrimSpace(h.ns.Run(t, "stat", "-c", "%Y", blobs)); mtime == strconv.FormatInt(longAgo.Unix(), 10) {
		t.Errorf("the namespace's %s: untouched; want the heartbeat written there", blobs)
	}
	if list := h.ns.Run(t, "ls", "-A", blobs); list != "" {
		t.Errorf("the namespace's %s holds %q; want nothing left by the heartbeat", blobs, list)
	}

	h.ns.RemountReadOnly(t, blobs)
	r, _ = evalNode(t, e, p, node)
	if r.State() != StateError {
		t.Fatalf("read-only: state %s, want error\n%s%s", r.State(), describeReport(r, p), h.log())
	}
	res := result(t, r, id)
	if res.Healthy || res.Detail != "mounted read-only" || res.Tier != TierStatvfs {
		t.Errorf("read-only: result %+v, want detail %q from the statvfs tier", res, "mounted read-only")
	}
	wantContains(t, "read-only reason", r.Reason(p), "node "+node, "a hypervisor node", "blob storage", blobs, "read-only", "needed by blob")

	h.ns.RemountReadWrite(t, blobs)
	r, _ = evalNode(t, e, p, node)
	if r.State() != StateHealthy {
		t.Errorf("after RemountReadWrite: %s", describeReport(r, p))
	}
}

func TestLocalPathReadOnlySuperblock(t *testing.T) {
	t.Parallel()
	checkReadOnlySuperblock(t, localHost(t))
}
func TestSSHDPathReadOnlySuperblock(t *testing.T) {
	t.Parallel()
	checkReadOnlySuperblock(t, sshdHost(t))
}

// checkReadOnlySuperblock: a file system the kernel forced read-only
// (errors=remount-ro) is read-only in its superblock, while a bind mount of
// it keeps its own flag rw. The checked path is such a bind mount, and its
// heartbeat is fresh, so only the cheap tier runs: it must see the
// superblock's flag, or the node stays healthy until the next heartbeat.
func checkReadOnlySuperblock(t *testing.T, h storageHost) {
	fs, root := t.TempDir(), t.TempDir()
	blobs := filepath.Join(root, "blobs")
	if err := os.Mkdir(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	h.ns.MountTmpfs(t, fs)
	h.ns.Run(t, "mount", "--bind", fs, blobs)
	node := uniqueNode(t, "ro-super")
	p := pathPolicy(root, node, h.node, answers)
	p.WriteProbeInterval = time.Hour // after the first heartbeat, only the cheap tier runs
	forgetMarkers(t, p, node)
	e := h.evaluator()
	id := "path:" + blobs

	r, _ := evalNode(t, e, p, node)
	if res := result(t, r, id); r.State() != StateHealthy || res.Tier != TierHeartbeat {
		t.Fatalf("before the fault: %s%s", describeReport(r, p), h.log())
	}

	// Remount the file system itself, not the bind mount.
	h.ns.RemountReadOnly(t, fs)
	mount, super := mountFlags(t, h.ns, blobs)
	if mount != "rw" || super != "ro" {
		t.Fatalf("the bind mount's flags: own %q, superblock %q; the test needs rw and ro", mount, super)
	}
	r, _ = evalNode(t, e, p, node)
	res := result(t, r, id)
	if r.State() != StateError || res.Healthy || res.Tier != TierStatvfs {
		t.Fatalf("superblock read-only, fresh heartbeat: %s%s", describeReport(r, p), h.log())
	}
	wantContains(t, "superblock read-only detail", res.Detail, "mounted read-only", "superblock")
	wantContains(t, "superblock read-only reason", r.Reason(p), "node "+node, "blob storage", blobs+": mounted read-only")

	h.ns.RemountReadWrite(t, fs)
	if r, _ = evalNode(t, e, p, node); r.State() != StateHealthy {
		t.Errorf("after RemountReadWrite: %s", describeReport(r, p))
	}
}

// mountFlags reads, inside ns, the read-only flags of the mount at dir from
// /proc/self/mountinfo: the mount's own (field 6) and its superblock's
// (the super options, after the " - " separator).
func mountFlags(t *testing.T, ns *sshtest.MountNamespace, dir string) (mount, super string) {
	t.Helper()
	for _, line := range strings.Split(ns.Run(t, "cat", "/proc/self/mountinfo"), "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 6 || f[4] != dir || sep < 0 || sep+3 >= len(f) {
			continue
		}
		flag := func(opts string) string {
			if slices.Contains(strings.Split(opts, ","), "ro") {
				return "ro"
			}
			return "rw"
		}
		mount, super = flag(f[5]), flag(f[sep+3])
	}
	if mount == "" {
		t.Fatalf("%s is not a mount point in the namespace", dir)
	}
	return mount, super
}

func TestLocalPathHungHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out probe timeouts): make test runs it")
	}
	t.Parallel()
	checkHungHeartbeat(t, localHost(t))
}
func TestSSHDPathHungHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out probe timeouts): make test runs it")
	}
	t.Parallel()
	checkHungHeartbeat(t, sshdHost(t))
}

// checkHungHeartbeat: a heartbeat write that blocks in the kernel (the
// checked path is a hung mount in the namespace) times out at the probe
// timeout; while it hangs, later evaluations, from the same evaluator or
// from another (another provider process), report it outstanding and start
// no second write; once the mount works again the node is healthy again.
func checkHungHeartbeat(t *testing.T, h storageHost) {
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	node := uniqueNode(t, "hung")
	// 4 s: the statvfs tier must answer, and the heartbeat's writer start,
	// inside it on a busy machine, or the wrong tier times out.
	const timeout = 4 * time.Second
	p := pathPolicy(root, node, h.node, timeout)
	forgetMarkers(t, p, node)
	hung := h.ns.MountHung(t, blobs)
	id := "path:" + blobs
	e := h.evaluator()

	started := time.Now()
	r, took := evalNode(t, e, p, node)
	res := result(t, r, id)
	if r.State() != StateError || !res.TimedOut || res.Detail != "probe timed out" {
		t.Fatalf("hung heartbeat: %s%s", describeReport(r, p), h.log())
	}
	if res.Tier != TierHeartbeat {
		t.Errorf("hung heartbeat: tier %q, want %q (the tier that hung)", res.Tier, TierHeartbeat)
	}
	if took > timeout+h.slack {
		t.Errorf("hung heartbeat: evaluation took %v, want at most the probe timeout %v + %v", took, timeout, h.slack)
	}
	wantContains(t, "hung heartbeat reason", r.Reason(p), "node "+node, "blob storage", blobs+" is a broken mount (probe timed out)")

	// The writer left behind reaches the mount when the machine lets it:
	// it may not be blocked there yet when the timeout fires.
	var writers []int
	eventually(5*time.Second, func() bool {
		writers = heartbeatWriters(blobs)
		return len(writers) == 1 && hung.Blocked() == 1
	})
	if len(writers) != 1 || hung.Blocked() != 1 {
		t.Fatalf("after the first evaluation: %d heartbeat writers %v, %d operations blocked in the mount; want exactly the one left hung",
			len(writers), writers, hung.Blocked())
	}

	for _, again := range []struct {
		name string
		e    *Evaluator
	}{{"same evaluator", e}, {"new evaluator", h.evaluator()}} {
		r, took := evalNode(t, again.e, p, node)
		res := result(t, r, id)
		if r.State() != StateError || !res.Outstanding || res.TimedOut {
			t.Fatalf("%s, while hung: %s", again.name, describeReport(r, p))
		}
		if !strings.HasPrefix(res.Detail, "previous probe still outstanding since ") ||
			!strings.Contains(res.Detail, res.OutstandingSince.Format(time.RFC3339)) {
			t.Errorf("%s, while hung: detail %q, want it to say since when the previous probe is outstanding", again.name, res.Detail)
		}
		if res.OutstandingSince.Before(started.Add(-time.Second).Truncate(time.Second)) || res.OutstandingSince.After(time.Now()) {
			t.Errorf("%s: outstanding since %v, want the start of the first evaluation (%v)", again.name, res.OutstandingSince, started)
		}
		if took > timeout+h.slack {
			t.Errorf("%s: evaluation took %v", again.name, took)
		}
		wantContains(t, again.name+" reason", r.Reason(p), blobs+" is a broken mount (previous probe still outstanding since ")
		if now := heartbeatWriters(blobs); !slices.Equal(now, writers) {
			t.Fatalf("%s: heartbeat writers %v, want only the first %v: a second probe joined the hung one", again.name, now, writers)
		}
	}

	hung.Release()
	if !eventually(10*time.Second, func() bool { return len(heartbeatWriters(blobs)) == 0 }) {
		t.Fatalf("heartbeat writers %v still there 10s after the mount was released", heartbeatWriters(blobs))
	}
	var last Report
	healthy := eventually(10*time.Second, func() bool {
		last, _ = evalNode(t, e, p, node)
		return last.State() == StateHealthy
	})
	if !healthy {
		t.Fatalf("not healthy 10s after the mount was released: %s", describeReport(last, p))
	}
	if res := result(t, last, id); res.Detail != "heartbeat written" {
		t.Errorf("after repair: %+v, want a heartbeat written", res)
	}
	// The hung heartbeat, once its write went through, removed its file
	// too; nothing piles up.
	if got := hung.Entries(); len(got) != 0 {
		t.Errorf("after repair: %s holds %q; want no heartbeat file left", blobs, got)
	}
}

// TestEvaluatorConcurrentSameNode: an evaluation of a node that starts
// while the same evaluator is still evaluating it waits for that one instead
// of starting probes beside it, then finds the probe hung and reports it
// outstanding, saying since when; only one heartbeat write ever runs.
func TestEvaluatorConcurrentSameNode(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a probe timeout): make test runs it")
	}
	t.Parallel()
	h := localHost(t)
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	node := uniqueNode(t, "concurrent")
	const timeout = 2 * time.Second
	p := pathPolicy(root, node, h.node, timeout)
	forgetMarkers(t, p, node)
	h.ns.MountHung(t, blobs)
	e := h.evaluator()

	type done struct {
		r  Report
		at time.Time
	}
	first := make(chan done, 1)
	start := time.Now()
	go func() {
		reports, _ := e.Evaluate(t.Context(), p, []string{node})
		first <- done{reports[0], time.Now()}
	}()
	if !eventually(5*time.Second, func() bool { return len(heartbeatWriters(blobs)) == 1 }) {
		t.Fatalf("the first evaluation's heartbeat never started")
	}
	r, took := evalNode(t, e, p, node)
	end := time.Now()
	f := <-first
	if res := result(t, f.r, "path:"+blobs); !res.TimedOut {
		t.Errorf("first evaluation: %s", describeReport(f.r, p))
	}
	if end.Before(f.at) {
		t.Errorf("second evaluation ended at +%v, before the first (+%v): it ran beside it", end.Sub(start), f.at.Sub(start))
	}
	res := result(t, r, "path:"+blobs)
	if !res.Outstanding || res.Healthy || r.State() != StateError {
		t.Errorf("second evaluation: %s", describeReport(r, p))
	}
	if !strings.HasPrefix(res.Detail, "previous probe still outstanding since ") {
		t.Errorf("second evaluation: detail %q, want it to say since when the previous probe is outstanding", res.Detail)
	}
	if took > 2*timeout+h.slack {
		t.Errorf("second evaluation took %v", took)
	}
	if w := heartbeatWriters(blobs); len(w) != 1 {
		t.Errorf("heartbeat writers %v, want exactly one", w)
	}
}

// TestEvaluatorHungEvaluationNotJoined: an evaluation of a node that is
// still running when another one's wait for it ends (the node's shell
// itself hangs) is not joined: the other reports the node's checks
// outstanding since the hung evaluation began, and no second shell starts.
func TestEvaluatorHungEvaluationNotJoined(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out a hung shell's probe timeout): make test runs it")
	}
	t.Parallel()
	sleep := sleepArgs(t)
	killArgv(t, sleep...)
	root := t.TempDir()
	node := uniqueNode(t, "hung-shell")
	// The shell reads the script and never answers; it is killed when the
	// first evaluation's bound (probe timeout + grace) ends.
	e := newEvaluator([]string{"/bin/sh", "-c", "cat >/dev/null; exec " + strings.Join(sleep, " ")})
	// 6 s: on a busy machine seeing the first's shell start may take
	// seconds of it.
	slow := pathPolicy(root, node, Node{Local: true}, 6*time.Second)
	forgetMarkers(t, slow, node)
	quick := pathPolicy(root, node, Node{Local: true}, 100*time.Millisecond)

	first := make(chan Report, 1)
	start := time.Now()
	go func() {
		reports, _ := e.Evaluate(t.Context(), slow, []string{node})
		first <- reports[0]
	}()
	shells := func() (n int) {
		for _, args := range procArgs() {
			if slices.Equal(args, sleep) {
				n++
			}
		}
		return n
	}
	if !eventually(5*time.Second, func() bool { return shells() == 1 }) {
		t.Fatalf("the first evaluation's shell never started")
	}
	// The second waits 100ms + the grace for the first, which needs 6s +
	// the grace: it gives up first.
	r, _ := evalNode(t, e, quick, node)
	select {
	case f := <-first:
		t.Fatalf("the first evaluation ended (%s) before the second gave up waiting", describeReport(f, slow))
	default:
	}
	res := result(t, r, "path:"+filepath.Join(root, "blobs"))
	if !res.Outstanding || res.Healthy || r.State() != StateError || res.OutstandingSince.Before(start.Add(-time.Second)) || res.OutstandingSince.After(time.Now()) {
		t.Errorf("second evaluation: %+v\n%s", res, describeReport(r, quick))
	}
	if want := "previous probe still outstanding since " + res.OutstandingSince.Format(time.RFC3339); res.Detail != want {
		t.Errorf("second evaluation: detail %q, want %q", res.Detail, want)
	}
	if n := shells(); n != 1 {
		t.Errorf("%d shells running, want only the first", n)
	}
	f := <-first
	if res := result(t, f, "path:"+filepath.Join(root, "blobs")); !res.TimedOut || res.Detail != "probe timed out" {
		t.Errorf("first evaluation, its shell hung: %s", describeReport(f, slow))
	}
}

func TestLocalPathMissing(t *testing.T) {
	t.Parallel()
	checkMissingPath(t, localHost(t))
}
func TestSSHDPathMissing(t *testing.T) {
	t.Parallel()
	checkMissingPath(t, sshdHost(t))
}

func checkMissingPath(t *testing.T, h storageHost) {
	root := t.TempDir() // root/blobs is never created
	node := uniqueNode(t, "missing")
	// A probe timeout far beyond an SSH session's start on a busy machine:
	// the detail is what is tested, not how fast it comes.
	p := pathPolicy(root, node, h.node, 30*time.Second)
	forgetMarkers(t, p, node)
	blobs := filepath.Join(root, "blobs")
	r, _ := evalNode(t, h.evaluator(), p, node)
	res := result(t, r, "path:"+blobs)
	if r.State() != StateError || res.Detail != "no such file or directory" || res.Tier != TierStatvfs {
		t.Fatalf("missing path: %s%s", describeReport(r, p), h.log())
	}
	wantContains(t, "missing path reason", r.Reason(p), "node "+node, "blob storage", blobs+": no such file or directory")
}

// TestLocalPathIOError injects EIO at the statvfs seam: the path check's
// statvfs is coreutils `stat -f`, replaced on the shell's PATH by one that
// fails as it does on a disk returning I/O errors.
func TestLocalPathIOError(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	if err := os.Mkdir(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	node := uniqueNode(t, "eio")
	p := pathPolicy(root, node, Node{Local: true}, answers)
	forgetMarkers(t, p, node)

	// The same directory is healthy through the real stat.
	if r, _ := evalNode(t, newEvaluator(nil), p, node); r.State() != StateHealthy {
		t.Fatalf("with the real stat: %s", describeReport(r, p))
	}
	e := newEvaluator([]string{"env", "PATH=" + fakeStatDir(t) + ":" + os.Getenv("PATH"), "/bin/sh", "-s"})
	r, _ := evalNode(t, e, p, node)
	res := result(t, r, "path:"+blobs)
	if r.State() != StateError || res.Detail != "input/output error" || res.Tier != TierStatvfs {
		t.Fatalf("statvfs EIO: %s", describeReport(r, p))
	}
	wantContains(t, "statvfs EIO reason", r.Reason(p), "node "+node, "blob storage", blobs+": input/output error")
}

// TestSSHDPathIOError injects the same EIO over sshd: its SetEnv puts the
// fake stat first on the PATH of every session.
func TestSSHDPathIOError(t *testing.T) {
	t.Parallel()
	fake := fakeStatDir(t)
	h := sshdHost(t, sshtest.WithConfigLines("SetEnv PATH="+fake+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"))
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	h.ns.MountTmpfs(t, blobs)
	node := uniqueNode(t, "eio-sshd")
	p := pathPolicy(root, node, h.node, 30*time.Second)
	forgetMarkers(t, p, node)
	r, _ := evalNode(t, h.evaluator(), p, node)
	res := result(t, r, "path:"+blobs)
	if r.State() != StateError || res.Detail != "input/output error" || res.Tier != TierStatvfs {
		t.Fatalf("statvfs EIO over sshd: %s%s", describeReport(r, p), h.log())
	}
	wantContains(t, "statvfs EIO reason", r.Reason(p), "node "+node, blobs+": input/output error")
}

func TestLocalPathInterruptedEvaluation(t *testing.T) {
	t.Parallel()
	checkInterruptedEvaluation(t, localHost(t))
}
func TestSSHDPathInterruptedEvaluation(t *testing.T) {
	t.Parallel()
	checkInterruptedEvaluation(t, sshdHost(t))
}

// checkInterruptedEvaluation: an evaluation interrupted (Ctrl-C) while a
// heartbeat hangs under a long probe timeout leaves that probe running; the
// next evaluation, from another provider process, reports it outstanding at
// once instead of waiting out the timeout for it, and starts no second one.
func checkInterruptedEvaluation(t *testing.T, h storageHost) {
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	node := uniqueNode(t, "interrupted")
	const timeout = 60 * time.Second
	p := pathPolicy(root, node, h.node, timeout)
	forgetMarkers(t, p, node)
	mount := h.ns.MountHung(t, blobs)

	// Interrupted once the heartbeat hangs, not at a fixed time: an SSH
	// session can take over a second to start on a loaded machine, and an
	// interrupt before the node's shell starts is another case. A writer
	// seen before its write hangs in the mount (its mktemp) is not yet.
	ctx, cancel := context.WithCancel(t.Context())
	hung := make(chan bool, 1)
	go func() {
		ok := eventually(20*time.Second, func() bool { return mount.Blocked() > 0 && len(heartbeatWriters(blobs)) == 1 })
		cancel()
		hung <- ok
	}()
	if _, err := h.evaluator().Evaluate(ctx, p, []string{node}); err == nil {
		t.Fatal("an interrupted evaluation returned reports")
	}
	if !<-hung {
		t.Fatalf("the heartbeat never started within 20s%s", h.log())
	}
	if w := heartbeatWriters(blobs); len(w) != 1 {
		t.Fatalf("after the interrupted evaluation: heartbeat writers %v, want the one left hung", w)
	}
	r, took := evalNode(t, h.evaluator(), p, node)
	res := result(t, r, "path:"+blobs)
	if !res.Outstanding {
		t.Fatalf("after an interrupted evaluation: %s%s", describeReport(r, p), h.log())
	}
	if took > timeout/4 {
		t.Errorf("the next evaluation took %v: it waited for the probe the interrupted one left, against a %v timeout", took, timeout)
	}
	if w := heartbeatWriters(blobs); len(w) != 1 {
		t.Errorf("heartbeat writers %v, want still exactly one", w)
	}
}
