package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"golang.org/x/crypto/ssh"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/validators"
)

// The connection schema is one set of fields, used identically by every
// resource and data source that reaches a host. Descriptions live here once.
var connectionDescriptions = map[string]string{
	"host": "Host name or address of the SSH server.",
	"port": "SSH port. Default 22.",
	"user": "User to log in as. Default: the provider's `default_user`, else `FLEET_SSH_USER`, else `root`.",
	"private_key": "Private key in PEM form (OpenSSH, PKCS#1, PKCS#8). Sensitive and write-only: it is never stored in state " +
		"(needs Terraform or OpenTofu 1.11 or later). Because a refresh cannot read it back, refresh probes of an executor that uses only an inline key " +
		"verify transport and host key but not authentication; prefer `private_key_file` or `agent` for full refresh probes.",
	"private_key_passphrase": "Passphrase of an encrypted `private_key` or `private_key_file`. Write-only: never stored in state nor shown in a plan.",
	"private_key_file":       "Path of a private key file; `~` is expanded.",
	"agent":                  "Authenticate with the keys of the ssh-agent at `SSH_AUTH_SOCK`. Default: true when neither `private_key` nor `private_key_file` is set.",
	"host_key_fingerprint": "The host key pin, in any form an operator has at hand, pasted as it is: the line `ssh-keygen -lf` prints " +
		"(`256 SHA256:... host (ED25519)`), the bare `SHA256:<base64>` fingerprint, a public key line (`ssh-ed25519 AAAA...`), or an `ssh-keyscan` / `known_hosts` line. " +
		"A host is never dialled without one: a plan refuses a connection without a pin and prints the command that gives one.",
	"proxy_jump": "Jump host, `[user@]host[:port]` (one hop). The bastion's key is verified against the provider's `known_hosts_file` " +
		"with accept-new semantics; the target's key is still checked against `host_key_fingerprint` end to end.",
}

func connectionDescription(name string) string { return connectionDescriptions[name] }

// connectionModel holds the connection fields of a resource or data source.
type connectionModel struct {
	Host                 types.String `tfsdk:"host"`
	Port                 types.Int64  `tfsdk:"port"`
	User                 types.String `tfsdk:"user"`
	PrivateKey           types.String `tfsdk:"private_key"`
	PrivateKeyPassphrase types.String `tfsdk:"private_key_passphrase"`
	PrivateKeyFile       types.String `tfsdk:"private_key_file"`
	Agent                types.Bool   `tfsdk:"agent"`
	HostKeyFingerprint   types.String `tfsdk:"host_key_fingerprint"`
	ProxyJump            types.String `tfsdk:"proxy_jump"`
}

// exportedConnectionTypes is the shape of an executor's `connection`
// attribute: the connection without its secrets.
var exportedConnectionTypes = map[string]attr.Type{
	"host":                 types.StringType,
	"port":                 types.Int64Type,
	"user":                 types.StringType,
	"private_key_file":     types.StringType,
	"agent":                types.BoolType,
	"host_key_fingerprint": types.StringType,
	"proxy_jump":           types.StringType,
}

// exported returns the connection without secrets.
func (c connectionModel) exported() types.Object {
	return types.ObjectValueMust(exportedConnectionTypes, map[string]attr.Value{
		"host":                 c.Host,
		"port":                 c.Port,
		"user":                 c.User,
		"private_key_file":     c.PrivateKeyFile,
		"agent":                c.Agent,
		"host_key_fingerprint": c.HostKeyFingerprint,
		"proxy_jump":           c.ProxyJump,
	})
}

