package deploy

import (
	"os/exec"
	"strconv"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Issue 13 §4: a key the provider holds in memory reaches OpenSSH through
// the provider's own agent, for every key type OpenSSH logs in with: an RSA
// key is asked for SHA-2 signatures (agent flags), which a plain Sign
// (SHA-1) would fail. The agent refuses changes and ends its connections
// when closed.
func TestKeyAgentLogsOpenSSHIn(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"ed25519", "ecdsa", "rsa"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			key := sshtest.NewKeyOfType(t, typ)
			sshd := sshtest.StartSSHD(t, sshtest.WithAuthorizedKeys(key))
			sshd.SetAuthorizedKeys(t, key) // only this key
			dir := t.TempDir()
			a, err := StartKeyAgent(dir, []ssh.Signer{key.Signer})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			cmd := exec.Command("ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
				"-o", "LogLevel=ERROR", "-o", "IdentityAgent="+a.Socket, "-p", strconv.Itoa(sshd.Port), sshd.User+"@"+sshd.Host, "--", "echo", "in")
			out, err := cmd.CombinedOutput()
			if err != nil || string(out) != "in\n" {
				t.Fatalf("ssh through the agent: %v: %s", err, out)
			}
			if err := a.signer.RemoveAll(); err == nil {
				t.Errorf("the agent let a client remove its keys")
			}
		})
	}
}
