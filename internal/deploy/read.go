package deploy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
)

// Current is what a read of a node found.
type Current struct {
	System string
	// Succeeded is the last system a deploy finished on the host with a
	// passing verdict; empty when none did, or while the host settles.
	Succeeded string
	// BootDefault is the last system a deploy made the host's boot
	// default (goal switch or boot); empty when none did.
	BootDefault string
	// Settling: the host settles a run on its own (its watchdog waits for
	// a decision or switches back, as after an interrupted deploy), so
	// what it runs may change any moment: nothing it runs counts as
	// verified (Succeeded is empty) until it has.
	Settling bool
	// Boots is the system the host boots next: its system profile's,
	// from which NixOS installs the default boot entry; empty when it has
	// none.
	Boots   string
	HostKey string // the key the host showed ("type base64"); empty when not known
	// KeyRecords name the deployments whose record of the keys they wrote
	// there the host keeps (agreement.KeyRecord), holding a path.
	KeyRecords []string
}

// HasKeys says whether the host keeps a record of keys deployment wrote
// there (which its next deploy removes once no key of it is there).
func (c Current) HasKeys(deployment string) bool {
	name := strings.TrimPrefix(agreement.KeyRecord(deployment), agreement.KeyRecordDir+"/")
	return slices.Contains(c.KeyRecords, name)
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

// parseCurrent reads what agreement.ReadCurrentScript printed.
func parseCurrent(out string) Current {
	lines := strings.Split(strings.TrimSpace(out)+"\n\n\n\n\n", "\n")
	c := Current{System: strings.TrimSpace(lines[0]), Succeeded: strings.TrimSpace(lines[1]), BootDefault: strings.TrimSpace(lines[2]),
		Settling: strings.TrimSpace(lines[3]) == "settling", Boots: strings.TrimSpace(lines[4])}
	if f := strings.Fields(lines[5]); len(f) > 0 && f[0] == "keys" {
		c.KeyRecords = f[1:]
	}
	if c.Settling {
		// Nor is what it boots known: a watchdog switching back points
		// the profile back.
		c.Succeeded, c.Boots = "", ""
	}
	return c
}

// Settle is what a refresh makes of a node whose last deploy's outcome was
// not known (PhaseUnknown), from what its host runs now: Succeeded when it
// runs the node's system and a deploy of it passed its verdict there (its
// boot entry made, for goals that make one; for goal boot, the boot entry
// made); RolledBack when it runs the
// system it ran before the deploy; otherwise Failed: it runs the new
// system without a finished deploy (the next apply finishes it), or
// something else.
func Settle(goal Goal, system, previous string, cur Current) (Phase, string) {
	if goal == GoalBoot {
		// The running system stays: what counts is the boot entry, which a
		// deploy records once made.
		if cur.BootDefault == system {
			return PhaseSucceeded, fmt.Sprintf("settled by a refresh: %s is the host's boot default", system)
		}
		return PhaseFailed, fmt.Sprintf("settled by a refresh: the host has no record of %s made its boot default: the next apply makes it", system)
	}
	switch {
	case cur.Runs(system):
		return PhaseSucceeded, fmt.Sprintf("settled by a refresh: the host runs %s, which passed its verdict there", system)
	case cur.System == previous:
		return PhaseRolledBack, fmt.Sprintf("settled by a refresh: rolled back; the host runs %s, the system it ran before this deploy", orNone(previous))
	case cur.System == system:
		// Its boot entry not made after a confirmation, or (a deploy that
		// rebooted the host, which did not see it back) booted into and
		// not judged.
		return PhaseFailed, fmt.Sprintf("settled by a refresh: the host runs %s, but no deploy of it finished there (no verdict judged it there, or its boot entry was not made): the next apply finishes it", system)
	}
	return PhaseFailed, fmt.Sprintf("settled by a refresh: the host runs %s, neither %s nor the system it ran before (%s)", orNone(cur.System), system, orNone(previous))
}
