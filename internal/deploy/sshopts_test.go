package deploy

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// sshOptCorpus is what the validator must accept and refuse.
var sshOptCorpus = []struct {
	item string
	ok   bool
}{
	{"Port=2222", true},
	{"ProxyJump=ops@bastion.example.org:2222", true},
	{"StrictHostKeyChecking=yes", true},
	{"UserKnownHostsFile=/dev/null", true},
	{"ProxyCommand=ssh -W %h:%p bastion", true},
	{"IdentityFile=~/.ssh/id_ed25519", true},
	{"SendEnv=LANG LC_*", true},
	{"ServerAliveCountMax=3", true},
	{"X11Forwarding=no", true},
	{"a=b", true},
	{"-o Port=2222", false},
	{"-oPort=2222", false},
	{"-J", false},
	{"-J bastion", false},
	{"-p 2222", false},
	{"Port 2222", false},
	{"Port", false},
	{"Port=", false},
	{"=2222", false},
	{"", false},
	{" Port=2222", false},
	{"2Port=2222", false},
	{"Po-rt=2222", false},
	{"Port=22\n22", false},
	{"Port=22\t22", false},
	{"Port=\u00e9", false},
	{"Port:2222", false},
}

func TestCheckSSHOpt(t *testing.T) {
	t.Parallel()
	for _, c := range sshOptCorpus {
		err := CheckSSHOpt(c.item)
		if (err == nil) != c.ok {
			t.Errorf("CheckSSHOpt(%q) = %v, want ok=%v", c.item, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "Key=Value such as Port=2222") {
			t.Errorf("CheckSSHOpt(%q): %q does not name the form", c.item, err)
		}
	}
	for item, fix := range map[string]string{"-o Port=2222": `write "Port=2222"`, "-J bastion": "ProxyJump=host", "Port 2222": `write "Port=2222"`} {
		if err := CheckSSHOpt(item); err == nil || !strings.Contains(err.Error(), fix) {
			t.Errorf("CheckSSHOpt(%q) = %v, want the fix %q", item, err, fix)
		}
	}
}

// The published pattern, read by a POSIX ERE engine (grep -E) and by an
// ECMA-262 engine (node), admits exactly what the validator admits.
func TestSSHOptPatternAgreesAcrossEngines(t *testing.T) {
	t.Parallel()
	var items []string
	for _, c := range sshOptCorpus {
		if !strings.ContainsAny(c.item, "\n") { // grep reads lines
			items = append(items, c.item)
		}
	}
	for engine, matches := range map[string][]bool{"POSIX ERE (grep -E)": grepE(t, items), "ECMA-262 (node)": ecma(t, items)} {
		for i, item := range items {
			if want := CheckSSHOpt(item) == nil; matches[i] != want {
				t.Errorf("%s: %q matches=%v, validator ok=%v", engine, item, matches[i], want)
			}
		}
	}
}

// grepE matches each item against the pattern with grep -E, in the C
// locale (ranges are byte ranges).
func grepE(t *testing.T, items []string) []bool {
	t.Helper()
	out := make([]bool, len(items))
	for i, item := range items {
		cmd := exec.Command("grep", "-E", "-q", "-e", SSHOptPattern)
		cmd.Env = []string{"LC_ALL=C"}
		cmd.Stdin = strings.NewReader(item + "\n")
		err := cmd.Run()
		switch e := err.(type) {
		case nil:
			out[i] = true
		case *exec.ExitError:
			if e.ExitCode() != 1 {
				t.Fatalf("grep -E on %q: %v", item, err)
			}
		default:
			t.Fatalf("grep -E: %v (Debian package grep)", err)
		}
	}
	return out
}

// ecma matches every item with node's RegExp.
func ecma(t *testing.T, items []string) []bool {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: install Debian package nodejs (scripts/setup.sh does)")
	}
	in, _ := json.Marshal(map[string]any{"pattern": SSHOptPattern, "items": items})
	cmd := exec.Command(node, "-e", `const d = JSON.parse(require("fs").readFileSync(0, "utf8")); const re = new RegExp(d.pattern); process.stdout.write(JSON.stringify(d.items.map(s => re.test(s))));`)
	cmd.Stdin = bytes.NewReader(in)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var out []bool
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != len(items) {
		t.Fatalf("node answered %q: %v", raw, err)
	}
	return out
}

func FuzzCheckSSHOpt(f *testing.F) {
	for _, c := range sshOptCorpus {
		f.Add(c.item)
	}
	f.Fuzz(func(t *testing.T, item string) {
		err := CheckSSHOpt(item)
		if err == nil {
			// What is accepted is safe to give ssh as one -o argument.
			k, v, ok := strings.Cut(item, "=")
			if !ok || k == "" || v == "" || strings.HasPrefix(item, "-") || strings.ContainsAny(item, "\n\r\t\x00") {
				t.Fatalf("accepted %q", item)
			}
		}
	})
}
