package provider

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

var (
	_ resource.ResourceWithConfigure   = (*executorResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*executorResource)(nil)
	_ resource.ResourceWithImportState = (*executorResource)(nil)
)

func newExecutorResource() resource.Resource { return &executorResource{} }

type executorResource struct{ data *providerData }

type executorModel struct {
	ID   types.String `tfsdk:"id"`
	Name types.String `tfsdk:"name"`
	connectionModel
	Enabled            types.Bool   `tfsdk:"enabled"`
	Connection         types.Object `tfsdk:"ssh_connection"`
	Generation         types.Int64  `tfsdk:"generation"`
	ObservedGeneration types.Int64  `tfsdk:"observed_generation"`
	Conditions         types.List   `tfsdk:"conditions"`
	Reachability       types.Object `tfsdk:"reachability"`
}

var objectAsOptions = basetypes.ObjectAsOptions{}

func (r *executorResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_executor"
}

func (r *executorResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := resourceConnectionAttributes()
	attrs["id"] = schema.StringAttribute{Computed: true,
		MarkdownDescription: "Identifier generated once at create and never reused; it sorts in creation order.",
		PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
	attrs["name"] = schema.StringAttribute{Required: true, MarkdownDescription: "Name of the executor, used in messages and warnings.",
		Validators: []validator.String{stringvalidator.LengthAtLeast(1)}}
	attrs["enabled"] = schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(true),
		MarkdownDescription: "Whether the executor is probed. A disabled executor is never probed nor reset: its record stays as it was until it is enabled again. Default true."}
	attrs["port"] = schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(sshdial.DefaultPort),
		MarkdownDescription: connectionDescription("port"), Validators: portValidators()}
	// "connection" is reserved at the root of a resource (provisioners), so
	// the export carries the closest legal name.
	attrs["ssh_connection"] = schema.ObjectAttribute{Computed: true, AttributeTypes: exportedConnectionTypes,
		MarkdownDescription: "The connection without secrets, for other resources: `connection = fleet_executor.x.ssh_connection` " +
			"(Terraform reserves the name `connection` at the root of a resource). " +
			"It carries `private_key_file` and `agent` but never `private_key`: a host reached with an inline key is given that key again where it is used."}
	attrs["generation"] = schema.Int64Attribute{Computed: true,
		MarkdownDescription: "Starts at 1 and increases by one whenever a connection field changes (a rotated inline key included)."}
	attrs["observed_generation"] = schema.Int64Attribute{Computed: true,
		MarkdownDescription: "The `generation` the record and conditions describe. Lower than `generation` while a disabled executor's new connection is not yet probed."}
	attrs["conditions"] = conditionsAttribute("`HostKeyVerified`, `Authenticated`, `Reachable`")
	attrs["reachability"] = recordAttribute()
	resp.Schema = schema.Schema{
		MarkdownDescription: "An SSH host the operator relies on. Its reachability record is kept in state: creating it probes the host, " +
			"a refresh probes it again when the record is older than the provider's `probe_interval`, and a change of any connection field resets the record " +
			"and probes the new target. Plans warn about every executor that is unreachable, failing, or stale.\n\n" +
			"A probe dials with the host key pin, bounds TCP connect and SSH handshake together by 10 seconds, closes at once and runs no command.",
		Attributes: attrs,
	}
}

func (r *executorResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = configuredData(req.ProviderData, &resp.Diagnostics)
}

// credentialsKey is the private state entry that remembers, without the
// secret, which write-only credentials the executor was configured with.
const credentialsKey = "credentials"

type privateCredentials struct {
	InlineKey  string `json:"inline_key,omitempty"` // public-key fingerprint of the inline key
	Passphrase bool   `json:"passphrase,omitempty"`
}

type privateGetter interface {
	GetKey(context.Context, string) ([]byte, diag.Diagnostics)
}

type privateSetter interface {
	SetKey(context.Context, string, []byte) diag.Diagnostics
}

