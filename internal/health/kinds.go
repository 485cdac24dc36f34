package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

func init() {
	Register("path", newPathCheck)
	Register("command", newCommandCheck)
	Register("systemd_unit", newUnitCheck)
	Register("tcp", newTCPCheck)
	Register("http", newHTTPCheck)
}

func str(settings map[string]any, key string) (string, error) {
	v, ok := settings[key]
	if !ok || v == nil {
		return "", fmt.Errorf("%s is required", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string", key)
	}
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%s must not be empty", key)
	}
	return s, nil
}

// lastLine is the last non-empty line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// ---- path ----

// PathCheck checks a directory in two tiers: statvfs (and the read-only
// flags of the mount and of its file system) at every evaluation, and a heartbeat write with fsync when
// the last good one is older than the write-probe interval.
type PathCheck struct{ Path string }

func newPathCheck(settings map[string]any, storageRoot string) (Check, error) {
	p, err := str(settings, "path")
	if err != nil {
		return nil, err
	}
	if !path.IsAbs(p) {
		if storageRoot == "" {
			return nil, fmt.Errorf("path %q is relative and no storage_root is set to resolve it against: give an absolute path or set storage_root", p)
		}
		p = path.Join(storageRoot, p)
	}
	return PathCheck{Path: path.Clean(p)}, nil
}

// Kind implements Check.
func (PathCheck) Kind() string { return "path" }

// Target implements Check.
func (c PathCheck) Target() string { return c.Path }

// ReadOnlySuperblock is the detail of a path whose file system is read-only
// while the mount it is reached through says rw.
const ReadOnlySuperblock = "mounted read-only: the file system's superblock is read-only, though this mount's own flag says rw " +
	"(the kernel remounts a file system read-only after errors, errors=remount-ro)"

// HeartbeatPrefix begins the name of the file a heartbeat writes in a
// checked path: a new name each time (six random characters follow), made
// by the write itself and removed after it.
const HeartbeatPrefix = ".fleet-heartbeat."

// Script implements ScriptCheck. Its output is "tier T", then "hb EPOCH_MS"
// for a good heartbeat, "ro mount" or "ro super" for a read-only mount or
// file system, or "fail TEXT". The heartbeat's success marker lives
// in $M (outside the path) and holds the time of the last good heartbeat in
// milliseconds, shared by every evaluation of this node and path, whoever
// runs it.
//
// The checked path may be writable by other users, who can plant links
// there, so the heartbeat never writes into a name it did not make: mktemp
// -u picks a fresh one, and dd creates it exclusively (conv=excl: O_EXCL
// fails on any name that exists, link or not, and follows none), writes
// and fsyncs through that one descriptor, and the file is removed. Its
// name is kept in $M/KEY.hb until then, so that a heartbeat killed in
// between has its file removed by the next one. dd and rm speak C, whose
// "failed to open" tells that dd created nothing, so that nothing of
// someone else's is removed.
func (c PathCheck) Script(env ScriptEnv) string {
	interval := env.WriteProbeInterval.Milliseconds()
	return fmt.Sprintf(`p=%[1]s ok="$M/%[2]s.ok" hb="$M/%[2]s.hb"
echo "tier statvfs"
if ! e=$(stat -f -c %%i -- "$p" 2>&1 >/dev/null); then echo "fail $e"; return 1; fi
if [ ! -d "$p" ]; then echo "fail not a directory"; return 1; fi
if w=$(fleet_ro "$p"); then echo "ro $w"; return 1; fi
if [ -f "$ok" ] && read -r t < "$ok" && [ -n "$t" ] && [ $(( $(fleet_ms) - t )) -lt %[3]d ]; then echo "hb $t"; return 0; fi
echo "tier heartbeat"
if [ -s "$hb" ] && read -r f < "$hb"; then rm -f -- "$f" && : > "$hb"; fi
if ! f=$(mktemp -u -- "$p/%[4]sXXXXXX" 2>&1); then echo "fail heartbeat write failed: $f"; return 1; fi
echo "$f" > "$hb"
if e=$(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ | LC_ALL=C dd of="$f" conv=excl,fsync status=none 2>&1); then
  if e=$(LC_ALL=C rm -- "$f" 2>&1); then
    : > "$hb"
    t=$(fleet_ms) && echo "$t" > "$ok" && echo "hb $t" && return 0
  fi
  echo "fail heartbeat file not removed: $e"
  return 1
fi
case $e in *"failed to open"*) : > "$hb" ;; *) rm -f -- "$f" && : > "$hb" ;; esac
echo "fail heartbeat write failed: $e"
return 1`, shell.Quote(c.Path), env.Key, interval, HeartbeatPrefix)
}

