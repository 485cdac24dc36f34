package sshdial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Stage is the step of a dial that failed.
type Stage string

// The stages of a dial, in the order they run.
const (
	StageResolve   Stage = "resolve"   // turning the target into credentials and a pin
	StageConnect   Stage = "connect"   // TCP connect (to the target, or to the bastion)
	StageHandshake Stage = "handshake" // SSH key exchange, host key check, authentication
	StageForward   Stage = "forward"   // the bastion opening a channel to the target
)

// Hop tells which server a failure concerns.
type Hop string

// The two hops of a dial.
const (
	HopTarget  Hop = "target"
	HopBastion Hop = "bastion"
)

// DialError is every failure of a dial: where it happened and why. Its text
// names host and port, and the bastion when the failure arose on the jump hop.
type DialError struct {
	Hop    Hop
	Stage  Stage
	Target Endpoint  // always the target
	Jump   *Endpoint // the bastion, when the dial goes through one
	Err    error
}

func (e *DialError) Error() string {
	var b strings.Builder
	switch {
	case e.Hop == HopBastion && e.Stage == StageForward:
		fmt.Fprintf(&b, "bastion %s could not open a tunnel to %s: ", e.Jump.Addr(), e.Target.Addr())
	case e.Hop == HopBastion:
		fmt.Fprintf(&b, "bastion %s (jump hop to %s): %s: ", e.Jump.Addr(), e.Target.Addr(), e.Stage)
	case e.Jump != nil:
		fmt.Fprintf(&b, "%s (via bastion %s): %s: ", e.Target.Addr(), e.Jump.Addr(), e.Stage)
	default:
		fmt.Fprintf(&b, "%s: %s: ", e.Target.Addr(), e.Stage)
	}
	b.WriteString(describe(e.Err))
	return b.String()
}

func (e *DialError) Unwrap() error { return e.Err }

// ConfigError is a target that cannot be dialled as configured: no pin, an
// unreadable or invalid key, no credentials, an unusable known_hosts file.
// It is found before any network access, and the same configuration fails
// the same way every time.
type ConfigError struct {
	Field    string // the attribute to fix
	Provider bool   // the attribute is the provider's, not the connection's
	Msg      string
}

func (e *ConfigError) Error() string {
	if e.Provider {
		return "provider " + e.Field + ": " + e.Msg
	}
	return e.Field + ": " + e.Msg
}

// ForwardingRefusedError is a bastion that will not open a tunnel to the
// target by policy (administratively prohibited, or no support for
// forwarding): it answers the same way until its configuration changes.
type ForwardingRefusedError struct {
	Err *ssh.OpenChannelError
}

func (e *ForwardingRefusedError) Error() string {
	return fmt.Sprintf("%s (%s): allow TCP forwarding to the target for this user on the bastion (sshd_config AllowTcpForwarding, PermitOpen)",
		e.Err.Message, e.Err.Reason)
}

func (e *ForwardingRefusedError) Unwrap() error { return e.Err }

// HostKeyError is a target whose host key is not the pinned one.
type HostKeyError struct {
	Pin     Pin
	Offered []ssh.PublicKey // every key the host offered, in order
}

func (e *HostKeyError) Error() string {
	if len(e.Offered) == 0 {
		return fmt.Sprintf("host key mismatch: the host offers no key of the pinned type (pinned %s)", e.Pin)
	}
	offered := make([]string, len(e.Offered))
	for i, k := range e.Offered {
		offered[i] = k.Type() + " " + ssh.FingerprintSHA256(k)
	}
	return fmt.Sprintf("host key mismatch: pinned %s, host offered %s; if the host was reinstalled, update the pin, otherwise treat this as possible interception",
		e.Pin, strings.Join(offered, ", "))
}

// AuthError is a host (the target, or the bastion) that completed key
// exchange and then refused every credential offered.
type AuthError struct {
	User string
	Err  error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("authentication as %q refused: %s", e.User, strings.TrimPrefix(describe(e.Err), "ssh: "))
}
func (e *AuthError) Unwrap() error { return e.Err }

// errTimedOut marks a dial ended by its deadline; errors.Is finds
// context.DeadlineExceeded in it.
var errTimedOut error = timedOut{}

type timedOut struct{}

func (timedOut) Error() string        { return "timed out" }
func (timedOut) Is(target error) bool { return target == context.DeadlineExceeded }

// describe renders a cause without the redundant prefixes of the net and ssh
// packages ("dial tcp 1.2.3.4:22: connect:", "ssh: handshake failed:").
func describe(err error) string {
	if err == nil {
		return "<nil>"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil && !errors.Is(err, errTimedOut) {
		var dns *net.DNSError
		if errors.As(op.Err, &dns) {
			return dns.Error()
		}
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err.Error()
		}
		return op.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), "ssh: handshake failed: ")
}
