package sshdial

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Pin is the expected host key of a target: either a SHA-256 fingerprint as
// `ssh-keygen -lf` prints it, or a whole public key.
type Pin struct {
	fingerprint string        // "SHA256:..." form; set for both kinds
	key         ssh.PublicKey // set when the pin is a public key line
}

// ParsePin parses "SHA256:<base64>" or a public key line
// ("ssh-ed25519 AAAA... [comment]").
func ParsePin(s string) (Pin, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Pin{}, fmt.Errorf("empty host key pin")
	}
	if rest, ok := strings.CutPrefix(s, "SHA256:"); ok {
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(rest, "="))
		if err != nil || len(raw) != 32 {
			return Pin{}, fmt.Errorf("%q is not a SHA256 fingerprint: expected SHA256: and 43 base64 characters, as `ssh-keygen -lf` prints", s)
		}
		return Pin{fingerprint: "SHA256:" + base64.RawStdEncoding.EncodeToString(raw)}, nil
	}
	if strings.HasPrefix(s, "MD5:") || isLegacyMD5(s) {
		return Pin{}, fmt.Errorf("%q is an MD5 fingerprint: give the SHA256 fingerprint (`ssh-keygen -lf`) or the public key line", s)
	}
	key, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return Pin{}, fmt.Errorf("%q is neither a SHA256:<base64> fingerprint nor a public key line such as \"ssh-ed25519 AAAA...\"", abbreviate(s))
	}
	if len(options) > 0 || len(bytes.TrimSpace(rest)) > 0 {
		return Pin{}, fmt.Errorf("%q: give exactly one public key line, without authorized_keys options", abbreviate(s))
	}
	if _, isCert := key.(*ssh.Certificate); isCert {
		return Pin{}, fmt.Errorf("%q is a certificate: pin the host's plain public key", abbreviate(s))
	}
	return Pin{fingerprint: ssh.FingerprintSHA256(key), key: key}, nil
}

// MustParsePin is ParsePin for values known to be valid, such as tests'.
func MustParsePin(s string) Pin {
	p, err := ParsePin(s)
	if err != nil {
		panic(err)
	}
	return p
}

// PinKey pins a known public key.
func PinKey(key ssh.PublicKey) Pin { return Pin{fingerprint: ssh.FingerprintSHA256(key), key: key} }

// IsZero reports whether no pin is set.
func (p Pin) IsZero() bool { return p.fingerprint == "" }

// String is the pin's SHA256 fingerprint.
func (p Pin) String() string { return p.fingerprint }

// Matches reports whether key is the pinned key.
func (p Pin) Matches(key ssh.PublicKey) bool {
	if p.key != nil {
		return bytes.Equal(p.key.Marshal(), key.Marshal())
	}
	return ssh.FingerprintSHA256(key) == p.fingerprint
}

// hostKeyAlgorithms is the preference order of plain host key algorithms.
// A key-line pin narrows it to the pinned key's type, so the host offers the
// pinned key rather than another of its keys.
func (p Pin) hostKeyAlgorithms() []string {
	if p.key == nil {
		return slices.Clone(plainHostKeyAlgorithms)
	}
	return algorithmsFor(p.key.Type())
}

var plainHostKeyAlgorithms = []string{
	ssh.KeyAlgoED25519,
	ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
	ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256,
}

// keyTypeOf maps a host key algorithm to the type of key that signs with it.
func keyTypeOf(algorithm string) string {
	switch algorithm {
	case ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSASHA512:
		return ssh.KeyAlgoRSA
	}
	return algorithm
}

func algorithmsFor(keyType string) []string {
	var out []string
	for _, a := range plainHostKeyAlgorithms {
		if keyTypeOf(a) == keyType {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = []string{keyType}
	}
	return out
}

func withoutKeyType(algorithms []string, keyType string) []string {
	return slices.DeleteFunc(slices.Clone(algorithms), func(a string) bool { return keyTypeOf(a) == keyType })
}

func isLegacyMD5(s string) bool {
	return len(s) == 47 && strings.Count(s, ":") == 15
}

// abbreviate keeps error messages short when a whole key line is quoted.
func abbreviate(s string) string {
	if len(s) <= 60 {
		return s
	}
	return s[:40] + "…" + s[len(s)-12:]
}
