package sshdial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestSanitize(t *testing.T) {
	t.Parallel()
	pem := "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACBqbGVzc2VjcmV0\n-----END OPENSSH PRIVATE KEY-----\n"
	rsaPEM := "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
	blob200 := strings.Repeat("QUJD", 50) // 200 base64 characters
	blob199 := strings.Repeat("A", 199)   // one short of a long run
	tests := []struct {
		name, in, want string
	}{
		{"plain text unchanged", "web1:22: connect: connection refused", "web1:22: connect: connection refused"},
		{"openssh private key block removed", "parse key: " + pem + "done", "parse key: [private key removed] done"},
		{"rsa private key block removed", "a " + rsaPEM + " b", "a [private key removed] b"},
		{"two key blocks both removed", rsaPEM + " and " + rsaPEM, "[private key removed] and [private key removed]"},
		{"unterminated key block removed to the end", "oops -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "oops [private key removed]"},
		{"200-char base64 run removed", "key " + blob200 + " end", "key [data removed] end"},
		{"199-char run kept", "key " + blob199 + " end", "key " + blob199 + " end"},
		{"newlines collapsed", "line one\nline two\r\n\tline three", "line one line two line three"},
		{"leading and trailing space trimmed", "  \n padded \n ", "padded"},
		{"empty stays empty", "", ""},
		{"public key header kept", "-----BEGIN PUBLIC KEY----- x", "-----BEGIN PUBLIC KEY----- x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Sanitize(tc.in)
			if got != tc.want {
				t.Fatalf("Sanitize(%q) =\n %q\nwant\n %q", tc.in, got, tc.want)
			}
			if strings.Contains(got, "PRIVATE KEY") || strings.ContainsAny(got, "\r\n") {
				t.Fatalf("Sanitize output %q still holds a key header or a line break", got)
			}
		})
	}
}

func TestReasonSticky(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    Reason
		want bool
	}{
		{ReasonNone, false},
		{ReasonConfig, true},
		{ReasonTimeout, false},
		{ReasonHostKey, true},
		{ReasonAuth, false},
		{ReasonNetwork, false},
		{ReasonUnknown, false},
		{Reason("bogus"), false},
	}
	for _, tc := range tests {
		t.Run("reason_"+string(tc.r), func(t *testing.T) {
			if got := tc.r.Sticky(); got != tc.want {
				t.Fatalf("Reason(%q).Sticky() = %v, want %v", tc.r, got, tc.want)
			}
		})
	}
}

func TestReasonsClosedSet(t *testing.T) {
	t.Parallel()
	// The spec's closed set, in classification order.
	want := []Reason{"config", "timeout", "host_key", "auth", "network", "unknown"}
	if fmt.Sprint(Reasons) != fmt.Sprint(want) {
		t.Fatalf("Reasons = %v, want %v", Reasons, want)
	}
}

// timeoutOpError is a net.OpError whose cause is a deadline: both a timeout and a network error.
func timeoutOpError() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
}

func refusedOpError() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
}

func TestClassifyConstructedErrors(t *testing.T) {
	t.Parallel()
	target := Endpoint{Host: "web1", Port: 22}
	bastion := &Endpoint{Host: "jump", Port: 22}
	hostKeyErr := &HostKeyError{Pin: Pin{fingerprint: "SHA256:" + strings.Repeat("A", 43)}}
	cfg := &ConfigError{Field: "host_key_fingerprint", Msg: "no pin"}
	tests := []struct {
		name string
		err  error
		want Reason
	}{
		{"nil is success", nil, ReasonNone},
		{"config error", cfg, ReasonConfig},
		{"config error in a dial error", &DialError{Hop: HopTarget, Stage: StageResolve, Target: target, Err: cfg}, ReasonConfig},
		{"config error joined with a timeout", errors.Join(cfg, context.DeadlineExceeded), ReasonConfig},
		{"config error joined with a host key error", errors.Join(hostKeyErr, cfg), ReasonConfig},
		{"config error joined with a network error", errors.Join(refusedOpError(), cfg), ReasonConfig},
		{"context deadline", context.DeadlineExceeded, ReasonTimeout},
		{"os deadline", os.ErrDeadlineExceeded, ReasonTimeout},
		{"op error that is a timeout", timeoutOpError(), ReasonTimeout},
		{"timeout op error in a dial error", &DialError{Hop: HopTarget, Stage: StageConnect, Target: target, Err: timeoutOpError()}, ReasonTimeout},
		{"timeout joined with a host key error", errors.Join(hostKeyErr, os.ErrDeadlineExceeded), ReasonTimeout},
		{"host key error", hostKeyErr, ReasonHostKey},
		{"host key error in a dial error", &DialError{Hop: HopTarget, Stage: StageHandshake, Target: target, Err: hostKeyErr}, ReasonHostKey},
		{"host key error wrapped by fmt", fmt.Errorf("ssh: handshake failed: %w", hostKeyErr), ReasonHostKey},
		{"host key error joined with an auth error", errors.Join(&AuthError{Err: errors.New("ssh: unable to authenticate")}, hostKeyErr), ReasonHostKey},
		{"bastion known_hosts key change", &DialError{Hop: HopBastion, Stage: StageHandshake, Target: target, Jump: bastion,
			Err: &knownhosts.KeyError{Want: []knownhosts.KnownKey{{Filename: "known_hosts", Line: 3}}}}, ReasonHostKey},
		{"bastion revoked key", &DialError{Hop: HopBastion, Stage: StageHandshake, Target: target, Jump: bastion,
			Err: &knownhosts.RevokedError{}}, ReasonHostKey},
		{"auth error", &AuthError{Err: errors.New("ssh: unable to authenticate")}, ReasonAuth},
		{"auth error in a dial error", &DialError{Hop: HopTarget, Stage: StageHandshake, Target: target, Err: &AuthError{Err: errors.New("no")}}, ReasonAuth},
		{"auth error wrapping EOF is still auth", &AuthError{Err: io.EOF}, ReasonAuth},
		{"op error with ECONNREFUSED", refusedOpError(), ReasonNetwork},
		{"ECONNREFUSED in a dial error", &DialError{Hop: HopTarget, Stage: StageConnect, Target: target, Err: refusedOpError()}, ReasonNetwork},
		{"dns error", &net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}, ReasonNetwork},
		{"bare EHOSTUNREACH", syscall.EHOSTUNREACH, ReasonNetwork},
		{"bare ECONNRESET", fmt.Errorf("read: %w", syscall.ECONNRESET), ReasonNetwork},
		{"EOF before handshake end", fmt.Errorf("ssh: handshake failed: %w", io.EOF), ReasonNetwork},
		{"bastion could not open a channel", &DialError{Hop: HopBastion, Stage: StageForward, Target: target, Jump: bastion,
			Err: &ssh.OpenChannelError{Reason: ssh.ConnectionFailed, Message: "Connection refused"}}, ReasonNetwork},
		{"bastion refused the channel administratively", &ssh.OpenChannelError{Reason: ssh.Prohibited, Message: "no"}, ReasonUnknown},
		{"plain error", errors.New("x"), ReasonUnknown},
		{"dial error around a plain error", &DialError{Hop: HopTarget, Stage: StageHandshake, Target: target, Err: errors.New("ssh: no common algorithm")}, ReasonUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Fatalf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
