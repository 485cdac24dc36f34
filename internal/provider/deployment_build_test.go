package provider_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

var onThisMachine = regexp.MustCompile(`build \d+ derivations? on this machine: [^\n]*\bnixos-system-web1\n`)

var onTheHost = regexp.MustCompile(`build \d+ derivations? on the host \(what its store lacks\), once the derivations are copied there: [^\n]*\bnixos-system-web3\n  what the switch changes is known once the host has built the system\n`)

// From configurations (issue 23) through one CLI (AlternateCLIs): nodes whose systems
// are not built yet, given their derivations. The plan says what each
// switch will build; the apply builds them (on this machine, or on the
// host with build_on = "target"), a build failure failing only its node;
// the next plan retries exactly that node.
func TestDeploymentBuildsSystemsFromTheirDerivations(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			good := nixtest.Configuration{System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}}
			r := &nixtest.Repository{Dir: t.TempDir(), Configurations: map[string]nixtest.Configuration{
				"web1": good, "web2": {System: good.System, BuildFails: true}, "web3": good}}
			r.Write(t)
			systems, err := nixos.Nix{}.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var nodes strings.Builder
			var tgs []*nixtest.Target
			for i, sys := range systems {
				tg := nixtest.NewTarget(t)
				tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
				tgs = append(tgs, tg)
				buildOn := "null"
				if i == 2 {
					buildOn = `"target"`
				}
				fmt.Fprintf(&nodes, `    {
      name             = %q
      host             = %q
      system           = %q
      derivation       = %q
      build_on         = %s
      host_key         = %q
      user             = %q
      private_key_file = %q
      ssh_opts         = ["Port=%d", "IdentitiesOnly=yes"]
    },
`, sys.Name, tg.Host, sys.Path, sys.Derivation, buildOn, tg.HostKey, tg.User, tg.ClientKeyFile, tg.Port)
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(fmt.Sprintf(`
resource "fleet_ssh_deployment" "prod" {
  nodes = [
%s  ]
  verdict = {
    confirm_timeout = "3s"
    settle_timeout  = "2s"
  }
}
`, nodes.String()))
			s.Run("init", "-input=false")
			out, errOut := s.Run("plan", "-input=false", "-no-color")
			if want := "known once the system is built (build = true"; !strings.Contains(out+errOut, want) {
				t.Errorf("the plan does not say %q:\n%s%s", want, out, errOut)
			}
			// How many derivations a store lacks depends on what it already
			// holds (the test hosts share this machine's store, which earlier
			// tests may have filled); the system's own derivation is always
			// among them.
			if !onThisMachine.MatchString(out + errOut) {
				t.Errorf("the plan does not say what this machine will build for web1 (%s):\n%s%s", onThisMachine, out, errOut)
			}
			if !onTheHost.MatchString(out + errOut) {
				t.Errorf("the plan does not say what web3's host will build (%s):\n%s%s", onTheHost, out, errOut)
			}
			out, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(errOut, "DEPLOY FAILED for web2 (exit 1): the system did not build") || !strings.Contains(errOut, "fails to build, on purpose") {
				t.Fatalf("apply (exit %d):\n%s\n%s", code, out, errOut)
			}
			for i, want := range []string{systems[0].Path, "", systems[2].Path} {
				if want != "" && tgs[i].CurrentSystem() != want {
					t.Errorf("%s runs %s, want %s", systems[i].Name, tgs[i].CurrentSystem(), want)
				}
			}
			if calls, runs := tgs[1].Calls(), tgs[1].SystemdRuns(); len(calls)+len(runs) != 0 {
				t.Errorf("web2, whose system did not build, was deployed to: %q, %+v", calls, runs)
			}
			if got := fmt.Sprint(s.Values("fleet_ssh_deployment.prod")["actions"]); got != "map[web1:switch web2:failed web3:switch]" {
				t.Errorf("actions after the apply: %s", got)
			}
			out, _ = s.Run("plan", "-input=false", "-no-color")
			if !strings.Contains(out, `"web2" = "failed" -> "switch"`) || strings.Contains(out, `"web1" = "switch" -> "switch"`) {
				t.Errorf("the next plan does not retry exactly web2:\n%s", out)
			}
		})
	}
}

