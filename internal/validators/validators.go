// Package validators holds the provider's attribute validators. Each one
// calls the domain parser that later uses the value, so what validate accepts
// is exactly what a probe can use.
package validators

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// stringCheck adapts a parser to a string validator.
type stringCheck struct {
	description string
	check       func(string) error
}

func (v stringCheck) Description(context.Context) string         { return v.description }
func (v stringCheck) MarkdownDescription(context.Context) string { return v.description }

func (v stringCheck) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(), err.Error())
	}
}

// HostKeyPin accepts a SHA256 fingerprint or a public key line.
func HostKeyPin() validator.String {
	return stringCheck{
		description: "value must be SHA256:<base64> as `ssh-keygen -lf` prints it, or a public key line such as `ssh-ed25519 AAAA...`",
		check:       func(s string) error { _, err := sshdial.ParsePin(s); return err },
	}
}

// ProxyJump accepts [user@]host[:port].
func ProxyJump() validator.String {
	return stringCheck{
		description: "value must be [user@]host[:port], one jump host",
		check:       func(s string) error { _, err := sshdial.ParseJump(s); return err },
	}
}

// Host accepts a bare host name or address.
func Host() validator.String {
	return stringCheck{
		description: "value must be a bare host name or address",
		check:       sshdial.CheckHost,
	}
}

// RequiredWhenKnown requires attributes of a nested object once its value is
// known. The framework's own Required check reads the attributes of a list
// element that is unknown during validate (one built with merge() from a
// resource's export, say) as missing, and refuses a configuration that is
// fine; this check waits until the object is known.
func RequiredWhenKnown(names ...string) validator.Object { return requiredAttrs(names) }

type requiredAttrs []string

func (r requiredAttrs) Description(context.Context) string {
	return "attributes " + strings.Join(r, ", ") + " must be set"
}

func (r requiredAttrs) MarkdownDescription(ctx context.Context) string { return r.Description(ctx) }

func (r requiredAttrs) ValidateObject(_ context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	attrs := req.ConfigValue.Attributes()
	for _, name := range r {
		if v, ok := attrs[name]; !ok || v.IsNull() {
			resp.Diagnostics.AddAttributeError(req.Path.AtName(name), "Missing "+name,
				fmt.Sprintf("%s: %s is required.", req.Path, name))
		}
	}
}
