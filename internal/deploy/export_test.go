package deploy

import (
	"context"
	"fmt"
)

// Exported for the package's external tests.
var (
	ParseDryActivate = parseDryActivate
	SplitName        = splitName
)

// PathOption is pathOption, for the tests that read its values back with
// ssh -G.
var PathOption = pathOption

// Capture is capture, for the tests of commands whose streams outlive them.
var Capture = capture

// AskTimeout is how long an interrupted node asks its host what it runs.
const AskTimeout = askTimeout

// HoldLock takes s's host's deploy lock as a node's deploy does (a master
// connection, then the lock session over it, speaking) and returns what
// lets it all go.
func (d *Deployer) HoldLock(ctx context.Context, s Settings) (release func(), err error) {
	c, err := d.Transport.Open(ctx, s)
	if err != nil {
		return nil, err
	}
	if exit, msg := d.startMaster(ctx, c); exit != 0 {
		c.Close()
		return nil, fmt.Errorf("master: exit %d: %s", exit, msg)
	}
	l, _, err := d.takeLock(ctx, c, d.Options.LockTimeout, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	return func() { l.Release(); c.Close() }, nil
}
