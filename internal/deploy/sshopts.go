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
