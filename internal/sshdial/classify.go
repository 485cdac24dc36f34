package sshdial

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Reason is why a host could not be reached: a closed set. The empty Reason
// is success.
type Reason string

// The reasons, in the order Classify tests them.
const (
	ReasonNone    Reason = ""         // reached
	ReasonConfig  Reason = "config"   // the configuration cannot work as given: no pin, unusable keys or known_hosts, a bastion that refuses to forward
	ReasonTimeout Reason = "timeout"  // the deadline expired
	ReasonHostKey Reason = "host_key" // target key differs from its pin, or bastion key from known_hosts
	ReasonAuth    Reason = "auth"     // transport negotiated, authentication refused
	ReasonNetwork Reason = "network"  // refused, no route, DNS failure, connection lost
	ReasonUnknown Reason = "unknown"  // anything else
)

// Reasons lists every failure reason in classification order.
var Reasons = []Reason{ReasonConfig, ReasonTimeout, ReasonHostKey, ReasonAuth, ReasonNetwork, ReasonUnknown}

// Sticky reports whether a failure of this reason is deterministic and will
// repeat on the next probe, so waiting for a second failure buys nothing.
func (r Reason) Sticky() bool {
	switch r {
	case ReasonConfig, ReasonHostKey:
		return true
	case ReasonNone, ReasonTimeout, ReasonAuth, ReasonNetwork, ReasonUnknown:
		return false
	}
	return false
}

// Classify maps a dial error to exactly one Reason, walking a total order and
// returning the first match: config, timeout, host_key, auth, network,
// unknown. A nil error is ReasonNone.
//
// A cancellation is not an observation and has no Reason: callers check their
// own context before classifying (Probe does).
func Classify(err error) Reason {
	if err == nil {
		return ReasonNone
	}
	var cfg *ConfigError
	var refused *ForwardingRefusedError
	if errors.As(err, &cfg) || errors.As(err, &refused) {
		return ReasonConfig
	}
	// timeout precedes network: a deadline surfaces as a dial error too.
	if isTimeout(err) {
		return ReasonTimeout
	}
	// host_key precedes auth: both arrive as handshake failures and only a
	// key mismatch is a security event.
	var hk *HostKeyError
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	if errors.As(err, &hk) || errors.As(err, &ke) || errors.As(err, &re) {
		return ReasonHostKey
	}
	var auth *AuthError
	if errors.As(err, &auth) {
		return ReasonAuth
	}
	if isNetwork(err) {
		return ReasonNetwork
	}
	return ReasonUnknown
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isNetwork(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) || errors.As(err, &dns) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EPIPE} {
		if errors.Is(err, errno) {
			return true
		}
	}
	// The bastion could not reach the target.
	var oc *ssh.OpenChannelError
	if errors.As(err, &oc) && oc.Reason == ssh.ConnectionFailed {
		return true
	}
	// The host hung up before the handshake finished.
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "connection reset by peer")
}
