package provider_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
)

// BenchmarkPlanPreview plans a 20-node deployment that switches every node
// to a new system (a closure of about 250 paths, some new to the hosts, a
// unit changed, one added, one removed), through Terraform, with the
// summary of what each switch will do (issue 16) and without it (a
// provider made WithoutPlanPreview), and side by side the same queries
// run by hand: per node, the closure and its sizes from the local store,
// and one ssh running the host's side, 10 nodes at a time. It reports
// preview_ms = plan - plan without the summary, and ratio = preview_ms /
// by hand.
func BenchmarkPlanPreview(b *testing.B) {
	b.Setenv("NIX_CONFIG", nixtest.NixConfig)
	const n = 20
	cli := acctest.CLIs(b)[0]
	ok := nixtest.Behaviour{Kind: nixtest.Succeed}
	shared := map[string]int{}
	for i := range 240 {
		shared[fmt.Sprintf("lib%03d-1.%d", i, i)] = 2 << 10
	}
	spec := func(nginx string, units map[string]string, extra map[string]int) nixtest.SystemSpec {
		pkgs := map[string]int{"nginx-" + nginx: 1 << 20}
		for k, v := range shared {
			pkgs[k] = v
		}
		for k, v := range extra {
			pkgs[k] = v
		}
		return nixtest.SystemSpec{Behaviour: ok, Units: units, Packages: pkgs}
	}
	old := nixtest.System(b, spec("1.26.1", map[string]string{"nginx.service": "a", "cron.service": "c", "sshd.service": "s"}, nil))
	sys := nixtest.System(b, spec("1.26.2", map[string]string{"nginx.service": "b", "app.service": "p", "sshd.service": "s"}, map[string]int{"app-1.0": 4 << 20}))
	tgs := make([]*nixtest.Target, n)
	olds, news := make([]string, n), make([]string, n)
	for i := range tgs {
		tgs[i] = nixtest.NewTarget(b)
		tgs[i].Boot(b, old)
		olds[i], news[i] = old, sys
	}
	with := acctest.NewSession(b, cli, server())
	without := acctest.NewSession(b, cli, server(provider.WithoutPlanPreview()))
	with.WriteConfig(deploymentConfig(tgs, olds, "  parallelism = 10\n"))
	with.Run("init", "-input=false")
	with.Run("apply", "-auto-approve", "-input=false")
	state, err := os.ReadFile(filepath.Join(with.Dir, "terraform.tfstate"))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(without.Dir, "terraform.tfstate"), state, 0o600); err != nil {
		b.Fatal(err)
	}
	without.Run("init", "-input=false")
	for _, s := range []*acctest.Session{with, without} {
		s.WriteConfig(deploymentConfig(tgs, news, "  parallelism = 10\n"))
	}
	closure := storeLines(b, "--query", "--requisites", sys)
	stdin := "old\n" + strings.Join(closure, "\n") + "\n"
	var withSummary, withoutSummary, byHand time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		out, _ := with.Run("plan", "-input=false", "-no-color")
		withSummary += time.Since(start)
		if got := strings.Count(out, "copy 5 store paths"); got != n {
			b.Fatalf("%d nodes say they copy 5 store paths, want %d:\n%s", got, n, out)
		}

		start = time.Now()
		out, _ = without.Run("plan", "-input=false", "-no-color")
		withoutSummary += time.Since(start)
		if strings.Contains(out, "will switch") {
			b.Fatalf("the plan without the summary has one:\n%s", out)
		}

		start = time.Now()
		previewByHand(b, tgs, sys, stdin, 10)
		byHand += time.Since(start)
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(ms(withSummary), "plan_ms")
	b.ReportMetric(ms(withoutSummary), "plan_no_summary_ms")
	b.ReportMetric(ms(withSummary-withoutSummary), "preview_ms")
	b.ReportMetric(ms(byHand), "by_hand_ms")
	b.ReportMetric((withSummary-withoutSummary).Seconds()/byHand.Seconds(), "ratio")
}

// hostQueries is what a person would ask each host for the summary, on
// one ssh: the running system, the booted kernel, the units, which of the
// closure's paths (on standard input) the store lacks, the running
// system's closure with its sizes.
const hostQueries = `cur=$(readlink -f /run/current-system); echo "$cur"
for l in kernel initrd kernel-modules; do readlink -e "$cur/$l"; done
for f in "$cur"/etc/systemd/system/*; do echo "${f##*/} $(readlink -f "$f")"; done
read -r _; nix-store --check-validity --print-invalid $(cat)
olds=$(nix-store --query --requisites "$cur"); nix-store --query --size $olds`

// previewByHand runs the summary's queries by hand for each target, slots
// at a time: the local closure and sizes, then one ssh.
func previewByHand(b *testing.B, tgs []*nixtest.Target, sys, stdin string, slots int) {
	b.Helper()
	nixtest.AtMost(b, len(tgs), slots, func(i int) error {
		q := exec.Command("nix-store", "--query", "--requisites", sys)
		q.Env = nixtest.DeployerEnv()
		paths, err := q.Output()
		if err != nil {
			return err
		}
		sz := exec.Command("nix-store", append([]string{"--query", "--size"}, strings.Fields(string(paths))...)...)
		sz.Env = nixtest.DeployerEnv()
		if _, err := sz.Output(); err != nil {
			return err
		}
		ssh := exec.Command("ssh", append(tgs[i].SSHOptions(b), tgs[i].Destination(), hostQueries)...)
		ssh.Stdin = strings.NewReader(stdin)
		out, err := ssh.Output()
		if err == nil && strings.Count(string(out), "/nix/store/") < 4 {
			err = fmt.Errorf("the host answered %q", out)
		}
		return err
	})
}
