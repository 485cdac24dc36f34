package deploy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"

	"golang.org/x/crypto/ssh"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// Transport settings shared by every node of a deployment.
const (
	DefaultRemoteExecTimeout = 60 * time.Second
	connectTimeoutSeconds    = 10
	keepaliveInterval        = 5 * time.Second
	// KnownHostsFileName is the accept-new trust store's name, beside the
	// key file or in the temporary directory.
	KnownHostsFileName = "fleet-known-hosts"
)

// Transport describes how the system OpenSSH client reaches the nodes of a
// deployment.
type Transport struct {
	// SSH is the ssh binary; "ssh" on PATH when empty.
	SSH string
	// ConfigFile is given to every ssh as -F when set.
	ConfigFile string
	// RemoteExecTimeout is how long a remote command may stay silent
	// before the keepalive ends it: ServerAliveCountMax is it / 5 s.
	RemoteExecTimeout time.Duration
	// KnownHostsFile is the persistent accept-new trust store for nodes
	// without a host key and for jump hosts.
	KnownHostsFile string
	// ControlDir holds the multiplexing sockets and the deployment's
	// temporary files (pinned host keys); NewControlDir makes it private
	// and short enough (a Unix socket path is at most 104 bytes).
	ControlDir string
	// MasterPersist is how long a node's master connection outlives its
	// last session when the deployer is gone before it could end it (a
	// killed process); masterPersist when zero.
	MasterPersist time.Duration
	// Agent is the socket of the provider's KeyAgent, given to every ssh
	// as IdentityAgent (never in the environment, where a ProxyCommand's
	// ssh would find it); empty for the user's own agent, if any.
	Agent string
}

// command is an ssh (or what runs it).
func (t *Transport) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return command(ctx, name, args...)
}

// connCount numbers the process's connections, for their sockets.
var connCount atomic.Int64

// hostKeyOptions are the options a pin or accept-new sets, compared in
// lower case as ssh -G prints them.
var hostKeyOptions = []string{"stricthostkeychecking", "userknownhostsfile", "globalknownhostsfile", "knownhostscommand"}

// IsHostKeyOption reports whether an ssh option (any case) decides which
// host key a login accepts.
func IsHostKeyOption(key string) bool { return slices.Contains(hostKeyOptions, strings.ToLower(key)) }

// hostKeyOptionNames are the same as ssh_config(5) spells them.
var hostKeyOptionNames = []string{"StrictHostKeyChecking", "UserKnownHostsFile", "GlobalKnownHostsFile", "KnownHostsCommand"}

// Conn is one node's transport: the options of every ssh to it, one
// multiplexed master shared by every command and by nix-copy-closure.
type Conn struct {
	t        *Transport
	s        Settings
	opts     []string // -o options, in order, for direct ssh
	copyOpts []string // the same for NIX_SSHOPTS (ProxyJump kept as it is)
	pinned   string   // the temporary known_hosts of a pinned node
	offered  string   // the file KnownHostsCommand writes the offered key to
	identify string   // the KnownHostsCommand option that writes it
	control  string   // the ControlPath option
	// configLink is a link to the config file for NIX_SSHOPTS, when its
	// path holds whitespace.
	configLink string
	identity   string // the IdentityFile option of a given key
	// keyOptsElsewhere says ssh_opts or the config file set host-key
	// options, which win over the deployment's: see SeenKey.
	keyOptsElsewhere bool
	mastered         bool // a master was started: Close ends it
	// Redirected is set when the config file sends the host elsewhere:
	// "web1 -> 10.0.0.5".
	Redirected string
	// MaybeFromConfig are the host-key options the config file sets only
	// under a Match line, which is not evaluated: they are left to the
	// file, whether or not that Match applies to the node (FR-016).
	MaybeFromConfig []string
}

func (t *Transport) ssh() string {
	if t.SSH != "" {
		return t.SSH
	}
	return "ssh"
}

func (t *Transport) aliveCount() int {
	return max(1, int(t.remoteExecTimeout()/keepaliveInterval))
}

