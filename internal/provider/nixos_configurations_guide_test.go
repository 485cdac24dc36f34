package provider_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// guideFleet is the test bed of the NixOS configurations guide: a session
// with a guide's example directory copied in, a repository of
// NixOS-like configurations in its nixos/ (as the guide lays it out), and
// one NixOS-like target per configuration, booted into a first system and
// accepting one client key.
type guideFleet struct {
	s       *acctest.Session
	repo    *nixtest.Repository
	targets map[string]*nixtest.Target
	keyFile string
}

func newGuideFleet(t *testing.T, s *acctest.Session, example string, configs map[string]nixtest.Configuration) *guideFleet {
	t.Helper()
	if err := os.CopyFS(s.Dir, os.DirFS(example)); err != nil {
		t.Fatal(err)
	}
	s.Setenv("NIX_CONFIG", nixtest.NixConfig)
	client := sshtest.NewKey(t)
	f := &guideFleet{s: s, targets: map[string]*nixtest.Target{}, keyFile: client.WriteFile(t, t.TempDir()),
		repo: &nixtest.Repository{Dir: filepath.Join(s.Dir, "nixos"), Configurations: configs}}
	f.repo.Write(t)
	first := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	for name := range configs {
		tg := nixtest.NewTarget(t, nixtest.WithSSHDOptions(sshtest.WithAuthorizedKeys(client)))
		tg.Boot(t, first)
		f.targets[name] = tg
	}
	return f
}

// vars writes the session's terraform.tfvars.json.
func (f *guideFleet) vars(t *testing.T, v map[string]any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.s.Dir, "terraform.tfvars.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runs fails the test unless each named target runs its configuration's
// system, as the nix command line evaluates it.
func (f *guideFleet) runs(t *testing.T, names ...string) {
	t.Helper()
	r := &nixtest.Repository{Dir: f.repo.Dir}
	for _, name := range names {
		if want, _ := systemOf(t, r, name); f.targets[name].CurrentSystem() != want {
			t.Errorf("%s runs %s, want its configuration's system %s", name, f.targets[name].CurrentSystem(), want)
		}
	}
}

// output is the JSON of output name.
func (f *guideFleet) output(t *testing.T, name string) string {
	t.Helper()
	out, _ := f.s.Run("output", "-json", name)
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output %s = %q: %v", name, out, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// switches is, per node the plan output switches, its summary: the
// detail of its "Node <name> will switch" warning.
func switches(out string) map[string]string {
	got := map[string]string{}
	for _, part := range strings.Split(out, "Node ")[1:] {
		name, rest, ok := strings.Cut(part, " will switch:\n")
		if !ok || strings.ContainsAny(name, " \n") {
			continue
		}
		summary, _, _ := strings.Cut(rest, "\n\n")
		got[name] = summary
	}
	return got
}

// The guide's recommended wiring (examples/guides/nixos-configurations),
// applied as an operator would with the built provider, through both
// CLIs: from an empty state in one go, every host's system is built (on
// this machine, and web3's on its host, build_on = "target") and switched,
// and the next plan is empty. Then one configuration is edited: the plan
// switches exactly that host, saying what it will build; the CI plan
// (build_at_plan) builds it and says exactly what the switch copies; the
// apply switches it, and the plan after is empty.
func TestNixOSConfigurationsGuideAppliesInOneGo(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			spec := nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed},
				Units: map[string]string{"nginx.service": "[Service]\nExecStart=/bin/nginx\n"}, Packages: map[string]int{"nginx-1.26.2": 64 << 10}}
			configs := map[string]nixtest.Configuration{"web1": {System: spec}, "web2": {System: spec}, "web3": {System: spec}}
			f := newGuideFleet(t, acctest.NewBinarySession(t, cli, binary), "../../examples/guides/nixos-configurations", configs)
			var hosts []map[string]any
			for _, name := range []string{"web1", "web2", "web3"} {
				tg := f.targets[name]
				h := map[string]any{"name": name, "host": tg.Host, "port": tg.Port, "host_key": tg.HostKey}
				if name == "web3" {
					h["build_on"] = "target"
				}
				hosts = append(hosts, h)
			}
			f.vars(t, map[string]any{"hosts": hosts, "ssh_key_file": f.keyFile})

			out, errOut := f.s.Run("apply", "-auto-approve", "-input=false", "-no-color")
			f.runs(t, "web1", "web2", "web3")
			if got := f.output(t, "switched"); got != `["web1","web2","web3"]` {
				t.Errorf("switched = %s, want every host:\n%s\n%s", got, out, errOut)
			}
			web3, _ := systemOf(t, &nixtest.Repository{Dir: f.repo.Dir}, "web3")
			if _, err := os.Stat(web3); err == nil || !f.targets["web3"].HasPath(t, web3) {
				t.Errorf("web3's system (build_on = \"target\") was built here, or is not on its host")
			}
			f.s.WantNoChanges()

			// One configuration edited: web2's, whose system changes and
			// nothing else.
			edited := f.repo.Configurations["web2"]
			edited.Revision = 1
			f.repo.Configurations["web2"] = edited
			f.repo.Write(t)
			newWeb2, _ := systemOf(t, &nixtest.Repository{Dir: f.repo.Dir}, "web2")
			out, errOut = f.s.Run("plan", "-input=false", "-no-color")
			got := switches(out + errOut)
			if len(got) != 1 || !strings.Contains(got["web2"], "to   "+newWeb2) ||
				!strings.Contains(got["web2"], "build 1 derivation on this machine: nixos-system-web2") {
				t.Errorf("the plan after web2's edit switches %v, want web2 only, building its system:\n%s\n%s", got, out, errOut)
			}
			if !strings.Contains(out, "1 to change") {
				t.Errorf("the plan after web2's edit does not change the deployment:\n%s", out)
			}
			// The CI plan builds it, and then knows what the switch copies.
			out, errOut = f.s.Run("plan", "-input=false", "-no-color", "-var", "build_at_plan=true")
			got = switches(out + errOut)
			if len(got) != 1 || !strings.Contains(got["web2"], "  copy ") || strings.Contains(got["web2"], "build 1 derivation") {
				t.Errorf("the CI plan after web2's edit: %v, want web2's exact summary (what it copies), no build left:\n%s\n%s", got, out, errOut)
			}
			if _, err := os.Stat(newWeb2); err != nil {
				t.Errorf("the CI plan did not build web2's system: %v", err)
			}
			f.s.Run("apply", "-auto-approve", "-input=false")
			f.runs(t, "web1", "web2", "web3")
			f.s.WantNoChanges()
		})
	}
}

