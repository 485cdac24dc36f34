package sshdial

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ProbeTimeout bounds one probe, TCP connect and SSH handshake of both hops
// together. It is a constant, as in the seed: a longer one lets one hung host
// hold a probe slot for a large part of the interval.
const ProbeTimeout = 10 * time.Second

// HostKeyResult is what a probe learnt about the target's host key.
type HostKeyResult string

// The host key results.
const (
	HostKeyNotSeen  HostKeyResult = "not_seen" // the dial failed before the target showed a key
	HostKeyVerified HostKeyResult = "verified" // the target's key matched the pin
	HostKeyMismatch HostKeyResult = "mismatch" // the target's key did not match the pin
)

// AuthResult is what a probe learnt about authentication on the target.
type AuthResult string

// The authentication results.
const (
	AuthNotAttempted AuthResult = "not_attempted" // the dial failed before authentication
	AuthAccepted     AuthResult = "accepted"
	AuthRefused      AuthResult = "refused"
	AuthWithheld     AuthResult = "withheld" // not checked: the credential was not available to this probe
)

// Outcome is the result of one probe.
type Outcome struct {
	Target Endpoint // always the target, never the bastion
	// Canceled says the probe was interrupted by its caller. It is not an
	// observation: nothing else in the outcome is meaningful.
	Canceled      bool
	Reason        Reason // ReasonNone on success
	Message       string // sanitised; names host and port, and the bastion when the jump hop failed
	Field         string // for a config failure, the attribute to fix
	HostKey       HostKeyResult
	Auth          AuthResult
	ServerVersion string // the SSH banner of the target, on success
	Latency       time.Duration
	// BastionKeyAdded is set when accept-new trusted a bastion's key during
	// this probe and wrote it to known_hosts: "host type SHA256:...".
	BastionKeyAdded string
	// Withheld is why authentication was not checked (Auth is AuthWithheld):
	// the credentials' Withheld.
	Withheld string
	// CheckedAt is when the probe finished, stamped by whoever ran it with
	// the clock it keeps (the Prober does).
	CheckedAt time.Time
}

// Reachable reports whether the probe succeeded in full: host key and
// authentication checked.
func (o Outcome) Reachable() bool {
	return !o.Canceled && o.Reason == ReasonNone && o.Auth == AuthAccepted
}

// Unchecked reports whether the probe could check nothing of the target:
// the bastion needs the credentials that were withheld.
func (o Outcome) Unchecked() bool { return o.Auth == AuthWithheld && o.HostKey == HostKeyNotSeen }

// Probe dials t, closes the connection at once (no session, no command) and
// classifies the result. The whole dial is bounded by timeout. When ctx is
// cancelled (not timed out) the outcome is Canceled: an interrupted probe
// observed nothing.
func (d *Dialer) Probe(ctx context.Context, t Target, timeout time.Duration) Outcome {
	client, o := d.Connect(ctx, t, timeout)
	if client != nil {
		_ = client.Close()
	}
	return o
}

// Connect dials t as Probe does and, when the probe succeeds in full, keeps
// the connection open for the caller, who closes it. The client is nil
// whenever the outcome is not Reachable.
func (d *Dialer) Connect(ctx context.Context, t Target, timeout time.Duration) (*Client, Outcome) {
	tr := &trace{}
	var client *Client
	r, err := d.resolve(t)
	var latency time.Duration
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		if err = r.addAgent(pctx, t); err == nil {
			client, err = d.dial(pctx, t, r, tr)
			r.release()
		}
		latency = time.Since(start)
		cancel()
	}
	// The caller's context is checked first: only the probe's own deadline is
	// a timeout, and a cancellation must never be recorded as a failure.
	if callerEnded(ctx) {
		if client != nil {
			_ = client.Close()
		}
		return nil, Outcome{Target: t.Endpoint, Canceled: true}
	}
	o := Outcome{Target: t.Endpoint, HostKey: HostKeyNotSeen, Auth: AuthNotAttempted, Latency: latency, BastionKeyAdded: tr.bastionAdded}
	switch {
	case tr.hostKeyVerified:
		o.HostKey = HostKeyVerified
	case len(tr.offered) > 0:
		o.HostKey = HostKeyMismatch
	}
	if err == nil {
		o.Auth, o.ServerVersion = AuthAccepted, tr.serverVersion
		return client, o
	}
	if (tr.authRefused || tr.bastionAuthRefused) && t.Credentials.Withheld != "" {
		// The credential that would authenticate is not here: what was
		// checked before authentication stands, authentication is not judged.
		o.Auth, o.Withheld = AuthWithheld, t.Credentials.Withheld
		return nil, o
	}
	if tr.authRefused {
		o.Auth = AuthRefused
	}
	o.Reason = Classify(err)
	o.Message = Sanitize(err.Error())
	var cfg *ConfigError
	if errors.As(err, &cfg) {
		o.Field = cfg.Field
		if cfg.Provider {
			o.Field = "provider." + cfg.Field
		}
	}
	if o.Reason == ReasonTimeout {
		o.Message = fmt.Sprintf("%s (no answer within the %s probe timeout)", o.Message, timeout)
	}
	return nil, o
}

// callerEnded reports whether the caller's context is over. Its deadline is
// compared with the clock too: a connection deadline copied from it can fire
// a moment before the context's own timer marks it done.
func callerEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
