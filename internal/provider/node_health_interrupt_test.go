package provider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Ctrl-C ends a node health evaluation at once and records nothing: a
// create whose node never answers the SSH handshake, and the refresh of an
// apply whose heartbeat write hangs under a 30 s probe timeout. The built
// provider is run as operators run it.
func TestNodeHealthCtrlCRecordsNothing(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			hole := sshtest.NewServer(t, sshtest.BlackHole)
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
				t.Fatal(err)
			}
			s := acctest.NewBinarySession(t, cli, binary)
			config := func(nodes string) {
				s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
resource "fleet_node_health_policy" "p" {
  name                 = "p"
  probe_timeout        = "30s"
  write_probe_interval = "0s"
  checks               = { data = { path = %q } }
  object_types         = { volume = { checks = ["data"] } }
  roles                = { storage = { hosts = ["volume"] } }
  nodes                = { %s }
}
`, filepath.Join(root, "data"), nodes))
			}
			config(fmt.Sprintf(`hole = { roles = ["storage"], connection = { host = "127.0.0.1", port = %d, private_key_file = %q, host_key_fingerprint = %q } }`,
				hole.Port, sshtest.NewKey(t).WriteFile(t, t.TempDir()), sshtest.NewKey(t).Fingerprint()))
			// Once the node's connection is in flight (the black hole took
			// it), not after a guessed time: under load the plan alone can
			// take longer, and nothing would be interrupted.
			stdout, stderr, took := s.InterruptWhen(func() bool { return hole.Accepted() > 0 }, "apply", "-auto-approve", "-input=false")
			if took > 6*time.Second {
				t.Fatalf("the interrupted create ended %s after the interrupt, against a 10 s connect timeout:\n%s\n%s", took, stdout, stderr)
			}
			if list, _ := s.Run("state", "list"); strings.TrimSpace(list) != "" {
				t.Errorf("an interrupted create recorded %q", list)
			}

			config(`local = { roles = ["storage"], local = true }`)
			s.Run("apply", "-auto-approve", "-input=false")
			before := s.Values("fleet_node_health_policy.p")["status"]
			// The checked directory hangs from now on, like a dead
			// hard-NFS mount: the refresh's heartbeat blocks in the kernel.
			hung := sshtest.MountHung(t, filepath.Join(root, "data"))
			// Once the heartbeat is blocked in the mount, not after a
			// guessed time: under load the CLI may not have started the
			// refresh yet, and an interrupt before it is lost.
			stdout, stderr, took = s.InterruptWhen(func() bool { return hung.Blocked() > 0 }, "apply", "-auto-approve", "-input=false")
			if took > 6*time.Second {
				t.Fatalf("the apply interrupted in its refresh took %s, against a 30 s probe timeout:\n%s\n%s", took, stdout, stderr)
			}
			if after := s.Values("fleet_node_health_policy.p")["status"]; fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("an interrupted refresh changed the status:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}