// Interpret implements ScriptCheck.
func (c PathCheck) Interpret(exit int, output string) Result {
	r := Result{Tier: TierStatvfs, Healthy: exit == 0}
	for _, line := range strings.Split(output, "\n") {
		switch {
		case strings.HasPrefix(line, "tier "):
			r.Tier = strings.TrimPrefix(line, "tier ")
		case strings.HasPrefix(line, "hb "):
			if n, err := strconv.ParseInt(strings.TrimPrefix(line, "hb "), 10, 64); err == nil {
				r.Heartbeat = time.UnixMilli(n).UTC()
			}
		case line == "ro mount":
			r.Detail = "mounted read-only"
		case line == "ro super":
			r.Detail = ReadOnlySuperblock
		case strings.HasPrefix(line, "fail "):
			r.Detail = plainError(strings.TrimPrefix(line, "fail "))
		}
	}
	switch {
	case exit < 0:
	case r.Healthy && r.Tier == TierHeartbeat:
		r.Detail = "heartbeat written"
	case r.Healthy:
		r.Detail = "statvfs ok"
	case r.Detail == "":
		r.Detail = fmt.Sprintf("probe failed (exit %d): %s", exit, lastLine(output))
	}
	return r
}

// plainError reduces a coreutils error ("stat: cannot read file system
// information for '/x': Input/output error") to its cause in plain words,
// keeping what the command was doing when that helps.
func plainError(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, ": "); i >= 0 {
		cause := s[i+2:]
		switch {
		case strings.Contains(s, "file system information"):
			return lowerFirst(cause)
		case strings.HasPrefix(s, "heartbeat write failed: "):
			return "heartbeat write failed: " + lowerFirst(cause)
		case strings.HasPrefix(s, "heartbeat file not removed: "):
			return "heartbeat file not removed: " + lowerFirst(cause)
		}
		return lowerFirst(cause)
	}
	return s
}

