package sshdial

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
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
	hostKeyVerified bool            // the target's key matched the pin
	offered         []ssh.PublicKey // keys the target offered that did not match
	authRefused     bool            // the target refused authentication after a verified key exchange
	serverVersion   string
	bastionAdded    string // "host type fingerprint" of a bastion key accept-new trusted
}

// Dial connects, verifies and authenticates, with the TCP connects and SSH
// handshakes of both hops bounded by ctx. ssh.NewClientConn takes no context,
// so the connection gets ctx's deadline where it supports one and is closed
// when ctx ends, which also covers a connection tunnelled through a bastion.
func (d *Dialer) Dial(ctx context.Context, t Target) (*Client, error) {
	tr := &trace{}
	creds, err := d.resolve(t)
	if err != nil {
		return nil, err
	}
	defer creds.close()
	return d.dial(ctx, t, creds, tr)
}

// resolved is a target's credentials, loaded before any network access.
type resolved struct {
	auth  []ssh.AuthMethod
	close func()
}

// resolve checks the pin and loads the credentials. It touches no network,
// and its cost (a key's passphrase derivation, say) is not charged to the
// dial's deadline.
func (d *Dialer) resolve(t Target) (resolved, error) {
	fail := func(hop Hop, err error) (resolved, error) {
		return resolved{}, &DialError{Hop: hop, Stage: StageResolve, Target: t.Endpoint, Jump: t.Jump, Err: err}
	}
	if t.Pin.IsZero() {
		return fail(HopTarget, &ConfigError{Field: "host_key_fingerprint",
			Msg: "no host key pin is set; the provider never dials an unpinned host: set it to the host's key, e.g. the output of `ssh-keyscan -p " +
				strconv.Itoa(t.Port) + " " + t.Host + " | ssh-keygen -lf -` checked out of band"})
	}
	if t.Jump != nil && (d.KnownHosts == nil || d.KnownHosts.Path == "") {
		return fail(HopBastion, &ConfigError{Field: "proxy_jump", Msg: "a bastion needs the provider's known_hosts_file to verify its key"})
	}
	signers, closeAgent, err := t.Credentials.signers()
	if err != nil {
		return fail(HopTarget, err)
	}
	return resolved{auth: []ssh.AuthMethod{ssh.PublicKeys(signers...)}, close: closeAgent}, nil
}

func (d *Dialer) dial(ctx context.Context, t Target, creds resolved, tr *trace) (*Client, error) {
	fail := func(hop Hop, stage Stage, err error) (*Client, error) {
		return nil, &DialError{Hop: hop, Stage: stage, Target: t.Endpoint, Jump: t.Jump, Err: err}
	}
	var bastion *ssh.Client
	var err error
	if t.Jump != nil {
		bastion, err = d.dialBastion(ctx, *t.Jump, t.User, creds.auth, tr)
		if err != nil {
			return fail(HopBastion, stageOf(err), cause(err))
		}
	}
	client, err := d.dialTarget(ctx, t, bastion, creds.auth, tr)
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
		c, err := handshake(ctx, conn, t.Addr(), cfg)
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
		if t.Pin.key != nil && isNoCommonHostKey(err) {
			return nil, &stageError{StageHandshake, &HostKeyError{Pin: t.Pin}}
		}
		if tr.hostKeyVerified && isAuthFailure(err) {
			tr.authRefused = true
			return nil, &stageError{StageHandshake, &AuthError{User: t.User, Err: err}}
		}
		return nil, &stageError{StageHandshake, err}
	}
}

func (d *Dialer) dialBastion(ctx context.Context, jump Endpoint, defaultUser string, auth []ssh.AuthMethod, tr *trace) (*ssh.Client, error) {
	if jump.User == "" {
		jump.User = defaultUser
	}
	conn, err := d.connect(ctx, jump, nil)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ClientConfig{
		User: jump.User,
		Auth: auth,
		HostKeyCallback: d.KnownHosts.Callback(func(host string, key ssh.PublicKey) {
			tr.bastionAdded = host + " " + key.Type() + " " + ssh.FingerprintSHA256(key)
		}),
	}
	// Ask for a key type the file knows, as OpenSSH does, so that a host
	// offering several keys is not mistaken for a changed one.
	if types := d.KnownHosts.KeyTypes(jump.Addr(), conn.RemoteAddr()); len(types) > 0 {
		for _, typ := range types {
			cfg.HostKeyAlgorithms = append(cfg.HostKeyAlgorithms, algorithmsFor(typ)...)
		}
	}
	c, err := handshake(ctx, conn, jump.Addr(), cfg)
	if err != nil {
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
// ctx ends (which is the only bound on a tunnelled connection).
func handshake(ctx context.Context, conn net.Conn, addr string, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl) // a bastion channel refuses deadlines; AfterFunc covers it
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
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

func isAuthFailure(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "unable to authenticate") || strings.Contains(msg, "authentication failures")
}

func isNoCommonHostKey(err error) bool {
	return strings.Contains(err.Error(), "no common algorithm for host key")
}
