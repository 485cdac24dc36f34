package provider_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// BenchmarkDeploymentPlan plans a converged deployment of n NixOS-like
// hosts, each behind its own sshd, with the built provider through
// Terraform, and side by side in the same run: an empty configuration's
// plan, and OpenSSH reading /run/current-system of the same hosts at the
// provider's default probe_concurrency (10), as `xargs -P 10` would. It
// reports plan_minus_empty / openssh (target: at most 1.5), the plan's
// logins per host (target: 1), and a plan without refresh, which reads no
// host: what the plan costs besides the reads.
func BenchmarkDeploymentPlan(b *testing.B) {
	b.Setenv("NIX_CONFIG", nixtest.NixConfig)
	binary := acctest.ProviderBinary(b)
	cli := acctest.CLIs(b)[0]
	empty := acctest.NewBinarySession(b, cli, binary)
	empty.WriteConfig("terraform {}\n")
	for _, n := range []int{24, 96} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			sys := nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
			tgs := make([]*nixtest.Target, n)
			systems := make([]string, n)
			for i := range tgs {
				tgs[i] = nixtest.NewTarget(b)
				tgs[i].Boot(b, sys)
				systems[i] = sys
			}
			s := acctest.NewBinarySession(b, cli, binary)
			s.WriteConfig(deploymentConfig(tgs, systems, "  parallelism = 10\n"))
			s.Run("apply", "-auto-approve", "-input=false")
			opts := make([][]string, n)
			for i, tg := range tgs {
				opts[i] = append(tg.SSHOptions(b), tg.Destination(), "readlink", "/run/current-system")
			}
			var plan, noRefresh, emptyPlan, openssh time.Duration
			var logins int
			b.ResetTimer()
			for range b.N {
				before := acceptedBy(tgs)
				start := time.Now()
				s.Run("plan", "-input=false", "-detailed-exitcode")
				plan += time.Since(start)
				logins += acceptedBy(tgs) - before

				start = time.Now()
				s.Run("plan", "-input=false", "-refresh=false")
				noRefresh += time.Since(start)

				start = time.Now()
				empty.Run("plan", "-input=false")
				emptyPlan += time.Since(start)

				start = time.Now()
				readAll(b, opts, sys, 10)
				openssh += time.Since(start)
			}
			ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
			b.ReportMetric(ms(plan), "plan_ms")
			b.ReportMetric(ms(noRefresh), "plan_no_refresh_ms")
			b.ReportMetric(ms(emptyPlan), "empty_plan_ms")
			b.ReportMetric(ms(openssh), "openssh_ms")
			b.ReportMetric((plan-emptyPlan).Seconds()/openssh.Seconds(), "ratio")
			b.ReportMetric(float64(logins)/float64(b.N*n), "logins_per_host")
		})
	}
}

func acceptedBy(tgs []*nixtest.Target) int {
	n := 0
	for _, tg := range tgs {
		n += tg.AcceptedConnections()
	}
	return n
}

// readAll runs ssh with each argument list, at most slots at once, and
// checks each printed want.
func readAll(b *testing.B, args [][]string, want string, slots int) {
	b.Helper()
	nixtest.AtMost(b, len(args), slots, func(i int) error {
		out, err := exec.Command("ssh", args[i]...).Output()
		if err == nil && strings.TrimSpace(string(out)) != want {
			err = fmt.Errorf("read %q, want %q", out, want)
		}
		return err
	})
}

// BenchmarkDeploymentPlanKeys plans the same converged fleet of n
// NixOS-like hosts twice in each round, side by side: a deployment with no
// keys, and one with a key on every host, whose refresh reads each key's
// file and whose plan asks each host for its digest. It reports
// keys_ratio = the plan with keys / the plan without (target: at most 1.3,
// the key look riding on the refresh's logins), and the logins per host
// of the plan with keys (target: 1).
func BenchmarkDeploymentPlanKeys(b *testing.B) {
	b.Setenv("NIX_CONFIG", nixtest.NixConfig)
	binary := acctest.ProviderBinary(b)
	cli := acctest.CLIs(b)[0]
	const n = 24
	sys := nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
	tgs := make([]*nixtest.Target, n)
	systems := make([]string, n)
	for i := range tgs {
		tgs[i] = nixtest.NewTarget(b)
		tgs[i].Boot(b, sys)
		systems[i] = sys
	}
	plain := acctest.NewBinarySession(b, cli, binary)
	plain.WriteConfig(deploymentConfig(tgs, systems, "  parallelism = 10\n"))
	plain.Run("apply", "-auto-approve", "-input=false")
	keyed := acctest.NewBinarySession(b, cli, binary)
	keyed.WriteConfig(deploymentConfig(tgs, systems, "  parallelism = 10\n  keys = { \"db-password\" = {} }\n  key_contents_wo = { \"db-password\" = \"bench\" }\n"))
	keyed.Run("apply", "-auto-approve", "-input=false")
	var withKeys, without time.Duration
	var logins int
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		plain.Run("plan", "-input=false", "-detailed-exitcode")
		without += time.Since(start)
		before := acceptedBy(tgs)
		start = time.Now()
		keyed.Run("plan", "-input=false", "-detailed-exitcode")
		withKeys += time.Since(start)
		logins += acceptedBy(tgs) - before
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(ms(without), "plan_ms")
	b.ReportMetric(ms(withKeys), "plan_keys_ms")
	b.ReportMetric(withKeys.Seconds()/without.Seconds(), "keys_ratio")
	b.ReportMetric(float64(logins)/float64(b.N*n), "logins_per_host")
}
