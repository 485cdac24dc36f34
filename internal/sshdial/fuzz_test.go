package sshdial

import (
	"crypto/ed25519"
	"slices"
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
	comment := "# 127.0.0.1:2222 SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u10"
	for _, s := range []string{
		fp, fp + "=", " " + fp + "\n", line, line + " root@web1",
		"", "SHA256:", "SHA256:abc", "MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48",
		"16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", "no-pty " + line, line + "\n" + line,
		"ssh-ed25519", "ssh-rsa AAAA", "garbage",
		// ssh-keygen -lf lines, known_hosts and ssh-keyscan lines, and pasted output.
		"256 " + fp + " [127.0.0.1]:2222 (ED25519)", "256 " + fp + " no comment (ED25519)", "256 " + fp + " (ED25519)",
		"384 " + fp + " root@web 1 (ECDSA)", "3072 " + fp + " web1 (RSA)", "256 " + fp, "255 " + fp + " x (ECDSA)",
		"256 " + fp + " x (ED25519-CERT)", "1024 " + fp + " x (DSA)", "256 MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48 no comment (ED25519)",
		"[127.0.0.1]:2222 " + line, "host " + line, "web1,10.0.0.1 " + line + " c", "|1|5tjFsYoc0ILxBIjqinX6x0bv3+A=|WL/YLds+DdfQChSLfIa1dFz5PhE= " + line,
		"@cert-authority *.example.com " + line, "@revoked web1 " + line, `from="10.0.0.1" ` + line,
		comment + "\n[127.0.0.1]:2222 " + line + "\n", comment + "\r\n256 " + fp + " [127.0.0.1]:2222 (ED25519)\r\n",
		comment + "\n", "\n  # c\n\n  " + line + "\n", "256 " + fp + " a (ED25519)\n256 " + fp + " b (ED25519)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePin(s)
		if err != nil {
			if !p.IsZero() {
				t.Fatalf("ParsePin(%q) returned pin %q with error %v", s, p, err)
			}
			// A refusal says what is accepted and quotes at most an abbreviated line.
			if msg := err.Error(); !strings.HasSuffix(msg, pinForms) || len(msg) > 400 {
				t.Fatalf("ParsePin(%q) error %q: want at most 400 bytes ending with the accepted forms", s, msg)
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
		// A pin offers at least one host key algorithm, and a typed one offers
		// only the algorithms of its type.
		algs := p.hostKeyAlgorithms()
		if len(algs) == 0 {
			t.Fatalf("pin from %q offers no host key algorithm", s)
		}
		if p.keyType != "" && !slices.Equal(algs, algorithmsFor(p.keyType)) {
			t.Fatalf("pin from %q of type %s offers %v", s, p.keyType, algs)
		}
		// ssh-keyscan's comments may come before the line: they change nothing.
		withComment, err := ParsePin("# comment\n" + s)
		if err != nil || withComment.String() != fp || withComment.keyType != p.keyType || (withComment.key != nil) != (p.key != nil) {
			t.Fatalf("ParsePin(%q) = %q, but after a comment line it is %q, %v", s, fp, withComment, err)
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
