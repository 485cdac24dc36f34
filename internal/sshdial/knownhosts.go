package sshdial

import (
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

	mu sync.Mutex // serialises read-check-append so concurrent dials add a host once
}

// Callback returns the host key callback for this file. added, when not
// nil, is told about a key that accept-new wrote to the file.
func (k *KnownHosts) Callback(added func(host string, key ssh.PublicKey)) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		check, err := k.load()
		if err != nil {
			return err
		}
		err = check(hostname, remote, key)
		var ke *knownhosts.KeyError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ke) && len(ke.Want) == 0:
			if err := k.add(hostname, key); err != nil {
				return err
			}
			if added != nil {
				added(hostname, key)
			}
			return nil
		case errors.As(err, &ke):
			return &KnownHostMismatchError{Path: k.Path, Host: hostname, Offered: key, Err: ke}
		}
		return err // revoked, or the file is unreadable
	}
}

// KeyTypes returns the types of the keys the file holds for hostname, so that
// a dial can ask the host for a key it will recognise.
func (k *KnownHosts) KeyTypes(hostname string, remote net.Addr) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	check, err := k.load()
	if err != nil {
		return nil
	}
	// A key no host can hold makes the callback list the keys it knows.
	err = check(hostname, remote, probeKey)
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

func (k *KnownHosts) load() (ssh.HostKeyCallback, error) {
	if _, err := os.Stat(k.Path); errors.Is(err, fs.ErrNotExist) {
		return func(string, net.Addr, ssh.PublicKey) error { return &knownhosts.KeyError{} }, nil
	}
	check, err := knownhosts.New(k.Path)
	if err != nil {
		return nil, fmt.Errorf("reading known_hosts_file %s: %w", k.Path, err)
	}
	return check, nil
}

func (k *KnownHosts) add(hostname string, key ssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(k.Path), 0o700); err != nil {
		return fmt.Errorf("adding %s to known_hosts_file: %w", hostname, err)
	}
	f, err := os.OpenFile(k.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("adding %s to known_hosts_file: %w", hostname, err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key) + "\n"
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
