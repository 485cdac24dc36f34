package acctest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The repository's own commands keep what they promise a developer.

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// make test runs the OpenTofu named by FLEET_TOFU_PATH when it is set.
func TestMakeTestHonoursFleetTofuPath(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("make", "-n", "test", "testacc")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "FLEET_TOFU_PATH=/opt/tofu-of-my-own/tofu")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	// make test runs the provider's tests in a part of their own, testacc
	// runs only them: every go test it runs is given the OpenTofu.
	var runs, provider int
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "go test ") {
			continue
		}
		runs++
		if !strings.Contains(line, `FLEET_TOFU_PATH="/opt/tofu-of-my-own/tofu" go test`) {
			t.Errorf("a go test without the OpenTofu of FLEET_TOFU_PATH: %s", line)
		}
		if strings.Contains(line, " ./internal/provider/") {
			provider++
		}
	}
	if runs != 3 || provider != 2 {
		t.Fatalf("make test and testacc: %d go test runs, %d of the provider's package; want 3 and 2 (make test's two parts, testacc):\n%s", runs, provider, out)
	}
}

// setup names both CLIs' versions even when TF_CLI_CONFIG_FILE names a
// file that does not exist (the CLIs then print a warning first).
func TestSetupReportsBothVersions(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("scripts/setup.sh")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+filepath.Join(t.TempDir(), "missing.tfrc"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/setup.sh: %v\n%s", err, out)
	}
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	if !strings.HasPrefix(last, "setup: ready (Terraform v") || !strings.Contains(last, "; OpenTofu v"+TofuVersion+")") {
		t.Fatalf("setup's last line %q does not name both versions", last)
	}
}

// Every make target that a message, a script or the docs tell a developer to
// run exists.
func TestNamedMakeTargetsExist(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	makefile, err := os.ReadFile(filepath.Join(root, "GNUmakefile"))
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, glob := range []string{"README.md", "internal/*/*.go", "scripts/*.sh", "templates/*.tmpl", "templates/*/*.tmpl", "docs/*.md", "docs/*/*.md"} {
		files, _ := filepath.Glob(filepath.Join(root, glob))
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				sources = append(sources, f)
			}
		}
	}
	if len(sources) < 10 {
		t.Fatalf("found %d files to search: the globs are broken", len(sources))
	}
	// `make x`, (make x) and "run make x": a command, not the English verb.
	named := regexp.MustCompile("(?:`|\\(|run )make ([a-z][a-z-]*)")
	found := 0
	for _, f := range sources {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(text), -1) {
			found++
			if !strings.Contains(string(makefile), "\n"+m[1]+":") {
				t.Errorf("%s names `make %s`, which GNUmakefile does not define", f, m[1])
			}
		}
	}
	if found == 0 {
		t.Fatal("no make target named anywhere: the pattern is broken")
	}
}

// sandboxVars is what make sandbox writes to SANDBOX_OUT, as far as the
// tests read it.
type sandboxVars struct {
	Hosts         map[string]any `json:"hosts"`
	Nodes         map[string]any `json:"nodes"`
	DeployTargets []struct {
		Name           string `json:"name"`
		Host           string `json:"host"`
		Port           int    `json:"port"`
		PrivateKeyFile string `json:"private_key_file"`
		User           string `json:"user"`
		UseSudo        bool   `json:"use_sudo"`
	} `json:"deploy_targets"`
	NixOSFlake string `json:"nixos_flake"`
	NixOSDir   string `json:"nixos_dir"`
}

// startSandbox runs make sandbox with SANDBOX_FLAGS flags until it prints
// ready, and returns what it wrote and a stop that closes its standard
// input and checks that it ends.
func startSandbox(t *testing.T, flags string) (sandboxVars, []byte, func()) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sandbox.auto.tfvars.json")
	cmd := exec.Command("make", "--no-print-directory", "sandbox", "SANDBOX_OUT="+out, "SANDBOX_FLAGS="+flags)
	cmd.Dir = repoRoot(t)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		var seen strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if sc.Text() == "ready" {
				ready <- seen.String()
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- seen.String()
	}()
	var printed string
	select {
	case printed = <-ready:
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("make sandbox did not print ready within 5 minutes:\n%s", stderr.String())
	}
	if !strings.HasSuffix(printed, "ready\n") {
		_ = cmd.Wait()
		t.Fatalf("make sandbox ended without printing ready:\n%s\n%s", printed, stderr.String())
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("make sandbox after its standard input closed: %v\n%s", err, stderr.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("make sandbox did not stop within a minute of its standard input closing")
		}
	}
	t.Cleanup(stop)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("make sandbox printed ready without writing SANDBOX_OUT: %v", err)
	}
	var vars sandboxVars
	if err := json.Unmarshal(b, &vars); err != nil {
		t.Fatalf("SANDBOX_OUT is not JSON: %v\n%s", err, b)
	}
	return vars, b, stop
}

