package provider_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/systemdtest"
)

// kernelSystem is a NixOS-like system with kernel version kernel, a unit
// of its own (so that each is another system), and behaviour b.
func kernelSystem(t *testing.T, b nixtest.Behaviour, kernel, unit string) string {
	return nixtest.System(t, nixtest.SystemSpec{Behaviour: b, Kernel: kernel, Units: map[string]string{"app.service": unit}})
}

// Issue 39 through both CLIs: a kernel upgrade with reboot =
// "when-required". The plan names the nodes that will reboot and why; the
// apply boots n1 into its new system (Succeeded, booted into it, Rebooted
// True), boots n2, whose new system fails a unit, back into the system
// before (RolledBack, two boots), and never reboots n3, which is held.
func TestDeploymentRebootsForAKernelUpgrade(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			ok := nixtest.Behaviour{Kind: nixtest.Succeed}
			before := kernelSystem(t, ok, "6.6.50", "1")
			good := kernelSystem(t, ok, "6.6.58", "2")
			bad := kernelSystem(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"app.service"}}, "6.6.58", "3")
			tgs := []*nixtest.Target{nixtest.NewTarget(t), nixtest.NewTarget(t), nixtest.NewTarget(t)}
			for _, tg := range tgs {
				tg.Boot(t, before)
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(tgs, []string{before, before, before}, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")

			s.WriteConfig(deploymentConfig(tgs, []string{good, bad, good}, "  reboot = \"when-required\"\n  reboot_timeout = \"60s\"\n  hold = [\"n3\"]\n"))
			plan, _ := s.Run("plan", "-input=false", "-no-color")
			if !strings.Contains(plan, "Nodes n1, n2 will reboot") || !strings.Contains(plan, "n1, n2: kernel, initrd, kernel-modules change") {
				t.Errorf("the plan does not name the reboots:\n%s", plan)
			}
			_, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(strings.Join(strings.Fields(errOut), " "), "the boot entry was put back to "+before+" and the host rebooted into it") {
				t.Errorf("the apply: exit %d\n%s", code, errOut)
			}
			v := s.Values("fleet_ssh_deployment.prod")
			n1, n2, n3 := nodeRecordOf(t, v, "n1"), nodeRecordOf(t, v, "n2"), nodeRecordOf(t, v, "n3")
			if tgs[0].BootedSystem() != good || tgs[0].CurrentSystem() != good || tgs[0].BootEntry() != good || len(tgs[0].Boots()) != 1 {
				t.Errorf("n1: booted %s, runs %s, boot entry %s, %d boots; want %s, once", tgs[0].BootedSystem(), tgs[0].CurrentSystem(), tgs[0].BootEntry(), len(tgs[0].Boots()), good)
			}
			if n1["phase"] != "Succeeded" || n1["boot_system"] != good || conditionOf(n1, "Rebooted")["status"] != "True" {
				t.Errorf("n1's record: phase %v, boot_system %v, Rebooted %v", n1["phase"], n1["boot_system"], conditionOf(n1, "Rebooted"))
			}
			if tgs[1].BootedSystem() != before || tgs[1].CurrentSystem() != before || tgs[1].BootEntry() != before || len(tgs[1].Boots()) != 2 {
				t.Errorf("n2: booted %s, runs %s, boot entry %s, %d boots; want %s, twice", tgs[1].BootedSystem(), tgs[1].CurrentSystem(), tgs[1].BootEntry(), len(tgs[1].Boots()), before)
			}
			if n2["phase"] != "RolledBack" || n2["current_system"] != before || n2["boot_system"] != before {
				t.Errorf("n2's record: phase %v, current %v, boot %v", n2["phase"], n2["current_system"], n2["boot_system"])
			}
			if len(tgs[2].Boots()) != 0 || n3["phase"] != "Skipped" {
				t.Errorf("n3, held: %d boots, phase %v", len(tgs[2].Boots()), n3["phase"])
			}
		})
	}
}

// A host that does not come back within reboot_timeout, through both
// CLIs: the apply records what it knows (Unknown, nothing said of what the
// host runs), and once the host is back, the next refresh settles the
// record; the apply after it finishes the node without another reboot
// (it booted the new kernel already).
func TestDeploymentRebootHostLateSettledByRefresh(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			ok := nixtest.Behaviour{Kind: nixtest.Succeed}
			before, next := kernelSystem(t, ok, "6.6.50", "1"), kernelSystem(t, ok, "6.6.58", "2")
			tg := nixtest.NewTarget(t)
			tg.Boot(t, before)
			tg.SetRebootDown(20 * time.Second)
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{next}, "  reboot = \"when-required\"\n  reboot_timeout = \"10s\"\n"))
			s.Run("init", "-input=false")
			_, errOut, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 || !strings.Contains(strings.Join(strings.Fields(errOut), " "), "did not come back within reboot_timeout (10s)") {
				t.Fatalf("the apply: exit %d\n%s", code, errOut)
			}
			rec := nodeRecordOf(t, s.Values("fleet_ssh_deployment.prod"), "n1")
			if rec["phase"] != "Unknown" || rec["current_system"] != "" {
				t.Errorf("the record of a host that did not come back: phase %v, current %v", rec["phase"], rec["current_system"])
			}
			for end := time.Now().Add(30 * time.Second); (len(tg.Boots()) == 0 || tg.Boots()[0].Up.IsZero()) && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			}
			out, _ := s.Run("apply", "-refresh-only", "-auto-approve", "-input=false", "-no-color")
			rec = nodeRecordOf(t, s.Values("fleet_ssh_deployment.prod"), "n1")
			if !strings.Contains(out, "Node n1 settled") || rec["phase"] == "Unknown" || rec["current_system"] != next {
				t.Errorf("the refresh after the host came back: phase %v, current %v\n%s", rec["phase"], rec["current_system"], out)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			rec = nodeRecordOf(t, s.Values("fleet_ssh_deployment.prod"), "n1")
			if rec["phase"] != "Succeeded" || len(tg.Boots()) != 1 || tg.BootedSystem() != next {
				t.Errorf("after the next apply: phase %v, %d boots, booted %s", rec["phase"], len(tg.Boots()), tg.BootedSystem())
			}
			s.WantNoChanges()
		})
	}
}