func (t *Transport) remoteExecTimeout() time.Duration {
	return orDefault(t.RemoteExecTimeout, DefaultRemoteExecTimeout)
}

// Open prepares node s's transport: a pinned node gets a temporary
// known_hosts holding only its key (removed by Close). It reads which
// host-key options the config file sets (configSets), and gives none of
// those. Nothing of this machine's is forwarded to the host, and a given
// key is the only identity offered.
func (t *Transport) Open(ctx context.Context, s Settings) (*Conn, error) {
	for _, o := range s.SSHOpts {
		if err := CheckSSHOpt(o); err != nil {
			return nil, err
		}
		if err := CheckForwarding(o); err != nil {
			return nil, fmt.Errorf("node %s: %w", s.Name, err)
		}
	}
	// A socket of the connection's own, not ssh's %C: that hashes the
	// host name the config file resolves, and nix-copy-closure's ssh may
	// not read the config file (see NixSSHOpts).
	n := connCount.Add(1)
	control, err := pathOption("ControlPath", filepath.Join(t.ControlDir, "m"+strconv.FormatInt(n, 10)), "")
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", s.Name, err)
	}
	c := &Conn{t: t, s: s, control: control}
	if strings.ContainsAny(t.ConfigFile, " \t") {
		// Nix splits NIX_SSHOPTS on whitespace: the copy reads the config
		// file through a link whose path holds none.
		c.configLink = filepath.Join(t.ControlDir, "config-"+strconv.FormatInt(n, 10))
		target, err := filepath.Abs(t.ConfigFile)
		if err == nil {
			err = os.Symlink(target, c.configLink)
		}
		if err != nil {
			return nil, fmt.Errorf("node %s: ssh_config_file: %w", s.Name, err)
		}
	}
	head := append([]string{"BatchMode=yes", "User=" + s.User}, noForwarding...)
	if s.PrivateKeyFile != "" {
		if c.identity, err = pathOption("IdentityFile", s.PrivateKeyFile, ""); err != nil {
			return nil, fmt.Errorf("node %s: private_key_file: %w", s.Name, err)
		}
		head = append(head, "IdentitiesOnly=yes")
	}
	if t.Agent != "" {
		agent, err := pathOption("IdentityAgent", t.Agent, "")
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", s.Name, err)
		}
		head = append(head, agent)
	}
	fromConfig, maybe, redirected, err := t.configSets(ctx, s)
	if err != nil {
		return nil, err
	}
	c.Redirected, c.MaybeFromConfig = redirected, maybe
	var hostKey []string
	if pin := c.pin(); pin != "" {
		f, err := os.CreateTemp(t.ControlDir, "pin-*")
		if err != nil {
			return nil, fmt.Errorf("node %s: temporary known_hosts: %w", s.Name, err)
		}
		c.pinned = f.Name()
		_, werr := fmt.Fprintf(f, "* %s\n", pin)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		var file string
		if werr == nil {
			file, werr = pathOption("UserKnownHostsFile", c.pinned, "")
		}
		if werr != nil {
			c.Close()
			return nil, fmt.Errorf("node %s: temporary known_hosts: %w", s.Name, werr)
		}
		hostKey = []string{"StrictHostKeyChecking=yes", "GlobalKnownHostsFile=/dev/null", file}
	} else {
		file, err := pathOption("UserKnownHostsFile", t.KnownHostsFile, "")
		if err != nil {
			return nil, fmt.Errorf("node %s: known_hosts_file: %w", s.Name, err)
		}
		hostKey = []string{"StrictHostKeyChecking=accept-new", file}
	}
	fromOpts := map[string]bool{}
	for _, o := range s.SSHOpts {
		key, _, _ := strings.Cut(o, "=")
		fromOpts[strings.ToLower(key)] = true
	}
	for _, k := range hostKeyOptions {
		c.keyOptsElsewhere = c.keyOptsElsewhere || fromConfig[k] || fromOpts[k]
	}
	if !fromConfig["knownhostscommand"] && !fromOpts["knownhostscommand"] {
		// Records the key the host offers, for the message of a refused
		// key; it adds no key, so it trusts nothing. Only OfferedKey's
		// connection gets it (it costs a login about a third more).
		f, err := os.CreateTemp(t.ControlDir, "offered-*")
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("node %s: temporary file: %w", s.Name, err)
		}
		_ = f.Close()
		c.offered = f.Name()
		// The control directory's path is plain (controlBase), so the
		// file's name needs no quoting inside the command.
		c.identify = "KnownHostsCommand=/bin/sh -c '[ \"$1\" = HOSTNAME ] && [ -n \"$3\" ] && echo \"$2 $3\" > \"$4\"; exit 0' fleet-offered-key %I %t %K '" + c.offered + "'"
	}
	tail := []string{fmt.Sprintf("ConnectTimeout=%d", connectTimeoutSeconds),
		fmt.Sprintf("ServerAliveInterval=%d", int(keepaliveInterval/time.Second)),
		fmt.Sprintf("ServerAliveCountMax=%d", t.aliveCount())}
	for _, o := range hostKey {
		key, _, _ := strings.Cut(o, "=")
		if !fromConfig[strings.ToLower(key)] {
			tail = append(tail, o)
		}
	}
	var direct, copied []string
	for _, o := range s.SSHOpts {
		key, value, _ := strings.Cut(o, "=")
		copied = append(copied, o)
		if strings.EqualFold(key, "ProxyJump") {
			// The jump host gets accept-new with the deployment's file;
			// the node's own key is still checked end to end by the outer
			// ssh, which a ProxyJump would hand the pinned file to.
			jump, err := t.jumpCommand(value, s.PrivateKeyFile)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("node %s: %w", s.Name, err)
			}
			direct = append(direct, "ProxyCommand="+jump)
			continue
		}
		direct = append(direct, o)
	}
	c.opts = append(append(append([]string{}, head...), direct...), tail...)
	c.copyOpts = append(append(append([]string{}, head...), copied...), tail...)
	return c, nil
}

