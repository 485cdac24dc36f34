//go:build !unix

package deploy

// checkPrivate is not implemented off Unix, where the deployment's
// OpenSSH multiplexing does not run either.
func checkPrivate(string, bool) error { return nil }

// checkTempDir is not implemented off Unix either.
func checkTempDir(string) error { return nil }