// target resolves the connection into a dial target, with the provider's
// defaults where the connection sets nothing: the user, and the credentials
// when it gives no key of its own. withheld, when set, says why a credential
// of the connection is not available to this dial (a write-only key during
// a refresh): the dial then checks what it can without it, and the
// provider's credentials do not stand in for the connection's own.
// Values have passed the schema validators, so a parse error here means
// state was edited by hand.
func (c connectionModel) target(d connectionDefaults, withheld string) (sshdial.Target, error) {
	t := sshdial.Target{Endpoint: sshdial.Endpoint{Host: c.Host.ValueString(), Port: sshdial.DefaultPort, User: d.user}}
	if !c.Port.IsNull() && !c.Port.IsUnknown() {
		t.Port = int(c.Port.ValueInt64())
	}
	if c.User.ValueString() != "" {
		t.User = c.User.ValueString()
	}
	if pin := c.HostKeyFingerprint.ValueString(); pin != "" {
		p, err := sshdial.ParsePin(pin)
		if err != nil {
			return sshdial.Target{}, fmt.Errorf("host_key_fingerprint: %w", err)
		}
		t.Pin = p
	}
	if jump := c.ProxyJump.ValueString(); jump != "" {
		j, err := sshdial.ParseJump(jump)
		if err != nil {
			return sshdial.Target{}, fmt.Errorf("proxy_jump: %w", err)
		}
		t.Jump = &j
	}
	t.Credentials = sshdial.Credentials{
		PrivateKey:     []byte(c.PrivateKey.ValueString()),
		Passphrase:     []byte(c.PrivateKeyPassphrase.ValueString()),
		PrivateKeyFile: c.PrivateKeyFile.ValueString(),
		Withheld:       withheld,
	}
	if !c.hasKey() && withheld == "" && d.hasKey() {
		t.Credentials = d.credentials
	}
	t.Credentials.Agent = c.agentEffective(d)
	return t, nil
}

// hasKey reports whether the connection gives a key of its own.
func (c connectionModel) hasKey() bool {
	return c.PrivateKey.ValueString() != "" || c.PrivateKeyFile.ValueString() != ""
}

// agentEffective is the agent flag with its default applied: on when
// neither the connection nor the provider gives a key.
func (c connectionModel) agentEffective(d connectionDefaults) bool {
	if !c.Agent.IsNull() && !c.Agent.IsUnknown() {
		return c.Agent.ValueBool()
	}
	return !c.hasKey() && !d.hasKey()
}

// fullyKnown reports whether every connection field is known, write-only
// secrets included (config values; a plan never carries those).
func (c connectionModel) fullyKnown() bool {
	for _, v := range c.values() {
		if v.IsUnknown() {
			return false
		}
	}
	return !c.PrivateKey.IsUnknown() && !c.PrivateKeyPassphrase.IsUnknown()
}

// values are the connection fields kept in state, in a fixed order.
func (c connectionModel) values() []attr.Value {
	return []attr.Value{c.Host, c.Port, c.User, c.PrivateKeyFile, c.Agent, c.HostKeyFingerprint, c.ProxyJump}
}

// addConfigFault reports a static configuration fault found before any dial
// (sshdial.Dialer.Check) as an error on the attribute to fix, under at (the
// resource root, or a data source's target). who names what is affected.
func addConfigFault(diags *diag.Diagnostics, err error, at path.Path, who string) {
	var cfg *sshdial.ConfigError
	switch {
	case !errors.As(err, &cfg):
		diags.AddAttributeError(at, "Invalid connection", who+": "+err.Error())
	case cfg.Provider:
		diags.AddError("Invalid provider "+cfg.Field, who+": the provider's "+cfg.Field+": "+cfg.Msg)
	default:
		diags.AddAttributeError(at.AtName(cfg.Field), "Invalid "+cfg.Field, who+": "+cfg.Msg)
	}
}

// inlineKeyID identifies an inline private key without revealing it: the
// SHA-256 of its public half. Kept in private state, it lets a plan notice a
// rotated write-only key, which Terraform itself cannot diff.
func inlineKeyID(pem, passphrase string) string {
	if pem == "" {
		return ""
	}
	var signer ssh.Signer
	var err error
	if passphrase != "" {
		signer, err = ssh.ParsePrivateKeyWithPassphrase([]byte(pem), []byte(passphrase))
	} else {
		signer, err = ssh.ParsePrivateKey([]byte(pem))
	}
	if err != nil {
		// Unparsable keys are reported by the probe; identify them by digest
		// so that replacing one is still seen as a change.
		sum := sha256.Sum256([]byte(pem))
		return "unparsed:" + hex.EncodeToString(sum[:8])
	}
	return ssh.FingerprintSHA256(signer.PublicKey())
}

// Validators shared by both schema kinds.
func portValidators() []validator.Int64 {
	return []validator.Int64{int64validator.Between(1, 65535)}
}

