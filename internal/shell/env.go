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
func Environ(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); passed(name) {
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

func passed(name string) bool {
	if passedNames[name] {
		return true
	}
	for _, p := range passedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
