package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"
)

// effectiveConfig is what the real ssh makes of a node's arguments.
func effectiveConfig(t *testing.T, c *Conn) map[string]string {
	t.Helper()
	cmd := exec.Command("ssh", append([]string{"-G"}, c.Args()...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("ssh -G %q: %v: %s", c.Args(), err, stderr.String())
	}
	out, err := parseEffective(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantOpt(t *testing.T, what string, got map[string]string, key, want string) {
	t.Helper()
	if got[key] != want {
		t.Errorf("%s: %s = %q, want %q", what, key, got[key], want)
	}
}

func openConn(t *testing.T, tr *Transport, s Settings) *Conn {
	t.Helper()
	c, err := tr.Open(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newTransport(t *testing.T) *Transport {
	dir := t.TempDir()
	return &Transport{KnownHostsFile: filepath.Join(dir, KnownHostsFileName), ControlDir: dir, RemoteExecTimeout: time.Minute}
}

// Every connection: BatchMode, the connect timeout and keepalives from
// remote_exec_timeout, the user, one master per node.
func TestTransportBaseOptions(t *testing.T) {
	t.Parallel()
	tr := newTransport(t)
	tr.RemoteExecTimeout = 90 * time.Second
	key := filepath.Join(t.TempDir(), "deploy")
	if err := os.WriteFile(key, []byte("not read by ssh -G"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := openConn(t, tr, Settings{Name: "web1", Host: "web1.example.org", User: "deploy", PrivateKeyFile: key, SSHOpts: []string{}})
	got := effectiveConfig(t, c)
	wantOpt(t, "base", got, "batchmode", "yes")
	wantOpt(t, "base", got, "connecttimeout", "10")
	wantOpt(t, "base", got, "serveraliveinterval", "5")
	wantOpt(t, "base", got, "serveralivecountmax", "18")
	wantOpt(t, "base", got, "user", "deploy")
	wantOpt(t, "base", got, "hostname", "web1.example.org")
	wantOpt(t, "base", got, "controlmaster", "false")
	if !strings.HasPrefix(got["controlpath"], tr.ControlDir) {
		t.Errorf("controlpath %q is not in %s", got["controlpath"], tr.ControlDir)
	}
	wantOpt(t, "base", got, "stricthostkeychecking", "accept-new")
	wantOpt(t, "base", got, "userknownhostsfile", tr.KnownHostsFile)
	if got["identityfile"] != key {
		t.Errorf("identityfile = %q", got["identityfile"])
	}
}

// A pinned node: only its key, in a temporary file removed afterwards.
func TestTransportPinnedHostKey(t *testing.T) {
	t.Parallel()
	tr := newTransport(t)
	c, err := tr.Open(context.Background(), Settings{Name: "web1", Host: "web1", User: "root", HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"})
	if err != nil {
		t.Fatal(err)
	}
	got := effectiveConfig(t, c)
	wantOpt(t, "pinned", got, "stricthostkeychecking", "true")
	wantOpt(t, "pinned", got, "globalknownhostsfile", "/dev/null")
	file := got["userknownhostsfile"]
	content, err := os.ReadFile(file)
	if err != nil || string(content) != "* ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n" {
		t.Fatalf("temporary known_hosts %s: %q, %v", file, content, err)
	}
	c.Close()
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the temporary known_hosts %s is still there after Close: %v", file, err)
	}
}

// ssh_opts come before the host-key options: theirs win; a node's port in
// ssh_opts wins over the config file's.
func TestTransportSSHOptsWin(t *testing.T) {
	t.Parallel()
	tr := newTransport(t)
	tr.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(tr.ConfigFile, []byte("Host web1\n  Port 2299\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := openConn(t, tr, Settings{Name: "web1", Host: "web1", User: "root", HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
		SSHOpts: []string{"Port=2200", "StrictHostKeyChecking=no", "ConnectTimeout=30"}})
	got := effectiveConfig(t, c)
	wantOpt(t, "ssh_opts", got, "port", "2200")
	wantOpt(t, "ssh_opts", got, "stricthostkeychecking", "false")
	wantOpt(t, "ssh_opts", got, "connecttimeout", "30")
	wantOpt(t, "ssh_opts", got, "batchmode", "yes")

	// Without ssh_opts, the config file's port applies.
	c = openConn(t, tr, Settings{Name: "web1", Host: "web1", User: "root"})
	wantOpt(t, "config file", effectiveConfig(t, c), "port", "2299")
}

// A host-key option the config file sets stays the config file's: none of
// ours is given for it. A config file that sends the host elsewhere is
// reported.
func TestTransportConfigFileHostKeyOptions(t *testing.T) {
	t.Parallel()
	tr := newTransport(t)
	tr.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
	kh := filepath.Join(t.TempDir(), "their_known_hosts")
	if err := os.WriteFile(tr.ConfigFile, []byte("Host web1\n  HostName 127.0.0.9\n  UserKnownHostsFile "+kh+"\n  StrictHostKeyChecking yes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := openConn(t, tr, Settings{Name: "web1", Host: "web1", User: "root"})
	got := effectiveConfig(t, c)
	wantOpt(t, "config file", got, "stricthostkeychecking", "true")
	wantOpt(t, "config file", got, "userknownhostsfile", kh)
	if c.Redirected != "web1 -> 127.0.0.9" {
		t.Errorf("Redirected = %q", c.Redirected)
	}
	for _, o := range c.opts {
		if strings.HasPrefix(o, "StrictHostKeyChecking=") || strings.HasPrefix(o, "UserKnownHostsFile=") {
			t.Errorf("gave %s although the config file sets it", o)
		}
	}
}

// A ProxyJump in ssh_opts: direct ssh gets a ProxyCommand whose jump uses
// accept-new with the deployment's file, so the node's own pin is checked
// end to end; nix-copy-closure keeps the ProxyJump.
func TestTransportProxyJump(t *testing.T) {
	t.Parallel()
	tr := newTransport(t)
	c := openConn(t, tr, Settings{Name: "db1", Host: "10.0.3.21", User: "root", HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
		SSHOpts: []string{"ProxyJump=ops@bastion.example.org:2222"}})
	got := effectiveConfig(t, c)
	pc := got["proxycommand"]
	for _, want := range []string{"BatchMode=yes", "StrictHostKeyChecking=accept-new", "UserKnownHostsFile=" + tr.KnownHostsFile, "-W %h:%p", "ssh://ops@bastion.example.org:2222"} {
		if !strings.Contains(pc, want) {
			t.Errorf("proxycommand %q lacks %q", pc, want)
		}
	}
	if got["proxyjump"] != "" && got["proxyjump"] != "none" {
		t.Errorf("direct ssh still has proxyjump %q", got["proxyjump"])
	}
	wantOpt(t, "jumped node", got, "stricthostkeychecking", "true")
	if !strings.Contains(c.NixSSHOpts(), "-o ProxyJump=ops@bastion.example.org:2222") || strings.Contains(c.NixSSHOpts(), "ProxyCommand") {
		t.Errorf("NIX_SSHOPTS = %q, want the ProxyJump as given", c.NixSSHOpts())
	}
}

// The jump's own ssh forwards nothing either, whatever the config file
// says of the bastion: the ssh that ProxyJump's ProxyCommand runs reads
// the file too, and the provider's agent must not reach a bastion.
func TestTransportProxyJumpForwardsNoAgent(t *testing.T) {
	t.Parallel()
	tr := newTransport(t)
	tr.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(tr.ConfigFile, []byte("Host *\n  ForwardAgent yes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args, err := tr.jumpArgs("ops@bastion.example.org:2222", "", "db1:22")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := exec.Command("ssh", append([]string{"-G"}, args...)...).Output()
	if err != nil {
		t.Fatalf("ssh -G %q: %v", args, err)
	}
	got, err := parseEffective(raw)
	if err != nil {
		t.Fatal(err)
	}
	wantOpt(t, "the jump's ssh", got, "forwardagent", "no")
	wantOpt(t, "the jump's ssh", got, "batchmode", "yes")
}

// An ssh_opts item in argv form is refused before anything runs.
func TestTransportRefusesArgvItems(t *testing.T) {
	t.Parallel()
	if _, err := newTransport(t).Open(context.Background(), Settings{Name: "a", Host: "a", SSHOpts: []string{"-o Port=2222"}}); err == nil {
		t.Fatal("accepted -o Port=2222")
	}
}

// Issue 12: the accept-new file is read as OpenSSH reads it (x/crypto's
// knownhosts): a line with a comment, or a hashed one, yields the key
// alone, never "AAAA... comment".
func TestRecordedKeyReadsKnownHostsAsOpenSSH(t *testing.T) {
	t.Parallel()
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	for name, line := range map[string]string{
		"a comment":                    "[10.0.0.5]:2222 " + key + " root@web1",
		"hashed":                       "|1|JfKTdBh7rNbXkVAQCRp4OQoPfmI=|USECr3SWf1JUPsms5AqfD5QfxkM= " + key,
		"two names":                    "web1,[10.0.0.5]:2222 " + key + " a comment with spaces",
		"a @cert-authority line first": "@cert-authority * ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPnH6HgDIhv2wZnX0eGx2A4WJ7KyHa7W0ns1wIB2QW6G\n[10.0.0.5]:2222 " + key + " c",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr := newTransport(t)
			if name == "hashed" {
				line = hashedLine(t, "[10.0.0.5]:2222", key)
			}
			if err := os.WriteFile(tr.KnownHostsFile, []byte(line+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c := openConn(t, tr, Settings{Name: "web1", Host: "10.0.0.5", User: "root", SSHOpts: []string{"Port=2222"}})
			if got, _ := c.RecordedKey(context.Background()); got != key {
				t.Errorf("RecordedKey = %q, want %q", got, key)
			}
		})
	}
}

// hashedLine is a known_hosts line for host with its name hashed, as
// HashKnownHosts writes it.
func hashedLine(t *testing.T, host, key string) string {
	t.Helper()
	return knownhosts.HashHostname(host) + " " + key
}

// FR-016: a host-key option the config file sets to ssh's own default
// value is the file's too, although ssh -G shows the same value with the
// file and without it: the file's own lines for the host say so. One set
// under a Host line that does not take the host is not the file's; one
// under a Match line may be (the deployment does not evaluate Match): it is
// left to the file for every host the file sets it for no other way, and
// named.
// Serial: ssh reads ~ of the config file's Include from the process's HOME.
func TestTransportConfigFileSetsADefaultValueFR016(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	mustMkdir(t, filepath.Join(home, ".ssh"), 0o700)
	if err := os.WriteFile(filepath.Join(home, ".ssh", "hosts.conf"), []byte("Host db1\n  GlobalKnownHostsFile /etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t)
	tr.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
	config := `# ssh's own defaults, spelled out
Host web1 web2
  StrictHostKeyChecking ask
Host=cache* !cache9
  UserKnownHostsFile=~/.ssh/known_hosts ~/.ssh/known_hosts2
Host db*
  Include hosts.conf
Match user deploy
  StrictHostKeyChecking ask
Host web3
  StrictHostKeyChecking "ask" # quoted, with a comment
`
	if err := os.WriteFile(tr.ConfigFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	pin := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	for _, c := range []struct {
		host     string
		fileOpts []string // the file's: not given
		ourOpts  []string // given
		maybe    []string
	}{
		{"web1", []string{"StrictHostKeyChecking"}, []string{"UserKnownHostsFile", "GlobalKnownHostsFile"}, nil},
		{"web3", []string{"StrictHostKeyChecking"}, []string{"UserKnownHostsFile"}, nil},
		{"cache1", []string{"UserKnownHostsFile", "StrictHostKeyChecking"}, []string{"GlobalKnownHostsFile"}, []string{"StrictHostKeyChecking"}},
		{"cache9", []string{"StrictHostKeyChecking"}, []string{"UserKnownHostsFile", "GlobalKnownHostsFile"}, []string{"StrictHostKeyChecking"}},
		{"db1", []string{"GlobalKnownHostsFile", "StrictHostKeyChecking"}, []string{"UserKnownHostsFile"}, []string{"StrictHostKeyChecking"}},
		{"mail1", []string{"StrictHostKeyChecking"}, []string{"UserKnownHostsFile", "GlobalKnownHostsFile"}, []string{"StrictHostKeyChecking"}},
	} {
		conn := openConn(t, tr, Settings{Name: c.host, Host: c.host, User: "root", HostKey: pin})
		given := map[string]bool{}
		for _, o := range conn.opts {
			key, _, _ := strings.Cut(o, "=")
			given[key] = true
		}
		for _, k := range c.fileOpts {
			if given[k] {
				t.Errorf("%s: gave %s although the config file sets it for the host", c.host, k)
			}
		}
		for _, k := range c.ourOpts {
			if !given[k] {
				t.Errorf("%s: did not give %s, which the config file does not set for the host (options %q)", c.host, k, conn.opts)
			}
		}
		if !slices.Equal(conn.MaybeFromConfig, c.maybe) {
			t.Errorf("%s: MaybeFromConfig = %q, want %q", c.host, conn.MaybeFromConfig, c.maybe)
		}
	}
}

// FR-016: the Host lines are read as ssh reads them. For a value ssh -G
// shows (not ssh's default), the file's own lines find an option set for
// exactly the hosts ssh finds it set for.
func TestConfigFileSetsAgreesWithSSHFR016(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inc := filepath.Join(dir, "inc.conf")
	if err := os.WriteFile(inc, []byte("Host other\n  StrictHostKeyChecking yes\nHost *\n  StrictHostKeyChecking yes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	configs := []string{
		"StrictHostKeyChecking yes\n",
		"Host web1\n  StrictHostKeyChecking yes\n",
		"Host web? !web2\n  StrictHostKeyChecking yes\n",
		"Host *.example.org\n  StrictHostKeyChecking=yes\n",
		"Host Web1\n  StrictHostKeyChecking yes\n",
		"Host web1,web2\n  StrictHostKeyChecking yes\n",
		"Host \"web2\"\n  StrictHostKeyChecking yes\n",
		"Host nomatch\n  Include " + inc + "\n",
		"Host web*\n  Include " + inc + "\n",
		"Host web1\nHost *\n  StrictHostKeyChecking yes\n",
		"# Host web1\nHost [w]eb1\n  StrictHostKeyChecking yes\n",
		"Match all\n  StrictHostKeyChecking yes\n",
	}
	hosts := []string{"web1", "web2", "web3", "WEB1", "a.example.org", "[w]eb1", "other"}
	tr := &Transport{}
	for i, config := range configs {
		file := filepath.Join(dir, fmt.Sprintf("config%d", i))
		if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, host := range hosts {
			with, err := tr.effective(context.Background(), file, host)
			if err != nil {
				t.Fatal(err)
			}
			set, _, err := configFileSets(file, host)
			if err != nil {
				t.Fatal(err)
			}
			if ssh := with["stricthostkeychecking"] == "true"; set["stricthostkeychecking"] != ssh {
				t.Errorf("config %q, host %s: the file's lines set StrictHostKeyChecking: %v; ssh -G: %v", config, host, set["stricthostkeychecking"], ssh)
			}
		}
	}
}
