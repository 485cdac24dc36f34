package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Current is what a read of a node found.
type Current struct {
	System string
	// Succeeded is the last system a deploy finished on the host with a
	// passing verdict; empty when none did.
	Succeeded string
	HostKey   string // the key the host showed ("type base64"); empty when not known
}

// Runs reports whether the host runs system and a deploy of it passed its
// verdict there.
func (c Current) Runs(system string) bool { return c.System == system && c.Succeeded == system }

// ReadCurrent reads a node's current system (refresh, drift) and the key
// it showed; a key other than its pin or recorded key is refused with
// both named.
func (d *Deployer) ReadCurrent(ctx context.Context, s Settings) (Current, error) {
	c, err := d.Transport.Open(ctx, s)
	if err != nil {
		return Current{}, err
	}
	defer c.Close()
	out, err := d.output(c.readCommand(ctx, remote(readCurrentScript)))
	if err != nil {
		if ctx.Err() != nil {
			return Current{}, fmt.Errorf("%s before the host was read", cause(ctx))
		}
		_, msg := exitOf(err, out)
		if hostKeyRefused(msg) {
			msg, hint, _ := d.hostKeyMismatch(ctx, c, s)
			return Current{}, fmt.Errorf("%s. Fix: %s", msg, hint)
		}
		return Current{}, errors.New(msg)
	}
	current := parseCurrent(out)
	current.HostKey = c.SeenKey(ctx)
	return current, nil
}

// parseCurrent reads what readCurrentScript printed.
func parseCurrent(out string) Current {
	lines := strings.Split(strings.TrimSpace(out)+"\n", "\n")
	return Current{System: strings.TrimSpace(lines[0]), Succeeded: strings.TrimSpace(lines[1])}
}