// The guide's keep_going wiring (examples/guides/nixos-keep-going): every
// configuration of the flake is a host reached by name through an
// ssh_config_file that holds the pins. From an empty state, through one
// CLIs, a configuration that does not evaluate stays out of the
// deployment, named in a warning and in not_deployed; one that does not
// build fails its own node only; the good one is switched. Fixed, the two
// deploy, and the plan after is empty.
func TestNixOSConfigurationsGuideKeepsGoing(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			good := nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}}
			f := newGuideFleet(t, acctest.NewBinarySession(t, cli, binary), "../../examples/guides/nixos-keep-going", map[string]nixtest.Configuration{
				"web1": good,
				"web2": {System: good.System, EvalError: "The option `services.ngnix' does not exist."},
				"web3": {System: good.System, BuildFails: true},
			})
			dir := t.TempDir()
			var config, known strings.Builder
			for _, name := range []string{"web1", "web2", "web3"} {
				tg := f.targets[name]
				fmt.Fprintf(&config, "Host %s\n  HostName %s\n  Port %d\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n",
					name, tg.Host, tg.Port, filepath.Join(dir, "known_hosts"))
				fmt.Fprintf(&known, "[%s]:%d %s\n", tg.Host, tg.Port, tg.HostKey)
			}
			for file, text := range map[string]string{"ssh_config": config.String(), "known_hosts": known.String()} {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			f.vars(t, map[string]any{"ssh_config_file": filepath.Join(dir, "ssh_config")})
			f.s.Setenv("FLEET_PRIVATE_KEY_FILE", f.keyFile)

			out, errOut, code := f.s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for web3 (exit 1): the system did not build") {
				t.Fatalf("apply (exit %d), want web3's build to fail it:\n%s\n%s", code, out, errOut)
			}
			if !wrapped("Configuration web2 of flake path:./nixos#nixosConfigurations: error: The option `services.ngnix' does not exist.").MatchString(out + errOut) {
				t.Errorf("the apply does not warn about web2, naming Nix's error:\n%s\n%s", out, errOut)
			}
			f.runs(t, "web1")
			if calls := f.targets["web2"].Calls(); len(calls) != 0 {
				t.Errorf("web2, whose configuration does not evaluate, was deployed to: %q", calls)
			}
			if got := f.output(t, "not_deployed"); !strings.Contains(got, `"web2":`) || strings.Contains(got, "web1") || strings.Contains(got, "web3") {
				t.Errorf("not_deployed = %s, want web2 only", got)
			}
			if got := fmt.Sprint(f.s.Values("fleet_ssh_deployment.all")["actions"]); got != "map[web1:switch web3:failed]" {
				t.Errorf("actions = %s, want web1 switched, web3 failed, web2 not in the deployment", got)
			}

			f.repo.Configurations["web2"], f.repo.Configurations["web3"] = good, good
			f.repo.Write(t)
			f.s.Run("apply", "-auto-approve", "-input=false")
			f.runs(t, "web1", "web2", "web3")
			if got := f.output(t, "not_deployed"); got != "{}" {
				t.Errorf("not_deployed = %s after the fixes, want none", got)
			}
			f.s.WantNoChanges()
		})
	}
}

