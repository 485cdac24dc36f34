package sshdial_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Every classification row is exercised over a real connection: OpenSSH's
// sshd for success and authentication, in-process servers for the faults.

// testTimeout is the probe timeout of a probe that must time out (a
// stalled server): the tests wait it out. answerTimeout bounds a probe
// whose host answers: generous, since on a busy machine a handshake
// through a bastion has taken longer than testTimeout.
const (
	testTimeout   = 1500 * time.Millisecond
	answerTimeout = 15 * time.Second
)

func target(host string, port int, user string, pin sshdial.Pin, key *sshtest.Key) sshdial.Target {
	return sshdial.Target{
		Endpoint:    sshdial.Endpoint{Host: host, Port: port, User: user},
		Pin:         pin,
		Credentials: sshdial.Credentials{PrivateKey: key.PEM()},
	}
}

func sshdTarget(s *sshtest.SSHD) sshdial.Target {
	return target(s.Host, s.Port, s.User, sshdial.PinKey(s.HostKeys[0].Public), s.ClientKey)
}

func serverTarget(t *testing.T, s *sshtest.Server) sshdial.Target {
	client := s.ClientKey
	if client == nil {
		client = sshtest.NewKey(t)
	}
	pin := sshdial.PinKey(sshtest.NewKey(t).Public)
	if s.HostKey != nil {
		pin = sshdial.PinKey(s.HostKey.Public)
	}
	return target(s.Host, s.Port, "root", pin, client)
}

func dialer(t *testing.T) (*sshdial.Dialer, string) {
	path := filepath.Join(t.TempDir(), "known_hosts")
	return &sshdial.Dialer{KnownHosts: &sshdial.KnownHosts{Path: path}}, path
}

func probe(t *testing.T, d *sshdial.Dialer, tgt sshdial.Target) (sshdial.Outcome, time.Duration) {
	t.Helper()
	return probeWithin(d, tgt, answerTimeout)
}

// stalledProbe is probe of a target that never answers, with testTimeout.
func stalledProbe(t *testing.T, d *sshdial.Dialer, tgt sshdial.Target) (sshdial.Outcome, time.Duration) {
	t.Helper()
	return probeWithin(d, tgt, testTimeout)
}

func probeWithin(d *sshdial.Dialer, tgt sshdial.Target, timeout time.Duration) (sshdial.Outcome, time.Duration) {
	start := time.Now()
	o := d.Probe(context.Background(), tgt, timeout)
	return o, time.Since(start)
}

func wantReason(t *testing.T, o sshdial.Outcome, want sshdial.Reason, messageParts ...string) {
	t.Helper()
	if o.Canceled {
		t.Fatalf("outcome cancelled, want reason %q", want)
	}
	if o.Reason != want {
		t.Fatalf("reason = %q, want %q (message %q)", o.Reason, want, o.Message)
	}
	for _, p := range messageParts {
		if !strings.Contains(o.Message, p) {
			t.Errorf("message %q does not contain %q", o.Message, p)
		}
	}
}

func TestProbeSucceedsAgainstOpenSSH(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	d, _ := dialer(t)
	o, _ := probe(t, d, sshdTarget(s))
	wantReason(t, o, sshdial.ReasonNone)
	if o.HostKey != sshdial.HostKeyVerified || o.Auth != sshdial.AuthAccepted {
		t.Errorf("host key %q, auth %q; want verified, accepted", o.HostKey, o.Auth)
	}
	if !strings.HasPrefix(o.ServerVersion, "SSH-2.0-OpenSSH") {
		t.Errorf("server version %q, want the OpenSSH banner", o.ServerVersion)
	}
	if o.Target.Host != s.Host || o.Message != "" {
		t.Errorf("outcome %+v: want target host %s and no message", o, s.Host)
	}
}

