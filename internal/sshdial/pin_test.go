package sshdial

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
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
	ec384Priv, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
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
	for name, priv := range map[string]crypto.Signer{"ed25519": edPriv, "ecdsa": ecPriv, "ecdsa384": ec384Priv, "rsa": rsaPriv, "other-ed25519": otherEd} {
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
	t.Parallel()
	keys := pinTestKeys()
	ed, ec, ec384, rsaKey := keys["ed25519"], keys["ecdsa"], keys["ecdsa384"], keys["rsa"]
	edFP := ssh.FingerprintSHA256(ed) // "SHA256:" + 43 base64 characters, as ssh-keygen -lf prints
	ecFP, ec384FP, rsaFP := ssh.FingerprintSHA256(ec), ssh.FingerprintSHA256(ec384), ssh.FingerprintSHA256(rsaKey)
	short := "SHA256:" + base64.RawStdEncoding.EncodeToString(make([]byte, 31))
	long := "SHA256:" + base64.RawStdEncoding.EncodeToString(make([]byte, 33))
	md5 := "MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48"
	edLine := pinTestLine(ed, "")
	keyscanComment := "# 127.0.0.1:2222 SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u10"
	hashed := knownhosts.HashHostname("web1.example.com") // "|1|salt|hash", as HashKnownHosts writes

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
		narrow  string // the key type hostKeyAlgorithms narrows to; "" means every plain algorithm
		errPart string
	}{
		// Bare fingerprints.
		{name: "sha256 fingerprint as ssh-keygen prints it", in: edFP, wantFP: edFP},
		{name: "sha256 fingerprint with trailing =", in: edFP + "=", wantFP: edFP},
		{name: "sha256 fingerprint with surrounding whitespace", in: "  " + edFP + "\n", wantFP: edFP},
		{name: "all-zero sha256 fingerprint", in: "SHA256:" + strings.Repeat("A", 43), wantFP: "SHA256:" + strings.Repeat("A", 43)},

		// ssh-keygen -lf lines: the type narrows the pin.
		{name: "keygen line with [host]:port comment", in: "256 " + edFP + " [127.0.0.1]:2222 (ED25519)", wantFP: edFP, narrow: ssh.KeyAlgoED25519},
		{name: "keygen line with no comment", in: "256 " + edFP + " no comment (ED25519)", wantFP: edFP, narrow: ssh.KeyAlgoED25519},
		{name: "keygen line with empty comment", in: "256 " + edFP + " (ED25519)", wantFP: edFP, narrow: ssh.KeyAlgoED25519},
		{name: "keygen line with several-word comment", in: "256 " + edFP + " root@web1 prod box (ED25519)", wantFP: edFP, narrow: ssh.KeyAlgoED25519},
		{name: "keygen line with hashed host comment", in: "256 " + edFP + " " + hashed + " (ED25519)", wantFP: edFP, narrow: ssh.KeyAlgoED25519},
		{name: "keygen line with padded fingerprint", in: "256 " + edFP + "= web1 (ED25519)", wantFP: edFP, narrow: ssh.KeyAlgoED25519},
		{name: "keygen line with lower-case type", in: "256 " + edFP + " web1 (ed25519)", wantFP: edFP, narrow: ssh.KeyAlgoED25519},
		{name: "keygen line ecdsa 256", in: "256 " + ecFP + " web1 (ECDSA)", wantFP: ecFP, narrow: ssh.KeyAlgoECDSA256},
		{name: "keygen line ecdsa 384", in: "384 " + ec384FP + " root@web 1 (ECDSA)", wantFP: ec384FP, narrow: ssh.KeyAlgoECDSA384},
		{name: "keygen line ecdsa 521 takes the curve from the bits", in: "521 " + ecFP + " web1 (ECDSA)", wantFP: ecFP, narrow: ssh.KeyAlgoECDSA521},
		{name: "keygen line rsa", in: "3072 " + rsaFP + " web1 (RSA)", wantFP: rsaFP, narrow: ssh.KeyAlgoRSA},
		{name: "keygen line without type", in: "256 " + edFP + " web1", wantFP: edFP},
		{name: "keygen line with fingerprint only", in: "256 " + edFP, wantFP: edFP},
		{name: "keygen output after a keyscan comment", in: keyscanComment + "\n256 " + edFP + " [127.0.0.1]:2222 (ED25519)\n", wantFP: edFP, narrow: ssh.KeyAlgoED25519},

		// Public key lines.
		{name: "ed25519 key line", in: edLine, wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},
		{name: "ed25519 key line with comment", in: pinTestLine(ed, "root@web1"), wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},
		{name: "ecdsa key line", in: pinTestLine(ec, "root@web1"), wantFP: ecFP, wantKey: true, narrow: ssh.KeyAlgoECDSA256},
		{name: "ecdsa 384 key line", in: pinTestLine(ec384, ""), wantFP: ec384FP, wantKey: true, narrow: ssh.KeyAlgoECDSA384},
		{name: "rsa key line", in: pinTestLine(rsaKey, ""), wantFP: rsaFP, wantKey: true, narrow: ssh.KeyAlgoRSA},

		// known_hosts and ssh-keyscan lines: the host field is ignored.
		{name: "keyscan line with [host]:port", in: "[127.0.0.1]:2222 " + edLine, wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},
		{name: "known_hosts line with host name", in: "host " + edLine, wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},
		{name: "known_hosts line with several hosts and a comment", in: "web1,10.0.0.1,[web1]:2222 " + pinTestLine(ec, "added 2024"), wantFP: ecFP, wantKey: true, narrow: ssh.KeyAlgoECDSA256},
		{name: "known_hosts line with wildcard and negation", in: "*.example.com,!bad.example.com " + pinTestLine(rsaKey, ""), wantFP: rsaFP, wantKey: true, narrow: ssh.KeyAlgoRSA},
		{name: "hashed known_hosts line", in: hashed + " " + edLine, wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},
		{name: "hashed known_hosts line with trailing space", in: hashed + " " + edLine + " \n", wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},

		// Multi-line input: comments and blank lines are ignored.
		{name: "keyscan output with comment lines", in: keyscanComment + "\n" + keyscanComment + "\n[127.0.0.1]:2222 " + edLine + "\n", wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},
		{name: "keyscan output with comment after the key", in: "[127.0.0.1]:2222 " + edLine + "\n" + keyscanComment, wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},
		{name: "heredoc with blank and indented lines", in: "\n    # web1, checked on the console\n\n    " + edLine + "\n\n", wantFP: edFP, wantKey: true, narrow: ssh.KeyAlgoED25519},
		{name: "pasted with CRLF line ends", in: keyscanComment + "\r\n256 " + edFP + " web1 (ED25519)\r\n", wantFP: edFP, narrow: ssh.KeyAlgoED25519},

		// Refusals.
		{name: "empty", in: "", errPart: "empty host key pin"},
		{name: "blank", in: " \t\n", errPart: "empty host key pin"},
		{name: "comment lines only", in: keyscanComment + "\n# another\n", errPart: "has only # comment lines"},
		{name: "sha256 prefix only", in: "SHA256:", errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 of 31 bytes", in: short, errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 of 33 bytes", in: long, errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 one character short", in: edFP[:len(edFP)-1], errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 not base64", in: "SHA256:" + strings.Repeat("!", 43), errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 in url-safe base64", in: "SHA256:" + strings.Repeat("-", 43), errPart: "is not a SHA256 fingerprint"},
		{name: "sha256 followed by a type", in: edFP + " (ED25519)", errPart: "is not a SHA256 fingerprint"},
		{name: "MD5: prefixed fingerprint", in: md5, errPart: "is an MD5 fingerprint: use the SHA256 form"},
		{name: "legacy bare MD5 fingerprint", in: md5[len("MD5:"):], errPart: "is an MD5 fingerprint: use the SHA256 form"},
		{name: "keygen -E md5 line", in: "256 " + md5 + " no comment (ED25519)", errPart: "is an MD5 fingerprint: use the SHA256 form"},
		{name: "keygen line with short fingerprint", in: "256 " + short + " web1 (ED25519)", errPart: "is not a SHA256 fingerprint"},
		{name: "keygen line with ecdsa of 255 bits", in: "255 " + ecFP + " web1 (ECDSA)", errPart: "an ECDSA key has 256, 384 or 521 bits"},
		{name: "keygen line with dsa type", in: "1024 " + edFP + " web1 (DSA)", errPart: "unsupported key type"},
		{name: "keygen line with unknown type", in: "256 " + edFP + " web1 (XMSS)", errPart: "unsupported key type"},
		{name: "keygen line of a certificate", in: "256 " + edFP + " web1 (ED25519-CERT)", errPart: "is a certificate"},
		{name: "two keygen lines", in: "256 " + edFP + " web1 (ED25519)\n256 " + ecFP + " web1 (ECDSA)", errPart: "the host has several keys, pin one, e.g. with `ssh-keyscan -t ed25519"},
		{name: "two key lines", in: pinTestLine(ed, "a") + "\n" + pinTestLine(ec, "b"), errPart: "has 2 key lines: the host has several keys"},
		{name: "keyscan output of every host key", in: keyscanComment + "\n[127.0.0.1]:2222 " + edLine + "\n" + keyscanComment + "\n[127.0.0.1]:2222 " + pinTestLine(ec, "") + "\n[127.0.0.1]:2222 " + pinTestLine(rsaKey, ""), errPart: "has 3 key lines: the host has several keys"},
		{name: "same key line twice", in: edLine + "\n" + edLine, errPart: "has 2 key lines"},
		{name: "fingerprint and key line", in: edFP + "\n" + edLine, errPart: "has 2 key lines"},
		{name: "key line and pasted junk", in: edLine + "\n$ exit", errPart: `"$ exit" is not a host key pin`},
		{name: "keygen -lv randomart", in: "256 " + edFP + " web1 (ED25519)\n+--[ED25519 256]--+\n|   .o.o+ |\n+----[SHA256]-----+", errPart: `"+--[ED25519 256]--+" is not a host key pin`},
		{name: "key line with authorized_keys option", in: "no-pty " + edLine, errPart: "is an authorized_keys line, not a host key"},
		{name: "key line with restrict,command= options", in: `restrict,command="uptime" ` + edLine, errPart: "is an authorized_keys line, not a host key"},
		{name: "key line with from= option", in: `from="10.0.0.1" ` + edLine, errPart: "is an authorized_keys line, not a host key"},
		{name: "key line with quoted option holding a space", in: `command="echo hi" ` + edLine, errPart: "is an authorized_keys line, not a host key"},
		{name: "cert-authority line", in: "@cert-authority *.example.com " + edLine, errPart: "is a known_hosts @cert-authority line, not a host key"},
		{name: "revoked line", in: "@revoked web1 " + edLine, errPart: "is a known_hosts @revoked line, not a host key"},
		{name: "host certificate", in: pinTestLine(cert, ""), errPart: "is a certificate"},
		{name: "host certificate in a known_hosts line", in: "web1 " + pinTestLine(cert, ""), errPart: "is a certificate"},
		{name: "known_hosts line with mismatched type", in: "web1 ssh-rsa " + strings.Fields(edLine)[1], errPart: "is not a host key pin"},
		{name: "key type without blob", in: "ssh-ed25519", errPart: "is not a host key pin"},
		{name: "key type with garbage blob", in: "ssh-ed25519 not-base64!", errPart: "is not a host key pin"},
		{name: "host and key type without blob", in: "web1 ssh-ed25519", errPart: "is not a host key pin"},
		{name: "plain garbage", in: "hello world", errPart: "is not a host key pin"},
		{name: "lower-case sha256 prefix", in: "sha256:" + edFP[len("SHA256:"):], errPart: "is not a host key pin"},
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
				// Every refusal says what would be accepted, briefly.
				if !strings.HasSuffix(err.Error(), pinForms) {
					t.Fatalf("error %q does not end with the accepted forms", err)
				}
				if len(err.Error()) > 200 {
					t.Fatalf("error is %d characters long: %q", len(err.Error()), err)
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
			want := plainHostKeyAlgorithms
			if tc.narrow != "" {
				want = algorithmsFor(tc.narrow)
			}
			if got := p.hostKeyAlgorithms(); !slices.Equal(got, want) {
				t.Fatalf("hostKeyAlgorithms() = %v, want %v", got, want)
			}
		})
	}
}

