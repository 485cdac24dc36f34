package sshtest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/crypto/ssh/agent"
)

// StartAgent serves an ssh-agent holding keys on a Unix socket, as
// ssh-agent does, and returns the socket's path (for SSH_AUTH_SOCK). It
// stops when the test ends.
func StartAgent(tb TB, keys ...*Key) string {
	tb.Helper()
	keyring := agent.NewKeyring()
	for _, k := range keys {
		if err := keyring.Add(agent.AddedKey{PrivateKey: k.private}); err != nil {
			tb.Fatalf("sshtest: agent: add a key: %v", err)
		}
	}
	dir, err := os.MkdirTemp("", "fa") //nolint:usetesting // a socket path must be short
	if err != nil {
		tb.Fatalf("sshtest: agent: %v", err)
	}
	socket := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		tb.Fatalf("sshtest: agent: listen: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				_ = agent.ServeAgent(keyring, conn)
			}()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		_ = os.RemoveAll(dir)
	})
	return socket
}