func TestProbeWithKeyFileAndPassphrase(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	d, _ := dialer(t)
	dir := t.TempDir()
	encrypted := filepath.Join(dir, "id_encrypted")
	if err := os.WriteFile(encrypted, s.ClientKey.EncryptedPEM(t, "correct horse"), 0o600); err != nil {
		t.Fatal(err)
	}
	tgt := sshdTarget(s)
	tgt.Credentials = sshdial.Credentials{PrivateKeyFile: encrypted, Passphrase: []byte("correct horse")}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonNone)

	t.Run("missing passphrase is config", func(t *testing.T) {
		tgt.Credentials.Passphrase = nil
		o, _ := probe(t, d, tgt)
		wantReason(t, o, sshdial.ReasonConfig, "private_key_passphrase", "id_encrypted", "encrypted")
	})
	t.Run("wrong passphrase is config", func(t *testing.T) {
		tgt.Credentials.Passphrase = []byte("wrong")
		o, _ := probe(t, d, tgt)
		wantReason(t, o, sshdial.ReasonConfig, "does not decrypt")
	})
	t.Run("withheld passphrase still proves transport and host key", func(t *testing.T) {
		tgt.Credentials.Passphrase = nil
		tgt.Credentials.Withheld = "the passphrase is write-only"
		o, _ := probe(t, d, tgt)
		wantReason(t, o, sshdial.ReasonNone)
		if o.HostKey != sshdial.HostKeyVerified || o.Auth != sshdial.AuthWithheld {
			t.Errorf("host key %q, auth %q; want verified, withheld", o.HostKey, o.Auth)
		}
	})
}

func TestProbeAuthRefusedByOpenSSH(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	d, _ := dialer(t)
	tgt := sshdTarget(s)
	tgt.Credentials = sshdial.Credentials{PrivateKey: sshtest.NewKey(t).PEM()} // not authorised
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonAuth, s.Addr, "unable to authenticate")
	if o.HostKey != sshdial.HostKeyVerified || o.Auth != sshdial.AuthRefused {
		t.Errorf("host key %q, auth %q; want verified, refused", o.HostKey, o.Auth)
	}
}

func TestProbeAuthRefusedInProcess(t *testing.T) {
	t.Parallel()
	s := sshtest.NewServer(t, sshtest.RefuseAuth)
	d, _ := dialer(t)
	o, _ := probe(t, d, serverTarget(t, s))
	wantReason(t, o, sshdial.ReasonAuth, s.Addr)
}

func TestProbeRefusedConnection(t *testing.T) {
	t.Parallel()
	host, port := sshtest.ClosedPort(t)
	d, _ := dialer(t)
	o, _ := probe(t, d, target(host, port, "root", sshdial.PinKey(sshtest.NewKey(t).Public), sshtest.NewKey(t)))
	wantReason(t, o, sshdial.ReasonNetwork, "connection refused", host)
	if o.HostKey != sshdial.HostKeyNotSeen || o.Auth != sshdial.AuthNotAttempted {
		t.Errorf("host key %q, auth %q; want not_seen, not_attempted", o.HostKey, o.Auth)
	}
}

func TestProbeBlackHoledAfterAccept(t *testing.T) {
	t.Parallel()
	s := sshtest.NewServer(t, sshtest.BlackHole)
	d, _ := dialer(t)
	o, took := stalledProbe(t, d, serverTarget(t, s))
	wantReason(t, o, sshdial.ReasonTimeout, s.Addr, "probe timeout")
	withinTimeout(t, took)
	if s.Accepted() != 1 {
		t.Errorf("server accepted %d connections, want 1", s.Accepted())
	}
}

func TestProbeStalledHandshake(t *testing.T) {
	t.Parallel()
	s := sshtest.NewServer(t, sshtest.StallHandshake)
	d, _ := dialer(t)
	o, took := stalledProbe(t, d, serverTarget(t, s))
	wantReason(t, o, sshdial.ReasonTimeout, s.Addr, "handshake")
	withinTimeout(t, took)
}

func TestProbeStalledHandshakeThroughBastion(t *testing.T) {
	t.Parallel()
	bastion := sshtest.NewServer(t, sshtest.Bastion)
	stalled := sshtest.NewServer(t, sshtest.StallHandshake)
	d, _ := dialer(t)
	tgt := serverTarget(t, stalled)
	tgt.Credentials = sshdial.Credentials{PrivateKey: bastion.ClientKey.PEM()}
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
	o, took := stalledProbe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonTimeout, stalled.Addr, "via bastion "+bastion.Addr)
	withinTimeout(t, took)
}

// withinTimeout: a stalled dial waited for the probe timeout (not long
// before it) and returned soon after it. The upper bound is generous: under
// -race on two busy cores a timer can fire late, while a dial the timeout
// does not end runs on for good.
func withinTimeout(t *testing.T, took time.Duration) {
	t.Helper()
	if took > 3*testTimeout+2*time.Second || took < testTimeout*9/10 {
		t.Errorf("probe took %s, want about the %s probe timeout", took, testTimeout)
	}
}

