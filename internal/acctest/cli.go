// Package acctest runs the provider through the real command lines, Terraform
// and OpenTofu, for tests. A test of what the two CLIs render or decide
// differently runs once per CLI (CLIs); a test of the provider's own
// behaviour through one, alternating between tests (AlternateCLIs). A
// missing CLI fails the test: it is never skipped. Under go test -short
// (the inner loop) no test drives a CLI.
package acctest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
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
// missing: Terraform from FLEET_TERRAFORM_PATH or PATH, OpenTofu from
// FLEET_TOFU_PATH or the cache scripts/build-tofu.sh fills. A test of what
// the two may render or decide differently (plan text and JSON, warnings,
// moved, import, write-only values, lock files, exit codes, the state
// upgrade) runs through both.
func CLIs(t testing.TB) []CLI {
	t.Helper()
	SkipIfShort(t)
	return []CLI{terraform(t), tofu(t)}
}

// SkipIfShort skips a test that drives a CLI under go test -short (make
// test-short, the inner loop): make test runs it.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a CLI: make test runs it, make test-short does not")
	}
}

// EnvBothCLIs, set to 1, makes AlternateCLIs return both CLIs: every
// acceptance test then runs through Terraform and OpenTofu.
const EnvBothCLIs = "FLEET_ACC_BOTH_CLIS"

// AlternateCLIs returns the CLI a test of the provider's own behaviour
// runs through, the same on every run: Terraform or OpenTofu by the parity
// of an FNV-1a hash of the test's top-level name, so that such tests
// alternate between the two (each runs as a subtest named after its CLI,
// which go test -v prints). With FLEET_ACC_BOTH_CLIS=1 it returns both.
func AlternateCLIs(t testing.TB) []CLI {
	t.Helper()
	SkipIfShort(t)
	if os.Getenv(EnvBothCLIs) == "1" {
		return CLIs(t)
	}
	if AlternateIndex(t.Name()) == 0 {
		return []CLI{terraform(t)}
	}
	return []CLI{tofu(t)}
}

// AlternateIndex is 0 (Terraform) or 1 (OpenTofu): the CLI
// AlternateCLIs gives the test of that name (its top-level part).
func AlternateIndex(name string) int {
	name, _, _ = strings.Cut(name, "/")
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % 2)
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
	path := TofuPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("OpenTofu CLI not found at %s: run make setup (it builds OpenTofu with scripts/build-tofu.sh), or set FLEET_TOFU_PATH", path)
	}
	return CLI{Name: "tofu", Path: absolute(t, path), Host: "registry.opentofu.org"}
}

// TofuPath is FLEET_TOFU_PATH, else the build scripts/build-tofu.sh caches.
func TofuPath() string {
	if path := os.Getenv("FLEET_TOFU_PATH"); path != "" {
		return path
	}
	home, _ := os.UserHomeDir()
	cache := os.Getenv("FLEET_CACHE_DIR")
	if cache == "" {
		cache = filepath.Join(home, ".cache", "terraform-provider-fleet")
	}
	return filepath.Join(cache, "tofu-"+TofuVersion, "tofu")
}

func absolute(t testing.TB, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("absolute path of %s: %v", p, err)
	}
	return abs
}

// Test runs one acceptance test case of terraform-plugin-testing through
// every CLI, as subtests named after the CLI, in parallel with each other
// and with the package's other parallel tests (it marks t parallel).
// PrepareProcess must have run (in TestMain).
//
// terraform-plugin-testing takes its CLI from the process environment
// (TF_ACC_TERRAFORM_PATH), which parallel tests share, so that variable
// names a small script of PrepareProcess's: it runs OpenTofu in a working
// directory whose configuration has the line "# fleet-acctest-cli: tofu",
// which Test puts in every step's configuration through OpenTofu, and
// Terraform otherwise. TF_ACC_PROVIDER_HOST stays unset: the testing
// framework then names the provider registry.terraform.io/hashicorp/fleet
// in required_providers, which OpenTofu takes as it is.
func Test(t *testing.T, testCase func(t *testing.T, cli CLI) resource.TestCase) {
	t.Helper()
	SkipIfShort(t)
	if os.Getenv(envPrepared) != "1" {
		t.Fatalf("acctest.Test: call acctest.PrepareProcess in the package's TestMain first")
	}
	t.Parallel()
	for _, cli := range CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tc := testCase(t, cli)
			for i := range tc.Steps {
				if tc.Steps[i].Config != "" {
					tc.Steps[i].Config = cliMark + cli.Name + "\n" + tc.Steps[i].Config
				}
			}
			resource.Test(t, tc)
		})
	}
}

// cliMark begins the line that tells the script of PrepareProcess which
// CLI a configuration is for.
const cliMark = "# fleet-acctest-cli: "

// envPrepared is set once PrepareProcess has set the environment.
const envPrepared = "FLEET_ACCTEST_PREPARED"

// PrepareProcess sets, once for the whole test process, the environment
// terraform-plugin-testing reads (see Test), with its CLI script and an
// empty CLI configuration written into dir, where ProviderBinary builds
// too; the caller removes dir when the process ends. It fails when either
// CLI is missing.
func PrepareProcess(dir string) error {
	tf, tofu := os.Getenv("FLEET_TERRAFORM_PATH"), TofuPath()
	if tf == "" {
		var err error
		if tf, err = exec.LookPath("terraform"); err != nil {
			return fmt.Errorf("terraform CLI not found on PATH: install Terraform 1.11 or later (the machine image has it), or set FLEET_TERRAFORM_PATH")
		}
	}
	if _, err := os.Stat(tofu); err != nil {
		return fmt.Errorf("OpenTofu CLI not found at %s: run make setup (it builds OpenTofu with scripts/build-tofu.sh), or set FLEET_TOFU_PATH", tofu)
	}
	processDir = dir
	script := filepath.Join(dir, "cli")
	text := "#!/bin/sh\n# The CLI of terraform-plugin-testing: OpenTofu for a configuration marked for it, else Terraform.\n" +
		"if grep -qsx " + shell.Quote(cliMark+"tofu") + " ./*.tf; then exec " + shell.Quote(tofu) + ` "$@"; fi` + "\n" +
		"exec " + shell.Quote(tf) + ` "$@"` + "\n"
	config := filepath.Join(dir, "empty.tfrc")
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(config, nil, 0o600); err != nil {
		return err
	}
	for k, v := range map[string]string{
		"TF_ACC": "1", "TF_ACC_TERRAFORM_PATH": script, "TF_ACC_PROVIDER_NAMESPACE": "hashicorp",
		"CHECKPOINT_DISABLE": "1", "TF_CLI_CONFIG_FILE": config, envPrepared: "1",
	} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return os.Unsetenv("TF_ACC_PROVIDER_HOST")
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
	// processDir is the test process's directory, as PrepareProcess was
	// given it.
	processDir  string
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
		// one test's TempDir: it lives in the process's directory
		// (PrepareProcess), which its TestMain removes.
		dir, err := os.MkdirTemp(processDir, "fleet-provider-build-") //nolint:usetesting
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
