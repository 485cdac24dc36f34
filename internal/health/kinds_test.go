package health

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// kindPolicy is a policy whose one type, needed by node's one role, depends
// on every check given.
func kindPolicy(node string, n Node, timeout time.Duration, checks map[string]CheckDecl) *Policy {
	names := make([]string, 0, len(checks))
	for name := range checks {
		names = append(names, name)
	}
	n.Roles = []string{"worker"}
	return &Policy{
		ProbeTimeout: timeout,
		Checks:       checks,
		ObjectTypes:  map[string]ObjectType{"job": {Checks: names}},
		Roles:        map[string]Role{"worker": {Hosts: []string{"job"}, Description: "a worker node"}},
		Nodes:        map[string]Node{node: n},
	}
}

func specDecl(kind string, settings map[string]any) CheckDecl {
	return CheckDecl{Spec: Spec{Kind: kind, Settings: settings}}
}

// checkID builds the check a declaration makes and returns its identity.
func checkID(t *testing.T, d CheckDecl) string {
	t.Helper()
	c, err := Build(d.Spec, "")
	if err != nil {
		t.Fatal(err)
	}
	return ID(c)
}

// sleepArgs is a `sleep` argv unique to this test, so that the sleep it
// leaves running past its deadline is found, and killed, by its argv.
func sleepArgs(t *testing.T) []string {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"sleep", fmt.Sprintf("30.%06d", n.Int64())}
}

func TestCommandCheck(t *testing.T) {
	t.Parallel()
	node := uniqueNode(t, "command")
	sleep := sleepArgs(t)
	killArgv(t, sleep...)
	checks := map[string]CheckDecl{
		"fine":  specDecl("command", map[string]any{"command": "echo fine"}),
		"fails": specDecl("command", map[string]any{"command": "echo first; echo 'connection refused' >&2; exit 3"}),
		"hangs": specDecl("command", map[string]any{"command": "echo started; exec " + strings.Join(sleep, " ")}),
	}
	// 5 s: `echo fine` must answer inside it on a busy machine (CI saw it
	// miss 1.5 s); the sleep waits it out.
	const timeout = 5 * time.Second
	p := kindPolicy(node, Node{Local: true}, timeout, checks)
	forgetMarkers(t, p, node)
	r, took := evalNode(t, newEvaluator(nil), p, node)
	if r.State() != StateError {
		t.Fatalf("%s", describeReport(r, p))
	}
	if took > timeout+busy {
		t.Errorf("evaluation took %v, want at most the probe timeout %v + %v", took, timeout, busy)
	}
	if res := result(t, r, checkID(t, checks["fine"])); !res.Healthy || res.Detail != "exit 0" {
		t.Errorf("exit 0: %+v", res)
	}
	if res := result(t, r, checkID(t, checks["fails"])); res.Healthy || res.Detail != "exit 3: connection refused" {
		t.Errorf("exit 3: %+v, want detail %q", res, "exit 3: connection refused")
	}
	if res := result(t, r, checkID(t, checks["hangs"])); res.Healthy || !res.TimedOut || res.Detail != "probe timed out" {
		t.Errorf("sleeping past the timeout: %+v, want probe timed out", res)
	}
	wantContains(t, "reason", r.Reason(p), "node "+node+" is unhealthy because it is a worker node and ",
		"`echo first; echo 'connection refused' >&2; exit 3` failed: exit 3: connection refused",
		"`echo started; exec "+strings.Join(sleep, " ")+"` failed: probe timed out")
}