// probeOrHang runs a probe that must end by itself, failing the test rather
// than hanging it when the probe does not.
func probeOrHang(t *testing.T, ctx context.Context, d *sshdial.Dialer, tgt sshdial.Target, timeout time.Duration) (sshdial.Outcome, time.Duration) {
	t.Helper()
	type result struct {
		o    sshdial.Outcome
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		o := d.Probe(ctx, tgt, timeout)
		done <- result{o, time.Since(start)}
	}()
	select {
	case r := <-done:
		return r.o, r.took
	case <-time.After(10 * timeout):
		t.Fatalf("the probe of %s was still running after %s, ten times its timeout", tgt.Addr(), 10*timeout)
	}
	return sshdial.Outcome{}, 0
}

func TestProbeWrongTargetKey(t *testing.T) {
	t.Parallel()
	s := sshtest.NewServer(t, sshtest.Healthy)
	d, _ := dialer(t)
	tgt := serverTarget(t, s)
	pinned := sshtest.NewKey(t)
	for name, pin := range map[string]sshdial.Pin{
		"key line":    sshdial.MustParsePin(pinned.AuthorizedLine()),
		"fingerprint": sshdial.MustParsePin(pinned.Fingerprint()),
	} {
		t.Run(name, func(t *testing.T) {
			tgt.Pin = pin
			o, _ := probe(t, d, tgt)
			wantReason(t, o, sshdial.ReasonHostKey, s.Addr, "host key mismatch", pinned.Fingerprint(), s.HostKey.Fingerprint())
			if o.HostKey != sshdial.HostKeyMismatch || o.Auth != sshdial.AuthNotAttempted {
				t.Errorf("host key %q, auth %q; want mismatch, not_attempted", o.HostKey, o.Auth)
			}
		})
	}
}

// A SHA256 fingerprint does not say which of a host's keys it names: the
// pinned key must be found whichever key the host offers first.
func TestProbeFingerprintOfAnyHostKey(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t, sshtest.WithHostKeyTypes("ecdsa", "rsa", "ed25519"))
	d, _ := dialer(t)
	for _, k := range s.HostKeys {
		t.Run(k.Type, func(t *testing.T) {
			tgt := sshdTarget(s)
			tgt.Pin = sshdial.MustParsePin(k.Fingerprint())
			o, _ := probe(t, d, tgt)
			wantReason(t, o, sshdial.ReasonNone)
			tgt.Pin = sshdial.MustParsePin(k.AuthorizedLine())
			o, _ = probe(t, d, tgt)
			wantReason(t, o, sshdial.ReasonNone)
		})
	}
	t.Run("no key matches", func(t *testing.T) {
		tgt := sshdTarget(s)
		tgt.Pin = sshdial.MustParsePin(sshtest.NewKey(t).Fingerprint())
		o, _ := probe(t, d, tgt)
		wantReason(t, o, sshdial.ReasonHostKey)
		for _, k := range s.HostKeys {
			if !strings.Contains(o.Message, k.Fingerprint()) {
				t.Errorf("message %q does not list offered key %s", o.Message, k.Fingerprint())
			}
		}
	})
	t.Run("pinned key type not offered", func(t *testing.T) {
		only := sshtest.StartSSHD(t) // ed25519 only
		tgt := sshdTarget(only)
		ecdsa := sshtest.NewKeyOfType(t, "ecdsa")
		for form, pin := range map[string]string{
			"key line":              ecdsa.AuthorizedLine(),
			"ssh-keygen -lf output": "256 " + ecdsa.Fingerprint() + " web1 (ECDSA)",
		} {
			tgt.Pin = sshdial.MustParsePin(pin)
			o, _ := probe(t, d, tgt)
			if o.Reason != sshdial.ReasonHostKey || !strings.Contains(o.Message, "no key of the pinned type") {
				t.Errorf("%s pin: reason %q, message %q; want host_key, no key of the pinned type", form, o.Reason, o.Message)
			}
		}
	})
}

func TestProbeWithoutPinNeverDials(t *testing.T) {
	t.Parallel()
	s := sshtest.NewServer(t, sshtest.Healthy)
	d, _ := dialer(t)
	tgt := serverTarget(t, s)
	tgt.Pin = sshdial.Pin{}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonConfig, "host_key_fingerprint", "never dials an unpinned host")
	if s.Accepted() != 0 {
		t.Fatalf("an unpinned probe dialled: server accepted %d connections", s.Accepted())
	}
}