// Six hosts rebooted with parallelism = 2, through both CLIs: never more
// than two of them are away at once, as their own boot logs say.
func TestDeploymentRebootsFollowParallelism(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			ok := nixtest.Behaviour{Kind: nixtest.Succeed}
			before, next := kernelSystem(t, ok, "6.6.50", "1"), kernelSystem(t, ok, "6.6.58", "2")
			var tgs []*nixtest.Target
			var systems []string
			for range 6 {
				tg := nixtest.NewTarget(t)
				tg.Boot(t, before)
				tg.SetRebootDown(1500 * time.Millisecond)
				tgs, systems = append(tgs, tg), append(systems, next)
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(tgs, systems, "  reboot = \"always\"\n  parallelism = 2\n"))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			type edge struct {
				at   time.Time
				down int
			}
			var edges []edge
			for i, tg := range tgs {
				boots := tg.Boots()
				if len(boots) != 1 || boots[0].Up.IsZero() || tg.BootedSystem() != next {
					t.Fatalf("n%d: boots %+v, booted %s", i+1, boots, tg.BootedSystem())
				}
				edges = append(edges, edge{boots[0].Down, 1}, edge{boots[0].Up, -1})
			}
			sort.Slice(edges, func(i, j int) bool { return edges[i].at.Before(edges[j].at) })
			away, most := 0, 0
			for _, e := range edges {
				away += e.down
				most = max(most, away)
			}
			t.Logf("at most %d hosts away at once", most)
			if most > 2 {
				t.Errorf("%d hosts were away at once, with parallelism 2", most)
			}
			v := s.Values("fleet_ssh_deployment.prod")
			if fmt.Sprint(v["failed_nodes"]) != "[]" {
				t.Errorf("failed nodes %v", v["failed_nodes"])
			}
		})
	}
}

// A real systemd host (a Debian container booted with systemd-nspawn)
// rebooted into its new system, through one CLI (AlternateCLIs): the
// container asks to reboot (systemd-nspawn exits 133), the harness starts
// it again on the same disk, and its stage-2 stand-in points
// /run/booted-system and /run/current-system at the boot entry and starts
// its units, as NixOS's stage 2 does; the deployment judges it with real
// systemctl after it is back.
func TestDeploymentRebootsARealSystemdHost(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg := systemdtest.NewTarget(t)
			old := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
			tg.Boot(t, old)
			good := systemdtest.Closure(t, systemdtest.Behaviour{Kind: systemdtest.Succeed})
			before, _ := tg.Exec(t, "cat", "/proc/sys/kernel/random/boot_id")
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(systemdDeploymentConfig(tg, good, "  reboot = \"always\"\n  reboot_timeout = \"120s\"\n"))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			after, _ := tg.Exec(t, "cat", "/proc/sys/kernel/random/boot_id")
			booted, _ := tg.Exec(t, "readlink", "-f", "/run/booted-system")
			if len(tg.Boots()) != 1 || strings.TrimSpace(after) == strings.TrimSpace(before) || strings.TrimSpace(booted) != good || tg.CurrentSystem() != good || tg.BootEntry() != good {
				t.Errorf("after the reboot: %d boots, boot id %q (was %q), booted %q, current %s, boot entry %s; want %s", len(tg.Boots()), after, before, booted, tg.CurrentSystem(), tg.BootEntry(), good)
			}
			if svc := tg.Service(t, systemdtest.DefaultUnit); svc.ActiveState != "active" || svc.System != good {
				t.Errorf("%s after the reboot: %+v", systemdtest.DefaultUnit, svc)
			}
			rec := nodeRecordOf(t, s.Values("fleet_ssh_deployment.prod"), "ct1")
			if rec["phase"] != "Succeeded" || conditionOf(rec, "Rebooted")["status"] != "True" {
				t.Errorf("the record: phase %v, Rebooted %v", rec["phase"], conditionOf(rec, "Rebooted"))
			}
			s.WantNoChanges()
		})
	}
}
