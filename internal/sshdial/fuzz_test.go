package sshdial

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func FuzzParsePin(f *testing.F) {
	// A fixed key, so the seed corpus is the same on every run.
	pub, err := ssh.NewPublicKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public())
	if err != nil {
		f.Fatal(err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	fp := ssh.FingerprintSHA256(pub)
	for _, s := range []string{
		fp, fp + "=", " " + fp + "\n", line, line + " root@web1",
		"", "SHA256:", "SHA256:abc", "MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48",
		"16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", "no-pty " + line, line + "\n" + line,
		"ssh-ed25519", "ssh-rsa AAAA", "garbage",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePin(s)
		if err != nil {
			if !p.IsZero() {
				t.Fatalf("ParsePin(%q) returned pin %q with error %v", s, p, err)
			}
			return
		}
		fp := p.String()
		if !strings.HasPrefix(fp, "SHA256:") || len(fp) != len("SHA256:")+43 {
			t.Fatalf("ParsePin(%q).String() = %q, not SHA256: and 43 characters", s, fp)
		}
		again, err := ParsePin(fp)
		if err != nil {
			t.Fatalf("ParsePin(%q) = %q, which does not parse again: %v", s, fp, err)
		}
		if again.String() != fp {
			t.Fatalf("ParsePin(%q) = %q, re-parsed %q", s, fp, again.String())
		}
		if p.key != nil && !p.Matches(p.key) {
			t.Fatalf("key-line pin from %q does not match its own key", s)
		}
	})
}

func FuzzParseJump(f *testing.F) {
	for _, s := range []string{
		"bastion", "jump@bastion", "bastion:2222", "[::1]:2222", "[::1]", "user@[fe80::1]:22",
		"", "a,b", "ssh://x", "::1", "host:", "host:0", "host:65536", "host:abc", "@host",
		"-oProxyCommand=x", "user@", "a b", "[::1", "[]", "a@b@c", "[a]:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseJump(s)
		if err != nil {
			if e != (Endpoint{}) {
				t.Fatalf("ParseJump(%q) returned %+v with error %v", s, e, err)
			}
			return
		}
		if e.Host == "" {
			t.Fatalf("ParseJump(%q) gave an empty host: %#v", s, e)
		}
		if e.Port < 1 || e.Port > 65535 {
			t.Fatalf("ParseJump(%q) gave port %d", s, e.Port)
		}
		text := e.Addr()
		if e.User != "" {
			text = e.User + "@" + text
		}
		again, err := ParseJump(text)
		if err != nil {
			t.Fatalf("ParseJump(%q) = %#v, but its text %q does not parse: %v", s, e, text, err)
		}
		if again != e {
			t.Fatalf("ParseJump(%q) = %#v, but its text %q parses to %#v", s, e, text, again)
		}
	})
}
