package sshdial

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// KnownHosts is a known_hosts file used with OpenSSH's
// StrictHostKeyChecking=accept-new semantics: a host that is not in the file
// is added to it and trusted, a host whose key differs from the file is
// refused. It verifies bastions, whose keys are not pinned.
type KnownHosts struct {
	Path string
	// CreateDir lets the first accepted key create the file's directory, as
	// OpenSSH does for its default ~/.ssh. Otherwise a missing directory is
	// refused: a mistyped path must not start trusting bastions from scratch.
	CreateDir bool

	mu sync.Mutex // serialises re-check and append so concurrent dials add a host once
}

// knownHostsView is the file as one dial read it: parsed once, used for
// both choosing the host key algorithms and verifying the key.
type knownHostsView struct {
	file   *KnownHosts
	check  ssh.HostKeyCallback
	hashed bool // the file stores hashed host names, so new lines are hashed too
}

// open reads and parses the file. A file that cannot be read or parsed, or
// whose directory does not exist (unless CreateDir), is a ConfigError: it
// fails every dial the same way until the operator fixes it.
func (k *KnownHosts) open() (*knownHostsView, error) {
	fail := func(format string, args ...any) (*knownHostsView, error) {
		return nil, &ConfigError{Field: "known_hosts_file", Provider: true, Msg: fmt.Sprintf(format, args...)}
	}
	data, err := os.ReadFile(k.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(k.Path)
		if _, derr := os.Stat(dir); derr != nil && !k.CreateDir {
			return fail("%s: directory %s does not exist: create it, or correct the path", k.Path, dir)
		}
		// Nothing is known yet: every host is new.
		return &knownHostsView{file: k, check: func(string, net.Addr, ssh.PublicKey) error { return &knownhosts.KeyError{} }}, nil
	case err != nil:
		return fail("cannot read %s: %v", k.Path, errors.Unwrap(err))
	}
	check, err := knownhosts.New(k.Path)
	if err != nil {
		return fail("%s does not parse: %v; correct or remove that line", k.Path, err)
	}
	return &knownHostsView{file: k, check: check, hashed: usesHashedHosts(data)}, nil
}

// usesHashedHosts reports whether any entry stores a hashed host name
// (HashKnownHosts yes): such a file should not gain names in clear.
func usesHashedHosts(data []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if bytes.HasPrefix(bytes.TrimSpace(sc.Bytes()), []byte("|1|")) {
			return true
		}
	}
	return false
}

// callback verifies a host against the view. An unknown host is added to
// the file (accept-new) and reported to added; a changed key is refused.
func (v *knownHostsView) callback(added func(host string, key ssh.PublicKey)) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := v.check(hostname, remote, key)
		var ke *knownhosts.KeyError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ke) && len(ke.Want) == 0:
			return v.file.accept(hostname, remote, key, added)
		case errors.As(err, &ke):
			return &KnownHostMismatchError{Path: v.file.Path, Host: hostname, Offered: key, Err: ke}
		}
		return err // revoked
	}
}

// accept adds an unknown host, unless a concurrent dial added it since this
// dial read the file: the file is read again under the lock (a rare path,
// taken once per new bastion).
func (k *KnownHosts) accept(hostname string, remote net.Addr, key ssh.PublicKey, added func(string, ssh.PublicKey)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	now, err := k.open()
	if err != nil {
		return err
	}
	err = now.check(hostname, remote, key)
	var ke *knownhosts.KeyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ke) && len(ke.Want) > 0:
		return &KnownHostMismatchError{Path: k.Path, Host: hostname, Offered: key, Err: ke}
	case !errors.As(err, &ke):
		return err
	}
	if err := k.add(hostname, key, now.hashed); err != nil {
		return err
	}
	if added != nil {
		added(hostname, key)
	}
	return nil
}

// keyTypes returns the types of the keys the file holds for hostname, so
// that a dial can ask the host for a key it will recognise.
func (v *knownHostsView) keyTypes(hostname string, remote net.Addr) []string {
	// A key no host can hold makes the callback list the keys it knows.
	err := v.check(hostname, remote, probeKey)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		return nil
	}
	var types []string
	for _, w := range ke.Want {
		types = append(types, w.Key.Type())
	}
	return types
}

func (k *KnownHosts) add(hostname string, key ssh.PublicKey, hashed bool) error {
	if k.CreateDir {
		if err := os.MkdirAll(filepath.Dir(k.Path), 0o700); err != nil {
			return fmt.Errorf("adding %s to known_hosts_file: %w", hostname, err)
		}
	}
	f, err := os.OpenFile(k.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("adding %s to known_hosts_file: %w", hostname, err)
	}
	name := knownhosts.Normalize(hostname)
	if hashed {
		name = knownhosts.HashHostname(name)
	}
	line := knownhosts.Line([]string{name}, key) + "\n"
	if _, err := f.WriteString(line); err != nil {
		_ = f.Close()
		return fmt.Errorf("adding %s to known_hosts_file %s: %w", hostname, k.Path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("adding %s to known_hosts_file %s: %w", hostname, k.Path, err)
	}
	return nil
}

// probeKey is an arbitrary valid public key that no real host presents.
var probeKey = func() ssh.PublicKey {
	k, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		panic(err)
	}
	return k
}()

// KnownHostMismatchError is a host whose key differs from the one its
// known_hosts file records: it is refused, as OpenSSH's accept-new refuses it.
type KnownHostMismatchError struct {
	Path    string
	Host    string
	Offered ssh.PublicKey
	Err     *knownhosts.KeyError
}

func (e *KnownHostMismatchError) Error() string {
	return fmt.Sprintf("host key mismatch: %s offered %s %s, which differs from the key recorded in %s; if the host was reinstalled, remove its line from that file (ssh-keygen -R), otherwise treat this as possible interception",
		e.Host, e.Offered.Type(), ssh.FingerprintSHA256(e.Offered), e.Path)
}

func (e *KnownHostMismatchError) Unwrap() error { return e.Err }

// KnownKeys returns the keys the known_hosts file at path holds for host,
// the name ssh looks a host up by ("name", "name:port" or "[name]:port";
// port 22 when none), hashed entries included, as OpenSSH reads the file.
// A missing file holds none.
func KnownKeys(path, host string) ([]ssh.PublicKey, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	check, err := knownhosts.New(path)
	if err != nil {
		return nil, err
	}
	if h, p, err := net.SplitHostPort(host); err == nil {
		host = net.JoinHostPort(h, p)
	} else {
		host = net.JoinHostPort(host, "22")
	}
	// A key no host can hold makes the callback list the keys it knows.
	err = check(host, &net.TCPAddr{IP: net.IPv4zero, Port: 22}, probeKey)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		return nil, nil
	}
	keys := make([]ssh.PublicKey, 0, len(ke.Want))
	for _, w := range ke.Want {
		keys = append(keys, w.Key)
	}
	return keys, nil
}
