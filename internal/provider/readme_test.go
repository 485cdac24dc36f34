package provider_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// The README's configuration is the wiring the docs recommend. It is
// examples/wiring as it is, and applied, as an operator would, with the
// built provider, against a healthy host and a host that is down: from an
// empty state, in one go, the consumer's for_each is known at plan and
// takes only the reachable host; a plan afterwards is empty.
func TestReadmeConfigurationAppliesInOneGo(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, readme)
	example, err := os.ReadFile("../../examples/wiring/main.tf")
	if err != nil {
		t.Fatal(err)
	}
	if blocks[0] != string(example) {
		t.Fatalf("the README's first configuration differs from examples/wiring/main.tf: keep them the same")
	}

	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			_, down := sshtest.ClosedPort(t)
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(string(example))
			vars, err := json.Marshal(map[string]any{
				"ssh_key_file": sshd.ClientKey.WriteFile(t, t.TempDir()),
				"hosts": map[string]any{
					"web1": map[string]any{"host": "127.0.0.1", "port": sshd.Port, "user": sshd.User,
						"host_key_fingerprint": "256 " + sshd.HostKeys[0].Fingerprint() + " [127.0.0.1]:port (ED25519)"},
					"web2": map[string]any{"host": "127.0.0.1", "port": down, "user": sshd.User,
						"host_key_fingerprint": sshd.HostKeys[0].Fingerprint()},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.Dir, "terraform.tfvars.json"), vars, 0o600); err != nil {
				t.Fatal(err)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			out, _ := s.Run("output", "-json", "pool")
			var pool []string
			if err := json.Unmarshal([]byte(out), &pool); err != nil || strings.Join(pool, ",") != "web1" {
				t.Fatalf("pool = %q (%v), want [web1]", out, err)
			}
			s.WantNoChanges()
		})
	}
}

// readmeBlocks returns the README's HCL blocks, failing unless each one is
// an example file as it is (blocks of a language the README does not mark
// hcl are refused too): TestExamplesValidate validates every example, and
// the first block (examples/wiring) is applied by a test of its own.
func readmeBlocks(t *testing.T, readme []byte) []string {
	t.Helper()
	examples := map[string]string{}
	err := filepath.WalkDir("../../examples", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".tf") {
			b, rerr := os.ReadFile(path)
			if rerr != nil {
				return rerr
			}
			examples[string(b)] = path
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if other := regexp.MustCompile("(?m)^```(terraform|tf|hcl2)$").FindString(string(readme)); other != "" {
		t.Fatalf("the README has a %s block: mark configurations hcl so this test checks them", other)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```hcl\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if _, ok := examples[m[1]]; !ok {
			t.Errorf("the README shows a configuration that is not an example file (put it in examples/ and copy it as it is):\n%s", m[1])
		}
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatal("the README has no hcl block: the pattern is broken")
	}
	return blocks
}

// The README's configurations, put together as a reader copying them into
// one directory would, are one configuration that validate accepts through
// both CLIs (each block repeating the terraform or provider block would
// not be); and the README points at examples/install, the repository of
// one's own that TestMakeInstallServesBothCLIsWithoutOverrides inits and
// validates from make install.
func TestReadmeConfigurationsTogetherValidate(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(examples/install/main.tf)") {
		t.Error("the README does not point at examples/install, the configuration of a repository of one's own")
	}
	together := strings.Join(readmeBlocks(t, readme), "\n")
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(together)
			if valid, diags := s.Validate(); !valid {
				t.Fatalf("the README's configurations together do not validate: %+v", diags)
			}
		})
	}
}

// The module pattern of the wiring guide applies in one go too, with an
// empty role, and the provider's user and credentials from the environment
// as a CI job sets them.
func TestModuleWiringAppliesInOneGo(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			_, down := sshtest.ClosedPort(t)
			s := acctest.NewBinarySession(t, cli, binary)
			if err := os.CopyFS(s.Dir, os.DirFS("../../examples/guides/module")); err != nil {
				t.Fatal(err)
			}
			s.Setenv("FLEET_SSH_USER", sshd.User)
			s.Setenv("FLEET_PRIVATE_KEY_FILE", sshd.ClientKey.WriteFile(t, t.TempDir()))
			vars, err := json.Marshal(map[string]any{"roles": map[string]any{
				"web": map[string]any{
					"web1": map[string]any{"host": "127.0.0.1", "port": sshd.Port, "host_key_fingerprint": sshd.HostKeys[0].AuthorizedLine()},
					"web2": map[string]any{"host": "127.0.0.1", "port": down, "host_key_fingerprint": sshd.HostKeys[0].Fingerprint()},
				},
				"batch": map[string]any{},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.Dir, "terraform.tfvars.json"), vars, 0o600); err != nil {
				t.Fatal(err)
			}
			s.Run("get")
			s.Run("apply", "-auto-approve", "-input=false")
			pool := s.Values(`terraform_data.web_pool["web1"]`)
			wantValue(t, "web_pool[web1].input", pool["input"], "127.0.0.1")
			if list, _ := s.Run("state", "list"); strings.Contains(list, `web_pool["web2"]`) {
				t.Errorf("the host that is down joined the pool:\n%s", list)
			}
			s.WantNoChanges()
		})
	}
}