// The error for several keys must name the command that pins one, and that
// command's output must be accepted as pasted (pin_cli_test.go runs it).
func TestPinCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		port int
		want string
	}{
		{"127.0.0.1", 2222, "ssh-keyscan -t ed25519 -p 2222 127.0.0.1 | ssh-keygen -lf -"},
		{"web1.example.com", 22, "ssh-keyscan -t ed25519 -p 22 web1.example.com | ssh-keygen -lf -"},
		{"::1", 22, "ssh-keyscan -t ed25519 -p 22 ::1 | ssh-keygen -lf -"},
	}
	for _, tc := range tests {
		if got := PinCommand(tc.host, tc.port); got != tc.want {
			t.Errorf("PinCommand(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.want)
		}
	}
}

func TestParsePinErrorAbbreviatesLongInput(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
		{"keygen-line pin, same key", MustParsePin("256 " + ssh.FingerprintSHA256(ed) + " web1 (ED25519)"), ed, true},
		{"keygen-line pin, another key of the same type", MustParsePin("256 " + ssh.FingerprintSHA256(ed) + " web1 (ED25519)"), other, false},
		{"keygen-line pin, key of another type", MustParsePin("256 " + ssh.FingerprintSHA256(ed) + " web1 (ED25519)"), rsaKey, false},
		{"known_hosts pin, same key", MustParsePin("[web1]:2222 " + pinTestLine(ed, "")), ed, true},
		{"known_hosts pin, another key", MustParsePin("[web1]:2222 " + pinTestLine(ed, "")), other, false},
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
	t.Parallel()
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
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("MustParsePin(\"garbage\") did not panic")
		}
	}()
	MustParsePin("garbage")
}