// A saved plan applies what was planned (issue 23): configurations read by
// fleet_nixos_systems feed the deployment; the plan is saved, a
// configuration is edited, and the saved plan's apply switches the host to
// the system the plan showed (the evaluation is not repeated), built from
// the planned derivation; the next plan switches to the edited one.
func TestDeploymentSavedPlanAppliesThePlannedSystem(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			r := &nixtest.Repository{Dir: t.TempDir(), Configurations: map[string]nixtest.Configuration{
				"web1": {System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}}}}
			r.Write(t)
			tg := nixtest.NewTarget(t)
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			s := acctest.NewSession(t, cli, server())
			s.Setenv("XDG_STATE_HOME", t.TempDir())
			s.WriteConfig(fmt.Sprintf(`
data "fleet_nixos_systems" "hosts" {
  flake = "path:%s"
}

resource "fleet_ssh_deployment" "prod" {
  nodes = [for name, sys in data.fleet_nixos_systems.hosts.systems : {
    name             = name
    host             = %q
    system           = sys.system
    derivation       = sys.derivation
    host_key         = %q
    user             = %q
    private_key_file = %q
    ssh_opts         = ["Port=%d", "IdentitiesOnly=yes"]
  }]
  verdict = {
    confirm_timeout = "3s"
    settle_timeout  = "2s"
  }
}
`, r.Dir, tg.Host, tg.HostKey, tg.User, tg.ClientKeyFile, tg.Port))
			s.Run("init", "-input=false")
			planned, err := nixos.Nix{}.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.Run("plan", "-input=false", "-out=saved.plan")
			edited := r.Configurations["web1"]
			edited.Revision++
			r.Configurations["web1"] = edited
			r.Write(t)
			s.Run("apply", "-input=false", "saved.plan")
			if got := tg.CurrentSystem(); got != planned[0].Path {
				t.Fatalf("the saved plan's apply switched the host to %s, want the planned %s", got, planned[0].Path)
			}
			now, err := nixos.Nix{}.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
			if err != nil || now[0].Path == planned[0].Path {
				t.Fatalf("the edit did not change web1's system: %+v, %v", now, err)
			}
			out, errOut := s.Run("plan", "-input=false", "-no-color")
			if !strings.Contains(out, now[0].Path) || !strings.Contains(out+errOut, "Node web1 will switch") {
				t.Errorf("the plan after the edit does not switch web1 to the edited system %s:\n%s%s", now[0].Path, out, errOut)
			}
		})
	}
}

// Ctrl-C while the apply builds a node's system, through the built
// provider and one CLI (AlternateCLIs): the apply ends at once, the node is recorded
// interrupted in its build step with nothing done on its host, and no
// builder runs on.
func TestDeploymentCtrlCDuringABuild(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			delay := nixtest.OwnBuildDelay(73 * time.Second) // a sleep no other test's builder has
			r := &nixtest.Repository{Dir: t.TempDir(), Configurations: map[string]nixtest.Configuration{
				"web1": {System: nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}}, BuildDelay: delay}}}
			r.Write(t)
			systems, err := nixos.Nix{}.Evaluate(context.Background(), nixos.Source{Flake: "path:" + r.Dir}, nil, nixos.EvaluateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(fmt.Sprintf(`
resource "fleet_ssh_deployment" "prod" {
  nodes = [{
    name             = "web1"
    host             = %q
    system           = %q
    derivation       = %q
    host_key         = %q
    user             = %q
    private_key_file = %q
    ssh_opts         = ["Port=%d", "IdentitiesOnly=yes"]
  }]
}
`, tg.Host, systems[0].Path, systems[0].Derivation, tg.HostKey, tg.User, tg.ClientKeyFile, tg.Port))
			_, _, after := s.InterruptWhen(func() bool { return nixtest.BuilderSleeps(delay) }, "apply", "-auto-approve", "-input=false", "-no-color")
			if after > 10*time.Second {
				t.Errorf("the apply ended %s after the interrupt", after)
			}
			rec := nodeRecord(t, s.Values("fleet_ssh_deployment.prod"), 0)
			if msg := fmt.Sprint(rec["message"]); rec["phase"] != "Failed" || !strings.Contains(msg, "interrupted during the build step") || !strings.Contains(msg, "nothing was done on the host") {
				t.Errorf("web1's record: %v: %s", rec["phase"], msg)
			}
			if len(tg.Calls()) != 0 || tg.CurrentSystem() != old {
				t.Errorf("the host was deployed to: %q, runs %s", tg.Calls(), tg.CurrentSystem())
			}
			if nixtest.BuilderSleeps(delay) {
				t.Errorf("the builder runs on after the interrupted apply")
			}
		})
	}
}
