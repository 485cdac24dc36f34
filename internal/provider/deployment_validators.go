package provider

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// sshOptValidator refuses ssh_opts items that are not a bare Key=Value.
type sshOptValidator struct{}

func (sshOptValidator) Description(context.Context) string {
	return "a bare OpenSSH option Key=Value matching " + deploy.SSHOptPattern
}
func (v sshOptValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }
func (sshOptValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	opt := req.ConfigValue.ValueString()
	if err := deploy.CheckSSHOpt(opt); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid ssh_opts item", req.Path.String()+": "+err.Error())
		return
	}
	if err := deploy.CheckForwarding(opt); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Forwarding refused", req.Path.String()+": "+err.Error())
		return
	}
	key, value, _ := strings.Cut(opt, "=")
	value = strings.ToLower(strings.TrimSpace(value))
	if strings.EqualFold(key, "StrictHostKeyChecking") && (value == "no" || value == "off") ||
		strings.EqualFold(key, "UserKnownHostsFile") && value == "/dev/null" {
		resp.Diagnostics.AddAttributeWarning(req.Path, "Host key checking turned off",
			req.Path.String()+": "+opt+" lets ssh accept whatever key the host offers, so anyone between this machine and the host can take the deployment over. "+
				"Give the node's host_key (its public key line, from ssh-keyscan checked out of band) instead.")
	}
}

// hostKeyLineValidator accepts a public key line (type and base64 key, an
// optional comment): OpenSSH is given it in a known_hosts file.
type hostKeyLineValidator struct{}

func (hostKeyLineValidator) Description(context.Context) string {
	return "a public key line such as ssh-ed25519 AAAA..."
}
func (v hostKeyLineValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (hostKeyLineValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := deploy.CheckHostKeyLine(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid host_key", req.Path.String()+": "+err.Error())
	}
}

// durationValidator accepts a Go duration of at least least, such as "5m".
type durationValidator struct{ least time.Duration }

func (v durationValidator) Description(context.Context) string {
	return fmt.Sprintf("a Go duration of at least %s, such as \"5m\"", v.least)
}
func (v durationValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }
func (v durationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if d, err := time.ParseDuration(req.ConfigValue.ValueString()); err != nil || d < v.least {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration",
			fmt.Sprintf("%s: %q is not a Go duration of at least %s, such as \"90s\" or \"5m\"", req.Path, req.ConfigValue.ValueString(), v.least))
	}
}

// urlValidator accepts an http:// or https:// URL with a host.
type urlValidator struct{}

func (urlValidator) Description(context.Context) string { return "an http:// or https:// URL" }
func (v urlValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (urlValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	u, err := url.Parse(req.ConfigValue.ValueString())
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid URL",
			fmt.Sprintf("%s: %q is not an http:// or https:// URL with a host, such as \"https://web1.example.org/health\"", req.Path, req.ConfigValue.ValueString()))
	}
}

// storePathValidator accepts a path in the Nix store.
type storePathValidator struct{}

func (storePathValidator) Description(context.Context) string {
	return "a path in the Nix store (/nix/store/...-nixos-system-...)"
}
func (v storePathValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (storePathValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if !strings.HasPrefix(req.ConfigValue.ValueString(), "/nix/store/") {
		resp.Diagnostics.AddAttributeError(req.Path, "Not a system closure",
			fmt.Sprintf("%s: %q is not a path in the Nix store (/nix/store/...-nixos-system-...)", req.Path, req.ConfigValue.ValueString()))
	}
}

// derivationValidator accepts a derivation's store path.
type derivationValidator struct{}

func (derivationValidator) Description(context.Context) string {
	return "a derivation in the Nix store (/nix/store/...-nixos-system-....drv)"
}
func (v derivationValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (derivationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if v := req.ConfigValue.ValueString(); !strings.HasPrefix(v, "/nix/store/") || !strings.HasSuffix(v, ".drv") {
		resp.Diagnostics.AddAttributeError(req.Path, "Not a derivation",
			fmt.Sprintf("%s: %q is not a derivation in the Nix store (/nix/store/...-nixos-system-....drv): give the derivation fleet_nixos_systems reads (systems[name].derivation)", req.Path, v))
	}
}

// keyDestinationValidator accepts where a key is written on its host: an
// absolute path to a file, outside the Nix store (which every user of the
// host can read).
type keyDestinationValidator struct{}

func (keyDestinationValidator) Description(context.Context) string {
	return "an absolute path to a file outside /nix/store"
}
func (v keyDestinationValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (keyDestinationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if why := deploy.DestinationFault(req.ConfigValue.ValueString()); why != "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid key destination", fmt.Sprintf("%s: %s", req.Path, why))
	}
}

// permissionsValidator accepts a file mode in octal ("0400", "640").
type permissionsValidator struct{}

func (permissionsValidator) Description(context.Context) string {
	return "a file mode in octal, such as 0400 or 0640"
}
func (v permissionsValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (permissionsValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if !deploy.ValidMode(req.ConfigValue.ValueString()) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid permissions",
			fmt.Sprintf("%s: %q is not a file mode in octal: write it as chmod takes it, such as \"0400\" (the owner reads) or \"0440\" (the owner and the group read)", req.Path, req.ConfigValue.ValueString()))
	}
}