// make sandbox runs the demo's sandbox alone, as the README says: it writes
// the variables file SANDBOX_OUT names with the hosts and deploy targets
// and the flake of the targets' configurations (one per target, not
// built), prints ready, and stops, its hosts with it, when its standard
// input closes.
func TestMakeSandboxRunsTheSandboxAlone(t *testing.T) {
	t.Parallel()
	vars, b, stop := startSandbox(t, "")
	if len(vars.Hosts) != 5 || len(vars.Nodes) != 4 || len(vars.DeployTargets) < 2 {
		t.Errorf("the sandbox's variables: %d hosts, %d storage nodes, %d deploy targets; want 5, 4, at least 2:\n%s", len(vars.Hosts), len(vars.Nodes), len(vars.DeployTargets), b)
	}
	var targets []string
	for _, d := range vars.DeployTargets {
		targets = append(targets, d.Name)
	}
	if vars.NixOSFlake != "path:"+vars.NixOSDir || !filepath.IsAbs(vars.NixOSDir) {
		t.Errorf("nixos_flake = %q, nixos_dir = %q: want path: and the directory's absolute path", vars.NixOSFlake, vars.NixOSDir)
	}
	nix := func(args ...string) (string, error) {
		cmd := exec.Command("nix", append([]string{"--extra-experimental-features", "nix-command flakes", "eval"}, args...)...)
		cmd.Env = append(os.Environ(), "NIX_CONFIG=substituters =")
		out, err := cmd.Output()
		return string(out), err
	}
	names, err := nix("--json", vars.NixOSFlake+"#nixosConfigurations", "--apply", "builtins.attrNames")
	if want, _ := json.Marshal(targets); err != nil || strings.TrimSpace(names) != string(want) {
		t.Errorf("the flake's configurations: %s (%v), want one per deploy target, %s", names, err, want)
	}
	system, err := nix("--raw", vars.NixOSFlake+"#nixosConfigurations.web1.config.system.build.toplevel.outPath")
	if _, serr := os.Stat(system); err != nil || !strings.HasSuffix(system, "-nixos-system-web1") || serr == nil {
		t.Errorf("web1's system %q (%v) is built already, or is not web1's: the sandbox leaves it to the deployment to build", system, err)
	}
	stop()
}

// make sandbox starts only the hosts asked for (-start, -deploy-hosts),
// and with -sudo-login its deploy targets let in only a user who is not
// root and reaches root through sudo without a password, as a host that
// refuses root logins does: the entries say that user and use_sudo. With
// -link-faults, each is reached through a link that the file of its name
// breaks and heals.
func TestMakeSandboxStartsOnlyWhatIsAskedFor(t *testing.T) {
	t.Parallel()
	faults := t.TempDir()
	vars, b, _ := startSandbox(t, "-start= -deploy-hosts 2 -sudo-login -link-faults "+faults)
	if len(vars.Hosts) != 0 || len(vars.Nodes) != 0 || len(vars.DeployTargets) != 2 || vars.DeployTargets[0].Name != "node01" {
		t.Fatalf("-start= -deploy-hosts 2: %d hosts, %d storage nodes, %d deploy targets; want 0, 0 and node01, node02:\n%s", len(vars.Hosts), len(vars.Nodes), len(vars.DeployTargets), b)
	}
	// The variables of hosts not started are left out: a configuration
	// that deploys only is not warned of values it does not declare.
	for _, name := range []string{`"hosts"`, `"nodes"`, `"storage_root"`} {
		if strings.Contains(string(b), name) {
			t.Errorf("the sandbox's variables hold %s, whose hosts it did not start:\n%s", name, b)
		}
	}
	for _, d := range vars.DeployTargets {
		login := func(user, command string) (string, error) {
			out, err := exec.Command("ssh", "-F", "none", "-i", d.PrivateKeyFile, "-p", fmt.Sprint(d.Port),
				"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
				user+"@"+d.Host, command).CombinedOutput()
			return strings.TrimSpace(string(out)), err
		}
		if d.User == "root" || !d.UseSudo {
			t.Errorf("%s: user %q, use_sudo %v; want a user who is not root, and use_sudo", d.Name, d.User, d.UseSudo)
		}
		if out, err := login(d.User, "id -u; sudo -n id -u"); err != nil || len(strings.Fields(out)) != 2 || strings.Fields(out)[0] == "0" || strings.Fields(out)[1] != "0" {
			t.Errorf("%s: as %s, id -u then sudo -n id -u printed %q (%v); want a user who is not root, then 0", d.Name, d.User, out, err)
		}
		if out, err := login("root", "true"); err == nil {
			t.Errorf("%s let root in (%q): -sudo-login leaves only the sudo user", d.Name, out)
		}
		fault := func(word string) {
			if err := os.WriteFile(filepath.Join(faults, d.Name), []byte(word+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond) // read ten times a second
		}
		fault("refuse")
		if out, err := login(d.User, "true"); err == nil {
			t.Errorf("%s let a login in with its link refusing new connections (%q)", d.Name, out)
		}
		fault("heal")
		if out, err := login(d.User, "true"); err != nil {
			t.Errorf("%s after its link healed: %v: %s", d.Name, err, out)
		}
	}
	if out, err := exec.Command("make", "-C", repoRoot(t), "--no-print-directory", "sandbox", "SANDBOX_FLAGS=-start=hosts,mail").CombinedOutput(); err == nil || !strings.Contains(string(out), `no group "mail"; the groups are hosts, storage, web`) {
		t.Errorf("make sandbox with -start=hosts,mail: %v\n%s\nwant an error naming the groups", err, out)
	}
}
