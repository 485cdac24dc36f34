package provider_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Ctrl-C in a terminal ends the probes at once and records nothing, in a
// create and in the refresh an apply runs before it plans (where Terraform
// does not stop the provider: the interrupt reaches it directly). The
// built provider is run as operators run it, its probe timeout the real
// 10 s; each interrupted command must end well before that.
func TestCtrlCEndsProbesAndRecordsNothing(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			hole := sshtest.NewServer(t, sshtest.BlackHole)
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
resource "fleet_executor" "hole" {
  name                 = "hole"
  host                 = "127.0.0.1"
  port                 = %d
  private_key_file     = %q
  host_key_fingerprint = %q
}
`, hole.Port, sshtest.NewKey(t).WriteFile(t, t.TempDir()), sshtest.NewKey(t).Fingerprint()))

			// The create's probe is interrupted: the executor is saved
			// without an observation. The interrupt comes once the probe
			// is in flight (the black hole took its connection), not after
			// a guessed time: under load the plan alone can take longer.
			_, _, took := s.InterruptWhen(func() bool { return hole.Accepted() > 0 }, "apply", "-auto-approve", "-input=false")
			if took > 6*time.Second {
				t.Fatalf("the interrupted create took %s, against a 10s probe timeout", took)
			}
			rec := recordOf(t, s.Values("fleet_executor.hole"))
			wantValue(t, "state after an interrupted create", rec["state"], "unknown")
			wantValue(t, "checked_at after an interrupted create", rec["checked_at"], nil)

			// The next apply's refresh probes the record at once, and is
			// interrupted too: nothing is recorded.
			accepted := hole.Accepted()
			stdout, stderr, took := s.InterruptWhen(func() bool { return hole.Accepted() > accepted }, "apply", "-auto-approve", "-input=false")
			if took > 6*time.Second {
				t.Fatalf("the apply interrupted during its refresh took %s, against a 10s probe timeout:\n%s\n%s", took, stdout, stderr)
			}
			rec = recordOf(t, s.Values("fleet_executor.hole"))
			wantValue(t, "checked_at after an interrupted refresh", rec["checked_at"], nil)
			wantValue(t, "consecutive_failures after an interrupted refresh", rec["consecutive_failures"], 0)
		})
	}
}