// jumpArgs are the arguments of an ssh through the jump host(s) of a
// ProxyJump to forward to (-W) to dest ("host:port"): BatchMode, accept-new
// with the deployment's known_hosts file, the config file, the node's key,
// nothing forwarded.
func (t *Transport) jumpArgs(jump, keyFile, dest string) ([]string, error) {
	var args []string
	if t.ConfigFile != "" {
		args = append(args, "-F", t.ConfigFile)
	}
	if keyFile != "" {
		id, err := pathOption("IdentityFile", keyFile, "")
		if err != nil {
			return nil, fmt.Errorf("private_key_file: %w", err)
		}
		args = append(args, "-o", id, "-o", "IdentitiesOnly=yes")
	}
	kh, err := pathOption("UserKnownHostsFile", t.KnownHostsFile, "")
	if err != nil {
		return nil, fmt.Errorf("known_hosts_file: %w", err)
	}
	if t.Agent != "" {
		agent, err := pathOption("IdentityAgent", t.Agent, "")
		if err != nil {
			return nil, err
		}
		args = append(args, "-o", agent)
	}
	args = append(args, "-o", "BatchMode=yes", "-o", "ForwardAgent=no", "-o", "StrictHostKeyChecking=accept-new",
		"-o", kh, "-o", fmt.Sprintf("ConnectTimeout=%d", connectTimeoutSeconds))
	// ProxyJump takes [user@]host[:port] hops, comma-separated; a
	// destination takes a port only as an ssh:// URI.
	hops := strings.Split(jump, ",")
	if len(hops) > 1 {
		args = append(args, "-J", strings.Join(hops[:len(hops)-1], ","))
	}
	return append(args, "-W", dest, "ssh://"+strings.TrimPrefix(hops[len(hops)-1], "ssh://")), nil
}