func readPrivateCredentials(ctx context.Context, p privateGetter) (privateCredentials, diag.Diagnostics) {
	var pc privateCredentials
	raw, diags := p.GetKey(ctx, credentialsKey)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &pc); err != nil {
			diags.AddError("Corrupt private state", "fleet_executor private state is not readable: "+err.Error())
		}
	}
	return pc, diags
}

func writePrivateCredentials(ctx context.Context, p privateSetter, config executorModel) diag.Diagnostics {
	pc := privateCredentials{
		InlineKey:  inlineKeyID(config.PrivateKey.ValueString(), config.PrivateKeyPassphrase.ValueString()),
		Passphrase: config.PrivateKeyPassphrase.ValueString() != "",
	}
	raw, err := json.Marshal(pc)
	if err != nil {
		var d diag.Diagnostics
		d.AddError("Cannot save private state", err.Error())
		return d
	}
	return p.SetKey(ctx, credentialsKey, raw)
}

func (r *executorResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return // destroy, or validation before the provider is configured
	}
	var plan, config executorModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if config.User.IsNull() {
		plan.User = types.StringValue(r.data.defaultUser)
	}
	if config.Agent.IsNull() && !config.PrivateKey.IsUnknown() && !config.PrivateKeyFile.IsUnknown() {
		plan.Agent = types.BoolValue(config.PrivateKey.IsNull() && config.PrivateKeyFile.IsNull())
	}
	plan.Connection = plan.exported()

	if req.State.Raw.IsNull() {
		plan.Generation = types.Int64Value(1)
		resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
		return
	}

	var state executorModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	prev, diags := readPrivateCredentials(ctx, req.Private)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	changed := connectionChanged(state, plan, config, prev)
	plan.ID = state.ID
	plan.Generation = state.Generation
	if changed {
		plan.Generation = types.Int64Value(state.Generation.ValueInt64() + 1)
	}
	if willProbeOnUpdate(state, plan, changed) {
		plan.Reachability = types.ObjectUnknown(recordAttrTypes)
		plan.Conditions = types.ListUnknown(conditionObjectType)
		plan.ObservedGeneration = types.Int64Unknown()
	} else {
		plan.Reachability = state.Reachability
		plan.Conditions = state.Conditions
		plan.ObservedGeneration = state.ObservedGeneration
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)

	// Warn about the record as refreshed, unless the change about to be
	// applied makes it describe a target that is no longer configured.
	if !changed && state.Enabled.ValueBool() {
		rec, ok, diags := recordFrom(ctx, state.Reachability)
		resp.Diagnostics.Append(diags...)
		if ok {
			r.warn(&resp.Diagnostics, state, rec)
		}
	}
}

// connectionChanged says whether plan reaches the host differently from
// state: any connection field, or the inline key (known only by the public
// fingerprint kept in private state; an unknown key counts as changed).
func connectionChanged(state, plan, config executorModel, prev privateCredentials) bool {
	return !state.sameEndpoint(plan.connectionModel) || config.PrivateKey.IsUnknown() ||
		inlineKeyID(config.PrivateKey.ValueString(), config.PrivateKeyPassphrase.ValueString()) != prev.InlineKey
}

// willProbeOnUpdate says whether applying plan over state probes: an enabled
// executor is probed when its connection changed, when it has just been
// enabled, or when its record describes an older generation.
func willProbeOnUpdate(state, plan executorModel, changed bool) bool {
	if !plan.Enabled.ValueBool() {
		return false
	}
	return changed || !state.Enabled.ValueBool() || state.ObservedGeneration.ValueInt64() < plan.Generation.ValueInt64()
}

