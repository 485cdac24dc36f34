package sshdial

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Dialer dials SSH targets. The zero value dials directly and refuses every
// bastion (it has no known_hosts file to verify one against).
type Dialer struct {
	// KnownHosts verifies bastions (accept-new).
	KnownHosts *KnownHosts
	// NetDialer makes TCP connections; the zero value is used when nil.
	NetDialer *net.Dialer
}

// Client is an authenticated SSH connection to a target. Close releases the
// bastion connection too.
type Client struct {
	*ssh.Client
	bastion *ssh.Client
	// HostKey is the key the target presented (it matched the pin).
	HostKey ssh.PublicKey
}

// Close closes the connection to the target and to the bastion, if any.
func (c *Client) Close() error {
	err := c.Client.Close()
	if c.bastion != nil {
		_ = c.bastion.Close()
	}
	return err
}

// trace records what a dial saw, whether or not it succeeded.
type trace struct {
	hostKeyVerified    bool            // the target's key matched the pin
	offered            []ssh.PublicKey // keys the target offered that did not match
	authRefused        bool            // the target refused authentication after a verified key exchange
	bastionAuthRefused bool            // the bastion refused authentication after a verified key exchange
	serverVersion      string
	bastionAdded       string // "host type fingerprint" of a bastion key accept-new trusted
}

// Check reports, with no network access and without asking the agent,
// whether t can be dialled as configured: a pin, keys that load (with their
// passphrase), some credential to offer, and a usable known_hosts file when
// a bastion is used. A fault is a *ConfigError naming the attribute to fix;
// the same fault would fail every probe with reason config, so callers
// refuse it before anything is applied.
func (d *Dialer) Check(t Target) error {
	if err := checkPin(t); err != nil {
		return err
	}
	if t.Jump != nil {
		if _, err := d.knownHosts(); err != nil {
			return err
		}
	}
	return t.Credentials.check()
}

func checkPin(t Target) error {
	if !t.Pin.IsZero() {
		return nil
	}
	return &ConfigError{Field: "host_key_fingerprint",
		Msg: "no host key pin is set, and the provider never dials an unpinned host. Set it to the host's key, for example the output of `" +
			PinCommand(t.Host, t.Port) + "`, checked out of band (against the host's console, or its provisioning record)"}
}

func (d *Dialer) knownHosts() (*knownHostsView, error) {
	if d.KnownHosts == nil || d.KnownHosts.Path == "" {
		return nil, &ConfigError{Field: "known_hosts_file", Provider: true, Msg: "a bastion (proxy_jump) needs the provider's known_hosts_file to verify its key"}
	}
	return d.KnownHosts.open()
}

// Dial connects, verifies and authenticates, with the TCP connects and SSH
// handshakes of both hops bounded by ctx. ssh.NewClientConn takes no context,
// so the connection gets ctx's deadline where it supports one and is closed
// when ctx ends, which also covers a connection tunnelled through a bastion.
func (d *Dialer) Dial(ctx context.Context, t Target) (*Client, error) {
	r, err := d.resolve(t)
	if err != nil {
		return nil, err
	}
	if err := r.addAgent(ctx, t); err != nil {
		return nil, err
	}
	defer r.release()
	return d.dial(ctx, t, r, &trace{})
}

// resolved is what a dial needs before it touches the network.
type resolved struct {
	keys       []ssh.Signer
	auth       []ssh.AuthMethod
	knownHosts *knownHostsView // the bastion's trust store, read once; nil without a bastion
	release    func()          // releases the agent connection
}

// resolve checks the pin, reads known_hosts for a bastion and loads the
// keys. It touches no network, and its cost (a key's passphrase derivation,
// say) is not charged to the dial's deadline.
func (d *Dialer) resolve(t Target) (*resolved, error) {
	fail := func(hop Hop, err error) (*resolved, error) {
		return nil, &DialError{Hop: hop, Stage: StageResolve, Target: t.Endpoint, Jump: t.Jump, Err: err}
	}
	if err := checkPin(t); err != nil {
		return fail(HopTarget, err)
	}
	r := &resolved{release: func() {}}
	if t.Jump != nil {
		kh, err := d.knownHosts()
		if err != nil {
			return fail(HopBastion, err)
		}
		r.knownHosts = kh
	}
	keys, err := t.Credentials.keys()
	if err != nil {
		return fail(HopTarget, err)
	}
	r.keys = keys
	return r, nil
}