// TestCommandOutputWithoutNewline: a check whose output does not end in a
// newline does not swallow the report of the check after it.
func TestCommandOutputWithoutNewline(t *testing.T) {
	t.Parallel()
	node := uniqueNode(t, "nonl")
	checks := map[string]CheckDecl{
		"a": specDecl("command", map[string]any{"command": "printf 'disk full'; exit 4"}),
		"b": specDecl("command", map[string]any{"command": "printf 'all good'"}),
		"c": specDecl("command", map[string]any{"command": "true"}),
	}
	p := kindPolicy(node, Node{Local: true}, 5*time.Second, checks)
	forgetMarkers(t, p, node)
	r, _ := evalNode(t, newEvaluator(nil), p, node)
	if res := result(t, r, checkID(t, checks["a"])); res.Healthy || res.Detail != "exit 4: disk full" {
		t.Errorf("a: %+v, want exit 4: disk full\n%s", res, describeReport(r, p))
	}
	if res := result(t, r, checkID(t, checks["b"])); !res.Healthy || res.Detail != "exit 0" {
		t.Errorf("b, after a's unterminated output: %+v\n%s", res, describeReport(r, p))
	}
	if res := result(t, r, checkID(t, checks["c"])); !res.Healthy {
		t.Errorf("c, after b's unterminated output: %+v\n%s", res, describeReport(r, p))
	}
}