func (r *executorResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan, config executorModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		resp.Diagnostics.AddError("Cannot generate an executor id", err.Error())
		return
	}
	plan.ID = types.StringValue(id.String())
	plan.Generation = types.Int64Value(1)
	plan.ObservedGeneration = types.Int64Value(1)
	plan.Connection = plan.exported()

	now := r.data.clock.Now()
	rec := reachability.Reset(plan.Host.ValueString())
	conds, err := reachability.ResetConditions(1, plan.Host.ValueString(), now)
	if err != nil {
		resp.Diagnostics.AddError("Internal error building conditions", err.Error())
		return
	}
	if plan.Enabled.ValueBool() {
		rec, conds = r.probe(ctx, &resp.Diagnostics, plan, withSecrets(plan, config), rec, conds, false)
	}
	r.store(ctx, &resp.Diagnostics, &plan, rec, conds)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	resp.Diagnostics.Append(writePrivateCredentials(ctx, resp.Private, config)...)
}

func (r *executorResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state executorModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	pc, diags := readPrivateCredentials(ctx, req.Private)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !state.Enabled.ValueBool() {
		return // a disabled executor's record stays exactly as it was
	}
	rec, _, diags := recordFrom(ctx, state.Reachability)
	resp.Diagnostics.Append(diags...)
	conds, diags := conditionsFrom(ctx, state.Conditions)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	interval := r.data.interval.Duration()
	if rec.Due(r.data.clock.Now(), interval) {
		withheld := pc.InlineKey != "" || pc.Passphrase
		rec, conds = r.probe(ctx, &resp.Diagnostics, state, state, rec, conds, withheld)
		state.ObservedGeneration = state.Generation
	}
	r.store(ctx, &resp.Diagnostics, &state, rec, conds)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *executorResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state, config executorModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// The plan decided whether the connection changed: it raised the generation.
	changed := plan.Generation.ValueInt64() > state.Generation.ValueInt64()
	plan.ID = state.ID
	plan.Connection = plan.exported()

	rec, _, diags := recordFrom(ctx, state.Reachability)
	resp.Diagnostics.Append(diags...)
	conds, diags := conditionsFrom(ctx, state.Conditions)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.ObservedGeneration = state.ObservedGeneration
	if willProbeOnUpdate(state, plan, changed) {
		gen := plan.Generation.ValueInt64()
		if changed || state.ObservedGeneration.ValueInt64() < gen {
			// The old streak and success describe a different target.
			now := r.data.clock.Now()
			rec = reachability.Reset(plan.Host.ValueString())
			var err error
			if conds, err = reachability.ResetConditions(gen, plan.Host.ValueString(), now); err != nil {
				resp.Diagnostics.AddError("Internal error building conditions", err.Error())
				return
			}
			tflog.Info(ctx, "executor connection changed: reachability record reset", map[string]any{"host": plan.Host.ValueString(), "generation": gen})
		}
		rec, conds = r.probe(ctx, &resp.Diagnostics, plan, withSecrets(plan, config), rec, conds, false)
		plan.ObservedGeneration = types.Int64Value(gen)
	}
	r.store(ctx, &resp.Diagnostics, &plan, rec, conds)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	resp.Diagnostics.Append(writePrivateCredentials(ctx, resp.Private, config)...)
}