// addAgent asks the agent for its keys under ctx, which bounds the dial too.
func (r *resolved) addAgent(ctx context.Context, t Target) error {
	signers, release, err := t.Credentials.withAgent(ctx, r.keys)
	if err != nil {
		return &DialError{Hop: HopTarget, Stage: StageResolve, Target: t.Endpoint, Jump: t.Jump, Err: err}
	}
	r.auth = []ssh.AuthMethod{ssh.PublicKeys(signers...)}
	r.release = release
	return nil
}

func (d *Dialer) dial(ctx context.Context, t Target, r *resolved, tr *trace) (*Client, error) {
	fail := func(hop Hop, stage Stage, err error) (*Client, error) {
		return nil, &DialError{Hop: hop, Stage: stage, Target: t.Endpoint, Jump: t.Jump, Err: err}
	}
	var bastion *ssh.Client
	var err error
	if t.Jump != nil {
		bastion, err = d.dialBastion(ctx, *t.Jump, t.User, r, tr)
		if err != nil {
			return fail(HopBastion, stageOf(err), cause(err))
		}
	}
	client, err := d.dialTarget(ctx, t, bastion, r.auth, tr)
	if err != nil {
		if bastion != nil {
			_ = bastion.Close()
		}
		var se *stageError
		if errors.As(err, &se) && se.stage == StageForward {
			return fail(HopBastion, StageForward, se.err)
		}
		return fail(HopTarget, stageOf(err), cause(err))
	}
	client.bastion = bastion
	return client, nil
}

// dialTarget runs the target handshake, once per host key type when the pin
// is a bare fingerprint: the fingerprint does not say which of the host's
// keys it names, so a mismatch on one key type is retried on the others.
func (d *Dialer) dialTarget(ctx context.Context, t Target, bastion *ssh.Client, auth []ssh.AuthMethod, tr *trace) (*Client, error) {
	algorithms := t.Pin.hostKeyAlgorithms()
	for {
		var presented ssh.PublicKey
		cfg := &ssh.ClientConfig{
			User:              t.User,
			Auth:              auth,
			HostKeyAlgorithms: algorithms,
			HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
				presented = key
				if !t.Pin.Matches(key) {
					tr.offered = append(tr.offered, key)
					return &HostKeyError{Pin: t.Pin, Offered: tr.offered}
				}
				tr.hostKeyVerified = true
				return nil
			},
		}
		conn, err := d.connect(ctx, t.Endpoint, bastion)
		if err != nil {
			return nil, err
		}
		c, err := handshake(ctx, conn, t.Addr(), cfg, bastion)
		if err == nil {
			tr.serverVersion = string(c.ServerVersion())
			return &Client{Client: c, HostKey: presented}, nil
		}
		var hk *HostKeyError
		if errors.As(err, &hk) && t.Pin.key == nil && presented != nil {
			if algorithms = withoutKeyType(algorithms, presented.Type()); len(algorithms) > 0 {
				continue
			}
			return nil, &stageError{StageHandshake, &HostKeyError{Pin: t.Pin, Offered: tr.offered}}
		}
		if presented == nil && len(tr.offered) > 0 && isNoCommonHostKey(err) {
			// Every remaining key type was refused by the host: report the keys it did offer.
			return nil, &stageError{StageHandshake, &HostKeyError{Pin: t.Pin, Offered: tr.offered}}
		}
		if t.Pin.typed() && isNoCommonHostKey(err) {
			return nil, &stageError{StageHandshake, &HostKeyError{Pin: t.Pin}}
		}
		if tr.hostKeyVerified && isAuthFailure(err) {
			tr.authRefused = true
			return nil, &stageError{StageHandshake, &AuthError{User: t.User, Err: err}}
		}
		return nil, &stageError{StageHandshake, err}
	}
}