// The guide's wiring with remote builders, as the guide configures them:
// this machine's Nix may not build (max-jobs = 0) and names a build
// machine in builders (a NixOS-like host, reached with NIX_SSHOPTS). The
// apply builds the system there, copies it back, and switches the host.
func TestNixOSConfigurationsGuideBuildsOnRemoteBuilders(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			good := nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}}
			f := newGuideFleet(t, acctest.NewBinarySession(t, cli, binary), "../../examples/guides/nixos-configurations", map[string]nixtest.Configuration{"web1": good})
			tg := f.targets["web1"]
			f.vars(t, map[string]any{"ssh_key_file": f.keyFile,
				"hosts": []map[string]any{{"name": "web1", "host": tg.Host, "port": tg.Port, "host_key": tg.HostKey}}})
			builder := nixtest.NewTarget(t)
			known := filepath.Join(t.TempDir(), "known_hosts")
			if err := os.WriteFile(known, []byte(fmt.Sprintf("[%s]:%d %s\n", builder.Host, builder.Port, builder.HostKey)), 0o600); err != nil {
				t.Fatal(err)
			}
			f.s.Setenv("NIX_CONFIG", nixtest.NixConfig+fmt.Sprintf("max-jobs = 0\nbuilders = ssh://%s %s %s 1 1\n", builder.Destination(), nixtest.Platform(t), builder.ClientKeyFile))
			f.s.Setenv("NIX_SSHOPTS", fmt.Sprintf("-p %d -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes", builder.Port, known))

			f.s.Run("apply", "-auto-approve", "-input=false")
			f.runs(t, "web1")
			web1, _ := systemOf(t, &nixtest.Repository{Dir: f.repo.Dir}, "web1")
			if !builder.HasPath(t, web1) {
				t.Errorf("web1's system is not in the build machine's store: it was not built there")
			}
			f.s.WantNoChanges()
		})
	}
}

