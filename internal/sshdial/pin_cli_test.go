package sshdial_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// These tests paste what OpenSSH's own tools print into ParsePin, verbatim:
// the command a "no pin" error suggests must produce an accepted pin.

// requireTools fails, never skips: without the tools the promise is untested.
func requireTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"sh", "ssh-keyscan", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found in PATH (install Debian package openssh-client): %v", tool, err)
		}
	}
}

// shell runs command as an operator would. combined interleaves stderr, where
// ssh-keyscan prints its "# host:port SSH-2.0-..." comments, as a terminal shows it.
func shell(t *testing.T, command string, combined bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	var out []byte
	var err error
	if combined {
		out, err = cmd.CombinedOutput()
	} else {
		out, err = cmd.Output()
	}
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s: %v\noutput: %s\nstderr: %s", command, err, out, stderr)
	}
	if strings.TrimSpace(string(out)) == "" {
		t.Fatalf("%s printed nothing", command)
	}
	return string(out)
}

func hasCommentLine(out string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "# ") {
			return true
		}
	}
	return false
}

// countingDialer counts TCP connections, that is SSH handshakes: a bare
// fingerprint is retried once per host key type, a typed pin is not.
func countingDialer() (*sshdial.Dialer, *atomic.Int32) {
	var n atomic.Int32
	nd := &net.Dialer{Control: func(string, string, syscall.RawConn) error {
		n.Add(1)
		return nil
	}}
	return &sshdial.Dialer{NetDialer: nd}, &n
}

func pinnedTarget(t *testing.T, s *sshtest.SSHD, pin sshdial.Pin) sshdial.Target {
	return sshdial.Target{
		Endpoint:    sshdial.Endpoint{Host: s.Host, Port: s.Port, User: s.User},
		Pin:         pin,
		Credentials: sshdial.Credentials{PrivateKeyFile: s.ClientKey.WriteFile(t, t.TempDir())},
	}
}

func TestPinFromOpenSSHToolsIsAccepted(t *testing.T) {
	t.Parallel()
	requireTools(t)
	s := sshtest.StartSSHD(t)
	hostKey := s.HostKeys[0]
	keyscan := fmt.Sprintf("ssh-keyscan -t ed25519 -p %d %s", s.Port, s.Host)
	for _, tc := range []struct {
		name, command string
	}{
		{"PinCommand", sshdial.PinCommand(s.Host, s.Port)},
		{"ssh-keyscan", keyscan},
		{"ssh-keyscan -H", fmt.Sprintf("ssh-keyscan -H -t ed25519 -p %d %s", s.Port, s.Host)},
	} {
		for _, combined := range []bool{false, true} {
			name := tc.name + " stdout"
			if combined {
				name = tc.name + " stdout+stderr"
			}
			t.Run(name, func(t *testing.T) {
				out := shell(t, tc.command, combined)
				if combined && !hasCommentLine(out) {
					t.Fatalf("%s printed no # comment line with stderr, so this case tests nothing more than stdout:\n%s", tc.command, out)
				}
				pin, err := sshdial.ParsePin(out)
				if err != nil {
					t.Fatalf("ParsePin of the output of %s:\n%s\nerror: %v", tc.command, out, err)
				}
				if !pin.Matches(hostKey.Public) || pin.String() != hostKey.Fingerprint() {
					t.Fatalf("pin %s from %s does not match the host key %s", pin, tc.command, hostKey.Fingerprint())
				}
				if pin.Matches(sshtest.NewKey(t).Public) {
					t.Fatalf("pin %s matches an unrelated key", pin)
				}
				o := (&sshdial.Dialer{}).Probe(t.Context(), pinnedTarget(t, s, pin), sshdial.ProbeTimeout)
				if !o.Reachable() || o.HostKey != sshdial.HostKeyVerified {
					t.Fatalf("probe with the pin from %s: reason %q, host key %q, message %q", tc.command, o.Reason, o.HostKey, o.Message)
				}
			})
		}
	}
}

// A host with several keys: ssh-keyscan without -t lists them all, and a pin
// names one, so the operator is told to choose.
func TestPinFromKeyscanOfSeveralKeysIsRefused(t *testing.T) {
	t.Parallel()
	requireTools(t)
	s := sshtest.StartSSHD(t, sshtest.WithHostKeyTypes("ecdsa", "ed25519"))
	out := shell(t, fmt.Sprintf("ssh-keyscan -p %d %s", s.Port, s.Host), true)
	_, err := sshdial.ParsePin(out)
	if err == nil || !strings.Contains(err.Error(), "the host has several keys, pin one, e.g. with `ssh-keyscan -t ed25519") {
		t.Fatalf("ParsePin of every host key:\n%s\nerror %v, want the several-keys refusal", out, err)
	}
}

// The type in an `ssh-keygen -lf` line narrows the handshake to that key
// type: the host offers the pinned key at once, with no retry on another type.
func TestTypedPinNarrowsToItsKeyType(t *testing.T) {
	t.Parallel()
	requireTools(t)
	s := sshtest.StartSSHD(t, sshtest.WithHostKeyTypes("ecdsa", "ed25519"))
	ecdsaKey, edKey := s.HostKeys[0], s.HostKeys[1]
	if ecdsaKey.Type != "ecdsa" || edKey.Type != "ed25519" {
		t.Fatalf("host keys are %s, %s; want ecdsa, ed25519", ecdsaKey.Type, edKey.Type)
	}
	keygen := func(typ string) string {
		return shell(t, fmt.Sprintf("ssh-keyscan -t %s -p %d %s | ssh-keygen -lf -", typ, s.Port, s.Host), false)
	}
	edLine, ecdsaLine := keygen("ed25519"), keygen("ecdsa")
	ecdsaFingerprint := strings.Fields(ecdsaLine)[1] // the same key, without its type

	tests := []struct {
		name      string
		pin       string
		key       *sshtest.Key
		wantDials int32
	}{
		{"ed25519 keygen line", edLine, edKey, 1},
		// The client prefers ed25519, so only narrowing makes the host show its ECDSA key first.
		{"ecdsa keygen line", ecdsaLine, ecdsaKey, 1},
		// Control: the bare fingerprint costs a second handshake, which shows the count sees narrowing.
		{"bare ecdsa fingerprint", ecdsaFingerprint, ecdsaKey, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pin, err := sshdial.ParsePin(tc.pin)
			if err != nil {
				t.Fatalf("ParsePin(%q): %v", tc.pin, err)
			}
			if !pin.Matches(tc.key.Public) {
				t.Fatalf("pin %s does not match the %s host key %s", pin, tc.key.Type, tc.key.Fingerprint())
			}
			d, dials := countingDialer()
			o := d.Probe(t.Context(), pinnedTarget(t, s, pin), sshdial.ProbeTimeout)
			if !o.Reachable() || o.HostKey != sshdial.HostKeyVerified || o.Auth != sshdial.AuthAccepted {
				t.Fatalf("probe with pin %q: reason %q, host key %q, auth %q, message %q", tc.pin, o.Reason, o.HostKey, o.Auth, o.Message)
			}
			if got := dials.Load(); got != tc.wantDials {
				t.Fatalf("probe with pin %q made %d connections, want %d", tc.pin, got, tc.wantDials)
			}
		})
	}
}
