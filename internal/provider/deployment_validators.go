package provider

import (
	"context"

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
	if err := deploy.CheckSSHOpt(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid ssh_opts item", req.Path.String()+": "+err.Error())
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