func TestSystemdUnitCheck(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	writeExecutable(t, bin, "systemctl", `# fake: systemctl is-active -- UNIT
[ "$1" = is-active ] && [ "$2" = -- ] || { echo "unexpected arguments: $*" >&2; exit 64; }
case "$3" in
fleet-test-good.service) echo active; exit 0 ;;
*) echo failed; exit 3 ;;
esac
`)
	node := uniqueNode(t, "unit")
	checks := map[string]CheckDecl{
		"good": specDecl("systemd_unit", map[string]any{"systemd_unit": "fleet-test-good.service"}),
		"bad":  specDecl("systemd_unit", map[string]any{"systemd_unit": "fleet-test-bad.service"}),
	}
	p := kindPolicy(node, Node{Local: true}, 5*time.Second, checks)
	forgetMarkers(t, p, node)
	e := newEvaluator([]string{"env", "PATH=" + bin + ":" + os.Getenv("PATH"), "/bin/sh", "-s"})
	r, _ := evalNode(t, e, p, node)
	if res := result(t, r, checkID(t, checks["good"])); !res.Healthy || res.Detail != "active" {
		t.Errorf("active unit: %+v", res)
	}
	if res := result(t, r, checkID(t, checks["bad"])); res.Healthy || res.Detail != "failed" {
		t.Errorf("failed unit: %+v", res)
	}
	wantContains(t, "reason", r.Reason(p), "unit fleet-test-bad.service is failed")
	if strings.Contains(r.Reason(p), "good") {
		t.Errorf("reason names the active unit: %s", r.Reason(p))
	}

	// A node without systemctl: the script's other tools only.
	tools := t.TempDir()
	for _, name := range []string{"sh", "id", "mkdir", "mktemp", "date", "sleep", "cat", "rm", "mv", "stat"} {
		if err := os.Symlink(lookPath(t, name, "coreutils"), filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	e = newEvaluator([]string{"env", "PATH=" + tools, "/bin/sh", "-s"})
	r, _ = evalNode(t, e, p, node)
	if res := result(t, r, checkID(t, checks["good"])); res.Healthy || res.Detail != "systemctl not found on the node" {
		t.Errorf("without systemctl: %+v\n%s", res, describeReport(r, p))
	}
}

// listen starts a TCP listener that accepts and closes connections until
// the test ends.
func listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func closedAddr(t *testing.T) string {
	host, port := sshtest.ClosedPort(t)
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func TestTCPCheck(t *testing.T) {
	t.Parallel()
	node := uniqueNode(t, "tcp")
	closed := closedAddr(t)
	checks := map[string]CheckDecl{
		"open":   specDecl("tcp", map[string]any{"tcp": listen(t)}),
		"closed": specDecl("tcp", map[string]any{"tcp": closed}),
	}
	p := kindPolicy(node, Node{Local: true}, 5*time.Second, checks)
	e := newEvaluator(nil)
	r, _ := evalNode(t, e, p, node)
	if res := result(t, r, checkID(t, checks["open"])); !res.Healthy || res.Detail != "connected" {
		t.Errorf("open listener: %+v", res)
	}
	if res := result(t, r, checkID(t, checks["closed"])); res.Healthy || res.Detail != "connection refused" {
		t.Errorf("closed port: %+v, want connection refused", res)
	}
	wantContains(t, "reason", r.Reason(p), "tcp "+closed+": connection refused")
	if c, s, ch, probes := e.Counters.Snapshot(); c != 0 || s != 0 || ch != 0 || probes != 2 {
		t.Errorf("local dial checks: connections %d, sessions %d, channels %d, probes %d; want 0, 0, 0, 2", c, s, ch, probes)
	}
}

// statusServer answers each path with a fixed status and counts requests
// per path.
type statusServer struct {
	*httptest.Server
	mu    sync.Mutex
	count map[string]int
}

func newStatusServer(t *testing.T) *statusServer {
	s := &statusServer{count: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.count[r.URL.Path]++
		s.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/ok"):
			w.WriteHeader(http.StatusOK)
		case strings.HasPrefix(r.URL.Path, "/unavailable"):
			w.WriteHeader(http.StatusServiceUnavailable)
		case strings.HasPrefix(r.URL.Path, "/later"):
			// A retry would wait 30s: only the deadline ends the probe.
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *statusServer) requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[path]
}

func TestHTTPCheck(t *testing.T) {
	t.Parallel()
	srv := newStatusServer(t)
	node := uniqueNode(t, "http")
	checks := map[string]CheckDecl{
		"ok":        specDecl("http", map[string]any{"url": srv.URL + "/ok"}),
		"down":      specDecl("http", map[string]any{"url": srv.URL + "/unavailable", "retries": int64(2)}),
		"no-retry":  specDecl("http", map[string]any{"url": srv.URL + "/unavailable-once", "retries": int64(0)}),
		"expect503": specDecl("http", map[string]any{"url": srv.URL + "/unavailable-expected", "expect_status": int64(503)}),
		"later":     specDecl("http", map[string]any{"url": srv.URL + "/later", "retries": int64(10)}),
	}
	const timeout = 1500 * time.Millisecond
	p := kindPolicy(node, Node{Local: true}, timeout, checks)
	r, took := evalNode(t, newEvaluator(nil), p, node)
	if res := result(t, r, checkID(t, checks["ok"])); !res.Healthy || res.Detail != "status 200" {
		t.Errorf("ok: %+v", res)
	}
	if res := result(t, r, checkID(t, checks["down"])); res.Healthy || res.Detail != "status 503, expected 200" {
		t.Errorf("down: %+v, want status 503, expected 200", res)
	}
	if n := srv.requests("/unavailable"); n != 3 {
		t.Errorf("down with retries=2: %d requests, want 3", n)
	}
	if n := srv.requests("/unavailable-once"); n != 1 {
		t.Errorf("down with retries=0: %d requests, want 1", n)
	}
	if res := result(t, r, checkID(t, checks["expect503"])); !res.Healthy || res.Detail != "status 503" {
		t.Errorf("expect_status 503: %+v", res)
	}
	if n := srv.requests("/unavailable-expected"); n != 1 {
		t.Errorf("expected 503: %d requests, want 1 (the expected status is not retried)", n)
	}
	if res := result(t, r, checkID(t, checks["later"])); res.Healthy || !res.TimedOut || res.Detail != "probe timed out" {
		t.Errorf("retry past the deadline: %+v, want probe timed out", res)
	}
	if n := srv.requests("/later"); n != 1 {
		t.Errorf("retry past the deadline: %d requests, want 1", n)
	}
	if took > timeout+busy {
		t.Errorf("evaluation took %v: retries are not bounded by the %v deadline", took, timeout)
	}
	wantContains(t, "reason", r.Reason(p), "http "+srv.URL+"/unavailable: status 503, expected 200", "http "+srv.URL+"/later: probe timed out")
}

// TestDialChecksOverSSH: a remote node's tcp and http checks connect from
// the node, over forwarded channels of its one SSH connection, beside its
// script checks' one session.
func TestDialChecksOverSSH(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	srv := newStatusServer(t)
	closed := closedAddr(t)
	node := uniqueNode(t, "dial-ssh")
	checks := map[string]CheckDecl{
		"open":   specDecl("tcp", map[string]any{"tcp": listen(t)}),
		"closed": specDecl("tcp", map[string]any{"tcp": closed}),
		"ok":     specDecl("http", map[string]any{"url": srv.URL + "/ok"}),
		"down":   specDecl("http", map[string]any{"url": srv.URL + "/unavailable", "retries": int64(2)}),
		"agent":  specDecl("command", map[string]any{"command": "echo agent ok"}),
	}
	p := kindPolicy(node, sshdNode(s), 5*time.Second, checks)
	forgetMarkers(t, p, node)
	e := newEvaluator(nil)
	r, _ := evalNode(t, e, p, node)
	if !r.Reached {
		t.Fatalf("%s\nsshd log:\n%s", describeReport(r, p), s.Log())
	}
	if res := result(t, r, checkID(t, checks["open"])); !res.Healthy {
		t.Errorf("open listener over SSH: %+v", res)
	}
	if res := result(t, r, checkID(t, checks["closed"])); res.Healthy || !strings.Contains(strings.ToLower(res.Detail), "refused") {
		t.Errorf("closed port over SSH: %+v, want refused", res)
	}
	if res := result(t, r, checkID(t, checks["ok"])); !res.Healthy || res.Detail != "status 200" {
		t.Errorf("http ok over SSH: %+v", res)
	}
	if res := result(t, r, checkID(t, checks["down"])); res.Healthy || res.Detail != "status 503, expected 200" {
		t.Errorf("http down over SSH: %+v", res)
	}
	if res := result(t, r, checkID(t, checks["agent"])); !res.Healthy {
		t.Errorf("command over SSH: %+v", res)
	}
	if n := srv.requests("/unavailable"); n != 3 {
		t.Errorf("http down with retries=2 over SSH: %d requests, want 3", n)
	}
	// One channel per connection attempt: tcp open 1, tcp closed 1, http ok
	// 1, http down 3 (keep-alives are off).
	conns, sessions, channels, probes := e.Counters.Snapshot()
	if conns != 1 || sessions != 1 || channels != 6 || probes != 5 {
		t.Errorf("connections %d, sessions %d, channels %d, probes %d; want 1, 1, 6, 5", conns, sessions, channels, probes)
	}
	if n := strings.Count(s.Log(), "Accepted publickey"); n != 1 {
		t.Errorf("sshd accepted %d logins, want 1", n)
	}
}

// TestDialCheckOverSSHForwardingRefused: a node whose sshd forbids
// forwarding says so, instead of a bare channel error.
func TestDialCheckOverSSHForwardingRefused(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t, sshtest.WithConfigLines("AllowTcpForwarding no"))
	node := uniqueNode(t, "noforward")
	checks := map[string]CheckDecl{"open": specDecl("tcp", map[string]any{"tcp": listen(t)})}
	p := kindPolicy(node, sshdNode(s), 5*time.Second, checks)
	r, _ := evalNode(t, newEvaluator(nil), p, node)
	if res := result(t, r, checkID(t, checks["open"])); res.Healthy || !strings.Contains(res.Detail, "AllowTcpForwarding") {
		t.Errorf("forwarding refused: %+v\n%s", res, describeReport(r, p))
	}
}

// TestEvaluateInterrupted: an evaluation cut short by its caller returns an
// error and no report: it observed nothing.
func TestEvaluateInterrupted(t *testing.T) {
	t.Parallel()
	node := uniqueNode(t, "interrupted")
	sleep := sleepArgs(t)
	killArgv(t, sleep...)
	checks := map[string]CheckDecl{"hangs": specDecl("command", map[string]any{"command": "exec " + strings.Join(sleep, " ")})}
	p := kindPolicy(node, Node{Local: true}, 10*time.Second, checks)
	forgetMarkers(t, p, node)
	interrupt, stop := context.WithCancel(t.Context())
	e := newEvaluator(nil)
	e.Interrupt = interrupt
	time.AfterFunc(300*time.Millisecond, stop)
	start := time.Now()
	reports, err := e.Evaluate(t.Context(), p, nil)
	if err == nil || reports != nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("interrupted evaluation: %v, %v; want an error and no reports", reports, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("interrupted evaluation took %v", took)
	}
}
