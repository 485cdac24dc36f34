package provider

import (
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// importTestFP is a syntactically valid SHA256 fingerprint (32 zero bytes).
const importTestFP = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

func TestParseImportID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    importID
		errPart string // non-empty: an error holding this is expected
	}{
		{name: "bare host names the executor after it", in: "web1",
			want: importID{name: "web1", host: "web1", port: 22}},
		{name: "user@host:port", in: "deploy@web1.example.org:2222",
			want: importID{name: "web1.example.org", user: "deploy", host: "web1.example.org", port: 2222}},
		{name: "ssh:// prefix accepted", in: "ssh://deploy@web1:2200",
			want: importID{name: "web1", user: "deploy", host: "web1", port: 2200}},
		{name: "bracketed ipv6", in: "root@[fe80::1]:22",
			want: importID{name: "fe80::1", user: "root", host: "fe80::1", port: 22}},
		{name: "surrounding whitespace trimmed", in: "  web1 \n",
			want: importID{name: "web1", host: "web1", port: 22}},
		{name: "every key", in: "deploy@web1.example.org:2222,name=web1,host_key_fingerprint=" + importTestFP +
			",proxy_jump=jump@bastion:2200,private_key_file=~/.ssh/id_ed25519",
			want: importID{name: "web1", user: "deploy", host: "web1.example.org", port: 2222,
				hostKeyFingerprint: importTestFP, proxyJump: "jump@bastion:2200", privateKeyFile: "~/.ssh/id_ed25519"}},
		{name: "spaces around keys and values trimmed", in: "web1, name = app ,private_key_file= /k ",
			want: importID{name: "app", host: "web1", port: 22, privateKeyFile: "/k"}},
		{name: "value holding '=' kept whole", in: "web1,name=a=b",
			want: importID{name: "a=b", host: "web1", port: 22}},
		// Any 32 bytes make an ed25519 key blob; this one is made up.
		{name: "public key line as the pin", in: "web1,host_key_fingerprint=ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDt6lfGmkGjbyFC3XWYWeWFSkVjWQ4U0VcGQhkZ2DT3x",
			want: importID{name: "web1", host: "web1", port: 22,
				hostKeyFingerprint: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDt6lfGmkGjbyFC3XWYWeWFSkVjWQ4U0VcGQhkZ2DT3x"}},
		{name: "empty", in: "", errPart: "empty jump host"},
		{name: "host part empty before pairs", in: ",name=x", errPart: "empty jump host"},
		{name: "bad port", in: "web1:0", errPart: "not a number from 1 to 65535"},
		{name: "unbracketed ipv6", in: "::1", errPart: "put an IPv6 address in brackets"},
		{name: "option injection as host", in: "-oProxyCommand=x", errPart: "starts with '-'"},
		{name: "other URI scheme", in: "sftp://web1", errPart: "is a URI"},
		{name: "pair without '='", in: "web1,name", errPart: `"name" is not key=value`},
		{name: "pair with empty value", in: "web1,name=", errPart: `"name=" is not key=value`},
		{name: "trailing comma", in: "web1,", errPart: `"" is not key=value`},
		{name: "unknown key", in: "web1,port=22", errPart: `unknown key "port"`},
		{name: "keys are case-sensitive", in: "web1,Name=x", errPart: `unknown key "Name"`},
		{name: "secret key not importable", in: "web1,private_key=abc", errPart: `unknown key "private_key"`},
		{name: "MD5 fingerprint refused", in: "web1,host_key_fingerprint=16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", errPart: "host_key_fingerprint: "},
		{name: "short fingerprint refused", in: "web1,host_key_fingerprint=SHA256:abc", errPart: "host_key_fingerprint: "},
		{name: "bad proxy_jump refused", in: "web1,proxy_jump=::1", errPart: "proxy_jump: "},
		{name: "proxy_jump uri refused", in: "web1,proxy_jump=ssh://bastion", errPart: "proxy_jump: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseImportID(tc.in)
			if tc.errPart != "" {
				if err == nil {
					t.Fatalf("parseImportID(%q) = %#v, want an error", tc.in, got)
				}
				if !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("error %q does not contain %q", err, tc.errPart)
				}
				if got != (importID{}) {
					t.Fatalf("parseImportID returned %#v with its error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseImportID(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("parseImportID(%q) =\n %#v\nwant\n %#v", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzParseImportID(f *testing.F) {
	for _, s := range []string{
		"web1", "deploy@web1.example.org:2222", "ssh://deploy@web1:2200", "root@[fe80::1]:22",
		"web1,name=app,host_key_fingerprint=" + importTestFP + ",proxy_jump=jump@bastion:2200,private_key_file=~/k",
		"", ",", "web1,", "web1,name=", "web1,name", "web1,port=22", "::1", "web1:0", "ssh://ssh://x",
		"web1,proxy_jump=a,b", "web1,host_key_fingerprint=SHA256:abc",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := parseImportID(s)
		if err != nil {
			if id != (importID{}) {
				t.Fatalf("parseImportID(%q) returned %#v with error %v", s, id, err)
			}
			return
		}
		if id.name == "" || id.host == "" {
			t.Fatalf("parseImportID(%q) = %#v: empty name or host", s, id)
		}
		if id.port < 1 || id.port > 65535 {
			t.Fatalf("parseImportID(%q) = %#v: port out of range", s, id)
		}
		if id.hostKeyFingerprint != "" {
			if _, err := sshdial.ParsePin(id.hostKeyFingerprint); err != nil {
				t.Fatalf("parseImportID(%q) kept an unparsable pin %q: %v", s, id.hostKeyFingerprint, err)
			}
		}
		if id.proxyJump != "" {
			if _, err := sshdial.ParseJump(id.proxyJump); err != nil {
				t.Fatalf("parseImportID(%q) kept an unparsable proxy_jump %q: %v", s, id.proxyJump, err)
			}
		}
		// The host must be one the resource's own validation would accept.
		if err := sshdial.CheckHost(id.host); err != nil {
			t.Fatalf("parseImportID(%q) = %#v: host refused by CheckHost: %v", s, id, err)
		}
	})
}
