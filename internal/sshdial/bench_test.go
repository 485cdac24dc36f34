package sshdial_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// BenchmarkCheckEncryptedKey: what the static check at plan costs an
// executor whose key file is encrypted, once the process has parsed that key
// for another executor, against decrypting it again as each executor did.
// Run by make bench; the ratio is reported there.
func BenchmarkCheckEncryptedKey(b *testing.B) {
	key := sshtest.NewKey(b)
	path := filepath.Join(b.TempDir(), "id_encrypted")
	if err := os.WriteFile(path, key.EncryptedPEM(b, "correct horse"), 0o600); err != nil {
		b.Fatal(err)
	}
	d := &sshdial.Dialer{}
	target := sshdial.Target{
		Endpoint:    sshdial.Endpoint{Host: "web1", Port: 22, User: "deploy"},
		Pin:         sshdial.PinKey(sshtest.NewKey(b).Public),
		Credentials: sshdial.Credentials{PrivateKeyFile: path, Passphrase: []byte("correct horse")},
	}
	b.Run("decrypt-each-time", func(b *testing.B) {
		for b.Loop() {
			if err := sshdial.DecryptForBenchmark(path, "correct horse"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check", func(b *testing.B) {
		if err := d.Check(target); err != nil { // another executor parsed it first
			b.Fatal(err)
		}
		for b.Loop() {
			if err := d.Check(target); err != nil {
				b.Fatal(err)
			}
		}
	})
}