func TestProbeUnresolvableName(t *testing.T) {
	t.Parallel()
	// Go refuses .onion names without a lookup (RFC 7686), so this test
	// sends no DNS query off the machine.
	d, _ := dialer(t)
	o, _ := probe(t, d, target("no-such-host.onion", 22, "root", sshdial.PinKey(sshtest.NewKey(t).Public), sshtest.NewKey(t)))
	wantReason(t, o, sshdial.ReasonNetwork, "no-such-host.onion")
}

// Serial: "no agent" is an empty SSH_AUTH_SOCK in the process environment.
func TestProbeConfigErrorsNameTheField(t *testing.T) {
	s := sshtest.NewServer(t, sshtest.Healthy)
	d, _ := dialer(t)
	secret := string(sshtest.NewKey(t).PEM())
	cases := map[string]struct {
		creds sshdial.Credentials
		field string
	}{
		"garbled inline key": {sshdial.Credentials{PrivateKey: []byte(secret[:len(secret)/2])}, "private_key"},
		"missing key file":   {sshdial.Credentials{PrivateKeyFile: filepath.Join(t.TempDir(), "absent")}, "private_key_file"},
		"no credentials":     {sshdial.Credentials{}, "no credentials"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("SSH_AUTH_SOCK", "")
			tgt := serverTarget(t, s)
			tgt.Credentials = c.creds
			o, _ := probe(t, d, tgt)
			wantReason(t, o, sshdial.ReasonConfig, c.field)
			if strings.Contains(o.Message, "PRIVATE KEY") || strings.Contains(o.Message, secret[40:80]) {
				t.Errorf("message holds key material: %q", o.Message)
			}
		})
	}
	if s.Accepted() != 0 {
		t.Errorf("a config failure dialled: %d connections", s.Accepted())
	}
}

func TestProbeCancellationIsNotAnObservation(t *testing.T) {
	t.Parallel()
	s := sshtest.NewServer(t, sshtest.BlackHole)
	d, _ := dialer(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	o := d.Probe(ctx, serverTarget(t, s), 10*time.Second)
	if !o.Canceled || o.Reason != sshdial.ReasonNone || o.Message != "" {
		t.Fatalf("cancelled probe = %+v, want Canceled with no reason or message", o)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("cancelled probe took %s: cancellation must end the dial promptly", took)
	}
}

func TestProbeThroughBastion(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, s.ClientKey)
	d, knownHostsPath := dialer(t)
	tgt := sshdTarget(s)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}

	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonNone)
	if o.Target.Host != s.Host || o.Target.Port != s.Port {
		t.Errorf("outcome target %s, want the target %s, never the bastion", o.Target.Addr(), s.Addr)
	}
	// accept-new: the unknown bastion was trusted and written down...
	if !strings.Contains(o.BastionKeyAdded, bastion.HostKey.Fingerprint()) {
		t.Errorf("BastionKeyAdded = %q, want the bastion's fingerprint", o.BastionKeyAdded)
	}
	data, err := os.ReadFile(knownHostsPath)
	if err != nil || !strings.Contains(string(data), strings.TrimSpace(bastion.HostKey.AuthorizedLine())) {
		t.Fatalf("known_hosts %q (err %v) does not hold the bastion key", data, err)
	}
	// ...once: the second probe finds it known.
	o, _ = probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonNone)
	if o.BastionKeyAdded != "" {
		t.Errorf("second probe added the bastion again: %q", o.BastionKeyAdded)
	}
	again, _ := os.ReadFile(knownHostsPath)
	if string(again) != string(data) {
		t.Errorf("known_hosts changed on the second probe:\n%s\nthen\n%s", data, again)
	}
}

func TestProbeWrongBastionKey(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, s.ClientKey)
	d, knownHostsPath := dialer(t)
	line := knownhosts.Line([]string{knownhosts.Normalize(bastion.Addr)}, sshtest.NewKey(t).Public)
	if err := os.WriteFile(knownHostsPath, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tgt := sshdTarget(s)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonHostKey, "bastion "+bastion.Addr, "jump hop to "+s.Addr, "host key mismatch", knownHostsPath)
	if o.Target.Host != s.Host {
		t.Errorf("outcome host %s, want the target %s", o.Target.Host, s.Host)
	}
	after, _ := os.ReadFile(knownHostsPath)
	if string(after) != line+"\n" {
		t.Errorf("a refused bastion key changed known_hosts:\n%s", after)
	}
}