// jumpCommand is the ProxyCommand for a jump host (jumpArgs). Each argument
// is quoted for the shell ssh runs it with, after the encoding the inner
// ssh reads its options in; every % is then doubled, since the outer ssh
// expands the command's %-tokens, but those of the destination (%h:%p).
func (t *Transport) jumpCommand(jump, keyFile string) (string, error) {
	const dest = "fleet-destination"
	args, err := t.jumpArgs(jump, keyFile, dest)
	if err != nil {
		return "", err
	}
	words := []string{shell.Quote(t.ssh())}
	for _, a := range args {
		if a == dest {
			words = append(words, "%h:%p")
			continue
		}
		words = append(words, strings.ReplaceAll(shell.Quote(a), "%", "%%"))
	}
	return strings.Join(words, " "), nil
}

// configSets reads which host-key options the config file gives the node
// (they then stay the config file's, FR-016) and where it sends it. ssh -G
// shows an option whose value the file changes; the file's own lines show
// one it sets to ssh's default value (configFileSets). An option under a
// Match line may or may not apply: it is left to the file too, and named
// in maybe.
func (t *Transport) configSets(ctx context.Context, s Settings) (set map[string]bool, maybe []string, redirected string, err error) {
	set = map[string]bool{}
	if t.ConfigFile == "" {
		return set, nil, "", nil
	}
	with, err := t.effective(ctx, t.ConfigFile, s.Host)
	if err != nil {
		return nil, nil, "", fmt.Errorf("node %s: read ssh_config_file %s with ssh -G: %w", s.Name, t.ConfigFile, err)
	}
	without, err := t.effective(ctx, "/dev/null", s.Host)
	if err != nil {
		return nil, nil, "", fmt.Errorf("node %s: ssh -G: %w", s.Name, err)
	}
	lines, inMatch, err := configFileSets(t.ConfigFile, s.Host)
	if err != nil {
		return nil, nil, "", fmt.Errorf("node %s: read ssh_config_file %s: %w", s.Name, t.ConfigFile, err)
	}
	for i, k := range hostKeyOptions {
		set[k] = with[k] != without[k] || lines[k]
		if !set[k] && inMatch[k] {
			set[k] = true
			maybe = append(maybe, hostKeyOptionNames[i])
		}
	}
	if with["hostname"] != without["hostname"] {
		redirected = s.Host + " -> " + with["hostname"]
	}
	return set, maybe, redirected, nil
}

// effective runs ssh -G -F config host and returns its settings.
func (t *Transport) effective(ctx context.Context, config, host string) (map[string]string, error) {
	return t.effectiveArgs(ctx, []string{"-F", config, host})
}

// Args are the arguments of an ssh to the node over its master
// connection (or a connection of its own while there is none), before the
// remote command: -F, the options in order, the key, the destination.
func (c *Conn) Args() []string {
	return c.args("ControlMaster=no", c.control)
}

// MasterArgs start the node's master connection in the background (-f -N):
// Close ends it. The lock session keeps a session open on it from the
// lock to the end of the node, so it is never idle while in use; when
// the provider is killed before Close (a second Ctrl-C), it ends
// masterPersist after its last session instead of running on, logged in.
func (c *Conn) MasterArgs() []string {
	args := c.recording(c.args("ControlMaster=yes", c.control, fmt.Sprintf("ControlPersist=%d", max(1, int(orDefault(c.t.MasterPersist, masterPersist)/time.Second)))))
	return append(args[:len(args)-1:len(args)-1], "-f", "-N", c.s.Host)
}

// masterPersist is how long a master outlives its last session.
const masterPersist = 30 * time.Second

// FreshArgs are those of an ssh that makes a new connection, whatever the
// master: the verdict's proof that the host still takes logins.
func (c *Conn) FreshArgs() []string { return c.args("ControlMaster=no", "ControlPath=none") }

func (c *Conn) args(control ...string) []string {
	var args []string
	if c.t.ConfigFile != "" {
		args = append(args, "-F", c.t.ConfigFile)
	}
	for _, o := range control {
		args = append(args, "-o", o)
	}
	for _, o := range c.opts {
		args = append(args, "-o", o)
	}
	if c.identity != "" {
		args = append(args, "-o", c.identity)
	}
	return append(args, c.s.Host)
}

