package sshdial

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Pin is the expected host key of a target: a SHA-256 fingerprint, possibly
// with the key's type, or a whole public key.
type Pin struct {
	fingerprint string        // "SHA256:..." form; set for every kind
	key         ssh.PublicKey // set when the pin is a public key or known_hosts line
	// keyType is the SSH key type an `ssh-keygen -lf` line named ("ssh-ed25519");
	// empty for a bare fingerprint, whose type is unknown.
	keyType string
}

// pinForms ends every refusal, so an operator learns what to paste instead.
const pinForms = "accepted: SHA256:<base64>, ssh-keygen -lf output, a public key or known_hosts line"

// ParsePin parses a host key pin as an operator has it at hand: a
// "SHA256:<base64>" fingerprint, an `ssh-keygen -lf` line
// ("256 SHA256:... comment (ED25519)"), a public key line
// ("ssh-ed25519 AAAA... [comment]") or a known_hosts / ssh-keyscan line
// ("host ssh-ed25519 AAAA..."). Blank and "#" comment lines are ignored, as
// ssh-keyscan prints comments; exactly one line must remain.
func ParsePin(s string) (Pin, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Pin{}, fmt.Errorf("empty host key pin; %s", pinForms)
	}
	var lines []string
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return Pin{}, fmt.Errorf("host key pin has only # comment lines; %s", pinForms)
	}
	// Each line is checked first, so that pasted junk is reported as such
	// rather than as one of several keys.
	var p Pin
	for _, line := range lines {
		var err error
		if p, err = parsePinLine(line); err != nil {
			return Pin{}, err
		}
	}
	if len(lines) == 1 {
		return p, nil
	}
	return Pin{}, fmt.Errorf("host key pin has %d key lines: the host has several keys, pin one, e.g. with `ssh-keyscan -t ed25519 ...`; %s", len(lines), pinForms)
}

// parsePinLine parses one non-blank, non-comment line.
func parsePinLine(line string) (Pin, error) {
	fields := strings.Fields(line)
	switch {
	case strings.HasPrefix(line, "SHA256:"):
		return parseFingerprint(line)
	case strings.HasPrefix(line, "MD5:") || isLegacyMD5(line):
		return Pin{}, md5Error(line)
	case len(fields) >= 2 && isBits(fields[0]) && (strings.HasPrefix(fields[1], "SHA256:") || strings.HasPrefix(fields[1], "MD5:")):
		return parseKeygenLine(line, fields)
	}
	return parseKeyLine(line)
}

// parseFingerprint parses "SHA256:" and the base64 of 32 bytes, with or
// without padding.
func parseFingerprint(fp string) (Pin, error) {
	raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(strings.TrimPrefix(fp, "SHA256:"), "="))
	if err != nil || len(raw) != 32 {
		return Pin{}, fmt.Errorf("%q is not a SHA256 fingerprint of 43 base64 characters; %s", abbreviate(fp), pinForms)
	}
	return Pin{fingerprint: "SHA256:" + base64.RawStdEncoding.EncodeToString(raw)}, nil
}

func md5Error(s string) error {
	return fmt.Errorf("%q is an MD5 fingerprint: use the SHA256 form; %s", abbreviate(s), pinForms)
}

// parseKeygenLine parses `ssh-keygen -lf` output: bits, fingerprint, a
// comment of any number of words, and the key type in parentheses. The type,
// when present, narrows the pin to that key type.
func parseKeygenLine(line string, fields []string) (Pin, error) {
	if strings.HasPrefix(fields[1], "MD5:") {
		return Pin{}, md5Error(line)
	}
	p, err := parseFingerprint(fields[1])
	if err != nil {
		return Pin{}, err
	}
	last := fields[len(fields)-1]
	if len(fields) < 3 || !strings.HasPrefix(last, "(") || !strings.HasSuffix(last, ")") {
		return p, nil
	}
	bits, _ := strconv.Atoi(fields[0]) // isBits has checked it
	name := strings.ToUpper(last[1 : len(last)-1])
	switch {
	case name == "ED25519":
		p.keyType = ssh.KeyAlgoED25519
	case name == "RSA":
		p.keyType = ssh.KeyAlgoRSA
	case name == "ECDSA" && bits == 256:
		p.keyType = ssh.KeyAlgoECDSA256
	case name == "ECDSA" && bits == 384:
		p.keyType = ssh.KeyAlgoECDSA384
	case name == "ECDSA" && bits == 521:
		p.keyType = ssh.KeyAlgoECDSA521
	case name == "ECDSA":
		return Pin{}, fmt.Errorf("%q: an ECDSA key has 256, 384 or 521 bits; %s", abbreviate(line), pinForms)
	case strings.HasSuffix(name, "-CERT"):
		return Pin{}, certError(line)
	default:
		// Only the types the dialer negotiates: a pin of another type could never match.
		return Pin{}, fmt.Errorf("%q: unsupported key type, pin an ED25519, ECDSA or RSA key; %s", abbreviate(line), pinForms)
	}
	return p, nil
}

