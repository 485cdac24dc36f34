package shell

import (
	"os"
	"strings"
)

// Environ is the environment of a program the provider starts (ssh, Nix,
// the tools they start in turn), then extra (later values win): only what
// they need of the provider's own. The provider's environment holds
// secrets (FLEET_PRIVATE_KEY, TF_VAR_*, a CI runner's tokens), and ssh
// sends a host whatever variables an ssh_config's SendEnv names.
func Environ(extra ...string) []string { return environ(passed, extra) }

func environ(pass func(name string) bool, extra []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); pass(name) {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// passedNames are the variables a child program gets as they are; those
// with passedPrefixes too.
var (
	passedNames = map[string]bool{
		"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "TMPDIR": true, "TZ": true, "TERM": true,
		"LANG": true, "LANGUAGE": true,
		// The user's own agent, which ssh uses when no key of the
		// provider's is given (the provider's own is given by
		// IdentityAgent, never in the environment).
		"SSH_AUTH_SOCK": true,
		// What Nix needs to reach the user's substituters and builders.
		"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
		"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
		"SSL_CERT_FILE": true, "SSL_CERT_DIR": true, "CURL_CA_BUNDLE": true, "KRB5CCNAME": true,
	}
	passedPrefixes = []string{"LC_", "XDG_", "NIX_"}
)

// NixEnviron is Environ, and what Nix's own fetchers and substituters
// read of the user's environment: S3 substituters' credentials on a
// single-user Nix (AWS_*), and how git reaches a private input
// (GIT_SSH_COMMAND, GIT_SSH, GIT_CONFIG_*, NETRC). Only the Nix processes
// that evaluate and build get them: never ssh, which sends a host what
// SendEnv names.
func NixEnviron(extra ...string) []string {
	return environ(func(name string) bool { return passed(name) || nixPassed(name) }, extra)
}

var (
	nixPassedNames    = map[string]bool{"GIT_SSH_COMMAND": true, "GIT_SSH": true, "NETRC": true, "GIT_CONFIG_GLOBAL": true, "GIT_CONFIG_SYSTEM": true, "GIT_CONFIG_NOSYSTEM": true, "GIT_CONFIG_COUNT": true}
	nixPassedPrefixes = []string{"AWS_", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"}
)

func nixPassed(name string) bool { return named(name, nixPassedNames, nixPassedPrefixes) }

func passed(name string) bool { return named(name, passedNames, passedPrefixes) }

func named(name string, names map[string]bool, prefixes []string) bool {
	if names[name] {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
