package nixos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// benchEnv is the user's Nix without the flake evaluation cache: every
// side evaluates for real (the cache's own gain is measured apart).
var benchEnv = []string{"NIX_CONFIG=" + nixtest.NixConfig + "eval-cache = false\n"}

// sharedLoops is the size of the shared import: about half a second to
// evaluate on this machine, as nixpkgs costs more.
const sharedLoops = 1_500_000

// configCost is each configuration's own cost (nixtest.Configuration.Cost):
// about 0.2 s and 50 MiB here, as a NixOS configuration costs seconds and
// hundreds of MiB.
const configCost = 800_000

// benchMemory is the workers' memory bound in the bench: under half of
// what one process evaluating all 50 holds (about 2.2 GiB).
const benchMemory = 1 << 30

// BenchmarkEvaluate evaluates 50 configurations that cost like real ones
// (a shared import of about half a second; each about 0.2 s of CPU and
// 50 MiB it keeps), side by side: nixos.Evaluate (what fleet_nixos_systems
// reads with) with 1, 2 and 4 workers bounded at benchMemory, and with 2
// workers unbounded; one nix eval of all of them by hand; the largest
// resident size of any one Nix process of each; the evaluations a failure
// all 50 share costs; and a second Evaluate of the unchanged flake, with
// a cache (CacheDir). Targets (issue 31): 2 workers / by hand ≤ 0.65 on
// this 2-core machine; the largest process ≤ half the one by hand; a
// shared failure at most 2 evaluations beyond the first round; unchanged,
// no evaluation.
func BenchmarkEvaluate(b *testing.B) {
	const n = 50
	configs := map[string]nixtest.Configuration{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("host%02d", i)
		names = append(names, name)
		configs[name] = nixtest.Configuration{Cost: configCost,
			System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}, Units: map[string]string{"app.service": "[Service]\n"}}}
	}
	b.Run(fmt.Sprintf("configurations=%d", n), func(b *testing.B) {
		variants := []struct {
			name string
			opts nixos.EvaluateOptions
		}{
			{"w1", nixos.EvaluateOptions{Workers: 1, MaxMemory: benchMemory}},
			{"w2", nixos.EvaluateOptions{Workers: 2, MaxMemory: benchMemory}},
			{"w4", nixos.EvaluateOptions{Workers: 4, MaxMemory: benchMemory}},
			{"w2_unbounded", nixos.EvaluateOptions{Workers: 2, MaxMemory: 1 << 40}},
		}
		took := map[string]time.Duration{}
		peak := map[string]int64{}
		var byHand, cached time.Duration
		var byHandPeak int64
		evaluations := func(args []string) bool {
			return args[0] == "nix" && slices.Contains(args, "eval") && !strings.Contains(strings.Join(args, " "), "builtins.attrNames")
		}
		var sharedBeyond, cachedEvaluations int
		for range b.N {
			b.StopTimer()
			r := &nixtest.Repository{Dir: b.TempDir(), Configurations: configs, SharedImport: sharedLoops}
			r.Write(b)
			flake := "path:" + r.Dir
			for _, v := range variants {
				var mu sync.Mutex
				nix := nixos.Nix{Env: benchEnv, Exited: func(args []string, st *os.ProcessState) {
					if ru, ok := st.SysUsage().(*syscall.Rusage); ok && evaluations(args) {
						mu.Lock()
						peak[v.name] = max(peak[v.name], ru.Maxrss<<10)
						mu.Unlock()
					}
				}}
				start := time.Now()
				systems, err := nix.Evaluate(context.Background(), nixos.Source{Flake: flake}, names, v.opts)
				took[v.name] += time.Since(start)
				if err != nil || len(systems) != len(names) {
					b.Fatalf("Evaluate %s: %v", v.name, err)
				}
			}

			start := time.Now()
			st := run(b, "nix", "--extra-experimental-features", "nix-command flakes", "eval", "--json", flake+"#nixosConfigurations",
				"--apply", "cs: builtins.mapAttrs (n: c: { drv = c.config.system.build.toplevel.drvPath; out = c.config.system.build.toplevel.outPath; }) cs")
			byHand += time.Since(start)
			if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
				byHandPeak = max(byHandPeak, ru.Maxrss<<10)
			}

			broken := &nixtest.Repository{Dir: b.TempDir(), Configurations: configs, SharedImport: sharedLoops, SharedError: "a module every host imports is broken"}
			broken.Write(b)
			count := 0
			var mu sync.Mutex
			nix := nixos.Nix{Env: benchEnv, Ran: func(args []string) {
				if evaluations(args) {
					mu.Lock()
					count++
					mu.Unlock()
				}
			}}
			if _, err := nix.Evaluate(context.Background(), nixos.Source{Flake: "path:" + broken.Dir}, names, nixos.EvaluateOptions{Workers: 2}); err == nil {
				b.Fatal("a shared failure evaluated")
			}
			sharedBeyond = max(sharedBeyond, count-2)

			count = 0
			warm := nixos.Nix{Env: benchEnv, CacheDir: b.TempDir(), Ran: nix.Ran}
			if _, err := warm.Evaluate(context.Background(), nixos.Source{Flake: flake}, names, nixos.EvaluateOptions{}); err != nil {
				b.Fatal(err)
			}
			count = 0
			start = time.Now()
			if _, err := warm.Evaluate(context.Background(), nixos.Source{Flake: flake}, names, nixos.EvaluateOptions{}); err != nil {
				b.Fatal(err)
			}
			cached += time.Since(start)
			cachedEvaluations = max(cachedEvaluations, count)
		}
		per := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
		b.ReportMetric(per(byHand), "by_hand_ms")
		b.ReportMetric(float64(byHandPeak>>20), "by_hand_peak_mib")
		for _, v := range variants {
			b.ReportMetric(per(took[v.name]), v.name+"_ms")
			b.ReportMetric(float64(took[v.name])/float64(byHand), v.name+"_vs_by_hand")
			b.ReportMetric(float64(peak[v.name])/float64(byHandPeak), v.name+"_peak_vs_by_hand")
		}
		b.ReportMetric(float64(sharedBeyond), "shared_failure_evaluations_beyond_first")
		b.ReportMetric(per(cached), "cached_ms")
		b.ReportMetric(float64(cachedEvaluations), "cached_evaluations")
	})
}

func run(b *testing.B, name string, args ...string) *os.ProcessState {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(cmd.Environ(), benchEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return cmd.ProcessState
}