func TestProbeBastionDown(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	host, port := sshtest.ClosedPort(t)
	d, _ := dialer(t)
	tgt := sshdTarget(s)
	tgt.Jump = &sshdial.Endpoint{Host: host, Port: port}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonNetwork, "bastion "+tgt.Jump.Addr(), "jump hop to "+s.Addr, "connection refused")
}

func TestProbeBastionCannotReachTarget(t *testing.T) {
	t.Parallel()
	bastion := sshtest.NewServer(t, sshtest.Bastion)
	host, port := sshtest.ClosedPort(t)
	d, _ := dialer(t)
	tgt := target(host, port, "root", sshdial.PinKey(sshtest.NewKey(t).Public), bastion.ClientKey)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonNetwork, "bastion "+bastion.Addr, "could not open a tunnel to "+tgt.Addr())
}

func TestProbeBastionWithoutKnownHostsFile(t *testing.T) {
	t.Parallel()
	bastion := sshtest.NewServer(t, sshtest.Bastion)
	d := &sshdial.Dialer{}
	tgt := serverTarget(t, bastion)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonConfig, "known_hosts_file")
	if bastion.Accepted() != 0 {
		t.Errorf("dialled a bastion it could not verify")
	}
}

func TestDialReturnsUsableClient(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	d, _ := dialer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, sshdTarget(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.Output("echo reached")
	if err != nil || strings.TrimSpace(string(out)) != "reached" {
		t.Fatalf("remote command: %q, %v", out, err)
	}
}

// A bastion that hangs once it has opened the tunnel never answers the
// close of the channel, so closing the channel alone leaves the target
// handshake's read blocked: the probe must close the bastion connection too,
// at its deadline and on cancellation.
func TestProbeBastionStallingAfterChannelOpen(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	t.Run("deadline", func(t *testing.T) {
		bastion := sshtest.NewServerWithKeys(t, sshtest.StallingBastion, nil, s.ClientKey)
		d, _ := dialer(t)
		tgt := sshdTarget(s)
		tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
		o, took := probeOrHang(t, context.Background(), d, tgt, testTimeout)
		wantReason(t, o, sshdial.ReasonTimeout, s.Addr, "via bastion "+bastion.Addr)
		withinTimeout(t, took)
	})
	t.Run("cancellation", func(t *testing.T) {
		bastion := sshtest.NewServerWithKeys(t, sshtest.StallingBastion, nil, s.ClientKey)
		d, _ := dialer(t)
		tgt := sshdTarget(s)
		tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// A long probe timeout, so that only the cancellation can end it soon.
		time.AfterFunc(300*time.Millisecond, cancel)
		o, took := probeOrHang(t, ctx, d, tgt, 10*time.Second)
		if !o.Canceled {
			t.Fatalf("cancelled probe = %+v, want Canceled", o)
		}
		if took > 5*time.Second {
			t.Errorf("the cancelled probe took %s: cancellation did not end it", took)
		}
	})
}

// A bastion that refuses the credentials is an authentication failure
// named after the bastion, not an unknown one.
func TestProbeBastionRefusesAuth(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	bastion := sshtest.NewServer(t, sshtest.Bastion) // accepts only its own client key
	d, _ := dialer(t)
	tgt := sshdTarget(s)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port, User: "jumper"}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonAuth, "bastion "+bastion.Addr, "jump hop to "+s.Addr, `authentication as "jumper" refused`)
	if o.HostKey != sshdial.HostKeyNotSeen || o.Auth != sshdial.AuthNotAttempted {
		t.Errorf("host key %q, auth %q: the target was never reached", o.HostKey, o.Auth)
	}
}

