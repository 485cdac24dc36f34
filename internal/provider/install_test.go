package provider_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
)

// make install puts the provider where Terraform and OpenTofu find it by
// themselves: a repository of one's own (examples/install, which the README
// shows: a root module naming the installed version and a local module
// using the provider) runs init and validate through both CLIs with no
// dev_overrides, no reattached provider and no CLI configuration, only the
// plugin directory under HOME that make install filled.
func TestMakeInstallServesBothCLIsWithoutOverrides(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	plugins := filepath.Join(home, ".terraform.d", "plugins")
	install := exec.Command("make", "--no-print-directory", "install", "PLUGIN_DIR="+plugins, "VERSION=0.1.0")
	install.Dir = root
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	platform := runtime.GOOS + "_" + runtime.GOARCH
	for _, cli := range acctest.CLIs(t) {
		binary := filepath.Join(plugins, cli.Host, "fleetops", "fleet", "0.1.0", platform, "terraform-provider-fleet_v0.1.0")
		if info, err := os.Stat(binary); err != nil || info.Mode()&0o111 == 0 {
			t.Fatalf("make install did not put an executable provider at %s for %s: %v", binary, cli.Name, err)
		}
	}

	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			s := acctest.NewPlainSession(t, cli)
			s.Setenv("HOME", home)
			if err := os.CopyFS(s.Dir, os.DirFS("../../examples/install")); err != nil {
				t.Fatal(err)
			}
			out, errOut := s.Run("init", "-input=false", "-no-color")
			// OpenTofu names a provider of another registry host in full.
			if !strings.Contains(out, "Installing fleetops/fleet v0.1.0") && !strings.Contains(out, "Installing registry.terraform.io/fleetops/fleet v0.1.0") || !strings.Contains(out, "- hosts in modules/hosts") {
				t.Errorf("init did not install the module and the provider make install put in the plugin directory:\n%s\n%s", out, errOut)
			}
			if strings.Contains(out+errOut, "development overrides") {
				t.Errorf("init ran with development overrides:\n%s\n%s", out, errOut)
			}
			lock, err := os.ReadFile(filepath.Join(s.Dir, ".terraform.lock.hcl"))
			if err != nil || !strings.Contains(string(lock), `provider "registry.terraform.io/fleetops/fleet"`) || !strings.Contains(string(lock), `version     = "0.1.0"`) {
				t.Errorf("the lock file does not record registry.terraform.io/fleetops/fleet 0.1.0 (%v):\n%s", err, lock)
			}
			if valid, diags := s.Validate(); !valid || len(diags) != 0 {
				t.Fatalf("validate: valid %v, diagnostics %+v", valid, diags)
			}
		})
	}
}

// One checkout serves both CLIs (examples/install, whose source names its
// registry host, as the README says): Terraform's init writes the lock
// file, OpenTofu's init accepts it as it is and changes nothing, and both
// validate; then the other way round.
func TestOneCheckoutServesBothCLIs(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	install := exec.Command("make", "--no-print-directory", "install", "PLUGIN_DIR="+filepath.Join(home, ".terraform.d", "plugins"), "VERSION=0.1.0")
	install.Dir = root
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	clis := acctest.CLIs(t)
	for _, order := range [][]acctest.CLI{clis, {clis[1], clis[0]}} {
		t.Run(order[0].Name+"-then-"+order[1].Name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS("../../examples/install")); err != nil {
				t.Fatal(err)
			}
			var lock []byte
			for i, cli := range order {
				s := acctest.NewPlainSession(t, cli)
				s.Dir = dir
				s.Setenv("HOME", home)
				args := []string{"init", "-input=false", "-no-color"}
				if i > 0 {
					args = append(args, "-lockfile=readonly")
				}
				if out, errOut, err := s.Try(args...); err != nil {
					t.Fatalf("%s init in the checkout the other CLI initialised: %v\n%s\n%s", cli.Name, err, out, errOut)
				}
				now, err := os.ReadFile(filepath.Join(dir, ".terraform.lock.hcl"))
				if err != nil {
					t.Fatal(err)
				}
				if i > 0 && string(now) != string(lock) {
					t.Errorf("%s changed the lock file %s wrote:\n%s\nto:\n%s", cli.Name, order[0].Name, lock, now)
				}
				lock = now
				if valid, diags := s.Validate(); !valid || len(diags) != 0 {
					t.Errorf("%s validate: valid %v, diagnostics %+v", cli.Name, valid, diags)
				}
			}
		})
	}
}

// make install refuses a VERSION that is not a semantic version, which
// neither CLI would find in the plugin directory, before building anything.
func TestMakeInstallRefusesAVersionThatIsNotSemver(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	plugins := t.TempDir()
	install := exec.Command("make", "--no-print-directory", "install", "PLUGIN_DIR="+plugins, "VERSION=1.2")
	install.Dir = root
	out, err := install.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "VERSION=1.2 is not a semantic version") {
		t.Fatalf("make install VERSION=1.2: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(plugins); len(entries) != 0 {
		t.Errorf("make install with a bad VERSION installed %d entries", len(entries))
	}
}

// Two clones of the same commit, in directories of different depths,
// install byte-identical providers, so a committed .terraform.lock.hcl
// made on one machine holds on another: a colleague's or CI's init against
// the lock file succeeds, through both CLIs.
func TestMakeInstallIsReproducible(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var binaries [2][]byte
	var homes [2]string
	for i, dir := range []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "another", "deeper", "clone")} {
		if out, err := exec.Command("git", "clone", "--quiet", "--no-hardlinks", root, dir).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		homes[i] = t.TempDir()
		plugins := filepath.Join(homes[i], ".terraform.d", "plugins")
		install := exec.Command("make", "--no-print-directory", "install", "PLUGIN_DIR="+plugins, "VERSION=0.1.0")
		install.Dir = dir
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("make install in %s: %v\n%s", dir, err, out)
		}
		binaries[i], err = os.ReadFile(filepath.Join(plugins, "registry.terraform.io", "fleetops", "fleet", "0.1.0", runtime.GOOS+"_"+runtime.GOARCH, "terraform-provider-fleet_v0.1.0"))
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(binaries[0]) != string(binaries[1]) {
		t.Fatalf("two clones of the same commit installed different binaries (%d and %d bytes)", len(binaries[0]), len(binaries[1]))
	}
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			s := acctest.NewPlainSession(t, cli)
			if err := os.CopyFS(s.Dir, os.DirFS("../../examples/install")); err != nil {
				t.Fatal(err)
			}
			s.Setenv("HOME", homes[0])
			s.Run("init", "-input=false", "-no-color")
			// A fresh checkout of the repository: the lock file, no .terraform.
			if err := os.RemoveAll(filepath.Join(s.Dir, ".terraform")); err != nil {
				t.Fatal(err)
			}
			s.Setenv("HOME", homes[1]) // the later value wins
			if out, errOut, err := s.Try("init", "-input=false", "-no-color", "-lockfile=readonly"); err != nil {
				t.Errorf("init with the other clone's provider against the lock file: %v\n%s\n%s", err, out, errOut)
			}
		})
	}
}
