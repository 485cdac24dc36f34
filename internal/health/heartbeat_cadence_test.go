package health

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// countingStatDir returns a directory holding a `stat` that appends a line
// to the returned file at every statvfs (stat -f) and otherwise runs the
// real stat: how many times the cheap tier ran.
func countingStatDir(t *testing.T) (dir, count string) {
	t.Helper()
	realStat := lookPath(t, "stat", "coreutils")
	dir = t.TempDir()
	count = filepath.Join(dir, "statvfs-calls")
	writeExecutable(t, dir, "stat", fmt.Sprintf(`for a; do
  if [ "$a" = -f ]; then echo x >> %s; break; fi
done
exec %s "$@"
`, shell.Quote(count), realStat))
	return dir, count
}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// Requirement "heartbeat cadence" (node-health seed: the authoritative
// write probe runs at most every write_probe_interval, the cheap statvfs
// tier at every evaluation): a first evaluation writes the heartbeat; a
// second inside the interval runs statvfs again but writes nothing (the
// directory is left untouched, and the result keeps the first heartbeat's
// time); one after the interval writes it anew. No heartbeat leaves a file.
func TestPathHeartbeatCadence(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out the write probe interval): make test runs it")
	}
	t.Parallel()
	const interval = 5 * time.Second
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	if err := os.Mkdir(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	node := uniqueNode(t, "cadence")
	p := pathPolicy(root, node, Node{Local: true}, answers)
	p.WriteProbeInterval = interval
	forgetMarkers(t, p, node)
	statDir, calls := countingStatDir(t)
	e := newEvaluator([]string{"env", "PATH=" + statDir + ":" + os.Getenv("PATH"), "/bin/sh", "-s"})
	id := "path:" + blobs
	empty := func(when string) {
		t.Helper()
		if list, err := os.ReadDir(blobs); err != nil || len(list) != 0 {
			t.Errorf("%s: %s holds %v (%v); want nothing left by a heartbeat", when, blobs, list, err)
		}
	}

	untouch(t, blobs)
	r, _ := evalNode(t, e, p, node)
	first := result(t, r, id)
	if r.State() != StateHealthy || first.Tier != TierHeartbeat || first.Heartbeat.IsZero() {
		t.Fatalf("first evaluation: %s", describeReport(r, p))
	}
	if !touched(t, blobs) {
		t.Fatalf("first evaluation wrote no heartbeat: %s untouched", blobs)
	}
	empty("first evaluation")
	if n := lines(t, calls); n != 1 {
		t.Errorf("first evaluation ran statvfs %d times, want 1", n)
	}

	untouch(t, blobs)
	r, _ = evalNode(t, e, p, node)
	if since := time.Since(first.Heartbeat); since >= interval {
		t.Fatalf("the second evaluation ended %s after the first heartbeat, not inside the %s interval: the machine is too slow for this test", since, interval)
	}
	second := result(t, r, id)
	if r.State() != StateHealthy || second.Tier != TierStatvfs || second.Detail != "statvfs ok" || !second.Heartbeat.Equal(first.Heartbeat) {
		t.Errorf("second evaluation, inside the interval: %s heartbeat %s; want the statvfs tier only, keeping heartbeat %s", describeReport(r, p), second.Heartbeat, first.Heartbeat)
	}
	if touched(t, blobs) {
		t.Errorf("second evaluation, inside the interval, wrote a heartbeat in %s: at most one write per write_probe_interval", blobs)
	}
	if n := lines(t, calls); n != 2 {
		t.Errorf("after the second evaluation statvfs ran %d times, want 2: statvfs runs at every evaluation", n)
	}

	time.Sleep(time.Until(first.Heartbeat.Add(interval + 100*time.Millisecond)))
	untouch(t, blobs)
	r, _ = evalNode(t, e, p, node)
	third := result(t, r, id)
	if r.State() != StateHealthy || third.Tier != TierHeartbeat || !third.Heartbeat.After(first.Heartbeat.Add(interval)) {
		t.Errorf("third evaluation, past the interval: %s heartbeat %s; want a new heartbeat after %s", describeReport(r, p), third.Heartbeat, first.Heartbeat.Add(interval))
	}
	if !touched(t, blobs) {
		t.Errorf("third evaluation, past the interval, wrote no heartbeat: %s untouched", blobs)
	}
	empty("third evaluation")
	if n := lines(t, calls); n != 3 {
		t.Errorf("after the third evaluation statvfs ran %d times, want 3", n)
	}
}