// plannedNodes is, per node of the deployments a saved plan holds, its
// system and derivation, as show -json prints them.
func plannedNodes(t *testing.T, s *acctest.Session, plan string) map[string][2]string {
	t.Helper()
	out, _ := s.Run("show", "-json", plan)
	var shown struct {
		ResourceChanges []struct {
			Type   string `json:"type"`
			Change struct {
				After struct {
					Nodes []struct{ Name, System, Derivation string } `json:"nodes"`
				} `json:"after"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("show -json %s: %v", plan, err)
	}
	nodes := map[string][2]string{}
	for _, rc := range shown.ResourceChanges {
		if rc.Type == "fleet_ssh_deployment" {
			for _, n := range rc.Change.After.Nodes {
				nodes[n.Name] = [2]string{n.System, n.Derivation}
			}
		}
	}
	return nodes
}

// freshRunner makes this machine's store look like a fresh CI runner's
// with the same checkout, for the planned nodes: neither their systems
// nor their derivations are in it (their inputs, shared with other
// systems, stay).
func freshRunner(t *testing.T, nodes map[string][2]string) {
	t.Helper()
	for name, n := range nodes {
		for _, p := range n {
			if _, err := os.Stat(p); err != nil {
				continue
			}
			cmd := exec.Command("nix-store", "--delete", p)
			cmd.Env = nixtest.DeployerEnv()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("forgetting %s's %s: %v\n%s", name, p, err, out)
			}
		}
	}
}

// runJob runs a CI job script of the guide in the session's directory,
// with the session's CLI as terraform, and returns its output and exit
// code.
func runJob(t *testing.T, s *acctest.Session, script string, args ...string) (string, int) {
	t.Helper()
	bin := t.TempDir()
	if err := os.Symlink(s.CLI.Path, filepath.Join(bin, "terraform")); err != nil {
		t.Fatal(err)
	}
	cmd := s.Command(filepath.Join(s.Dir, script), args...)
	cmd.Env = append(cmd.Env, "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("%s did not run: %v\n%s", script, err, out)
	return "", -1
}

// A saved plan applied by another job on a fresh runner, as the guide
// says, through both CLIs. Without the plan's derivations the apply stops
// before it deploys anything, naming each node and what to carry, and
// leaves that plan stale. With
// the guide's jobs (plan-job.sh keeps the derivations beside the plan,
// apply-job.sh brings them in), the apply builds and switches what was
// planned, even though a configuration changed since the plan.
func TestNixOSConfigurationsGuideSavedPlanOnAnotherRunner(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			good := nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}}
			// A CI runner: the provider installed where both CLIs find
			// it, so that the jobs' init works as it does there.
			s := acctest.NewPlainSession(t, cli)
			home := t.TempDir()
			dir := filepath.Join(home, ".terraform.d", "plugins", cli.Host, "fleetops", "fleet", "0.1.0", runtime.GOOS+"_"+runtime.GOARCH)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(binary)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "terraform-provider-fleet_v0.1.0"), b, 0o755); err != nil {
				t.Fatal(err)
			}
			s.Setenv("HOME", home)
			f := newGuideFleet(t, s, "../../examples/guides/nixos-configurations", map[string]nixtest.Configuration{"web1": good, "web2": good})
			var hosts []map[string]any
			for _, name := range []string{"web1", "web2"} {
				tg := f.targets[name]
				hosts = append(hosts, map[string]any{"name": name, "host": tg.Host, "port": tg.Port, "host_key": tg.HostKey})
			}
			f.vars(t, map[string]any{"hosts": hosts, "ssh_key_file": f.keyFile})
			booted := f.targets["web1"].CurrentSystem()

			// A plan saved here, applied where its derivations are not.
			f.s.Run("init", "-input=false")
			f.s.Run("plan", "-input=false", "-out=bare.tfplan")
			freshRunner(t, plannedNodes(t, f.s, "bare.tfplan"))
			out, errOut, code := f.s.ExitCode("apply", "-input=false", "-no-color", "bare.tfplan")
			for _, want := range []string{"Derivation missing", "node web1: neither the system", "node web2: neither the system", "nix copy --derivation"} {
				if code == 0 || !wrapped(want).MatchString(errOut) {
					t.Errorf("the saved plan applied without its derivations (exit %d) does not say %q:\n%s\n%s", code, want, out, errOut)
				}
			}
			for name, tg := range f.targets {
				if tg.CurrentSystem() != booted || len(tg.Calls()) != 0 {
					t.Errorf("%s was deployed to by an apply that lacked its derivation: runs %s, calls %q", name, tg.CurrentSystem(), tg.Calls())
				}
			}

			// As the guide says: that plan is stale now, whatever is
			// carried; plan again.
			if _, errOut, code := f.s.ExitCode("apply", "-input=false", "-no-color", "bare.tfplan"); code == 0 || !strings.Contains(errOut, "Saved plan is stale") {
				t.Errorf("the saved plan after its failed apply (exit %d) is not refused as stale:\n%s", code, errOut)
			}
			// The guide's jobs: the plan job keeps the derivations, the
			// apply job on a fresh runner brings them in.
			if out, code := runJob(t, f.s, "plan-job.sh"); code != 0 {
				t.Fatalf("plan-job.sh exited %d:\n%s", code, out)
			}
			planned := plannedNodes(t, f.s, "tfplan")
			freshRunner(t, planned)
			edited := f.repo.Configurations["web2"]
			edited.Revision = 1
			f.repo.Configurations["web2"] = edited
			f.repo.Write(t)
			if out, code := runJob(t, f.s, "apply-job.sh"); code != 0 {
				t.Fatalf("apply-job.sh exited %d:\n%s", code, out)
			}
			for name, n := range planned {
				if got := f.targets[name].CurrentSystem(); got != n[0] {
					t.Errorf("%s runs %s after the saved plan, want the planned %s", name, got, n[0])
				}
			}
			// web2's edit made after the plan is the next plan's.
			f.s.Run("apply", "-auto-approve", "-input=false")
			f.runs(t, "web1", "web2")
			if f.targets["web2"].CurrentSystem() == planned["web2"][0] {
				t.Errorf("web2 still runs the system planned before its edit")
			}
			f.s.WantNoChanges()
		})
	}
}
