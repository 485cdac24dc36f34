package sshdial

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// pinTestKeys holds one public key of each type, generated once per test binary.
var pinTestKeys = sync.OnceValue(func() map[string]ssh.PublicKey {
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	rsaPriv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	_, otherEd, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	out := map[string]ssh.PublicKey{}
	for name, priv := range map[string]crypto.Signer{"ed25519": edPriv, "ecdsa": ecPriv, "rsa": rsaPriv, "other-ed25519": otherEd} {
		pub, err := ssh.NewPublicKey(priv.Public())
		if err != nil {
			panic(err)
		}
		out[name] = pub
	}
	return out
})

// pinTestLine is a public key line as a host's /etc/ssh/ssh_host_*_key.pub holds it.
func pinTestLine(k ssh.PublicKey, comment string) string {
	line := strings.TrimSuffix(string(ssh.MarshalAuthorizedKey(k)), "\n")
	if comment != "" {
		line += " " + comment
	}
	return line
}

func TestParsePin(t *testing.T) {
	keys := pinTestKeys()
	ed := keys["ed25519"]
	edFP := ssh.FingerprintSHA256(ed) // "SHA256:" + 43 base64 characters, as ssh-keygen -lf prints
	short := "SHA256:" + base64.RawStdEncoding.EncodeToString(make([]byte, 31))
	long := "SHA256:" + base64.RawStdEncoding.EncodeToString(make([]byte, 33))

	// A host certificate signed by another key: pins name plain keys only.
	signer, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	cert := &ssh.Certificate{Key: ed, CertType: ssh.HostCert, KeyId: "web1", ValidPrincipals: []string{"web1"}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, signer); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		in      string
		wantFP  string // "" means an error is expected
		wantKey bool   // the pin carries the whole key
		errPart string
	}{
		{name: "sha256 fingerprint as ssh-keygen prints it", in: edFP, wantFP: edFP},
		{name: "sha256 fingerprint with trailing =", in: edFP + "=", wantFP: edFP},
		{name: "sha256 fingerprint with surrounding whitespace", in: "  " + edFP + "\n", wantFP: edFP},
		{name: "all-zero sha256 fingerprint", in: "SHA256:" + strings.Repeat("A", 43), wantFP: "SHA256:" + strings.Repeat("A", 43)},
		{name: "ed25519 key line", in: pinTestLine(ed, ""), wantFP: edFP, wantKey: true},
		{name: "ed25519 key line with comment", in: pinTestLine(ed, "root@web1"), wantFP: edFP, wantKey: true},
		{name: "ecdsa key line", in: pinTestLine(keys["ecdsa"], "root@web1"), wantFP: ssh.FingerprintSHA256(keys["ecdsa"]), wantKey: true},
		{name: "rsa key line", in: pinTestLine(keys["rsa"], ""), wantFP: ssh.FingerprintSHA256(keys["rsa"]), wantKey: true},
		{name: "empty", in: "", errPart: "empty host key pin"},
		{name: "blank", in: " \t\n", errPart: "empty host key pin"},
		{name: "sha256 prefix only", in: "SHA256:", errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 of 31 bytes", in: short, errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 of 33 bytes", in: long, errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 one character short", in: edFP[:len(edFP)-1], errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 not base64", in: "SHA256:" + strings.Repeat("!", 43), errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 in url-safe base64", in: "SHA256:" + strings.Repeat("-", 43), errPart: "is not a SHA256 fingerprint"},
		{name: "MD5: prefixed fingerprint", in: "MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", errPart: "is an MD5 fingerprint"},
		{name: "legacy bare MD5 fingerprint", in: "16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", errPart: "is an MD5 fingerprint"},
		{name: "key line with authorized_keys option", in: "no-pty " + pinTestLine(ed, ""), errPart: "without authorized_keys options"},
		{name: "key line with from= option", in: `from="10.0.0.1" ` + pinTestLine(ed, ""), errPart: "without authorized_keys options"},
		{name: "two key lines", in: pinTestLine(ed, "a") + "\n" + pinTestLine(keys["ecdsa"], "b"), errPart: "exactly one public key line"},
		{name: "host certificate", in: pinTestLine(cert, ""), errPart: "is a certificate"},
		{name: "key type without blob", in: "ssh-ed25519", errPart: "neither a SHA256"},
		{name: "key type with garbage blob", in: "ssh-ed25519 not-base64!", errPart: "neither a SHA256"},
		{name: "plain garbage", in: "hello world", errPart: "neither a SHA256"},
		{name: "lower-case sha256 prefix", in: "sha256:" + edFP[len("SHA256:"):], errPart: "neither a SHA256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePin(tc.in)
			if tc.wantFP == "" {
				if err == nil {
					t.Fatalf("ParsePin(%q) = %q, want an error", tc.in, p)
				}
				if !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("error %q does not contain %q", err, tc.errPart)
				}
				if !p.IsZero() {
					t.Fatalf("ParsePin returned a non-zero pin %q with its error", p)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePin(%q): %v", tc.in, err)
			}
			if p.String() != tc.wantFP {
				t.Fatalf("ParsePin(%q).String() = %q, want %q", tc.in, p.String(), tc.wantFP)
			}
			if p.IsZero() {
				t.Fatalf("parsed pin reports IsZero")
			}
			if (p.key != nil) != tc.wantKey {
				t.Fatalf("pin carries key = %v, want %v", p.key != nil, tc.wantKey)
			}
		})
	}
}