func keyConflicts() []validator.String {
	return []validator.String{stringvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("private_key_file"))}
}

// resourceConnectionAttributes are the connection fields as top-level
// attributes of a managed resource (fleet_executor).
func resourceConnectionAttributes() map[string]rschema.Attribute {
	return map[string]rschema.Attribute{
		"host": rschema.StringAttribute{Required: true, MarkdownDescription: connectionDescription("host"),
			Validators: []validator.String{validators.Host()}},
		"port": rschema.Int64Attribute{Optional: true, Computed: true, MarkdownDescription: connectionDescription("port"),
			Validators: portValidators()},
		"user": rschema.StringAttribute{Optional: true, Computed: true, MarkdownDescription: connectionDescription("user"),
			Validators: []validator.String{stringvalidator.LengthAtLeast(1)}},
		"private_key": rschema.StringAttribute{Optional: true, Sensitive: true, WriteOnly: true,
			MarkdownDescription: connectionDescription("private_key"), Validators: keyConflicts()},
		// Write-only, so never in state nor shown in a plan; not also marked
		// sensitive: Terraform lists a resource's sensitive paths in state
		// in an order of its own that changes from one refresh to the next,
		// and with two of them every refresh-only plan then counted as a
		// change (the drift job fired at every run).
		"private_key_passphrase": rschema.StringAttribute{Optional: true, WriteOnly: true,
			MarkdownDescription: connectionDescription("private_key_passphrase")},
		"private_key_file": rschema.StringAttribute{Optional: true, MarkdownDescription: connectionDescription("private_key_file"),
			Validators: []validator.String{stringvalidator.LengthAtLeast(1)}},
		"agent": rschema.BoolAttribute{Optional: true, Computed: true, MarkdownDescription: connectionDescription("agent")},
		"host_key_fingerprint": rschema.StringAttribute{Optional: true, MarkdownDescription: connectionDescription("host_key_fingerprint"),
			Validators: []validator.String{validators.HostKeyPin()}},
		"proxy_jump": rschema.StringAttribute{Optional: true, MarkdownDescription: connectionDescription("proxy_jump"),
			Validators: []validator.String{validators.ProxyJump()}},
	}
}

// dataSourceConnectionAttributes are the same fields inside a data source's
// nested target objects. A data source's arguments are kept in state, so its
// inline key fields are blanked before the result is saved.
// host is checked by the object's validator (validators.RequiredWhenKnown)
// rather than marked Required: the framework reads the attributes of a
// target unknown at validate time as missing.
func dataSourceConnectionAttributes() map[string]dschema.Attribute {
	return map[string]dschema.Attribute{
		"host": dschema.StringAttribute{Optional: true, MarkdownDescription: connectionDescription("host") + " Required.",
			Validators: []validator.String{validators.Host()}},
		"port": dschema.Int64Attribute{Optional: true, MarkdownDescription: connectionDescription("port"),
			Validators: portValidators()},
		"user": dschema.StringAttribute{Optional: true, MarkdownDescription: connectionDescription("user"),
			Validators: []validator.String{stringvalidator.LengthAtLeast(1)}},
		"private_key": dschema.StringAttribute{Optional: true, Sensitive: true,
			MarkdownDescription: "Private key in PEM form. Sensitive; used for this read and not kept in state.", Validators: keyConflicts()},
		"private_key_passphrase": dschema.StringAttribute{Optional: true, Sensitive: true,
			MarkdownDescription: "Passphrase of an encrypted key. Sensitive; used for this read and not kept in state."},
		"private_key_file": dschema.StringAttribute{Optional: true, MarkdownDescription: connectionDescription("private_key_file"),
			Validators: []validator.String{stringvalidator.LengthAtLeast(1)}},
		"agent": dschema.BoolAttribute{Optional: true, MarkdownDescription: connectionDescription("agent")},
		"host_key_fingerprint": dschema.StringAttribute{Optional: true, MarkdownDescription: connectionDescription("host_key_fingerprint"),
			Validators: []validator.String{validators.HostKeyPin()}},
		"proxy_jump": dschema.StringAttribute{Optional: true, MarkdownDescription: connectionDescription("proxy_jump"),
			Validators: []validator.String{validators.ProxyJump()}},
	}
}
