package deploy

import (
	"fmt"
	"regexp"
	"strings"
)

// SSHOptPattern is the form of an ssh_opts item, a bare OpenSSH option
// Key=Value (given to ssh as -o Key=Value): a key of letters and digits
// starting with a letter, "=", and a value of printable ASCII characters.
// It uses only constructs that read the same in ECMA-262 and in POSIX ERE
// (anchors, bracket expressions with ranges, + and *), and is published as
// it is in the docs for front ends that validate the items themselves.
const SSHOptPattern = `^[A-Za-z][A-Za-z0-9]*=[ -~]+$`

var sshOpt = regexp.MustCompile(SSHOptPattern)

// CheckSSHOpt refuses an ssh_opts item that is not a bare Key=Value, with a
// message that names the form and, for the usual mistakes, the fix.
func CheckSSHOpt(item string) error {
	if sshOpt.MatchString(item) {
		return nil
	}
	var hint string
	switch {
	case strings.HasPrefix(item, "-o ") || strings.HasPrefix(item, "-o"):
		hint = fmt.Sprintf(" Drop the -o: write %q.", strings.TrimSpace(strings.TrimPrefix(item, "-o")))
	case strings.HasPrefix(item, "-"):
		hint = " Command-line flags are not accepted; use the option they stand for (-J host is ProxyJump=host, -p 2222 is Port=2222)."
	case !strings.Contains(item, "=") && strings.Contains(strings.TrimSpace(item), " "):
		k, v, _ := strings.Cut(strings.TrimSpace(item), " ")
		hint = fmt.Sprintf(" Join key and value with =: write %q.", k+"="+strings.TrimSpace(v))
	}
	return fmt.Errorf("ssh_opts item %q is not a bare OpenSSH option Key=Value such as Port=2222 (pattern %s).%s", item, SSHOptPattern, hint)
}

// forwardingOptions are the ssh_config options that would hand the host
// something of this machine's (an agent holding keys that open every host
// of the fleet, its X display, its ports), with the one value each may
// have in ssh_opts.
var forwardingOptions = map[string]string{
	"forwardagent":        "no",
	"forwardx11":          "no",
	"forwardx11trusted":   "no",
	"localforward":        "",
	"remoteforward":       "",
	"dynamicforward":      "",
	"tunnel":              "no",
	"clearallforwardings": "yes",
}

// CheckForwarding refuses an ssh_opts item that asks ssh to forward an
// agent, X11, ports or a tunnel to the host: a compromised host could use
// the provider's keys to log in to every other host of the fleet while the
// deployment runs. The deployment itself turns all of them off on every
// connection, whatever a config file says (noForwarding).
func CheckForwarding(item string) error {
	key, value, _ := strings.Cut(item, "=")
	allowed, ok := forwardingOptions[strings.ToLower(key)]
	if !ok || (allowed != "" && strings.EqualFold(strings.TrimSpace(value), allowed)) {
		return nil
	}
	return fmt.Errorf("ssh_opts item %q asks ssh to forward something of this machine's to the host (an agent, X11, ports or a tunnel): "+
		"the deployment never does, since a compromised host could use it to reach what this machine reaches, the other hosts of the fleet among them; remove the item", item)
}

// noForwarding are the options every ssh to a node gets first, so that they
// win over ssh_opts and any config file (ssh takes the first value it
// reads, and -o options come before the files): nothing of this machine's
// is forwarded to a host.
var noForwarding = []string{"ForwardAgent=no", "ForwardX11=no", "ClearAllForwardings=yes"}

// pathOption is Key=Value for an option that names a file (UserKnownHostsFile,
// ControlPath, IdentityFile), written in OpenSSH's option syntax so that ssh
// reads the path back as it is: ssh splits a value on whitespace (double
// quotes group it, a backslash escapes a quote or itself) and expands
// %-tokens (%% is a %) and ${NAME} from the environment, which cannot be
// escaped, so a path holding "${" is refused. tokens (%C) are appended
// after the path, unescaped. The one encoder of OpenSSH option values.
func pathOption(key, path, tokens string) (string, error) {
	if strings.Contains(path, "${") || strings.ContainsAny(path, "\n\r\x00") {
		return "", fmt.Errorf("%s %q holds \"${\" or a line break, which OpenSSH would take apart (it expands ${NAME} from the environment and cannot be told not to): use a path without them", key, path)
	}
	v := strings.ReplaceAll(path, "%", "%%") + tokens
	if v != "" && !strings.ContainsAny(v, " \t\"'\\#") {
		return key + "=" + v, nil
	}
	return key + `="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`, nil
}