// parseKeyLine parses a public key line or a known_hosts line; the host
// patterns of the latter are ignored, since the pin is the key.
func parseKeyLine(line string) (Pin, error) {
	key, _, options, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err == nil && len(options) == 0 {
		return keyPin(line, key)
	}
	// ParseAuthorizedKey takes a known_hosts host field for options, so a
	// line with "options" is first tried as known_hosts.
	marker, hosts, khKey, _, _, khErr := ssh.ParseKnownHosts([]byte(line))
	switch {
	case khErr == nil && marker != "":
		return Pin{}, fmt.Errorf("%q is a known_hosts @%s line, not a host key; %s", abbreviate(line), abbreviate(marker), pinForms)
	case khErr == nil && !slices.ContainsFunc(hosts, isAuthorizedKeysOption):
		return keyPin(line, khKey)
	case khErr == nil || err == nil:
		return Pin{}, fmt.Errorf("%q is an authorized_keys line, not a host key; %s", abbreviate(line), pinForms)
	}
	return Pin{}, fmt.Errorf("%q is not a host key pin; %s", abbreviate(line), pinForms)
}

func keyPin(line string, key ssh.PublicKey) (Pin, error) {
	if _, isCert := key.(*ssh.Certificate); isCert {
		return Pin{}, certError(line)
	}
	return PinKey(key), nil
}

func certError(line string) error {
	return fmt.Errorf("%q is a certificate: pin the host's plain public key; %s", abbreviate(line), pinForms)
}

// isBits reports whether s is the key size ssh-keygen -l prints first.
func isBits(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && strings.Trim(s, "0123456789") == ""
}

// authorizedKeysOptions are sshd(8)'s authorized_keys options. A known_hosts
// host field holding one is an authorized_keys line, a user's key.
var authorizedKeysOptions = []string{
	"agent-forwarding", "cert-authority", "command", "environment", "expiry-time", "from",
	"no-agent-forwarding", "no-port-forwarding", "no-pty", "no-touch-required", "no-user-rc",
	"no-x11-forwarding", "permitlisten", "permitopen", "port-forwarding", "principals", "pty",
	"restrict", "tunnel", "user-rc", "verify-required", "x11-forwarding",
}

// isAuthorizedKeysOption reports whether a host pattern is rather an option:
// host patterns never hold quotes, and option names are not host names in practice.
func isAuthorizedKeysOption(pattern string) bool {
	name, _, _ := strings.Cut(pattern, "=")
	return strings.Contains(pattern, `"`) || slices.Contains(authorizedKeysOptions, strings.ToLower(name))
}

// PinCommand is the shell command whose output, pasted as it is, pins the
// ed25519 key of host: asking for one key type gives one line, and OpenSSH
// hosts generate an ed25519 key by default.
func PinCommand(host string, port int) string {
	return fmt.Sprintf("ssh-keyscan -t ed25519 -p %d %s | ssh-keygen -lf -", port, host)
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

// typed reports whether the pin names its key's type (a key line, or a
// fingerprint with the type ssh-keygen printed), so a host without a key of
// that type cannot hold the pinned key.
func (p Pin) typed() bool { return p.key != nil || p.keyType != "" }

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
// A pin that knows its key's type (a key line, or an `ssh-keygen -lf` line)
// narrows it to that type, so the host offers the pinned key rather than
// another of its keys.
func (p Pin) hostKeyAlgorithms() []string {
	switch {
	case p.key != nil:
		return algorithmsFor(p.key.Type())
	case p.keyType != "":
		return algorithmsFor(p.keyType)
	}
	return slices.Clone(plainHostKeyAlgorithms)
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
