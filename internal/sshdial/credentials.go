package sshdial

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// keys loads the private keys the credentials name, inline or from a file.
// It touches neither the network nor the agent, so a plan can run it to
// refuse a configuration that can never authenticate. Every failure is a
// ConfigError naming the attribute to fix.
func (c Credentials) keys() ([]ssh.Signer, error) {
	var out []ssh.Signer
	if len(c.PrivateKey) > 0 {
		s, err := parseKeyOnce(c.PrivateKey, c.Passphrase)
		switch {
		case errors.Is(err, errEncrypted) && c.Withheld != "":
			// Its write-only passphrase is not available to this dial.
		case err != nil:
			return nil, c.configError(fieldOf(err, "private_key"), err.Error())
		default:
			out = append(out, s)
		}
	}
	if c.PrivateKeyFile != "" {
		path, err := ExpandHome(c.PrivateKeyFile)
		if err != nil {
			return nil, c.configError("private_key_file", err.Error())
		}
		if info, err := os.Stat(path); err == nil && info.IsDir() {
			return nil, c.configError("private_key_file", fmt.Sprintf("%s is a directory, not a private key file", path))
		}
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, c.configError("private_key_file", fmt.Sprintf("cannot read %s: %v", path, errors.Unwrap(err)))
		}
		s, err := parseKeyOnce(pem, c.Passphrase)
		switch {
		case errors.Is(err, errEncrypted) && c.Withheld != "":
		case err != nil:
			return nil, c.configError(fieldOf(err, "private_key_file"), fmt.Sprintf("%s: %v", path, err))
		default:
			out = append(out, s)
		}
	}
	return out, nil
}

// fieldOf names the attribute a key parse error asks to fix: a passphrase
// problem is fixed in private_key_passphrase, anything else in the key.
func fieldOf(err error, keyField string) string {
	if errors.Is(err, errEncrypted) || errors.Is(err, errWrongPassphrase) {
		return "private_key_passphrase"
	}
	return keyField
}

func (c Credentials) configError(field, msg string) *ConfigError {
	return &ConfigError{Field: field, Provider: c.FromProvider, Msg: msg}
}

// check is what can be known of the credentials without using them: the
// keys load, and some credential exists. It does not talk to the agent.
func (c Credentials) check() error {
	keys, err := c.keys()
	switch {
	case err != nil:
		return err
	case len(keys) > 0 || c.Withheld != "":
		return nil
	case !c.Agent:
		return c.configError("private_key_file", errNoCredentials.Error())
	case os.Getenv("SSH_AUTH_SOCK") == "":
		return c.configError("agent", errNoAgent.Error())
	}
	return nil
}

// withAgent adds the agent's keys to keys when the credentials ask for the
// agent. The agent is dialled and listed under ctx, and its connection is
// closed when ctx ends, so a hung agent cannot hold a dial past its bound.
// The returned function releases the agent connection.
func (c Credentials) withAgent(ctx context.Context, keys []ssh.Signer) ([]ssh.Signer, func(), error) {
	release := func() {}
	if c.Agent {
		fromAgent, closeAgent, err := agentSigners(ctx)
		switch {
		case err == nil:
			keys = append(keys, fromAgent...)
			release = closeAgent
		case callerEnded(ctx):
			return nil, nil, ctxError(ctx)
		case len(keys) == 0 && c.Withheld == "":
			return nil, nil, c.configError("agent", err.Error())
		}
	}
	if len(keys) == 0 && c.Withheld == "" {
		release()
		return nil, nil, c.configError("private_key_file", errNoCredentials.Error())
	}
	return keys, release, nil
}

// agentSigners lists the keys of the agent at SSH_AUTH_SOCK under ctx.
func agentSigners(ctx context.Context) ([]ssh.Signer, func(), error) {
	socket := os.Getenv("SSH_AUTH_SOCK")
	if socket == "" {
		return nil, nil, errNoAgent
	}
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the agent at SSH_AUTH_SOCK: %v", describe(err))
	}
	// The connection serves the signatures of the handshake too: it lives
	// until the dial is over, and no longer than ctx.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	release := func() { stop(); _ = conn.Close() }
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Time{})
	}
	signers, err := agent.NewClient(conn).Signers()
	if err != nil {
		release()
		// The connection's deadline, copied from ctx, can fire a moment
		// before ctx's own timer marks it done.
		if callerEnded(ctx) || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, nil, ctxError(ctx)
		}
		return nil, nil, fmt.Errorf("listing the agent's keys: %v", err)
	}
	return signers, release, nil
}

var (
	errNoCredentials   = errors.New("no credentials: set private_key, private_key_file or agent, on the connection or in the provider block")
	errNoAgent         = errors.New("agent authentication is requested but SSH_AUTH_SOCK is not set: start an ssh-agent, or set private_key_file")
	errEncrypted       = errors.New("the key is encrypted: set private_key_passphrase")
	errWrongPassphrase = errors.New("private_key_passphrase does not decrypt the key")
)

// parsedKeys keeps the keys this process has parsed, by a digest of the key
// and passphrase: decrypting an encrypted key costs about 0.15 s (bcrypt),
// and a plan checks and probes every executor, often all with one key.
var parsedKeys sync.Map // [sha256.Size]byte -> *parsedKey

type parsedKey struct {
	once   sync.Once
	signer ssh.Signer
	err    error
}

// parseKeyOnce is parseKey, computed once per process for each key and
// passphrase, however many dials ask at once.
func parseKeyOnce(pem, passphrase []byte) (ssh.Signer, error) {
	h := sha256.New()
	h.Write(pem)
	h.Write([]byte{0})
	h.Write(passphrase)
	var digest [sha256.Size]byte
	h.Sum(digest[:0])
	e, _ := parsedKeys.LoadOrStore(digest, &parsedKey{})
	p, _ := e.(*parsedKey)
	p.once.Do(func() { p.signer, p.err = parseKey(pem, passphrase) })
	return p.signer, p.err
}

// parseKey parses a PEM private key. Its errors never quote the key.
func parseKey(pem, passphrase []byte) (ssh.Signer, error) {
	var s ssh.Signer
	var err error
	if len(passphrase) > 0 {
		s, err = ssh.ParsePrivateKeyWithPassphrase(pem, passphrase)
		if err != nil && !errors.Is(err, x509.IncorrectPasswordError) {
			// A passphrase given for a key that is not encrypted is harmless.
			if plain, perr := ssh.ParsePrivateKey(pem); perr == nil {
				s, err = plain, nil
			}
		}
	} else {
		s, err = ssh.ParsePrivateKey(pem)
	}
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return nil, errEncrypted
	case errors.Is(err, x509.IncorrectPasswordError):
		return nil, errWrongPassphrase
	case err != nil:
		return nil, errors.New("not a PEM private key that SSH can use (expected an OpenSSH, PKCS#1, PKCS#8 or EC private key)")
	}
	return s, nil
}

// Signers loads the keys the credentials give (not the agent's), for a
// program that needs them in another form, such as an agent of its own.
func (c Credentials) Signers() ([]ssh.Signer, error) { return c.keys() }
