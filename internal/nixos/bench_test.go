package nixos_test

import (
	"context"
	"fmt"
	"os/exec"
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

// BenchmarkEvaluate evaluates n configurations that share an expensive
// import, side by side: nixos.Evaluate (what fleet_nixos_systems reads
// with), one nix eval of all of them by hand, and one nix eval per
// configuration, one after the other; and a second Evaluate of the
// unchanged flake, with a cache (CacheDir). Targets: evaluate /
// by-hand ≤ 1.2, evaluate / one-each ≤ 0.2.
func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{50} {
		b.Run(fmt.Sprintf("configurations=%d", n), func(b *testing.B) {
			configs := map[string]nixtest.Configuration{}
			var names []string
			for i := range n {
				name := fmt.Sprintf("host%02d", i)
				names = append(names, name)
				configs[name] = nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}, Units: map[string]string{"app.service": "[Service]\n"}}}
			}
			var ours, byHand, each, cached time.Duration
			for range b.N {
				b.StopTimer()
				r := &nixtest.Repository{Dir: b.TempDir(), Configurations: configs, SharedImport: sharedLoops}
				r.Write(b)
				flake := "path:" + r.Dir
				n := nixos.Nix{Env: benchEnv}
				start := time.Now()
				systems, err := n.Evaluate(context.Background(), nixos.Source{Flake: flake}, names, nixos.EvaluateOptions{})
				ours += time.Since(start)
				if err != nil || len(systems) != len(names) {
					b.Fatalf("Evaluate: %v", err)
				}

				start = time.Now()
				run(b, "nix", "--extra-experimental-features", "nix-command flakes", "eval", "--json", flake+"#nixosConfigurations",
					"--apply", "cs: builtins.mapAttrs (n: c: { drv = c.config.system.build.toplevel.drvPath; out = c.config.system.build.toplevel.outPath; }) cs")
				byHand += time.Since(start)

				start = time.Now()
				for _, name := range names {
					run(b, "nix", "--extra-experimental-features", "nix-command flakes", "eval", "--raw", flake+"#nixosConfigurations."+name+".config.system.build.toplevel.drvPath")
				}
				each += time.Since(start)

				warm := nixos.Nix{Env: benchEnv, CacheDir: b.TempDir()}
				if _, err := warm.Evaluate(context.Background(), nixos.Source{Flake: flake}, names, nixos.EvaluateOptions{}); err != nil {
					b.Fatal(err)
				}
				start = time.Now()
				if _, err := warm.Evaluate(context.Background(), nixos.Source{Flake: flake}, names, nixos.EvaluateOptions{}); err != nil {
					b.Fatal(err)
				}
				cached += time.Since(start)
			}
			per := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
			b.ReportMetric(per(ours), "evaluate_ms")
			b.ReportMetric(per(byHand), "by_hand_ms")
			b.ReportMetric(per(each), "one_each_ms")
			b.ReportMetric(per(cached), "cached_ms")
			b.ReportMetric(float64(ours)/float64(byHand), "ratio_vs_by_hand")
			b.ReportMetric(float64(ours)/float64(each), "ratio_vs_one_each")
			b.ReportMetric(float64(cached)/float64(ours), "cached_vs_evaluate")
		})
	}
}

func run(b *testing.B, name string, args ...string) {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(cmd.Environ(), benchEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
}
