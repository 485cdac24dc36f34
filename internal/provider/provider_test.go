package provider_test

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"go.uber.org/goleak"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
)

// TestMain gives every test of the package, run in parallel, the same
// process environment, which the provider served in-process reads: Nix
// that reaches no binary cache (nixtest.NixConfig), a HOME and a state
// directory of the run's own rather than the user's (known hosts, dry
// activations, evaluations kept, Nix's caches), so that nothing a run
// leaves behind reaches the next, no agent of the machine's, and what
// terraform-plugin-testing reads
// (acctest.PrepareProcess). A test that needs another value of these sets
// it with t.Setenv, and so runs alone, before the parallel tests.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleet-provider-test-")
	if err == nil {
		err = prepareProcess(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "provider tests:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

func prepareProcess(dir string) error {
	// What HOME finds is found before HOME moves: the project's cache
	// (the OpenTofu build, the systemd host's root file system) and Go's
	// (the provider binary is built with go build).
	env := map[string]string{"NIX_CONFIG": nixtest.NixConfig}
	if os.Getenv("FLEET_TOFU_PATH") == "" {
		env["FLEET_TOFU_PATH"] = acctest.TofuPath()
	}
	if os.Getenv("FLEET_CACHE_DIR") == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return err
		}
		env["FLEET_CACHE_DIR"] = filepath.Join(home, ".cache", "terraform-provider-fleet")
	}
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		return fmt.Errorf("go env: %w", err)
	}
	if f := strings.Fields(string(out)); len(f) == 3 {
		env["GOCACHE"], env["GOMODCACHE"], env["GOPATH"] = f[0], f[1], f[2]
	}
	for _, d := range []string{"home", "state"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return err
		}
	}
	env["HOME"], env["XDG_STATE_HOME"] = filepath.Join(dir, "home"), filepath.Join(dir, "state")
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	if err := os.Unsetenv("SSH_AUTH_SOCK"); err != nil {
		return err
	}
	return acctest.PrepareProcess(dir)
}

// start is the fake time acceptance tests begin at.
var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// factories serves the provider to terraform-plugin-testing, which
// starts one for each CLI command: each is a run of its own.
func factories(opts ...provider.Option) map[string]func() (tfprotov6.ProviderServer, error) {
	var runs atomic.Int64
	return map[string]func() (tfprotov6.ProviderServer, error){"fleet": func() (tfprotov6.ProviderServer, error) {
		run := "command:" + strconv.FormatInt(runs.Add(1), 10)
		return server(opts...)(func() string { return run })
	}}
}

// server serves the provider in-process to a session, which tells it
// which command it serves (as a real provider's parent process does).
func server(opts ...provider.Option) acctest.Factory {
	return func(run func() string) (tfprotov6.ProviderServer, error) {
		opts := append([]provider.Option{provider.WithRunID(run)}, opts...)
		return providerserver.NewProtocol6WithError(provider.New("test", opts...)())()
	}
}

// hcl renders attributes as HCL assignments, in sorted key order; values are
// HCL expressions (quote strings with q).
func hcl(attrs map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		fmt.Fprintf(&b, "  %s = %s\n", k, attrs[k])
	}
	return b.String()
}

func q(s string) string { return fmt.Sprintf("%q", s) }

// acctest.Test runs each of its subtests through the CLI it is named
// after, though the two run at once and the testing framework reads its
// CLI from the process's environment: OpenTofu has urldecode, which
// Terraform 1.11 lacks.
func TestAccTestRunsEachStepThroughItsCLI(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		step := resource.TestStep{Config: `
data "fleet_reachability" "none" {
  targets = []
}

output "decoded" {
  value = urldecode("a%20b")
}
`}
		if cli.Name == "terraform" {
			step.ExpectError = regexp.MustCompile(`Call to unknown function`)
		} else {
			step.ConfigStateChecks = []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("decoded", knownvalue.StringExact("a b"))}
		}
		return resource.TestCase{ProtoV6ProviderFactories: factories(), Steps: []resource.TestStep{step}}
	})
}
