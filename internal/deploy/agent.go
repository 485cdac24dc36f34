package deploy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net"
	"path/filepath"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// KeyAgent hands keys the provider holds in memory (the provider block's
// private_key, or a key file with a passphrase) to the deployment's ssh
// processes, which take keys only from files and agents: an SSH agent of
// the provider's own, on a socket in the deployment's private control
// directory. Nothing is written to disk, and it signs only; it lives as
// long as the deployment's transport.
type KeyAgent struct {
	Socket string

	ln     net.Listener
	signer *signerAgent
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

// StartKeyAgent serves signers on a socket in dir (the control directory).
func StartKeyAgent(dir string, signers []ssh.Signer) (*KeyAgent, error) {
	a := &KeyAgent{Socket: filepath.Join(dir, "agent"), signer: &signerAgent{signers: signers}, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("unix", a.Socket)
	if err != nil {
		return nil, err
	}
	a.ln = ln
	a.wg.Add(1)
	go a.serve()
	return a, nil
}

func (a *KeyAgent) serve() {
	defer a.wg.Done()
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		a.mu.Lock()
		a.conns[c] = true
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			_ = agent.ServeAgent(a.signer, c)
			a.mu.Lock()
			delete(a.conns, c)
			a.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// Close stops the agent and ends its connections.
func (a *KeyAgent) Close() {
	_ = a.ln.Close()
	a.mu.Lock()
	for c := range a.conns {
		_ = c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// signerAgent is an agent that lists and signs with a fixed set of keys
// and refuses every change.
type signerAgent struct{ signers []ssh.Signer }

var errReadOnlyAgent = errors.New("the provider's agent only signs")

func (s *signerAgent) List() ([]*agent.Key, error) {
	var keys []*agent.Key
	for _, sg := range s.signers {
		pub := sg.PublicKey()
		keys = append(keys, &agent.Key{Format: pub.Type(), Blob: pub.Marshal(), Comment: "fleet provider key"})
	}
	return keys, nil
}

func (s *signerAgent) Sign(key ssh.PublicKey, data []byte) (*ssh.Signature, error) {
	return s.SignWithFlags(key, data, 0)
}

// SignWithFlags honours OpenSSH's request for an RSA SHA-2 signature.
func (s *signerAgent) SignWithFlags(key ssh.PublicKey, data []byte, flags agent.SignatureFlags) (*ssh.Signature, error) {
	for _, sg := range s.signers {
		if !bytes.Equal(sg.PublicKey().Marshal(), key.Marshal()) {
			continue
		}
		if as, ok := sg.(ssh.AlgorithmSigner); ok {
			switch {
			case flags&agent.SignatureFlagRsaSha512 != 0:
				return as.SignWithAlgorithm(rand.Reader, data, ssh.KeyAlgoRSASHA512)
			case flags&agent.SignatureFlagRsaSha256 != 0:
				return as.SignWithAlgorithm(rand.Reader, data, ssh.KeyAlgoRSASHA256)
			}
		}
		return sg.Sign(rand.Reader, data)
	}
	return nil, errors.New("no such key in the provider's agent")
}

func (s *signerAgent) Signers() ([]ssh.Signer, error) { return s.signers, nil }
func (s *signerAgent) Add(agent.AddedKey) error       { return errReadOnlyAgent }
func (s *signerAgent) Remove(ssh.PublicKey) error     { return errReadOnlyAgent }
func (s *signerAgent) RemoveAll() error               { return errReadOnlyAgent }
func (s *signerAgent) Lock([]byte) error              { return errReadOnlyAgent }
func (s *signerAgent) Unlock([]byte) error            { return errReadOnlyAgent }
func (s *signerAgent) Extension(string, []byte) ([]byte, error) {
	return nil, agent.ErrExtensionUnsupported
}