// NixSSHOpts is NIX_SSHOPTS for nix-copy-closure, which rides the node's
// master connection. Nix splits it on whitespace without quoting, so an
// ssh_opts item or a key file whose text holds a space is left out of it
// (the master already carries what it set; the control directory's path
// never holds one), and a config file whose path does is read through a
// link; a ProxyJump stays as given.
func (c *Conn) NixSSHOpts() string {
	words := []string{}
	switch {
	case c.configLink != "":
		words = append(words, "-F", c.configLink)
	case c.t.ConfigFile != "":
		words = append(words, "-F", c.t.ConfigFile)
	}
	for _, o := range append([]string{"ControlMaster=no", c.control}, c.copyOpts...) {
		if !strings.ContainsAny(o, " \t") {
			words = append(words, "-o", o)
		}
	}
	if c.identity != "" && !strings.ContainsAny(c.identity, " \t") {
		words = append(words, "-o", c.identity)
	}
	return strings.Join(words, " ")
}

// Command is an ssh running remote on the node over the master
// connection, as root: through sudo -n when the login user is not.
func (c *Conn) Command(ctx context.Context, remote string) *exec.Cmd {
	return c.t.command(ctx, c.t.ssh(), append(c.Args(), "--", c.asRoot(remote))...)
}

// FreshCommand is an ssh running remote over a new connection, as root.
func (c *Conn) FreshCommand(ctx context.Context, remote string) *exec.Cmd {
	return c.t.command(ctx, c.t.ssh(), append(c.FreshArgs(), "--", c.asRoot(remote))...)
}

// asRoot is remote as a command that runs as root: itself, or with
// use_sudo a shell through sudo -n, which fails at once where it would
// ask for a password.
func (c *Conn) asRoot(remote string) string {
	if !c.s.UseSudo {
		return remote
	}
	return SudoPrefix + " sh -c " + shell.Quote(remote)
}

// SudoPrefix starts every command of a use_sudo node: root gets the login
// session's PATH (and Nix configuration directory), which sudo's
// secure_path and env_reset would replace, so that it runs the tools the
// login user sees (on NixOS, those of /run/current-system/sw/bin).
const SudoPrefix = `sudo -n -- env "PATH=$PATH" ${NIX_CONF_DIR:+"NIX_CONF_DIR=$NIX_CONF_DIR"}`

// recording adds the option that records the key the host shows to args,
// when SeenKey needs it.
func (c *Conn) recording(args []string) []string {
	if !c.keyOptsElsewhere || c.identify == "" {
		return args
	}
	return append([]string{"-o", c.identify}, args...)
}

// Close ends the node's master connection and removes its temporary
// known_hosts.
func (c *Conn) Close() {
	if c.mastered {
		args := c.Args()
		args = append(args[:len(args)-1:len(args)-1], "-O", "exit", c.s.Host)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.t.command(ctx, c.t.ssh(), args...).Run()
		cancel()
	}
	for _, f := range []string{c.pinned, c.offered, c.configLink} {
		if f != "" {
			_ = os.Remove(f)
		}
	}
}

// pin is the key the node must show: host_key, else the key it showed on
// first use as state recorded it; empty for accept-new.
func (c *Conn) pin() string {
	if c.s.HostKey != "" {
		return strings.TrimSpace(c.s.HostKey)
	}
	return strings.TrimSpace(c.s.SeenHostKey)
}

// SeenKey is the key ("type base64") of a node a connection has just
// reached: its pin, or the key accept-new holds for its address, when the
// deployment's own host-key options decided the login. When ssh_opts or
// the config file set host-key options, the pin may not have been
// enforced: the key is then the one the host showed, recorded during the
// login, and empty when it could not be recorded (they set their own
// KnownHostsCommand). A key the host did not show is never returned.
func (c *Conn) SeenKey(ctx context.Context) string {
	if c.keyOptsElsewhere {
		if c.identify == "" {
			return ""
		}
		b, _ := os.ReadFile(c.offered)
		return strings.TrimSpace(string(b))
	}
	if pin := c.pin(); pin != "" {
		f := strings.Fields(pin)
		return strings.Join(f[:min(2, len(f))], " ")
	}
	key, _ := c.RecordedKey(ctx)
	return key
}

