package provider_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// The node health guide's configuration, applied as an operator would with
// the built provider: from an empty state in one go, the scheduler module's
// for_each is known at plan and takes only the healthy node; the storage
// node whose uploads path is missing is in error; after the repair it stays
// in error until the guide's clear is applied.
func TestNodeHealthGuideAppliesInOneGo(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			root := t.TempDir()
			for _, d := range []string{"blobs", "instances"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			s := acctest.NewBinarySession(t, cli, binary)
			if err := os.CopyFS(s.Dir, os.DirFS("../../examples/guides/node-health")); err != nil {
				t.Fatal(err)
			}
			s.Setenv("FLEET_SSH_USER", sshd.User)
			s.Setenv("FLEET_PRIVATE_KEY_FILE", sshd.ClientKey.WriteFile(t, t.TempDir()))
			vars := func(clears map[string]string) {
				node := func(role string) map[string]any {
					return map[string]any{"roles": []string{role}, "host": "127.0.0.1", "port": sshd.Port, "host_key_fingerprint": sshd.HostKeys[0].AuthorizedLine()}
				}
				b, err := json.Marshal(map[string]any{"storage_root": root, "clear_errors": clears,
					"nodes": map[string]any{"sf-6": node("hypervisor"), "sf-7": node("storage")}})
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(s.Dir, "terraform.tfvars.json"), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			output := func(name string) string {
				out, _ := s.Run("output", "-json", name)
				var v []string
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Fatalf("output %s = %q: %v", name, out, err)
				}
				return strings.Join(v, ",")
			}
			vars(map[string]string{})
			s.Run("get")
			s.Run("apply", "-auto-approve", "-input=false")
			if got := output("slots"); got != "sf-6" {
				t.Errorf("slots = %q, want sf-6 only", got)
			}
			if got := output("accepting"); got != "sf-6" {
				t.Errorf("accepting = %q, want sf-6 only", got)
			}
			if got := output("error_nodes"); got != "sf-7" {
				t.Errorf("error_nodes = %q, want sf-7", got)
			}
			s.WantNoChanges()

			if err := os.MkdirAll(filepath.Join(root, "uploads"), 0o755); err != nil {
				t.Fatal(err)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			if got := output("error_nodes"); got != "sf-7" {
				t.Errorf("after the repair, before a clear: error_nodes = %q, want sf-7 (errors are sticky)", got)
			}
			// Passing now, sf-7 gets a slot, which does not accept work
			// while it is held in error.
			if got := output("slots"); got != "sf-6,sf-7" {
				t.Errorf("after the repair: slots = %q, want sf-6,sf-7", got)
			}
			if got := output("accepting"); got != "sf-6" {
				t.Errorf("after the repair, before a clear: accepting = %q, want sf-6 only", got)
			}
			vars(map[string]string{"sf-7": "uploads recreated"})
			s.Run("apply", "-auto-approve", "-input=false")
			if got := output("error_nodes"); got != "" {
				t.Errorf("after the clear: error_nodes = %q, want none", got)
			}
			if got := output("accepting"); got != "sf-6,sf-7" {
				t.Errorf("after the clear: accepting = %q, want sf-6,sf-7", got)
			}
			s.WantNoChanges()
		})
	}
}
