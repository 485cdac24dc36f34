// Package acctest runs the provider through the real command lines, Terraform
// and OpenTofu, for tests. Every acceptance test runs once per CLI. A missing
// CLI fails the test: it is never skipped.
package acctest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TofuVersion is the OpenTofu release scripts/build-tofu.sh builds.
const TofuVersion = "1.12.6"

// CLI is one command line that drives providers.
type CLI struct {
	Name string // "terraform" or "tofu"
	Path string // absolute path of the binary
	// Host is the registry host the CLI expands provider sources with.
	Host string
}

// ProviderAddress is the address the CLI gives this provider when a
// configuration names it without required_providers (namespace hashicorp).
func (c CLI) ProviderAddress() string { return c.Host + "/hashicorp/fleet" }

// CLIs returns Terraform and OpenTofu, failing the test when either is
// missing: Terraform from TF_ACC_TERRAFORM_PATH or PATH, OpenTofu from
// FLEET_TOFU_PATH or the cache scripts/build-tofu.sh fills.
func CLIs(t testing.TB) []CLI {
	t.Helper()
	return []CLI{terraform(t), tofu(t)}
}

func terraform(t testing.TB) CLI {
	t.Helper()
	path := os.Getenv("FLEET_TERRAFORM_PATH")
	if path == "" {
		var err error
		if path, err = exec.LookPath("terraform"); err != nil {
			t.Fatalf("terraform CLI not found on PATH: install Terraform 1.11 or later (the machine image has it), or set FLEET_TERRAFORM_PATH")
		}
	}
	return CLI{Name: "terraform", Path: absolute(t, path), Host: "registry.terraform.io"}
}

func tofu(t testing.TB) CLI {
	t.Helper()
	path := os.Getenv("FLEET_TOFU_PATH")
	if path == "" {
		home, _ := os.UserHomeDir()
		cache := os.Getenv("FLEET_CACHE_DIR")
		if cache == "" {
			cache = filepath.Join(home, ".cache", "terraform-provider-fleet")
		}
		path = filepath.Join(cache, "tofu-"+TofuVersion, "tofu")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("OpenTofu CLI not found at %s: run make setup (it builds OpenTofu with scripts/build-tofu.sh), or set FLEET_TOFU_PATH", path)
	}
	return CLI{Name: "tofu", Path: absolute(t, path), Host: "registry.opentofu.org"}
}

func absolute(t testing.TB, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("absolute path of %s: %v", p, err)
	}
	return abs
}

// Test runs one acceptance test case through every CLI, as subtests named
// after the CLI. It sets TF_ACC itself: acceptance tests are part of the
// test suite, not an opt-in.
func Test(t *testing.T, testCase func(t *testing.T, cli CLI) resource.TestCase) {
	t.Helper()
	for _, cli := range CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Setenv("TF_ACC", "1")
			t.Setenv("TF_ACC_TERRAFORM_PATH", cli.Path)
			t.Setenv("TF_ACC_PROVIDER_HOST", cli.Host)
			t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "hashicorp")
			t.Setenv("CHECKPOINT_DISABLE", "1")
			t.Setenv("TF_CLI_CONFIG_FILE", emptyCLIConfig(t))
			resource.Test(t, testCase(t, cli))
		})
	}
}

// emptyCLIConfig is a CLI configuration file with nothing in it: the CLIs
// warn about a missing ~/.terraformrc, which breaks their version parsing,
// and nothing of the machine's own configuration should leak into a test.
func emptyCLIConfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "empty.tfrc")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	buildOnce   sync.Once
	buildPath   string
	buildOutput []byte
	buildErr    error
)

// ProviderBinary builds the provider once per test process and returns the
// path of terraform-provider-fleet, for tests that run it as operators do.
func ProviderBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		// One build serves every test of the process, so it cannot live in
		// one test's TempDir.
		dir, err := os.MkdirTemp("", "fleet-provider-build-") //nolint:usetesting
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "terraform-provider-fleet")
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", buildPath, ".")
		cmd.Dir = root
		buildOutput, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building the provider: %v\n%s", buildErr, buildOutput)
	}
	return buildPath
}

// moduleRoot finds the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// Before reports whether the CLI's version is older than major.minor.
func (c CLI) Before(t testing.TB, major, minor int) bool {
	t.Helper()
	out, err := exec.Command(c.Path, "version", "-json").Output()
	if err != nil {
		t.Fatalf("%s version -json: %v", c.Name, err)
	}
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s version -json: %v: %s", c.Name, err, out)
	}
	var gotMajor, gotMinor int
	if _, err := fmt.Sscanf(v.Version, "%d.%d", &gotMajor, &gotMinor); err != nil {
		t.Fatalf("%s version %q: %v", c.Name, v.Version, err)
	}
	return gotMajor < major || gotMajor == major && gotMinor < minor
}
