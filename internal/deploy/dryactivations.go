package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/atomicfile"
)

// A plan with plan_dry_activate dry-activates each switching node; the
// apply then plans once more (Terraform plans a resource again just
// before applying it) and would log in to the host and dry-activate it
// again, seconds later, for the same answer. What a dry activation said
// is kept for dryActivationFresh, in a private directory (Options.
// DryActivations), under the host (its address, login and the key it
// showed), the system it runs and the system it would switch to: the
// same host on the same system asked about the same new system within
// minutes is answered from there. A dry activation is advisory (it only
// says which units a switch would touch), so a kept answer never decides
// what a deploy does; a host whose running system changed since is asked
// again.

// dryActivationFresh is how long a dry activation's answer is kept.
const dryActivationFresh = 10 * time.Minute

// keptDryActivation is what a file of Options.DryActivations holds.
type keptDryActivation struct {
	At    time.Time   `json:"at"`
	Units UnitChanges `json:"units"`
}

// dryActivationKey is the name of the file that keeps the dry activation
// of system on c's host while it runs current and shows hostKey.
func dryActivationKey(c *Conn, hostKey, current, system string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{"fleet-dry-activation-1", c.s.User, c.s.Host, strings.Join(c.s.SSHOpts, "\x00"), hostKey, current, system}, "\x01")))
	return hex.EncodeToString(sum[:]) + ".json"
}

// dryActivationsDir is Options.DryActivations made (0700) and checked to
// be the user's own; "" when there is none or it is not private (then
// nothing is kept: every plan dry-activates).
func (d *Deployer) dryActivationsDir() string {
	dir := d.Options.DryActivations
	if dir == "" || os.MkdirAll(dir, 0o700) != nil || checkPrivate(dir, true) != nil {
		return ""
	}
	return dir
}

// keptDryActivationOf is the kept answer under key, if one is fresh.
func (d *Deployer) keptDryActivationOf(key string) (UnitChanges, bool) {
	dir := d.dryActivationsDir()
	if dir == "" {
		return UnitChanges{}, false
	}
	b, err := os.ReadFile(filepath.Join(dir, key))
	var k keptDryActivation
	if err != nil || json.Unmarshal(b, &k) != nil {
		return UnitChanges{}, false
	}
	if age := time.Since(k.At); age < 0 || age > dryActivationFresh {
		return UnitChanges{}, false
	}
	return k.Units, true
}

// keepDryActivation keeps units under key, in one step, and removes the answers no longer fresh.
func (d *Deployer) keepDryActivation(key string, units UnitChanges) {
	dir := d.dryActivationsDir()
	if dir == "" {
		return
	}
	b, err := json.Marshal(keptDryActivation{At: time.Now(), Units: units})
	if err != nil {
		return
	}
	_ = atomicfile.Write(filepath.Join(dir, key), b)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > dryActivationFresh {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
