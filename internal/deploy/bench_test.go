package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// BenchmarkDeploy deploys n NixOS-like targets with the engine and, side
// by side, does the same work by hand over one master connection per node
// (nix-copy-closure, nix-env --set, switch-to-configuration test,
// readlink, switch-to-configuration boot). It reports SSH connections the
// targets accepted per deployed node (target 2: the master and the
// verdict's new one) and the engine's wall time against the raw commands'
// (target at most 1.2), and against the raw commands plus the one new
// login the verdict needs, which no master connection can replace.
func BenchmarkDeploy(b *testing.B) {
	for _, n := range []int{1, 5, 20} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			b.Setenv("NIX_CONFIG", nixtest.NixConfig)
			var engine, raw, rawLogin time.Duration
			var conns int
			for range b.N {
				b.StopTimer()
				tgs := make([]*nixtest.Target, n)
				old := nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
				for i := range tgs {
					tgs[i] = nixtest.NewTarget(b)
					tgs[i].Boot(b, old)
				}
				nodes := make([]deploy.Target, n)
				for i, tg := range tgs {
					nodes[i] = benchTarget(tg, "n"+strconv.Itoa(i), nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed}))
				}
				d := benchDeployer(b)
				before := accepted(tgs)
				b.StartTimer()
				start := time.Now()
				res := d.Deploy(context.Background(), nodes, nil)
				engine += time.Since(start)
				b.StopTimer()
				for _, r := range res {
					if r.Phase != deploy.PhaseSucceeded {
						b.Fatalf("%s: %s %s", r.Name, r.Phase, r.Message)
					}
				}
				conns += accepted(tgs) - before

				// The same work by hand, to fresh systems.
				for _, tg := range tgs {
					tg.Boot(b, old)
				}
				systems := make([]string, n)
				for i := range systems {
					systems[i] = nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
				}
				start = time.Now()
				for i, tg := range tgs {
					rawDeploy(b, tg, systems[i], false)
				}
				raw += time.Since(start)
				for i, tg := range tgs {
					if tg.BootEntry() != systems[i] {
						b.Fatalf("raw deploy of node %d did not finish", i)
					}
				}

				// Again, with the verdict's new login by hand too.
				for i, tg := range tgs {
					tg.Boot(b, old)
					systems[i] = nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
				}
				start = time.Now()
				for i, tg := range tgs {
					rawDeploy(b, tg, systems[i], true)
				}
				rawLogin += time.Since(start)
			}
			b.ReportMetric(float64(conns)/float64(b.N*n), "conns_per_node")
			b.ReportMetric(float64(engine.Milliseconds())/float64(b.N), "engine_ms")
			b.ReportMetric(float64(raw.Milliseconds())/float64(b.N), "raw_ms")
			b.ReportMetric(engine.Seconds()/raw.Seconds(), "ratio")
			b.ReportMetric(float64(rawLogin.Milliseconds())/float64(b.N), "raw_login_ms")
			b.ReportMetric(engine.Seconds()/rawLogin.Seconds(), "ratio_login")
		})
	}
}

func accepted(tgs []*nixtest.Target) int {
	n := 0
	for _, tg := range tgs {
		n += tg.AcceptedConnections()
	}
	return n
}

func benchTarget(tg *nixtest.Target, name, system string) deploy.Target {
	return deploy.Target{System: system, Settings: deploy.Settings{Name: name, Host: tg.Host, User: tg.User, PrivateKeyFile: tg.ClientKeyFile,
		HostKey: tg.HostKey, SSHOpts: []string{"Port=" + strconv.Itoa(tg.Port), "IdentitiesOnly=yes"}}}
}

func benchDeployer(b *testing.B) *deploy.Deployer {
	control, err := os.MkdirTemp("", "fb") //nolint:usetesting // t.TempDir() is too long for a socket path
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(control) })
	return &deploy.Deployer{
		Transport: &deploy.Transport{KnownHostsFile: filepath.Join(b.TempDir(), "kh"), ControlDir: control},
		Options:   deploy.Options{Goal: deploy.GoalSwitch, Holder: "bench", Verdict: deploy.VerdictSpec{ConfirmTimeout: 5 * time.Second, SettleTimeout: 2 * time.Second}},
	}
}

