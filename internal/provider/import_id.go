package provider

import (
	"fmt"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// importID is a parsed fleet_executor import ID:
// [user@]host[:port] then optional ,key=value pairs.
type importID struct {
	name, user, host   string
	port               int
	hostKeyFingerprint string
	proxyJump          string
	privateKeyFile     string
}

func parseImportID(s string) (importID, error) {
	parts := strings.Split(strings.TrimSpace(s), ",")
	ep, err := sshdial.ParseJump(strings.TrimPrefix(parts[0], "ssh://"))
	if err != nil {
		return importID{}, err
	}
	id := importID{name: ep.Host, user: ep.User, host: ep.Host, port: ep.Port}
	for _, kv := range parts[1:] {
		key, value, ok := strings.Cut(kv, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || value == "" {
			return importID{}, fmt.Errorf("%q is not key=value", kv)
		}
		switch key {
		case "name":
			id.name = value
		case "host_key_fingerprint":
			if _, err := sshdial.ParsePin(value); err != nil {
				return importID{}, fmt.Errorf("host_key_fingerprint: %w", err)
			}
			id.hostKeyFingerprint = value
		case "proxy_jump":
			if _, err := sshdial.ParseJump(value); err != nil {
				return importID{}, fmt.Errorf("proxy_jump: %w", err)
			}
			id.proxyJump = value
		case "private_key_file":
			id.privateKeyFile = value
		default:
			return importID{}, fmt.Errorf("unknown key %q", key)
		}
	}
	return id, nil
}