func (r *executorResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {
	// The record lives only in state; removing the resource removes it.
}

func (r *executorResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	imp, err := parseImportID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("fleet_executor import ID %q: %s. Expected [user@]host[:port] followed by optional ,key=value pairs "+
			"(name, host_key_fingerprint, proxy_jump, private_key_file), e.g. deploy@web1.example.org:2222,name=web1,host_key_fingerprint=SHA256:...", req.ID, err))
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		resp.Diagnostics.AddError("Cannot generate an executor id", err.Error())
		return
	}
	m := executorModel{
		ID:   types.StringValue(id.String()),
		Name: types.StringValue(imp.name),
		connectionModel: connectionModel{
			Host: types.StringValue(imp.host), Port: types.Int64Value(int64(imp.port)),
			User:                 types.StringValue(imp.user),
			PrivateKey:           types.StringNull(),
			PrivateKeyPassphrase: types.StringNull(),
			PrivateKeyFile:       nullable(imp.privateKeyFile),
			Agent:                types.BoolValue(imp.privateKeyFile == ""),
			HostKeyFingerprint:   nullable(imp.hostKeyFingerprint),
			ProxyJump:            nullable(imp.proxyJump),
		},
		Enabled:            types.BoolValue(true),
		Generation:         types.Int64Value(1),
		ObservedGeneration: types.Int64Value(1),
	}
	if m.User.ValueString() == "" {
		m.User = types.StringValue(r.data.defaultUser)
	}
	m.Connection = m.exported()
	now := r.data.clock.Now()
	conds, err := reachability.ResetConditions(1, imp.host, now)
	if err != nil {
		resp.Diagnostics.AddError("Internal error building conditions", err.Error())
		return
	}
	r.store(ctx, &resp.Diagnostics, &m, reachability.Reset(imp.host), conds)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func nullable(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// withSecrets is the plan's connection with the write-only secrets of the
// configuration, which the plan never carries.
func withSecrets(plan, config executorModel) executorModel {
	plan.PrivateKey = config.PrivateKey
	plan.PrivateKeyPassphrase = config.PrivateKeyPassphrase
	return plan
}

// probe probes the executor and applies the outcome to its record and
// conditions. A cancelled probe changes nothing.
func (r *executorResource) probe(ctx context.Context, diags *diag.Diagnostics, m, creds executorModel, rec reachability.Record, conds []conditions.Condition, withheld bool) (reachability.Record, []conditions.Condition) {
	target, err := creds.target(r.data.defaultUser)
	if err != nil {
		diags.AddAttributeError(path.Root("host_key_fingerprint"), "Invalid connection in state", fmt.Sprintf("fleet_executor %q: %s", m.Name.ValueString(), err))
		return rec, conds
	}
	target.Credentials.Withheld = withheld
	fields := map[string]any{"executor": m.Name.ValueString(), "host": target.Host, "port": target.Port}
	tflog.Debug(ctx, "probing executor", fields)
	o := r.data.prober.Probe(ctx, target)
	if o.Canceled {
		tflog.Info(ctx, "probe cancelled: nothing recorded", fields)
		return rec, conds
	}
	now := r.data.clock.Now()
	next := reachability.Observe(rec, reachability.ObservationOf(o, now))
	fields["reason"], fields["state"], fields["latency_ms"] = string(o.Reason), string(next.State), o.Latency.Milliseconds()
	switch {
	case next.State != rec.State && next.State == reachability.StateUnreachable:
		tflog.Warn(ctx, "executor became unreachable", fields)
	case next.State != rec.State:
		tflog.Info(ctx, "executor reachability changed", fields)
	default:
		tflog.Debug(ctx, "executor probed", fields)
	}
	if o.BastionKeyAdded != "" {
		diags.AddWarning("Bastion key trusted on first use",
			fmt.Sprintf("fleet_executor %q: the jump host key %s was not in known_hosts_file and has been added to it (accept-new). Later dials refuse a different key.",
				m.Name.ValueString(), o.BastionKeyAdded))
	}
	out, err := reachability.ObservedConditions(conds, next, o, m.Generation.ValueInt64(), now)
	if err != nil {
		diags.AddError("Internal error building conditions", err.Error())
		return rec, conds
	}
	return next, out
}

// store writes a record and its conditions into the model.
func (r *executorResource) store(_ context.Context, diags *diag.Diagnostics, m *executorModel, rec reachability.Record, conds []conditions.Condition) {
	m.Reachability = recordValue(rec, rec.Stale(r.data.clock.Now(), r.data.interval.Duration()))
	cv, d := conditionsValue(conds)
	diags.Append(d...)
	m.Conditions = cv
}

// warn adds the plan warning for a record that is unreachable, failing
// below the threshold, or stale.
func (r *executorResource) warn(diags *diag.Diagnostics, m executorModel, rec reachability.Record) {
	now := r.data.clock.Now()
	summary, detail, ok := reachability.Warning(m.Name.ValueString(), rec, now, r.data.interval.Duration())
	if ok {
		diags.AddAttributeWarning(path.Root("reachability"), summary, detail)
	}
}