// rawDeploy is what an operator would type, over one master connection;
// with login, a new login after the activation too, as the verdict makes.
func rawDeploy(b *testing.B, tg *nixtest.Target, system string, login bool) {
	control, err := os.MkdirTemp("", "fr") //nolint:usetesting // t.TempDir() is too long for a socket path
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(control)
	opts := append([]string{"-o", "ControlPath=" + filepath.Join(control, "m")}, tg.SSHOptions(b)...)
	run := func(env []string, name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	env := nixtest.DeployerEnv()
	run(env, "ssh", append(append([]string{"-o", "ControlMaster=yes", "-o", "ControlPersist=yes", "-f", "-N"}, opts...), tg.Destination())...)
	defer func() {
		_ = exec.Command("ssh", append(append([]string{}, opts...), "-O", "exit", tg.Destination())...).Run()
	}()
	sshopts := ""
	for _, o := range opts {
		sshopts += o + " "
	}
	run(append(env, "NIX_SSHOPTS="+sshopts), "nix-copy-closure", "--to", "--gzip", "--use-substitutes", tg.Destination(), system)
	for _, remote := range []string{
		"nix-env -p /nix/var/nix/profiles/system --set " + system,
		system + "/bin/switch-to-configuration test",
		"readlink -f /run/current-system",
		system + "/bin/switch-to-configuration boot",
	} {
		run(env, "ssh", append(append([]string{}, opts...), tg.Destination(), remote)...)
		if login && strings.HasSuffix(remote, " test") {
			run(env, "ssh", append(append([]string{"-o", "ControlPath=none"}, tg.SSHOptions(b)...), tg.Destination(), "true")...)
		}
	}
}

// BenchmarkRollout deploys n targets whose activation takes 3 s, one node
// at a time and with parallelism p, side by side in one run. It reports
// both wall times, their ratio against the ideal ceil(n/p)/n (target: at
// most 1.3 times it), the most activations that ran at once (at most p)
// and the SSH connections per node (2, as in a serial rollout).
func BenchmarkRollout(b *testing.B) {
	for _, c := range []struct{ n, p int }{{12, 4}, {24, 8}} {
		b.Run(fmt.Sprintf("nodes=%d/parallelism=%d", c.n, c.p), func(b *testing.B) {
			b.Setenv("NIX_CONFIG", nixtest.NixConfig)
			old := nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
			tgs := make([]*nixtest.Target, c.n)
			for i := range tgs {
				tgs[i] = nixtest.NewTarget(b)
			}
			var serial, parallel time.Duration
			var most, conns int
			run := func(p int) time.Duration {
				b.StopTimer()
				defer b.StartTimer()
				nodes := make([]deploy.Target, c.n)
				for i, tg := range tgs {
					tg.Boot(b, old)
					nodes[i] = benchTarget(tg, "n"+strconv.Itoa(i), nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: 3 * time.Second}))
				}
				d := benchDeployer(b)
				d.Options.Parallelism = p
				acts := &activations{open: map[string]time.Time{}}
				d.Options.Log = func(e deploy.Event) { acts.see(e) }
				before := accepted(tgs)
				start := time.Now()
				res := d.Deploy(context.Background(), nodes, nil)
				took := time.Since(start)
				for _, r := range res {
					if r.Phase != deploy.PhaseSucceeded {
						b.Fatalf("%s: %s %s", r.Name, r.Phase, r.Message)
					}
				}
				if p > 1 {
					most = max(most, acts.most())
					conns += accepted(tgs) - before
				}
				return took
			}
			for range b.N {
				serial += run(1)
				parallel += run(c.p)
			}
			ideal := float64((c.n+c.p-1)/c.p) / float64(c.n)
			ratio := parallel.Seconds() / serial.Seconds()
			b.ReportMetric(float64(serial.Milliseconds())/float64(b.N), "serial_ms")
			b.ReportMetric(float64(parallel.Milliseconds())/float64(b.N), "parallel_ms")
			b.ReportMetric(ratio, "ratio")
			b.ReportMetric(ratio/ideal, "ratio_vs_ideal")
			b.ReportMetric(float64(most), "most_at_once")
			b.ReportMetric(float64(conns)/float64(b.N*c.n), "conns_per_node")
		})
	}
}

