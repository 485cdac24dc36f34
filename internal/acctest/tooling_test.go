package acctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
	cmd := exec.Command("make", "-n", "test", "testacc")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "FLEET_TOFU_PATH=/opt/tofu-of-my-own/tofu")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	if got := strings.Count(string(out), `FLEET_TOFU_PATH="/opt/tofu-of-my-own/tofu" go test`); got != 2 {
		t.Fatalf("make test and testacc do not both run the OpenTofu of FLEET_TOFU_PATH:\n%s", out)
	}
}

// setup names both CLIs' versions even when TF_CLI_CONFIG_FILE names a
// file that does not exist (the CLIs then print a warning first).
func TestSetupReportsBothVersions(t *testing.T) {
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
