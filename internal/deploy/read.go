package deploy

import (
	"context"
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
// both named. It is a session (OpenSession) ended at once.
func (d *Deployer) ReadCurrent(ctx context.Context, s Settings) (Current, error) {
	sess, err := d.OpenSession(ctx, s)
	if err != nil {
		return Current{}, err
	}
	sess.Close()
	return sess.Current, nil
}

// parseCurrent reads what readCurrentScript printed.
func parseCurrent(out string) Current {
	lines := strings.Split(strings.TrimSpace(out)+"\n", "\n")
	return Current{System: strings.TrimSpace(lines[0]), Succeeded: strings.TrimSpace(lines[1])}
}