func TestParsePinErrorAbbreviatesLongInput(t *testing.T) {
	// A whole key line quoted in an error must not flood a plan.
	in := "no-pty " + pinTestLine(pinTestKeys()["rsa"], "")
	_, err := ParsePin(in)
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), in) {
		t.Fatalf("error quotes the whole %d-char input: %q", len(in), err)
	}
	if len(err.Error()) > 200 {
		t.Fatalf("error is %d characters long: %q", len(err.Error()), err)
	}
}

func TestPinMatches(t *testing.T) {
	keys := pinTestKeys()
	ed, other, rsaKey := keys["ed25519"], keys["other-ed25519"], keys["rsa"]
	tests := []struct {
		name string
		pin  Pin
		key  ssh.PublicKey
		want bool
	}{
		{"fingerprint pin, same key", MustParsePin(ssh.FingerprintSHA256(ed)), ed, true},
		{"fingerprint pin with padding, same key", MustParsePin(ssh.FingerprintSHA256(ed) + "="), ed, true},
		{"fingerprint pin, another key of the same type", MustParsePin(ssh.FingerprintSHA256(ed)), other, false},
		{"fingerprint pin, key of another type", MustParsePin(ssh.FingerprintSHA256(ed)), rsaKey, false},
		{"key-line pin, same key", MustParsePin(pinTestLine(ed, "c")), ed, true},
		{"key-line pin, another key of the same type", MustParsePin(pinTestLine(ed, "c")), other, false},
		{"key-line pin, key of another type", MustParsePin(pinTestLine(ed, "c")), rsaKey, false},
		{"rsa key-line pin, same key", MustParsePin(pinTestLine(rsaKey, "")), rsaKey, true},
		{"PinKey, same key", PinKey(other), other, true},
		{"PinKey, another key", PinKey(other), ed, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.pin.Matches(tc.key); got != tc.want {
				t.Fatalf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPinKeyAndZero(t *testing.T) {
	ed := pinTestKeys()["ed25519"]
	tests := []struct {
		name     string
		pin      Pin
		wantZero bool
		wantStr  string
	}{
		{"zero pin", Pin{}, true, ""},
		{"PinKey is the key's fingerprint", PinKey(ed), false, ssh.FingerprintSHA256(ed)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pin.IsZero() != tc.wantZero || tc.pin.String() != tc.wantStr {
				t.Fatalf("IsZero=%v String=%q, want %v %q", tc.pin.IsZero(), tc.pin.String(), tc.wantZero, tc.wantStr)
			}
		})
	}
}

func TestMustParsePinPanicsOnInvalid(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MustParsePin(\"garbage\") did not panic")
		}
	}()
	MustParsePin("garbage")
}
