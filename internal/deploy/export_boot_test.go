package deploy

import "time"

// SetBootTimeout scales the bound on switch-to-configuration boot
// (FR-010) down, so a test of a hung bootloader takes seconds.
func SetBootTimeout(d *Deployer, bound time.Duration) { d.bootTimeout = bound }

// BootTimeout is the bound d puts on switch-to-configuration boot.
func BootTimeout(d *Deployer) time.Duration { return d.bootBound() }
