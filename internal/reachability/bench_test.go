package reachability_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// benchProbeTimeout is the per-host timeout of BOTH sides: our probe timeout
// and OpenSSH's ConnectTimeout. OpenSSH only takes whole seconds (at least 1),
// so 1 s is the shortest timeout the two can share.
const benchProbeTimeout = time.Second

// sshBackstop only catches an ssh that ignores its ConnectTimeout; it must
// never be what ends a black-holed ssh, or we would time our kill, not OpenSSH.
const sshBackstop = benchProbeTimeout + 5*time.Second

const sshPath = "/usr/bin/ssh"

// benchFleet is n in-process hosts on 127.0.0.1; every 10th is black-holed.
type benchFleet struct {
	targets    []reachability.Named
	blackholed []bool
	nBlack     int
	knownHosts string // one "[127.0.0.1]:port key" line per host, for ssh
	keyFile    string // the client key, for ssh -i
}

func newBenchFleet(b *testing.B, n int, hostKey, clientKey *sshtest.Key, keyFile string) *benchFleet {
	f := &benchFleet{keyFile: keyFile}
	pin := sshdial.PinKey(hostKey.Public)
	pem := clientKey.PEM()
	var known strings.Builder
	for i := range n {
		// Black holes spread evenly through the name order ProbeAll dispatches in.
		black := i%10 == 9
		behaviour := sshtest.Healthy
		if black {
			behaviour = sshtest.BlackHole
			f.nBlack++
		}
		s := sshtest.NewServerWithKeys(b, behaviour, hostKey, clientKey)
		f.blackholed = append(f.blackholed, black)
		// Zero-padded names make name order equal to index order, so both
		// sides dispatch hosts in the same sequence.
		f.targets = append(f.targets, reachability.Named{Name: fmt.Sprintf("h%04d", i), Target: sshdial.Target{
			Endpoint:    sshdial.Endpoint{Host: s.Host, Port: s.Port, User: "root"},
			Pin:         pin,
			Credentials: sshdial.Credentials{PrivateKey: pem},
		}})
		fmt.Fprintf(&known, "[%s]:%d %s\n", s.Host, s.Port, hostKey.AuthorizedLine())
	}
	f.knownHosts = filepath.Join(b.TempDir(), "known_hosts")
	if err := os.WriteFile(f.knownHosts, []byte(known.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return f
}

// raiseFileLimit lifts the soft descriptor limit to the hard one: 1000
// listeners plus both ends of every open probe need far more than 1024.
func raiseFileLimit(b *testing.B) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReachabilityPass times ProbeAll over n hosts with c slots, and
// OpenSSH doing the same job on the same hosts with c processes at once,
// interleaved in every iteration so both see the same machine. Ratios only:
// absolute times depend on the machine.
func BenchmarkReachabilityPass(b *testing.B) {
	if _, err := os.Stat(sshPath); err != nil {
		b.Fatalf("the OpenSSH comparison needs %s (Debian package openssh-client): %v", sshPath, err)
	}
	raiseFileLimit(b)
	// One host key and one client key for every server: key generation
	// would otherwise dominate the setup of 1000 hosts.
	hostKey, clientKey := sshtest.NewKey(b), sshtest.NewKey(b)
	keyFile := clientKey.WriteFile(b, b.TempDir())
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			// Built once per n and shared by both concurrencies; the
			// servers close when this sub-benchmark ends.
			f := newBenchFleet(b, n, hostKey, clientKey, keyFile)
			for _, c := range []int{4, 32} {
				b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) { f.bench(b, c) })
			}
		})
	}
}