// OfferedKey connects once more to learn the key ("type base64") the node
// offers, after ssh refused it: nothing is run there, as ssh stops at the
// key. Empty when it cannot be learnt (the config file sets its own
// KnownHostsCommand).
func (c *Conn) OfferedKey(ctx context.Context) string {
	if c.identify == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*connectTimeoutSeconds*time.Second)
	defer cancel()
	args := append([]string{"-o", c.identify}, c.FreshArgs()...)
	_ = c.t.command(ctx, c.t.ssh(), append(args, "--", "true")...).Run()
	b, _ := os.ReadFile(c.offered)
	return strings.TrimSpace(string(b))
}

// Remember writes key, a key node s showed before ("type base64", from
// state), to the accept-new known_hosts file when that file has no key for
// the node's address yet: the replacement of a deployment, which starts
// with no record, then refuses another key there as a later deploy does,
// also on a runner whose file was new. A pinned node needs nothing.
func (t *Transport) Remember(ctx context.Context, s Settings, key string) error {
	if s.HostKey != "" || strings.TrimSpace(key) == "" || t.KnownHostsFile == "" {
		return nil
	}
	s.SeenHostKey = ""
	c, err := t.Open(ctx, s)
	if err != nil {
		return err
	}
	defer c.Close()
	name, ours, err := c.knownHostsName(ctx)
	if err != nil || !ours {
		return err // not ours: ssh_opts or the config file name another file
	}
	if t.recordedKeyFor(name) != "" {
		return nil // the file's key for this address stays
	}
	f, err := os.OpenFile(t.KnownHostsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("node %s: record its key in %s: %w", s.Name, t.KnownHostsFile, err)
	}
	_, werr := fmt.Fprintf(f, "%s %s\n", name, strings.TrimSpace(key))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// knownHostsName is the name ssh looks the node up by in a known_hosts
// file (HostKeyAlias as it is, or the host name, as [name]:port off port
// 22), and
// whether that file is the transport's accept-new file.
func (c *Conn) knownHostsName(ctx context.Context) (string, bool, error) {
	cfg, err := c.t.effectiveArgs(ctx, c.FreshArgs())
	if err != nil {
		return "", false, fmt.Errorf("node %s: ssh -G: %w", c.s.Name, err)
	}
	ours := strings.Contains(cfg["userknownhostsfile"], c.t.KnownHostsFile)
	if alias := cfg["hostkeyalias"]; alias != "" && alias != "none" {
		return alias, ours, nil // ssh looks an alias up as it is, port and all
	}
	name := cfg["hostname"]
	if p := cfg["port"]; p != "" && p != "22" {
		name = "[" + name + "]:" + p
	}
	return name, ours, nil
}

// RecordedKey is the key ("type base64") the accept-new file holds for the
// node's address, with the name it is kept under; empty when it has none.
func (c *Conn) RecordedKey(ctx context.Context) (key, name string) {
	name, ours, err := c.knownHostsName(ctx)
	if err != nil || !ours {
		return "", name
	}
	return c.t.recordedKeyFor(name), name
}

// recordedKeyFor is the key ("type base64") the accept-new file holds
// under name; empty when it has none. The file is read as OpenSSH reads
// it (hashed names, comments, markers).
func (t *Transport) recordedKeyFor(name string) string {
	keys, err := sshdial.KnownKeys(t.KnownHostsFile, name)
	if err != nil || len(keys) == 0 {
		return ""
	}
	return keyText(keys[0])
}

// keyText is a public key as "type base64".
func keyText(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// effectiveArgs runs ssh -G with a connection's arguments and returns its
// settings.
func (t *Transport) effectiveArgs(ctx context.Context, args []string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, t.ssh(), append([]string{"-G"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseEffective(raw)
}

func parseEffective(raw []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if _, seen := out[k]; !seen {
			out[k] = v
		}
	}
	return out, sc.Err()
}

// tcpCheckTimeout bounds a tcp check: the connection, through the jump
// host when there is one.
const tcpCheckTimeout = 2 * connectTimeoutSeconds * time.Second

// tcpRoute is how a tcp check reaches a port of the node: the way its SSH
// connections do, at the HostName ssh resolves it to (ssh -G), directly or
// through its ProxyJump (from ssh_opts or the config file), so that a host
// behind a bastion is checked from there. A config file's own ProxyCommand
// is run as ssh runs it.
func (c *Conn) tcpRoute(ctx context.Context) (func(context.Context, int) error, error) {
	cfg, err := c.t.effectiveArgs(ctx, c.FreshArgs())
	if err != nil {
		return nil, fmt.Errorf("ssh -G: %w", err)
	}
	host := cfg["hostname"]
	jump := cfg["proxyjump"]
	for _, o := range c.s.SSHOpts {
		if key, value, _ := strings.Cut(o, "="); strings.EqualFold(key, "ProxyJump") {
			jump = value // ours became a ProxyCommand; ssh takes the first
			break
		}
	}
	if jump != "" && jump != "none" {
		return func(ctx context.Context, port int) error {
			args, err := c.t.jumpArgs(jump, c.s.PrivateKeyFile, net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return err
			}
			return c.t.forwardOpens(ctx, append([]string{"-vv"}, args...), "through "+jump)
		}, nil
	}
	if proxy := cfg["proxycommand"]; proxy != "" && proxy != "none" {
		return func(ctx context.Context, port int) error {
			return c.t.proxyOpens(ctx, proxy, host, port, cfg["user"])
		}, nil
	}
	return func(ctx context.Context, port int) error {
		dctx, cancel := context.WithTimeout(ctx, tcpCheckTimeout)
		defer cancel()
		conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	}, nil
}

// forwardOpens runs an ssh -W (args, with -vv) and reports whether the jump
// host opened the connection: ssh says "open confirm" when it did, and
// "open failed: <why>" when it could not, then exits.
func (t *Transport) forwardOpens(ctx context.Context, args []string, via string) error {
	ctx, cancel := context.WithTimeout(ctx, tcpCheckTimeout)
	defer cancel()
	cmd := t.command(ctx, t.ssh(), args...)
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	cmd.Stderr = w
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		return err
	}
	defer func() {
		_ = cmd.Cancel()
		_ = cmd.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { _ = r.SetReadDeadline(time.Now()) })
	defer stop()
	var last []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.Contains(line, "open confirm"):
			return nil
		case strings.Contains(line, "open failed: "):
			_, why, _ := strings.Cut(line, "open failed: ")
			return fmt.Errorf("%s: %s", via, why)
		case !strings.HasPrefix(line, "debug"):
			last = append(last, line)
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: no answer within %s", via, tcpCheckTimeout)
	}
	return fmt.Errorf("%s: %s", via, orNone(lastLines(strings.Join(last, "\n"), 3)))
}

// proxyOpens runs a config file's ProxyCommand to host:port, as ssh would
// (its %-tokens expanded, through the shell): a proxy that cannot connect
// ends (nc, ssh -W and their kind exit at once, failing); one still running
// after a second, or that ended well having passed on what the port sent,
// is connected.
func (t *Transport) proxyOpens(ctx context.Context, proxy, host string, port int, user string) error {
	ctx, cancel := context.WithTimeout(ctx, tcpCheckTimeout)
	defer cancel()
	expanded := strings.NewReplacer("%%", "%", "%h", host, "%p", strconv.Itoa(port), "%r", user, "%n", host).Replace(proxy)
	cmd := t.command(ctx, "/bin/sh", "-c", "exec "+expanded)
	// One writer for both streams: os/exec copies them in one goroutine,
	// and out is read once Wait has returned.
	var out bytes.Buffer
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	ended := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(ended)
	}()
	select {
	case <-ended:
		if waitErr == nil && out.String() != "" {
			return nil
		}
		return fmt.Errorf("the ssh_config ProxyCommand ended (%v): %s", waitErr, orNone(lastLines(out.String(), 3)))
	case <-time.After(time.Second):
		_ = cmd.Cancel()
		<-ended
		return nil
	case <-ctx.Done():
		<-ended
		return ctx.Err()
	}
}
