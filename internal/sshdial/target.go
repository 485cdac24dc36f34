package sshdial

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// DefaultPort is the SSH port used when none is given.
const DefaultPort = 22

// Endpoint is one SSH server: where it listens and whom to log in as.
type Endpoint struct {
	User string
	Host string
	Port int
}

// Addr is host:port, with IPv6 literals bracketed.
func (e Endpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// String is [user@]host:port, for messages.
func (e Endpoint) String() string {
	if e.User == "" {
		return e.Addr()
	}
	return e.User + "@" + e.Addr()
}

// Target is everything needed to reach one host.
type Target struct {
	Endpoint
	// Pin is the target's expected host key. A zero Pin is refused before
	// any dial: the target is never trusted on first use.
	Pin Pin
	// Jump is the optional bastion (ProxyJump). Its key is verified against
	// the dialer's known_hosts file with accept-new semantics.
	Jump *Endpoint
	// Credentials authenticate both the bastion and the target.
	Credentials Credentials
}

// Credentials say how to authenticate. Several may be given; they are tried
// in the order inline key, key file, agent. The bastion and the target are
// offered the same ones.
type Credentials struct {
	PrivateKey     []byte // PEM text of an inline key
	PrivateKeyFile string // path, "~" expanded
	Passphrase     []byte // for an encrypted PrivateKey or PrivateKeyFile
	Agent          bool   // use the agent at SSH_AUTH_SOCK
	// FromProvider says these are the provider's default credentials, so a
	// fault names the provider's attribute rather than the connection's.
	FromProvider bool
	// Withheld, when set, says why a credential exists but is not available
	// to this dial (a write-only key during a refresh, say). The dial then
	// checks what it can without it, and a refused authentication is not
	// held against the host: it was not checked.
	Withheld string
}

// String never shows secrets; it says which kinds of credential are set.
func (c Credentials) String() string {
	var kinds []string
	if len(c.PrivateKey) > 0 {
		kinds = append(kinds, "inline key")
	}
	if c.PrivateKeyFile != "" {
		kinds = append(kinds, "key file "+c.PrivateKeyFile)
	}
	if c.Agent {
		kinds = append(kinds, "agent")
	}
	if c.Withheld != "" {
		kinds = append(kinds, "withheld key")
	}
	if len(kinds) == 0 {
		return "no credentials"
	}
	return strings.Join(kinds, ", ")
}

// GoString keeps secrets out of %#v too.
func (c Credentials) GoString() string { return "sshdial.Credentials{" + c.String() + "}" }

// ParseJump parses a ProxyJump value, [user@]host[:port], with an IPv6
// literal in brackets. Only one hop is supported.
func ParseJump(s string) (Endpoint, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Endpoint{}, fmt.Errorf("empty jump host: expected [user@]host[:port]")
	}
	if strings.Contains(s, ",") {
		return Endpoint{}, fmt.Errorf("%q names several jump hosts: only one hop is supported, as [user@]host[:port]", s)
	}
	if strings.Contains(s, "://") {
		return Endpoint{}, fmt.Errorf("%q is a URI: expected [user@]host[:port]", s)
	}
	var e Endpoint
	if i := strings.LastIndex(s, "@"); i >= 0 {
		e.User, s = s[:i], s[i+1:]
		if err := checkUser(e.User); err != nil {
			return Endpoint{}, err
		}
	}
	host, port, err := splitHostPort(s)
	if err != nil {
		return Endpoint{}, err
	}
	e.Host, e.Port = host, port
	return e, nil
}

// splitHostPort accepts host, host:port, [v6] and [v6]:port.
func splitHostPort(s string) (string, int, error) {
	if s == "" {
		return "", 0, fmt.Errorf("empty host: expected [user@]host[:port]")
	}
	host, portText := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("%q: unclosed [ around an IPv6 address", s)
		}
		host, portText = s[1:end], s[end+1:]
		if portText != "" {
			if !strings.HasPrefix(portText, ":") {
				return "", 0, fmt.Errorf("%q: expected :port after ]", s)
			}
			portText = portText[1:]
			if portText == "" {
				return "", 0, fmt.Errorf("%q: empty port after ':'", s)
			}
		}
	case strings.Count(s, ":") == 1:
		i := strings.Index(s, ":")
		host, portText = s[:i], s[i+1:]
		if portText == "" {
			return "", 0, fmt.Errorf("%q: empty port after ':'", s)
		}
	case strings.Count(s, ":") > 1:
		return "", 0, fmt.Errorf("%q: put an IPv6 address in brackets, as [%s]:22", s, s)
	}
	if err := CheckHost(host); err != nil {
		return "", 0, err
	}
	port := DefaultPort
	if portText != "" {
		p, err := strconv.Atoi(portText)
		if err != nil || p < 1 || p > 65535 || strings.TrimLeft(portText, "0123456789") != "" {
			return "", 0, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, portText)
		}
		port = p
	}
	return host, port, nil
}

// CheckHost refuses host values that cannot be a name or an address.
func CheckHost(host string) error {
	if host == "" {
		return fmt.Errorf("empty host name: give a host name or an address")
	}
	if strings.ContainsAny(host, "@/[]") || strings.IndexFunc(host, unprintable) >= 0 {
		return fmt.Errorf("host %q contains a space, a control character, '@', '/' or a bracket: give a bare name or address", host)
	}
	if strings.HasPrefix(host, "-") {
		return fmt.Errorf("host %q starts with '-'", host)
	}
	return nil
}

func checkUser(user string) error {
	if user == "" {
		return fmt.Errorf("empty user before '@'")
	}
	if strings.ContainsAny(user, ":/@") || strings.IndexFunc(user, unprintable) >= 0 || strings.HasPrefix(user, "-") {
		return fmt.Errorf("user %q contains a space, a control character, ':', '/' or '@', or starts with '-'", user)
	}
	return nil
}

// unprintable is any space, control or otherwise invisible character, none
// of which belongs in a host or user name.
func unprintable(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }

// ExpandHome expands a leading "~/" (or a lone "~") to the home directory.
func ExpandHome(path string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expanding %q: %w", path, err)
	}
	return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
}