func (d *Dialer) dialBastion(ctx context.Context, jump Endpoint, defaultUser string, r *resolved, tr *trace) (*ssh.Client, error) {
	if jump.User == "" {
		jump.User = defaultUser
	}
	conn, err := d.connect(ctx, jump, nil)
	if err != nil {
		return nil, err
	}
	verified := false
	check := r.knownHosts.callback(func(host string, key ssh.PublicKey) {
		tr.bastionAdded = host + " " + key.Type() + " " + ssh.FingerprintSHA256(key)
	})
	cfg := &ssh.ClientConfig{
		User: jump.User,
		Auth: r.auth,
		HostKeyCallback: func(host string, remote net.Addr, key ssh.PublicKey) error {
			err := check(host, remote, key)
			verified = err == nil
			return err
		},
	}
	// Ask for a key type the file knows, as OpenSSH does, so that a host
	// offering several keys is not mistaken for a changed one.
	for _, typ := range r.knownHosts.keyTypes(jump.Addr(), conn.RemoteAddr()) {
		cfg.HostKeyAlgorithms = append(cfg.HostKeyAlgorithms, algorithmsFor(typ)...)
	}
	c, err := handshake(ctx, conn, jump.Addr(), cfg, nil)
	if err != nil {
		if verified && isAuthFailure(err) {
			tr.bastionAuthRefused = true
			return nil, &stageError{StageHandshake, &AuthError{User: jump.User, Err: err}}
		}
		return nil, &stageError{StageHandshake, err}
	}
	return c, nil
}

// connect opens the transport to e: TCP directly, or a channel through the
// bastion.
func (d *Dialer) connect(ctx context.Context, e Endpoint, bastion *ssh.Client) (net.Conn, error) {
	if bastion != nil {
		// Closing the bastion when ctx ends unblocks a channel open that the
		// bastion never answers.
		stop := context.AfterFunc(ctx, func() { _ = bastion.Close() })
		conn, err := bastion.DialContext(ctx, "tcp", e.Addr())
		if !stop() || ctx.Err() != nil {
			if conn != nil {
				_ = conn.Close()
			}
			return nil, &stageError{StageForward, ctxError(ctx)}
		}
		var refused *ssh.OpenChannelError
		if errors.As(err, &refused) && (refused.Reason == ssh.Prohibited || refused.Reason == ssh.UnknownChannelType) {
			err = &ForwardingRefusedError{Err: refused}
		}
		if err != nil {
			return nil, &stageError{StageForward, err}
		}
		return conn, nil
	}
	nd := d.NetDialer
	if nd == nil {
		nd = &net.Dialer{}
	}
	conn, err := nd.DialContext(ctx, "tcp", e.Addr())
	if err != nil {
		if ctx.Err() != nil {
			err = ctxError(ctx)
		}
		return nil, &stageError{StageConnect, err}
	}
	return conn, nil
}

// handshake runs ssh.NewClientConn under ctx: the deadline is set on the
// connection where it is supported (TCP), and the connection is closed when
// ctx ends, which is the only bound on a tunnelled connection. For one, the
// bastion is closed too: closing a channel does not end a read pending on
// it until the bastion answers the close, and a stalled bastion never does.
func handshake(ctx context.Context, conn net.Conn, addr string, cfg *ssh.ClientConfig, bastion *ssh.Client) (*ssh.Client, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl) // a bastion channel refuses deadlines; AfterFunc covers it
	}
	stop := context.AfterFunc(ctx, func() {
		_ = conn.Close()
		if bastion != nil {
			_ = bastion.Close()
		}
	})
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if !stop() {
		// ctx ended during the handshake: its error is the cause, whatever
		// the closed connection made NewClientConn say.
		if err == nil {
			_ = c.Close()
		}
		_ = conn.Close()
		return nil, ctxError(ctx)
	}
	if err != nil {
		_ = conn.Close()
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, ctxError(ctx)
		}
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// stageError carries the stage a failure arose in up to dial, which wraps it
// into a DialError.
type stageError struct {
	stage Stage
	err   error
}

func (e *stageError) Error() string { return string(e.stage) + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

func stageOf(err error) Stage {
	var se *stageError
	if errors.As(err, &se) {
		return se.stage
	}
	return StageHandshake
}

func cause(err error) error {
	var se *stageError
	if errors.As(err, &se) {
		return se.err
	}
	return err
}

// ctxError is the error for a dial ended by its context: a deadline becomes
// errTimedOut, a cancellation stays context.Canceled.
func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errTimedOut
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errTimedOut
}

// isAuthFailure: x/crypto exports no type for a client whose credentials
// were all refused, so its message is the only sign.
func isAuthFailure(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "unable to authenticate") || strings.Contains(msg, "authentication failures")
}

func isNoCommonHostKey(err error) bool {
	var ne *ssh.AlgorithmNegotiationError
	return errors.As(err, &ne) && ne.What == "host key"
}