// With a write-only credential withheld, a bastion's refusal says nothing
// about the target: the probe checked nothing of it and says so.
func TestProbeBastionWithWithheldCredentials(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, s.ClientKey)
	d, _ := dialer(t)
	tgt := sshdTarget(s)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
	tgt.Credentials = sshdial.Credentials{Withheld: "the inline private_key is write-only"}
	o, _ := probe(t, d, tgt)
	if o.Canceled || o.Reason != sshdial.ReasonNone || !o.Unchecked() || o.Withheld == "" {
		t.Fatalf("outcome %+v: want no failure, nothing of the target checked, and why", o)
	}
	if bastion.Accepted() != 1 {
		t.Errorf("bastion accepted %d connections, want 1 (its transport and key are still checked)", bastion.Accepted())
	}
	t.Run("a bastion that is down is still an observation", func(t *testing.T) {
		host, port := sshtest.ClosedPort(t)
		tgt.Jump = &sshdial.Endpoint{Host: host, Port: port}
		o, _ := probe(t, d, tgt)
		wantReason(t, o, sshdial.ReasonNetwork, "bastion "+tgt.Jump.Addr())
	})
}

// A bastion that forbids forwarding refuses every probe the same way until
// its configuration changes: config, not a transient unknown.
func TestProbeBastionForbidsForwarding(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	bastion := sshtest.NewServerWithKeys(t, sshtest.ForbiddingBastion, nil, s.ClientKey)
	d, _ := dialer(t)
	tgt := sshdTarget(s)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonConfig, "bastion "+bastion.Addr, "administratively prohibited", "AllowTcpForwarding")
	if !o.Reason.Sticky() {
		t.Errorf("reason %q is not sticky", o.Reason)
	}
}

// known_hosts faults are found before any dial, as configuration.
func TestProbeKnownHostsFaults(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, s.ClientKey)
	tgt := sshdTarget(s)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
	dir := t.TempDir()
	garbled := filepath.Join(dir, "garbled")
	if err := os.WriteFile(garbled, []byte("bastion ssh-ed25519 not-base64!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		kh   *sshdial.KnownHosts
		want []string
	}{
		"unparsable file":   {&sshdial.KnownHosts{Path: garbled}, []string{"provider known_hosts_file", garbled, "does not parse"}},
		"missing directory": {&sshdial.KnownHosts{Path: filepath.Join(dir, "typo", "known_hosts")}, []string{"provider known_hosts_file", filepath.Join(dir, "typo") + " does not exist"}},
	} {
		t.Run(name, func(t *testing.T) {
			d := &sshdial.Dialer{KnownHosts: c.kh}
			o, _ := probe(t, d, tgt)
			wantReason(t, o, sshdial.ReasonConfig, c.want...)
			var cfg *sshdial.ConfigError
			if err := d.Check(tgt); !errors.As(err, &cfg) || cfg.Field != "known_hosts_file" || !cfg.Provider {
				t.Errorf("Check = %v, want a ConfigError on the provider's known_hosts_file", err)
			}
		})
	}
	if bastion.Accepted() != 0 {
		t.Errorf("a known_hosts fault still dialled the bastion %d times", bastion.Accepted())
	}
	t.Run("the default directory is created as OpenSSH does", func(t *testing.T) {
		path := filepath.Join(dir, "home", ".ssh", "known_hosts")
		d := &sshdial.Dialer{KnownHosts: &sshdial.KnownHosts{Path: path, CreateDir: true}}
		o, _ := probe(t, d, tgt)
		wantReason(t, o, sshdial.ReasonNone)
		if _, err := os.Stat(path); err != nil {
			t.Errorf("known_hosts was not created: %v", err)
		}
	})
}

// A known_hosts file whose names are hashed (HashKnownHosts) gains hashed
// lines only, and a hashed entry is found again on the next dial.
func TestProbeKnownHostsHashed(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, s.ClientKey)
	d, path := dialer(t)
	other := knownhosts.Line([]string{knownhosts.HashHostname("other.example.org")}, sshtest.NewKey(t).Public)
	if err := os.WriteFile(path, []byte(other+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tgt := sshdTarget(s)
	tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
	o, _ := probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonNone)
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "|1|") || strings.Contains(lines[1], bastion.Host) {
		t.Fatalf("known_hosts after accept-new:\n%s\nwant a second, hashed line", data)
	}
	o, _ = probe(t, d, tgt)
	wantReason(t, o, sshdial.ReasonNone)
	if o.BastionKeyAdded != "" {
		t.Errorf("the hashed entry was not found again: %q", o.BastionKeyAdded)
	}
}

