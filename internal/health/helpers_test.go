package health

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// evalBound bounds one Evaluate call in a test: far above every probe
// timeout used here, so hitting it is a hang, not a slow machine.
const evalBound = 60 * time.Second

// uniqueNode names a node for one test run. The marker directory on the
// machine is shared by every test, run and process: a probe left hung by one
// test, or a fresh heartbeat left by an earlier run, must never be taken for
// this test's. The markers of its checks are removed when the test ends.
func uniqueNode(t *testing.T, base string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return base + "-" + hex.EncodeToString(b[:])
}

// localMarkerDir is MarkerDir as the shell of this machine expands it, for
// local nodes and for sshd sessions (which get no TMPDIR).
func localMarkerDir(tmpdir string) string {
	if tmpdir == "" {
		tmpdir = "/tmp"
	}
	return filepath.Join(tmpdir, "fleet-node-health."+strconv.Itoa(os.Getuid()))
}

// forgetMarkers removes, when the test ends, the markers node's checks in p
// leave on this machine. Call it right after building p, before anything
// that may hang a probe, so that it runs after the hung probe is released.
func forgetMarkers(t *testing.T, p *Policy, node string) {
	t.Helper()
	t.Cleanup(func() {
		dir := localMarkerDir(os.Getenv("TMPDIR"))
		for _, pl := range p.Plan(node) {
			key := markerKey(node, pl.ID)
			_ = os.Remove(filepath.Join(dir, key+".ok"))
			_ = os.Remove(filepath.Join(dir, key+".hb"))
			_ = os.Remove(filepath.Join(dir, key+".pid"))
			_ = os.RemoveAll(filepath.Join(dir, key+".d"))
		}
	})
}

func newEvaluator(shell []string) *Evaluator {
	return &Evaluator{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(8), LocalShell: shell}
}

// busy is what a bound on an evaluation's time allows beyond its probe
// timeout for a busy machine (shells and SSH sessions starting under -race,
// on cores other tests share): far less than what each such bound catches,
// a probe that runs on to its 30 s sleep or its hung mount.
const busy = 4 * time.Second

// answers is the probe timeout of a test whose checks are all meant to
// answer: far beyond what a stall of a busy machine takes (CI saw `echo
// fine` and a tmpfs heartbeat miss 1.5 and 2 s at a load of 25 on two
// cores), and it costs nothing, since no check waits it out.
const answers = 20 * time.Second

// evalNode evaluates one node and returns its report and how long it took.
func evalNode(t *testing.T, e *Evaluator, p *Policy, node string) (Report, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), evalBound)
	defer cancel()
	start := time.Now()
	reports, err := e.Evaluate(ctx, p, []string{node})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Evaluate(%s): %v", node, err)
	}
	if len(reports) != 1 || reports[0].Node != node {
		t.Fatalf("Evaluate(%s) returned %+v, want one report of that node", node, reports)
	}
	return reports[0], elapsed
}

// result returns the result of the planned check with identity id.
func result(t *testing.T, r Report, id string) Result {
	t.Helper()
	for i, pl := range r.Planned {
		if pl.ID == id {
			return r.Results[i]
		}
	}
	ids := make([]string, len(r.Planned))
	for i, pl := range r.Planned {
		ids[i] = pl.ID
	}
	t.Fatalf("node %s: no planned check %q (planned: %q)", r.Node, id, ids)
	return Result{}
}

// describeReport is a report in one block, for failure messages.
func describeReport(r Report, p *Policy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s reached=%v state=%s\nreason: %s\n", r.Node, r.Reached, r.State(), r.Reason(p))
	for i, pl := range r.Planned {
		res := r.Results[i]
		fmt.Fprintf(&b, "  %s: healthy=%v tier=%s detail=%q timedOut=%v outstanding=%v\n",
			pl.ID, res.Healthy, res.Tier, res.Detail, res.TimedOut, res.Outstanding)
	}
	return b.String()
}