func (f *benchFleet) bench(b *testing.B, c int) {
	n := len(f.targets)
	p := &reachability.Prober{Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(int64(c)), Timeout: benchProbeTimeout}
	var ours, theirs time.Duration
	for b.Loop() {
		start := time.Now()
		out, err := p.ProbeAll(b.Context(), f.targets)
		ours += time.Since(start)

		// The checks and the OpenSSH run stay out of ns/op, which is ours alone.
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		f.checkOurs(b, out)
		took, results := f.runOpenSSH(b, c)
		theirs += took
		f.checkOpenSSH(b, results)
		b.StartTimer()
	}

	passMS := ms(ours) / float64(b.N)
	sshMS := ms(theirs) / float64(b.N)
	boundMS := float64(ceilDiv(n, c)) * ms(benchProbeTimeout)
	// The black holes alone force ceil(black / c) full timeouts; healthy
	// probes take milliseconds, so a good pass is close to this.
	modelMS := float64(ceilDiv(f.nBlack, c)) * ms(benchProbeTimeout)
	b.ReportMetric(passMS, "pass_ms")
	b.ReportMetric(boundMS, "bound_ms")
	b.ReportMetric(passMS/boundMS, "bound_ratio")
	b.ReportMetric(passMS/modelMS, "model_ratio")
	b.ReportMetric(sshMS, "openssh_ms")
	b.ReportMetric(passMS/sshMS, "ratio_vs_openssh")
}

// checkOurs fails the benchmark unless every healthy host was reachable and
// every black hole timed out: timing wrong answers would be worthless.
func (f *benchFleet) checkOurs(b *testing.B, out []sshdial.Outcome) {
	if len(out) != len(f.targets) {
		b.Fatalf("%d outcomes for %d targets", len(out), len(f.targets))
	}
	for i, o := range out {
		if f.blackholed[i] {
			if o.Canceled || o.Reason != sshdial.ReasonTimeout {
				b.Fatalf("black-holed %s: outcome %+v, want a timeout", f.targets[i].Name, o)
			}
		} else if !o.Reachable() {
			b.Fatalf("healthy %s: outcome %+v, want reachable", f.targets[i].Name, o)
		}
	}
}

type sshResult struct {
	err      error
	output   string
	backstop bool // the backstop killed it, not its own ConnectTimeout
}

// runOpenSSH runs `ssh ... true` against every host in index (= name) order,
// at most c at once, and returns the wall time of the whole pass. ssh does a
// bit more than our probe (process start, a session, exec): that is the
// cost of doing the job with the OpenSSH client.
func (f *benchFleet) runOpenSSH(b *testing.B, c int) (time.Duration, []sshResult) {
	connectTimeout := strconv.Itoa(max(1, int((benchProbeTimeout+time.Second-1)/time.Second)))
	results := make([]sshResult, len(f.targets))
	slots := make(chan struct{}, c)
	var wg sync.WaitGroup
	start := time.Now()
	for i, t := range f.targets {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ctx, cancel := context.WithTimeout(b.Context(), sshBackstop)
			defer cancel()
			cmd := exec.CommandContext(ctx, sshPath,
				"-F", "/dev/null",
				"-o", "BatchMode=yes",
				"-o", "StrictHostKeyChecking=yes",
				"-o", "UserKnownHostsFile="+f.knownHosts,
				"-o", "GlobalKnownHostsFile=/dev/null",
				"-o", "ConnectTimeout="+connectTimeout,
				// Only the given key: no agent or ~/.ssh keys to try first.
				"-o", "IdentitiesOnly=yes",
				"-o", "LogLevel=ERROR",
				"-i", f.keyFile,
				"-p", strconv.Itoa(t.Target.Port),
				t.Target.User+"@"+t.Target.Host, "true")
			out, err := cmd.CombinedOutput()
			results[i] = sshResult{err: err, output: strings.TrimSpace(string(out)), backstop: errors.Is(ctx.Err(), context.DeadlineExceeded)}
		})
	}
	wg.Wait()
	return time.Since(start), results
}

// checkOpenSSH holds ssh to the same answers: exit 0 on healthy hosts, a
// failure of its own (not our backstop) on black holes.
func (f *benchFleet) checkOpenSSH(b *testing.B, results []sshResult) {
	for i, r := range results {
		name := f.targets[i].Name
		switch {
		case r.backstop:
			b.Fatalf("ssh to %s outlived its ConnectTimeout by %s; the comparison would time our kill", name, sshBackstop-benchProbeTimeout)
		case f.blackholed[i] && r.err == nil:
			b.Fatalf("ssh to black-holed %s succeeded", name)
		case !f.blackholed[i] && r.err != nil:
			b.Fatalf("ssh to healthy %s: %v: %s", name, r.err, r.output)
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