// BenchmarkReadCurrent reads the running system of n hosts, 10 at a time,
// as a deployment's refresh does, and side by side OpenSSH reading
// /run/current-system of the same hosts 10 at a time: the engine's share
// of a plan's reads (ratio, target near 1).
func BenchmarkReadCurrent(b *testing.B) {
	const slots = 10
	for _, n := range []int{24} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			b.Setenv("NIX_CONFIG", nixtest.NixConfig)
			sys := nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
			tgs := make([]*nixtest.Target, n)
			nodes := make([]deploy.Target, n)
			args := make([][]string, n)
			for i := range tgs {
				tgs[i] = nixtest.NewTarget(b)
				tgs[i].Boot(b, sys)
				nodes[i] = benchTarget(tgs[i], "n"+strconv.Itoa(i), sys)
				args[i] = append(tgs[i].SSHOptions(b), tgs[i].Destination(), "readlink", "/run/current-system")
			}
			d := benchDeployer(b)
			var engine, openssh time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				nixtest.AtMost(b, n, slots, func(i int) error {
					c, err := d.ReadCurrent(context.Background(), nodes[i].Settings)
					if err == nil && c.System != sys {
						err = fmt.Errorf("read %q", c.System)
					}
					return err
				})
				engine += time.Since(start)
				start = time.Now()
				nixtest.AtMost(b, n, slots, func(i int) error {
					out, err := exec.Command("ssh", args[i]...).Output()
					if err == nil && strings.TrimSpace(string(out)) != sys {
						err = fmt.Errorf("read %q", out)
					}
					return err
				})
				openssh += time.Since(start)
			}
			b.ReportMetric(float64(engine.Milliseconds())/float64(b.N), "engine_ms")
			b.ReportMetric(float64(openssh.Milliseconds())/float64(b.N), "openssh_ms")
			b.ReportMetric(engine.Seconds()/openssh.Seconds(), "ratio")
		})
	}
}

// BenchmarkRolloutBuilds deploys n nodes whose systems are not built yet
// (each a build of about a second, Nix's max-jobs 4), with parallelism 4,
// and side by side builds n other such systems with one nix-store
// --realise by hand. It reports how long the rollout took to build every
// system (from its start to the last build step's end) against the
// builds by hand (target: at most 1.1).
func BenchmarkRolloutBuilds(b *testing.B) {
	for _, n := range []int{8} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nixConfig := nixtest.NixConfig + "max-jobs = 4\n"
			b.Setenv("NIX_CONFIG", nixConfig)
			old := nixtest.Closure(b, nixtest.Behaviour{Kind: nixtest.Succeed})
			tgs := make([]*nixtest.Target, n)
			for i := range tgs {
				tgs[i] = nixtest.NewTarget(b)
			}
			systems := func() []nixos.System {
				configs := map[string]nixtest.Configuration{}
				for i := range n {
					configs[fmt.Sprintf("n%d", i)] = nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}, BuildDelay: time.Second}
				}
				r := &nixtest.Repository{Dir: b.TempDir(), Configurations: configs}
				r.Write(b)
				s, err := nixos.Nix{}.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
			var rollout, byHand time.Duration
			for range b.N {
				b.StopTimer()
				nodes := make([]deploy.Target, n)
				for i, s := range systems() {
					tgs[i].Boot(b, old)
					nodes[i] = benchTarget(tgs[i], s.Name, s.Path)
					nodes[i].Derivation = s.Derivation
				}
				d := benchDeployer(b)
				d.Options.Parallelism = 4
				var mu sync.Mutex
				var lastBuild time.Time
				d.Options.Log = func(e deploy.Event) {
					if e.Kind == deploy.EventStepEnded && e.Step == deploy.StepBuild {
						mu.Lock()
						lastBuild = time.Now()
						mu.Unlock()
					}
				}
				start := time.Now()
				for _, r := range d.Deploy(context.Background(), nodes, nil) {
					if r.Phase != deploy.PhaseSucceeded {
						b.Fatalf("%s: %s %s", r.Name, r.Phase, r.Message)
					}
				}
				rollout += lastBuild.Sub(start)

				args := []string{"--realise"}
				for _, s := range systems() {
					args = append(args, s.Derivation)
				}
				start = time.Now()
				if out, err := exec.Command("nix-store", args...).CombinedOutput(); err != nil {
					b.Fatalf("nix-store --realise: %v\n%s", err, out)
				}
				byHand += time.Since(start)
			}
			b.ReportMetric(float64(rollout.Milliseconds())/float64(b.N), "rollout_builds_ms")
			b.ReportMetric(float64(byHand.Milliseconds())/float64(b.N), "by_hand_ms")
			b.ReportMetric(rollout.Seconds()/byHand.Seconds(), "ratio")
		})
	}
}