// pathPolicy is a policy with one path check, "blobs" (blob storage) at
// root/blobs, needed by object type blob, hosted by role hypervisor (a
// hypervisor node), played by node.
func pathPolicy(root, node string, n Node, timeout time.Duration) *Policy {
	n.Roles = []string{"hypervisor"}
	return &Policy{
		StorageRoot:        root,
		ProbeTimeout:       timeout,
		WriteProbeInterval: 0, // a heartbeat is due at every evaluation
		Checks: map[string]CheckDecl{
			"blobs": {Spec: Spec{Kind: "path", Settings: map[string]any{"path": "blobs"}}, Description: "blob storage"},
		},
		ObjectTypes: map[string]ObjectType{"blob": {Checks: []string{"blobs"}}},
		Roles:       map[string]Role{"hypervisor": {Hosts: []string{"blob"}, Description: "a hypervisor node"}},
		Nodes:       map[string]Node{node: n},
	}
}

// sshdNode is a remote node reached through s: its user, its client key
// inline and a pin of its primary host key.
func sshdNode(s *sshtest.SSHD) Node {
	return Node{Target: sshdial.Target{
		Endpoint:    sshdial.Endpoint{Host: s.Host, Port: s.Port, User: s.User},
		Pin:         sshdial.MustParsePin(s.HostKeys[0].AuthorizedLine()),
		Credentials: sshdial.Credentials{PrivateKey: s.ClientKey.PEM()},
	}}
}

// writeExecutable writes an executable shell script.
func writeExecutable(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// lookPath finds a tool the test needs; a missing one fails the test.
func lookPath(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: install Debian package %s", name, pkg)
	}
	p, err = filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeStatDir returns a directory holding a fake `stat` that fails every
// statvfs (stat -f) with EIO as coreutils words it, and runs the real stat
// otherwise: the I/O error a dying disk returns, injected at the seam the
// path check's statvfs tier uses.
func fakeStatDir(t *testing.T) string {
	t.Helper()
	realStat := lookPath(t, "stat", "coreutils")
	dir := t.TempDir()
	writeExecutable(t, dir, "stat", fmt.Sprintf(`for a; do last=$a; done
for a; do
  if [ "$a" = -f ]; then
    echo "stat: cannot read file system information for '$last': Input/output error" >&2
    exit 1
  fi
done
exec %s "$@"
`, realStat))
	return dir
}

// procArgs lists every process's argv, by pid.
func procArgs() map[int][]string {
	out := map[int][]string{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue // gone, or a zombie
		}
		out[pid] = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	}
	return out
}

// heartbeatWriters lists the processes of a heartbeat into dir: any whose
// arguments name a heartbeat file there (the path check's mktemp, dd and
// rm), wherever it blocks: a heartbeat hung in its write holds dir's lock
// in the kernel, and a second one would wait for it in mktemp.
func heartbeatWriters(dir string) []int {
	want := filepath.Join(dir, HeartbeatPrefix)
	var pids []int
	for pid, args := range procArgs() {
		if slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, want) }) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// longAgo is the modification time untouch gives a directory.
var longAgo = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// untouch sets dir's modification time to long ago, so that touched tells
// whether anything was created or removed in it since: a heartbeat makes
// and removes a file of its own, and leaves nothing else to see.
func untouch(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chtimes(dir, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
}

func touched(t *testing.T, dir string) bool {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return !fi.ModTime().Equal(longAgo)
}

// killArgv kills, when the test ends, every process whose argv is exactly
// argv: probes a test deliberately left running past their deadline, each
// with an argv unique to the test.
func killArgv(t *testing.T, argv ...string) {
	t.Helper()
	t.Cleanup(func() {
		for pid, args := range procArgs() {
			if slices.Equal(args, argv) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// eventually polls cond every 50ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantContains(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%s does not contain %q:\n%s", what, p, s)
		}
	}
}
