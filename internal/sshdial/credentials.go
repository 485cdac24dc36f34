package sshdial

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// signers loads every signer the credentials name. The returned close
// function releases the agent connection. Every failure is a ConfigError:
// nothing has touched the network yet.
func (c Credentials) signers() ([]ssh.Signer, func(), error) {
	var out []ssh.Signer
	closeAgent := func() {}
	if len(c.PrivateKey) > 0 {
		s, err := parseKey(c.PrivateKey, c.Passphrase)
		if err != nil {
			return nil, nil, &ConfigError{Field: "private_key", Msg: err.Error()}
		}
		out = append(out, s)
	}
	if c.PrivateKeyFile != "" {
		path, err := ExpandHome(c.PrivateKeyFile)
		if err != nil {
			return nil, nil, &ConfigError{Field: "private_key_file", Msg: err.Error()}
		}
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, &ConfigError{Field: "private_key_file", Msg: fmt.Sprintf("cannot read %s: %v", path, errors.Unwrap(err))}
		}
		s, err := parseKey(pem, c.Passphrase)
		switch {
		case errors.Is(err, errEncrypted) && c.Withheld:
			// Its write-only passphrase is not available to this dial.
		case err != nil:
			return nil, nil, &ConfigError{Field: "private_key_file", Msg: fmt.Sprintf("%s: %v", path, err)}
		default:
			out = append(out, s)
		}
	}
	if c.Agent {
		socket := os.Getenv("SSH_AUTH_SOCK")
		switch {
		case socket == "" && len(out) == 0 && !c.Withheld:
			return nil, nil, &ConfigError{Field: "agent", Msg: "agent authentication is requested but SSH_AUTH_SOCK is not set: start an ssh-agent, or set private_key_file"}
		case socket != "":
			conn, err := net.Dial("unix", socket)
			if err != nil {
				if len(out) == 0 && !c.Withheld {
					return nil, nil, &ConfigError{Field: "agent", Msg: fmt.Sprintf("cannot reach the agent at SSH_AUTH_SOCK: %v", errors.Unwrap(err))}
				}
				break
			}
			closeAgent = func() { _ = conn.Close() }
			fromAgent, err := agent.NewClient(conn).Signers()
			if err != nil {
				closeAgent()
				return nil, nil, &ConfigError{Field: "agent", Msg: fmt.Sprintf("listing the agent's keys: %v", err)}
			}
			out = append(out, fromAgent...)
		}
	}
	if len(out) == 0 && !c.Withheld {
		return nil, nil, &ConfigError{Field: "private_key_file", Msg: "no credentials: set private_key, private_key_file or agent"}
	}
	return out, closeAgent, nil
}

var errEncrypted = errors.New("the key is encrypted: set private_key_passphrase")

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
		return nil, errors.New("private_key_passphrase does not decrypt the key")
	case err != nil:
		return nil, errors.New("not a PEM private key that SSH can use (expected an OpenSSH, PKCS#1, PKCS#8 or EC private key)")
	}
	return s, nil
}