// Check finds every static fault with no network and names the attribute.
// Serial: "no agent" is an empty SSH_AUTH_SOCK in the process environment.
func TestCheckStaticFaults(t *testing.T) {
	s := sshtest.NewServer(t, sshtest.Healthy)
	dir := t.TempDir()
	plain := s.ClientKey.WriteFile(t, dir)
	encrypted := filepath.Join(dir, "encrypted")
	if err := os.WriteFile(encrypted, s.ClientKey.EncryptedPEM(t, "right"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_AUTH_SOCK", "")
	d, _ := dialer(t)
	cases := []struct {
		name     string
		edit     func(*sshdial.Target)
		field    string
		provider bool
		msg      string
	}{
		{"no pin", func(tg *sshdial.Target) { tg.Pin = sshdial.Pin{} }, "host_key_fingerprint", false, "ssh-keyscan"},
		{"missing key file", func(tg *sshdial.Target) {
			tg.Credentials = sshdial.Credentials{PrivateKeyFile: filepath.Join(dir, "absent")}
		}, "private_key_file", false, "cannot read"},
		{"directory as key file", func(tg *sshdial.Target) { tg.Credentials = sshdial.Credentials{PrivateKeyFile: dir} }, "private_key_file", false, "is a directory"},
		{"missing passphrase", func(tg *sshdial.Target) { tg.Credentials = sshdial.Credentials{PrivateKeyFile: encrypted} }, "private_key_passphrase", false, "encrypted"},
		{"wrong passphrase", func(tg *sshdial.Target) {
			tg.Credentials = sshdial.Credentials{PrivateKeyFile: encrypted, Passphrase: []byte("wrong")}
		}, "private_key_passphrase", false, "does not decrypt"},
		{"provider key file missing", func(tg *sshdial.Target) {
			tg.Credentials = sshdial.Credentials{PrivateKeyFile: filepath.Join(dir, "absent"), FromProvider: true}
		}, "private_key_file", true, "cannot read"},
		{"agent without a socket", func(tg *sshdial.Target) { tg.Credentials = sshdial.Credentials{Agent: true} }, "agent", false, "SSH_AUTH_SOCK"},
		{"no credentials", func(tg *sshdial.Target) { tg.Credentials = sshdial.Credentials{} }, "private_key_file", false, "no credentials"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tgt := serverTarget(t, s)
			tgt.Credentials = sshdial.Credentials{PrivateKeyFile: plain}
			c.edit(&tgt)
			err := d.Check(tgt)
			var cfg *sshdial.ConfigError
			if !errors.As(err, &cfg) || cfg.Field != c.field || cfg.Provider != c.provider || !strings.Contains(cfg.Error(), c.msg) {
				t.Fatalf("Check = %v, want a ConfigError on %s (provider %v) saying %q", err, c.field, c.provider, c.msg)
			}
		})
	}
	t.Run("a good target passes", func(t *testing.T) {
		tgt := serverTarget(t, s)
		tgt.Credentials = sshdial.Credentials{PrivateKeyFile: encrypted, Passphrase: []byte("right")}
		if err := d.Check(tgt); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a withheld passphrase is no fault", func(t *testing.T) {
		tgt := serverTarget(t, s)
		tgt.Credentials = sshdial.Credentials{PrivateKeyFile: encrypted, Withheld: "write-only passphrase"}
		if err := d.Check(tgt); err != nil {
			t.Fatal(err)
		}
	})
	if s.Accepted() != 0 {
		t.Errorf("Check dialled the host %d times", s.Accepted())
	}
}

// The agent is asked for its keys under the probe's bound: an agent that
// accepts and never answers makes the probe time out, and Ctrl-C ends it.
// Serial: the agent is found at the process's SSH_AUTH_SOCK.
func TestProbeHungAgent(t *testing.T) {
	s := sshtest.NewServer(t, sshtest.Healthy)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	t.Setenv("SSH_AUTH_SOCK", sock)
	d, _ := dialer(t)
	tgt := serverTarget(t, s)
	tgt.Credentials = sshdial.Credentials{Agent: true}

	o, took := probeOrHang(t, context.Background(), d, tgt, testTimeout)
	wantReason(t, o, sshdial.ReasonTimeout)
	withinTimeout(t, took)

	// A long probe timeout, so that only the cancellation can end it soon.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(300*time.Millisecond, cancel)
	o, took = probeOrHang(t, ctx, d, tgt, 10*time.Second)
	if !o.Canceled || took > 5*time.Second {
		t.Errorf("cancelled probe = %+v after %s, want Canceled long before the 10s timeout", o, took)
	}
	if s.Accepted() != 0 {
		t.Errorf("the host was dialled %d times before the agent answered", s.Accepted())
	}
}
