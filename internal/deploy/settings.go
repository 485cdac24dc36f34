package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// DefaultUser is the built-in user when the provider sets none.
const DefaultUser = "root"

// Layer is one layer of SSH settings: the deployment's defaults or one
// node's entry. A nil field is absent (or null) and inherits the layer
// below. SSHOpts, when non-nil (even empty), replaces the list below it
// instead of appending to it.
type Layer struct {
	User           *string
	PrivateKeyFile *string
	SSHOpts        []string
	// UseSudo runs what needs root through sudo -n as the login user.
	UseSudo *bool
	// BuildOn is where a system this machine's store lacks is built.
	BuildOn *BuildOn
}

// BuildOn is where a system this machine's store lacks is built, from
// its derivation.
type BuildOn string

// Where systems are built.
const (
	// BuildLocal builds on this machine (and Nix's remote builders, as
	// its configuration names them).
	BuildLocal BuildOn = "local"
	// BuildTarget copies the derivation's closure to the host and builds
	// there: for a host of another platform, or a system cheaper to build
	// than to copy.
	BuildTarget BuildOn = "target"
)

// Node is a node's own entry: its layer, its host (nil: the node's name)
// and its host key, which exists on a node only.
type Node struct {
	Name    string
	Host    *string
	HostKey *string
	Layer
}

// Builtin is the layer below every other, the provider's: its default
// user (default_user, FLEET_SSH_USER, else root) and key file
// (private_key_file, FLEET_PRIVATE_KEY_FILE), else none: an agent, the
// provider's KeyAgent for a key it holds in memory or the user's.
type Builtin struct {
	User           string
	PrivateKeyFile string
}

// Settings are a node's resolved SSH settings.
type Settings struct {
	Name           string
	Host           string
	User           string
	PrivateKeyFile string // empty: the ssh-agent
	HostKey        string // empty: accept-new with a known_hosts file
	SSHOpts        []string
	// UseSudo: the login user is not root; every command that needs root
	// runs through sudo -n (never a prompt), and the closure is copied
	// into the host's store by root through sudo.
	UseSudo bool
	// BuildOn is where the system is built when this machine's store
	// lacks it; "" is BuildLocal.
	BuildOn BuildOn
	// SeenHostKey is the key the node showed on first use, as the
	// caller recorded it: without HostKey, the node is held to it, so a
	// runner with a new known_hosts file still refuses a changed key.
	SeenHostKey string
}

// Resolve layers a node's settings: built-in, then defaults (nil when the
// deployment sets none), then the node; a null host gives the node's name.
func Resolve(builtin Builtin, defaults *Layer, node Node) Settings {
	s := Settings{Name: node.Name, Host: node.Name, User: builtin.User, PrivateKeyFile: builtin.PrivateKeyFile, SSHOpts: []string{}}
	for _, l := range []*Layer{defaults, &node.Layer} {
		if l == nil {
			continue
		}
		if l.User != nil {
			s.User = *l.User
		}
		if l.PrivateKeyFile != nil {
			s.PrivateKeyFile = *l.PrivateKeyFile
		}
		if l.SSHOpts != nil {
			s.SSHOpts = slices.Clone(l.SSHOpts)
		}
		if l.UseSudo != nil {
			s.UseSudo = *l.UseSudo
		}
		if l.BuildOn != nil {
			s.BuildOn = *l.BuildOn
		}
	}
	if node.Host != nil {
		s.Host = *node.Host
	}
	if node.HostKey != nil {
		s.HostKey = *node.HostKey
	}
	return s
}

// CheckKeyFile is what can be known of a node's key file before any
// connection: it can be read, and ssh can use it without a prompt. An
// encrypted key is usable only through an ssh-agent that holds it
// (agentSocket: SSH_AUTH_SOCK; the agent is asked, bounded by ctx). A key
// this check cannot parse is left to ssh, which reads more formats. An
// empty path means the agent, or ssh's own default identities.
func CheckKeyFile(ctx context.Context, path, agentSocket string) error {
	if path == "" {
		return nil
	}
	expanded, err := sshdial.ExpandHome(path)
	if err != nil {
		return err
	}
	if _, err := pathOption("IdentityFile", expanded, ""); err != nil {
		return err
	}
	pem, err := os.ReadFile(expanded)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", path, errors.Unwrap(err))
	}
	_, err = ssh.ParseRawPrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	if !errors.As(err, &missing) {
		return nil
	}
	const never = "ssh runs with BatchMode=yes, which never asks for a passphrase"
	if agentSocket == "" {
		return fmt.Errorf("%s is encrypted, and %s: load the key into an ssh-agent (ssh-add %s) and run with SSH_AUTH_SOCK set", path, never, path)
	}
	public := missing.PublicKey
	if public == nil {
		// An old PEM key does not show its public half; a .pub beside it may.
		if b, err := os.ReadFile(expanded + ".pub"); err == nil {
			public, _, _, _, _ = ssh.ParseAuthorizedKey(b)
		}
	}
	held, err := agentHolds(ctx, agentSocket, public)
	switch {
	case err != nil:
		return fmt.Errorf("%s is encrypted, and the ssh-agent at SSH_AUTH_SOCK (%s) cannot be asked for it: %v; %s", path, agentSocket, err, never)
	case !held:
		return fmt.Errorf("%s is encrypted, and the ssh-agent at SSH_AUTH_SOCK (%s) does not hold it; %s: ssh-add %s", path, agentSocket, never, path)
	}
	return nil
}

// agentHolds asks the agent at socket whether it holds key; any key will
// do when the public key is not known (an old PEM key without its .pub).
func agentHolds(ctx context.Context, socket string, key ssh.PublicKey) (bool, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", socket)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	keys, err := agent.NewClient(conn).List()
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if key == nil || bytes.Equal(k.Marshal(), key.Marshal()) {
			return true, nil
		}
	}
	return false, nil
}

// CheckHostKeyLine accepts a public key line ("ssh-ed25519 AAAA...", a
// comment allowed): a pin goes to OpenSSH in a known_hosts file, which
// needs the key itself, not a fingerprint.
func CheckHostKeyLine(line string) error {
	if strings.ContainsAny(strings.TrimSpace(line), "\n\r") {
		return fmt.Errorf("%q holds more than one line; give one public key line (ssh-ed25519 AAAA...)", line)
	}
	if strings.Contains(line, "SHA256:") || strings.Contains(line, "MD5:") {
		return fmt.Errorf("%q is a fingerprint; give the host's public key line instead (ssh-ed25519 AAAA..., from its /etc/ssh/ssh_host_ed25519_key.pub or ssh-keyscan)", line)
	}
	if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err != nil {
		return fmt.Errorf("%q is not a public key line such as ssh-ed25519 AAAA... (from the host's /etc/ssh/ssh_host_ed25519_key.pub or ssh-keyscan): %v", line, err)
	}
	return nil
}