func lowerFirst(s string) string {
	if s == "" || (len(s) > 1 && s[1] >= 'A' && s[1] <= 'Z') {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// ---- command ----

// CommandCheck runs a shell command on the node; exit 0 within the deadline
// is healthy.
type CommandCheck struct{ Command string }

func newCommandCheck(settings map[string]any, _ string) (Check, error) {
	c, err := str(settings, "command")
	if err != nil {
		return nil, err
	}
	return CommandCheck{Command: c}, nil
}

// Kind implements Check.
func (CommandCheck) Kind() string { return "command" }

// Target implements Check.
func (c CommandCheck) Target() string { return c.Command }

// Script implements ScriptCheck.
func (c CommandCheck) Script(ScriptEnv) string {
	return "sh -c " + shell.Quote(c.Command) + " </dev/null"
}

// Interpret implements ScriptCheck.
func (c CommandCheck) Interpret(exit int, output string) Result {
	r := Result{Tier: TierProbe, Healthy: exit == 0}
	switch {
	case exit == 0:
		r.Detail = "exit 0"
	case exit > 0:
		r.Detail = fmt.Sprintf("exit %d", exit)
		if l := lastLine(output); l != "" {
			r.Detail += ": " + truncate(l, 200)
		}
	}
	return r
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ---- systemd_unit ----

// UnitCheck is healthy when a systemd unit is active.
type UnitCheck struct{ Unit string }

func newUnitCheck(settings map[string]any, _ string) (Check, error) {
	u, err := str(settings, "systemd_unit")
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(u, " \t\n/") {
		return nil, fmt.Errorf("systemd_unit %q is not a unit name (no spaces or slashes), for example \"libvirtd.service\"", u)
	}
	return UnitCheck{Unit: u}, nil
}

// Kind implements Check.
func (UnitCheck) Kind() string { return "systemd_unit" }

// Target implements Check.
func (c UnitCheck) Target() string { return c.Unit }

// Script implements ScriptCheck.
func (c UnitCheck) Script(ScriptEnv) string {
	return "systemctl is-active -- " + shell.Quote(c.Unit) + " </dev/null"
}

// Interpret implements ScriptCheck.
func (c UnitCheck) Interpret(exit int, output string) Result {
	r := Result{Tier: TierProbe, Healthy: exit == 0}
	state := lastLine(output)
	switch {
	case exit == 0:
		r.Detail = "active"
	case exit == 127:
		r.Detail = "systemctl not found on the node"
	case unitStates[state]:
		r.Detail = state
	case exit > 0 && state != "":
		r.Detail = "not known to be active: systemctl says " + truncate(state, 200)
	case exit > 0:
		r.Detail = fmt.Sprintf("not active (systemctl exit %d)", exit)
	}
	return r
}

// unitStates are the words `systemctl is-active` answers with.
var unitStates = map[string]bool{
	"inactive": true, "failed": true, "activating": true, "deactivating": true,
	"reloading": true, "refreshing": true, "maintenance": true, "unknown": true,
}

// ---- tcp ----

// TCPCheck connects to an address from the node.
type TCPCheck struct{ Addr string }

func newTCPCheck(settings map[string]any, _ string) (Check, error) {
	a, err := str(settings, "tcp")
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return nil, fmt.Errorf("tcp %q is not host:port, for example \"127.0.0.1:5432\"", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("tcp %q: port must be 1-65535", a)
	}
	return TCPCheck{Addr: a}, nil
}

// Kind implements Check.
func (TCPCheck) Kind() string { return "tcp" }

// Target implements Check.
func (c TCPCheck) Target() string { return c.Addr }

// Probe implements DialCheck.
func (c TCPCheck) Probe(ctx context.Context, dial DialFunc) Result {
	conn, err := dial(ctx, "tcp", c.Addr)
	if err != nil {
		return Result{Tier: TierProbe, Detail: dialDetail(ctx, err)}
	}
	_ = conn.Close()
	return Result{Tier: TierProbe, Healthy: true, Detail: "connected"}
}

func dialDetail(ctx context.Context, err error) string {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return "probe timed out"
	}
	msg := err.Error()
	// An SSH forwarded channel's refusal carries sshd's words.
	if strings.Contains(msg, "administratively prohibited") {
		return "the node's sshd refuses to forward the connection (AllowTcpForwarding)"
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// ---- http ----

// HTTPCheck requests a URL from the node and expects a status, retrying a
// failed request a bounded number of times within the deadline.
type HTTPCheck struct {
	URL          string
	ExpectStatus int
	Retries      int
}

func newHTTPCheck(settings map[string]any, _ string) (Check, error) {
	u, err := str(settings, "url")
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return nil, fmt.Errorf("url %q is not an http:// or https:// URL with a host", u)
	}
	c := HTTPCheck{URL: u, ExpectStatus: http.StatusOK, Retries: 2}
	if v, ok := settings["expect_status"].(int64); ok {
		if v < 100 || v > 599 {
			return nil, fmt.Errorf("expect_status %d is not an HTTP status (100-599)", v)
		}
		c.ExpectStatus = int(v)
	}
	if v, ok := settings["retries"].(int64); ok {
		if v < 0 || v > 10 {
			return nil, fmt.Errorf("retries %d must be 0-10", v)
		}
		c.Retries = int(v)
	}
	return c, nil
}

// Kind implements Check.
func (HTTPCheck) Kind() string { return "http" }

// Target implements Check. The expected status is part of the identity: two
// checks of one URL expecting different answers are two checks.
func (c HTTPCheck) Target() string {
	if c.ExpectStatus == http.StatusOK {
		return c.URL
	}
	return fmt.Sprintf("%s (expect %d)", c.URL, c.ExpectStatus)
}

// Probe implements DialCheck.
func (c HTTPCheck) Probe(ctx context.Context, dial DialFunc) Result {
	transport := &http.Transport{DialContext: dial, DisableKeepAlives: true}
	defer transport.CloseIdleConnections()
	client := retryablehttp.NewClient()
	client.HTTPClient = &http.Client{Transport: transport}
	client.Logger = nil
	client.RetryMax = c.Retries
	client.RetryWaitMin = 100 * time.Millisecond
	client.RetryWaitMax = time.Second
	// Any answer is an answer: the expected status is judged here, not
	// retried into a different one.
	client.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		// A connection error is retried; the error itself is reported
		// by Do once the retries are spent.
		retry := err != nil || (resp.StatusCode != c.ExpectStatus && resp.StatusCode >= 500)
		return retry, nil //nolint:nilerr // the error is Do's to report, after the retries
	}
	client.ErrorHandler = retryablehttp.PassthroughErrorHandler
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return Result{Tier: TierProbe, Detail: err.Error()}
	}
	resp, err := client.Do(req)
	if err != nil {
		return Result{Tier: TierProbe, Detail: dialDetail(ctx, err)}
	}
	_ = resp.Body.Close()
	if resp.StatusCode != c.ExpectStatus {
		return Result{Tier: TierProbe, Detail: fmt.Sprintf("status %d, expected %d", resp.StatusCode, c.ExpectStatus)}
	}
	return Result{Tier: TierProbe, Healthy: true, Detail: fmt.Sprintf("status %d", resp.StatusCode)}
}
