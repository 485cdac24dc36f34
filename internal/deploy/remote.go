package deploy

import "github.com/fleetops/terraform-provider-fleet/internal/agreement"

// What a deploy runs on a host is the host agreement's (package
// agreement): its files, and the PATH fallback of every remote command.

// The host's files, as the agreement names them.
const (
	ProfilePath = agreement.ProfilePath
	LockFile    = agreement.LockFile
	HolderFile  = agreement.HolderFile
	GuardFile   = agreement.GuardFile
)

func remote(script string) string { return agreement.Remote(script) }

// waitForEOF waits, with the shell's builtins only, for the standard input
// to close: the deployer ends a session that way.
const waitForEOF = `while read -r _; do :; done`
