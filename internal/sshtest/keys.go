// Package sshtest starts real SSH servers on 127.0.0.1 for tests, in the
// spirit of net/http/httptest: each constructor takes a testing.TB, starts a
// server, and registers its shutdown with tb.Cleanup.
//
// It is imported only from _test.go files, benchmarks and the demo sandbox
// (cmd/fleet-sandbox), which is why it takes the small TB interface rather
// than testing.TB itself.
package sshtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/crypto/ssh"
)

// TB is the part of testing.TB the harness needs; *testing.T satisfies it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Key is a freshly generated key pair usable as a host key or a client key.
type Key struct {
	Signer ssh.Signer
	Public ssh.PublicKey
	// Type is the name it was created with: "ed25519", "ecdsa" or "rsa".
	Type string

	private crypto.PrivateKey
}

// NewKey returns a new ed25519 key, the cheapest type to generate.
func NewKey(tb TB) *Key {
	tb.Helper()
	return NewKeyOfType(tb, "ed25519")
}

// NewKeyOfType returns a new key of type "ed25519", "ecdsa" (P-256) or
// "rsa" (2048 bits).
func NewKeyOfType(tb TB, typ string) *Key {
	tb.Helper()
	var (
		private crypto.PrivateKey
		err     error
	)
	switch typ {
	case "ed25519":
		_, private, err = ed25519.GenerateKey(rand.Reader)
	case "ecdsa":
		private, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "rsa":
		private, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		tb.Fatalf("sshtest: unknown key type %q (want ed25519, ecdsa or rsa)", typ)
	}
	if err != nil {
		tb.Fatalf("sshtest: generate %s key: %v", typ, err)
	}
	signer, err := ssh.NewSignerFromKey(private)
	if err != nil {
		tb.Fatalf("sshtest: %s signer: %v", typ, err)
	}
	return &Key{Signer: signer, Public: signer.PublicKey(), Type: typ, private: private}
}

// AuthorizedLine returns the public key as one authorized_keys line
// ("ssh-ed25519 AAAA..."), without a trailing newline.
func (k *Key) AuthorizedLine() string {
	return strings.TrimSuffix(string(ssh.MarshalAuthorizedKey(k.Public)), "\n")
}

// Fingerprint returns the public key's fingerprint as "SHA256:...".
func (k *Key) Fingerprint() string {
	return ssh.FingerprintSHA256(k.Public)
}

// PEM returns the private key in OpenSSH PEM form, unencrypted.
func (k *Key) PEM() []byte {
	block, err := ssh.MarshalPrivateKey(k.private, "")
	if err != nil {
		// Only keys made by NewKeyOfType exist, and all of them marshal.
		panic("sshtest: marshal private key: " + err.Error())
	}
	return pem.EncodeToMemory(block)
}

// EncryptedPEM returns the private key in OpenSSH PEM form, encrypted with
// passphrase by ssh-keygen with one round of its key derivation, where it
// makes 16 by default: every reader takes it alike, and decrypting it
// under the race detector costs a fraction of a second, not seconds.
func (k *Key) EncryptedPEM(tb TB, passphrase string) []byte {
	tb.Helper()
	path := k.WriteFile(tb, tb.TempDir())
	out, err := exec.Command("ssh-keygen", "-q", "-p", "-a", "1", "-P", "", "-N", passphrase, "-f", path).CombinedOutput()
	if err != nil {
		tb.Fatalf("sshtest: encrypt %s private key with ssh-keygen: %v\n%s", k.Type, err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	return b
}

// WriteFile writes the unencrypted private key into dir with mode 0600 (as
// ssh(1) insists) and returns its path.
func (k *Key) WriteFile(tb TB, dir string) string {
	tb.Helper()
	// CreateTemp opens with 0600 and gives every key in dir its own name.
	f, err := os.CreateTemp(dir, "id_"+k.Type+"_*")
	if err != nil {
		tb.Fatalf("sshtest: create key file: %v", err)
	}
	_, err = f.Write(k.PEM())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatalf("sshtest: write key file: %v", err)
	}
	return f.Name()
}
