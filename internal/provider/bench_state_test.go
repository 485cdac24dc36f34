package provider_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// timeProviderVersion is the terraform-provider-time release the state cost
// benchmark compares with: a peer provider built on the plugin framework.
const timeProviderVersion = "0.14.2"

// BenchmarkStateCost is what it costs to hold n resources in state, side by
// side in one run, with the built provider through Terraform: the plan
// (refresh included, converged state) of n fleet_executor, of n
// time_rotating (hashicorp/terraform-provider-time, a peer built on the
// same framework) and of n terraform_data (built into Terraform), each
// less an empty configuration's plan; the ratios executor / time_rotating
// and executor / terraform_data; the apply of each (the executors' probe
// every host at create); and the peak RSS and CPU time of the provider
// processes, which run under /usr/bin/time.
//
// The executors reach a few in-process SSH servers sharing one host key;
// probe_interval = 3600, so the plan's refresh finds no probe due (a plan
// that probes costs what the apply's probes cost: see apply).
func BenchmarkStateCost(b *testing.B) {
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		b.Fatalf("/usr/bin/time (Debian package time) is needed to measure the providers' peak memory: %v", err)
	}
	fleet := stateCostWrap(b, acctest.ProviderBinary(b))
	timeP := stateCostWrap(b, stateCostTimeProvider(b))
	cli := acctest.CLIs(b)[0]
	session := func() *acctest.Session {
		return acctest.NewBinarySession(b, cli, fleet.path, acctest.WithProviderBinary("hashicorp/time", timeP.path))
	}
	empty := session()
	empty.WriteConfig("terraform {}\n")

	hostKey, clientKey := sshtest.NewKey(b), sshtest.NewKey(b)
	keyFile := clientKey.WriteFile(b, b.TempDir())
	var ports []string
	for range 4 {
		srv := sshtest.NewServerWithKeys(b, sshtest.Healthy, hostKey, clientKey)
		ports = append(ports, strconv.Itoa(srv.Port))
	}
	knownHosts := filepath.Join(b.TempDir(), "known_hosts")

	for _, n := range []int{200, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			kinds := []struct {
				name   string
				config string
				wrap   *stateCostProvider // the provider measured, nil for terraform_data
			}{
				{"executor", fmt.Sprintf(`provider "fleet" {
  probe_interval   = 3600
  known_hosts_file = %q
}

locals {
  ports = [%s]
}

resource "fleet_executor" "e" {
  count                = %d
  name                 = "e${count.index}"
  host                 = "127.0.0.1"
  port                 = local.ports[count.index %% length(local.ports)]
  private_key_file     = %q
  host_key_fingerprint = %q
}
`, knownHosts, strings.Join(ports, ", "), n, keyFile, hostKey.Fingerprint()), fleet},
				{"time", fmt.Sprintf("resource \"time_rotating\" \"r\" {\n  count         = %d\n  rotation_days = 30\n}\n", n), timeP},
				{"data", fmt.Sprintf("resource \"terraform_data\" \"d\" {\n  count = %d\n  input = count.index\n}\n", n), nil},
			}
			sessions := make([]*acctest.Session, len(kinds))
			apply := make([]stateCostMeasure, len(kinds))
			for i, k := range kinds {
				sessions[i] = session()
				sessions[i].WriteConfig(k.config)
				apply[i] = stateCostRun(b, sessions[i], k.wrap, "apply", "-auto-approve", "-input=false")
			}

			plan := make([]stateCostMeasure, len(kinds))
			var emptyPlan stateCostMeasure
			b.ResetTimer()
			for range b.N {
				// Interleaved, so that the other work on the machine weighs
				// on every kind alike.
				emptyPlan.add(stateCostRun(b, empty, nil, "plan", "-input=false"))
				for i, k := range kinds {
					plan[i].add(stateCostRun(b, sessions[i], k.wrap, "plan", "-input=false", "-detailed-exitcode"))
				}
			}
			b.StopTimer()
			per := func(d time.Duration) float64 { return stateCostMs(d) / float64(b.N) }
			b.ReportMetric(per(emptyPlan.wall), "empty_plan_ms")
			for i, k := range kinds {
				// Reported after the loop: ResetTimer forgets metrics.
				b.ReportMetric(stateCostMs(apply[i].wall), k.name+"_apply_ms")
				b.ReportMetric(per(plan[i].wall), k.name+"_plan_ms")
				b.ReportMetric(per(plan[i].wall-emptyPlan.wall), k.name+"_net_ms")
				b.ReportMetric(per(plan[i].cpu), k.name+"_cpu_ms")
				if k.wrap != nil {
					b.ReportMetric(per(plan[i].providerCPU), k.name+"_provider_cpu_ms")
					b.ReportMetric(float64(plan[i].peakKiB)/1024, k.name+"_plan_rss_MiB")
					b.ReportMetric(float64(apply[i].peakKiB)/1024, k.name+"_apply_rss_MiB")
					b.ReportMetric(float64(plan[i].processes)/float64(b.N), k.name+"_plan_processes")
				}
			}
			net := func(i int) float64 { return (plan[i].wall - emptyPlan.wall).Seconds() }
			b.ReportMetric(net(0)/net(1), "ratio_vs_time")
			b.ReportMetric(net(0)/net(2), "ratio_vs_data")
		})
	}

	// A deployment of 200 nodes in state. Deploying 200 hosts one after
	// the other, each waiting out its verdict, would take far longer than
	// the rest of the benchmark, so every node is held: the apply records
	// all 200 (action skip) and deploys none. The nodes share one
	// NixOS-like target, which the plan's refresh reads 200 times.
	b.Run("deployment=200", func(b *testing.B) {
		b.Setenv("NIX_CONFIG", nixtest.NixConfig)
		sys := nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
		tg := nixtest.NewTarget(b)
		tg.Boot(b, sys)
		const n = 200
		nodes, systems, held := make([]*nixtest.Target, n), make([]string, n), make([]string, n)
		for i := range nodes {
			nodes[i], systems[i], held[i] = tg, sys, strconv.Quote(fmt.Sprintf("n%d", i+1))
		}
		s := session()
		s.WriteConfig(deploymentConfig(nodes, systems, "  hold = ["+strings.Join(held, ", ")+"]\n"))
		apply := stateCostRun(b, s, fleet, "apply", "-auto-approve", "-input=false")
		var plan, cached stateCostMeasure
		b.ResetTimer()
		for range b.N {
			plan.add(stateCostRun(b, s, fleet, "plan", "-input=false"))
			cached.add(stateCostRun(b, s, fleet, "plan", "-input=false", "-refresh=false"))
		}
		b.StopTimer()
		per := func(d time.Duration) float64 { return stateCostMs(d) / float64(b.N) }
		b.ReportMetric(stateCostMs(apply.wall), "apply_ms")
		b.ReportMetric(float64(apply.peakKiB)/1024, "apply_rss_MiB")
		b.ReportMetric(per(plan.wall), "plan_ms")
		b.ReportMetric(per(plan.providerCPU), "plan_provider_cpu_ms")
		b.ReportMetric(float64(plan.peakKiB)/1024, "plan_rss_MiB")
		b.ReportMetric(per(cached.wall), "norefresh_plan_ms")
		b.ReportMetric(float64(cached.peakKiB)/1024, "norefresh_plan_rss_MiB")
	})
}

func stateCostMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// stateCostProvider is a provider binary run under /usr/bin/time by a
// wrapper of the same name, so that each of its processes appends its peak
// RSS and CPU time to rusage.
type stateCostProvider struct {
	path   string // the wrapper, for dev_overrides
	rusage string
}

// stateCostWrap writes the wrapper of binary in a directory of its own.
func stateCostWrap(b *testing.B, binary string) *stateCostProvider {
	b.Helper()
	dir := b.TempDir()
	p := &stateCostProvider{path: filepath.Join(dir, filepath.Base(binary)), rusage: filepath.Join(dir, "rusage")}
	// %M: maximum resident set size in KiB (wait4's ru_maxrss, the
	// process's VmHWM); %U, %S: user and system CPU seconds.
	script := fmt.Sprintf("#!/bin/sh\nexec /usr/bin/time -a -o %q -f 'rusage %%M %%U %%S' %q \"$@\"\n", p.rusage, binary)
	if err := os.WriteFile(p.path, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	return p
}

// take reads what the provider's processes recorded since the last take
// and forgets it: the largest peak RSS, and the CPU time of all of them.
func (p *stateCostProvider) take(b *testing.B) (peakKiB int64, cpu time.Duration, processes int) {
	b.Helper()
	f, err := os.Open(p.rusage)
	if err != nil {
		b.Fatalf("the provider recorded no resource usage: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 || fields[0] != "rusage" {
			continue // "Command exited with non-zero status", say
		}
		kib, err1 := strconv.ParseInt(fields[1], 10, 64)
		user, err2 := strconv.ParseFloat(fields[2], 64)
		sys, err3 := strconv.ParseFloat(fields[3], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			b.Fatalf("unreadable resource usage line %q", sc.Text())
		}
		peakKiB = max(peakKiB, kib)
		cpu += time.Duration((user + sys) * float64(time.Second))
		processes++
	}
	if err := os.Remove(p.rusage); err != nil {
		b.Fatal(err)
	}
	if processes == 0 {
		b.Fatalf("the provider recorded no resource usage")
	}
	return peakKiB, cpu, processes
}

// stateCostMeasure is what one or more CLI commands cost.
type stateCostMeasure struct {
	wall time.Duration
	// cpu is the CPU time of the CLI and every process it started;
	// providerCPU that of the measured provider's processes alone.
	cpu, providerCPU time.Duration
	peakKiB          int64
	processes        int // of the measured provider
}

func (m *stateCostMeasure) add(o stateCostMeasure) {
	m.wall += o.wall
	m.cpu += o.cpu
	m.providerCPU += o.providerCPU
	m.peakKiB = max(m.peakKiB, o.peakKiB)
	m.processes += o.processes
}

// stateCostRun runs one CLI command and measures it; p is the provider
// whose processes it must have started, or nil.
func stateCostRun(b *testing.B, s *acctest.Session, p *stateCostProvider, args ...string) stateCostMeasure {
	b.Helper()
	before := stateCostChildrenCPU(b)
	start := time.Now()
	s.Run(args...)
	m := stateCostMeasure{wall: time.Since(start), cpu: stateCostChildrenCPU(b) - before}
	if p != nil {
		m.peakKiB, m.providerCPU, m.processes = p.take(b)
	}
	return m
}

// stateCostChildrenCPU is the CPU time of this process's children and their
// descendants that have ended (getrusage RUSAGE_CHILDREN).
func stateCostChildrenCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stateCostTimeProvider returns terraform-provider-time, built from its Go
// module through the Go proxy once and cached next to OpenTofu
// ($FLEET_CACHE_DIR, default ~/.cache/terraform-provider-fleet).
func stateCostTimeProvider(b *testing.B) string {
	b.Helper()
	cache := os.Getenv("FLEET_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			b.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "terraform-provider-fleet")
	}
	dir := filepath.Join(cache, "terraform-provider-time-"+timeProviderVersion)
	bin := filepath.Join(dir, "terraform-provider-time")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	// Built aside and renamed, so that an interrupted build leaves no
	// half-written binary in the cache.
	tmp, err := os.MkdirTemp(cache, ".time-build-") //nolint:usetesting // beside the cache entry, so the rename into place stays on one file system
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", "github.com/hashicorp/terraform-provider-time@v"+timeProviderVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building terraform-provider-time %s from its Go module: %v\n%s", timeProviderVersion, err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "terraform-provider-time"), bin); err != nil {
		b.Fatal(err)
	}
	return bin
}
