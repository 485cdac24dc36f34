package sshdial

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// anyError marks a case that must be refused whatever the message says.
const anyError = "\x00any"

func TestParseJump(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    Endpoint
		errPart string // non-empty: an error holding this is expected
	}{
		{name: "bare host", in: "bastion", want: Endpoint{Host: "bastion", Port: 22}},
		{name: "fqdn", in: "bastion.example.org", want: Endpoint{Host: "bastion.example.org", Port: 22}},
		{name: "user@host", in: "jump@bastion", want: Endpoint{User: "jump", Host: "bastion", Port: 22}},
		{name: "host:port", in: "bastion:2222", want: Endpoint{Host: "bastion", Port: 2222}},
		{name: "user@host:port", in: "jump@10.0.0.1:2222", want: Endpoint{User: "jump", Host: "10.0.0.1", Port: 2222}},
		{name: "bracketed ipv6 with port", in: "[::1]:2222", want: Endpoint{Host: "::1", Port: 2222}},
		{name: "bracketed ipv6 without port", in: "[::1]", want: Endpoint{Host: "::1", Port: 22}},
		{name: "user@bracketed link-local ipv6 with port", in: "user@[fe80::1]:22", want: Endpoint{User: "user", Host: "fe80::1", Port: 22}},
		{name: "surrounding whitespace trimmed", in: "  jump@bastion:2200\n", want: Endpoint{User: "jump", Host: "bastion", Port: 2200}},
		{name: "port 1", in: "bastion:1", want: Endpoint{Host: "bastion", Port: 1}},
		{name: "port 65535", in: "bastion:65535", want: Endpoint{Host: "bastion", Port: 65535}},
		{name: "empty", in: "", errPart: "empty jump host"},
		{name: "blank", in: "   ", errPart: "empty jump host"},
		{name: "two hops", in: "a,b", errPart: "only one hop is supported"},
		{name: "uri", in: "ssh://x", errPart: "is a URI"},
		{name: "unbracketed ipv6", in: "::1", errPart: "put an IPv6 address in brackets"},
		{name: "unbracketed ipv6 with user", in: "u@fe80::1", errPart: "put an IPv6 address in brackets"},
		{name: "empty port", in: "host:", errPart: "empty port"},
		{name: "empty port after bracket", in: "[::1]:", errPart: "empty port"},
		{name: "port 0", in: "host:0", errPart: "not a number from 1 to 65535"},
		{name: "port 65536", in: "host:65536", errPart: "not a number from 1 to 65535"},
		{name: "negative port", in: "host:-1", errPart: "not a number from 1 to 65535"},
		{name: "port not a number", in: "host:abc", errPart: "not a number from 1 to 65535"},
		{name: "port with a sign", in: "host:+22", errPart: "not a number from 1 to 65535"},
		{name: "empty user", in: "@host", errPart: "empty user"},
		{name: "option injection as host", in: "-oProxyCommand=x", errPart: "starts with '-'"},
		{name: "option injection as user", in: "-oProxyCommand=x@host", errPart: "starts with '-'"},
		{name: "user without host", in: "user@", errPart: "empty host"},
		{name: "space in host", in: "a b", errPart: "contains a space"},
		{name: "two @", in: "a@b@host", errPart: "user \"a@b\""},
		{name: "slash in host", in: "host/path", errPart: `host "host/path" contains`},
		{name: "unclosed bracket", in: "[::1", errPart: "unclosed ["},
		{name: "junk after bracket", in: "[::1]x", errPart: "expected :port after ]"},
		{name: "empty brackets", in: "[]", errPart: "empty host name"},
		// A host is a name or an address: whitespace and control characters cannot be part of one.
		{name: "bracketed vertical tab as host", in: "[\v]", errPart: anyError},
		{name: "bracketed form feed as host", in: "[\f]", errPart: anyError},
		{name: "no-break space inside a bracketed host", in: "[\u00a0web1]", errPart: anyError},
		{name: "NUL byte in host", in: "web1\x00", errPart: anyError},
		{name: "vertical tab inside user@host", in: "u@web\v1", errPart: anyError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseJump(tc.in)
			if tc.errPart != "" {
				if err == nil {
					t.Fatalf("ParseJump(%q) = %#v, want an error", tc.in, got)
				}
				if tc.errPart != anyError && !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("error %q does not contain %q", err, tc.errPart)
				}
				if got != (Endpoint{}) {
					t.Fatalf("ParseJump returned %+v with its error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseJump(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParseJump(%q) = %#v, want %#v", tc.in, got, tc.want)
			}
		})
	}
}

func TestEndpointAddrAndString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e              Endpoint
		addr, asString string
	}{
		{Endpoint{Host: "web1", Port: 22}, "web1:22", "web1:22"},
		{Endpoint{User: "deploy", Host: "web1", Port: 2222}, "web1:2222", "deploy@web1:2222"},
		{Endpoint{User: "u", Host: "fe80::1", Port: 22}, "[fe80::1]:22", "u@[fe80::1]:22"},
	}
	for _, tc := range tests {
		t.Run(tc.asString, func(t *testing.T) {
			if got := tc.e.Addr(); got != tc.addr {
				t.Fatalf("Addr() = %q, want %q", got, tc.addr)
			}
			if got := tc.e.String(); got != tc.asString {
				t.Fatalf("String() = %q, want %q", got, tc.asString)
			}
		})
	}
}

// Serial: ~ is the process's HOME.
func TestExpandHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	tests := []struct {
		name, in, want string
	}{
		{"lone tilde", "~", home},
		{"tilde slash path", "~/.ssh/id_ed25519", filepath.Join(home, ".ssh", "id_ed25519")},
		{"tilde slash", "~/", home},
		{"other user's home is left alone", "~deploy/.ssh/id", "~deploy/.ssh/id"},
		{"absolute path unchanged", "/etc/ssh/key", "/etc/ssh/key"},
		{"relative path unchanged", "keys/id", "keys/id"},
		{"tilde not at start unchanged", "/tmp/~/x", "/tmp/~/x"},
		{"empty unchanged", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExpandHome(tc.in)
			if err != nil {
				t.Fatalf("ExpandHome(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ExpandHome(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Serial: ~ is the process's HOME.
func TestExpandHomeWithoutHome(t *testing.T) {
	// With no home directory a "~" path is an error, not a path relative to "/".
	t.Setenv("HOME", "")
	got, err := ExpandHome("~/.ssh/id")
	if err == nil {
		t.Fatalf("ExpandHome with HOME unset = %q, want an error", got)
	}
	if !strings.Contains(err.Error(), `expanding "~/.ssh/id"`) {
		t.Fatalf("error %q does not name the path", err)
	}
}

func TestCredentialsStringHidesSecrets(t *testing.T) {
	t.Parallel()
	const secret = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
	tests := []struct {
		name string
		c    Credentials
		want string
	}{
		{"nothing", Credentials{}, "no credentials"},
		{"inline key with passphrase", Credentials{PrivateKey: []byte(secret), Passphrase: []byte("hunter2")}, "inline key"},
		{"every kind", Credentials{PrivateKey: []byte(secret), PrivateKeyFile: "/k", Agent: true, Withheld: "write-only key"}, "inline key, key file /k, agent, withheld key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.String(); got != tc.want {
				t.Fatalf("String() = %q, want %q", got, tc.want)
			}
			for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
				out := fmt.Sprintf(verb, tc.c)
				if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, "b3BlbnNzaC1") || strings.Contains(out, "hunter2") {
					t.Fatalf("%s leaks a secret: %q", verb, out)
				}
			}
		})
	}
}
