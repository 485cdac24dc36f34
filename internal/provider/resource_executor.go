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
		MarkdownDescription: "The connection without secrets, in this provider's connection shape: for example a `fleet_reachability` target, " +
			"`merge(fleet_executor.x.ssh_connection, { name = \"x\" })` (feed `for_each` from the executors' inputs instead; see the wiring guide). " +
			"It is not Terraform's provisioner `connection` block, whose arguments differ. " +
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
	// Imported says the executor was imported and has not been applied
	// since: its credentials are not known.
	Imported bool `json:"imported,omitempty"`
}

// withheld says why a refresh cannot use every credential of the executor:
// write-only values are never in state, and an import does not know them.
func (pc privateCredentials) withheld() string {
	switch {
	case pc.InlineKey != "":
		return "the inline private_key is write-only, so a refresh cannot use it"
	case pc.Passphrase:
		return "private_key_passphrase is write-only, so a refresh cannot decrypt the key"
	case pc.Imported:
		return "the credentials of an imported executor are not known until it is applied with its configuration"
	}
	return ""
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

func writePrivateCredentials(ctx context.Context, p privateSetter, pc privateCredentials) diag.Diagnostics {
	raw, err := json.Marshal(pc)
	if err != nil {
		var d diag.Diagnostics
		d.AddError("Cannot save private state", err.Error())
		return d
	}
	return p.SetKey(ctx, credentialsKey, raw)
}

func credentialsOf(config executorModel) privateCredentials {
	return privateCredentials{
		InlineKey:  inlineKeyID(config.PrivateKey.ValueString(), config.PrivateKeyPassphrase.ValueString()),
		Passphrase: config.PrivateKeyPassphrase.ValueString() != "",
	}
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
	// The defaults the provider fills in are inputs too.
	if config.User.IsNull() {
		plan.User = types.StringValue(r.data.defaults.user)
	}
	if config.Agent.IsNull() {
		plan.Agent = types.BoolUnknown()
		if !config.PrivateKey.IsUnknown() && !config.PrivateKeyFile.IsUnknown() {
			plan.Agent = types.BoolValue(withSecrets(plan, config).agentEffective(r.data.defaults))
		}
	}
	plan.Connection = plan.exported()

	// A fault no connection is needed to see is refused now, naming the
	// attribute, rather than saved as an unreachable record.
	creds := withSecrets(plan, config)
	if !plan.Enabled.IsUnknown() && plan.Enabled.ValueBool() && creds.fullyKnown() {
		target, err := creds.target(r.data.defaults, "")
		if err == nil {
			err = r.data.prober.Dialer.Check(target)
		}
		if err != nil {
			addConfigFault(&resp.Diagnostics, err, path.Empty(), fmt.Sprintf("fleet_executor %q (%s)", plan.Name.ValueString(), plan.Host.ValueString()))
			return
		}
	}
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
	change := connectionChange(state, plan, config, prev)
	plan.ID = state.ID
	plan.Generation = nextGeneration(state.Generation, change)
	observe := observesOnUpdate(state, plan, change)
	plan.Reachability = planObserved(observe, state.Reachability, types.ObjectUnknown(recordAttrTypes))
	plan.Conditions = planObserved(observe, state.Conditions, types.ListUnknown(conditionObjectType))
	plan.ObservedGeneration = planObserved(observe, state.ObservedGeneration, types.Int64Unknown())
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)

	// Warn about the record this plan keeps, unless a refresh of this run
	// did, or the change about to be applied makes it describe a target that
	// is no longer configured.
	if observe == no && change == no && state.Enabled.ValueBool() && !r.wasRefreshed(state.ID) {
		rec, ok, diags := recordFrom(ctx, state.Reachability)
		resp.Diagnostics.Append(diags...)
		conds, diags := conditionsFrom(ctx, state.Conditions)
		resp.Diagnostics.Append(diags...)
		if ok {
			r.warn(&resp.Diagnostics, state, rec, conds, false)
		}
	}
}

// connectionChange says whether plan reaches the host differently from
// state: any connection field, or the inline key (known only by the public
// fingerprint kept in private state). It is unknownYet while a field or the
// key is known only after apply.
func connectionChange(state, plan, config executorModel, prev privateCredentials) maybe {
	key := no
	switch {
	case config.PrivateKey.IsUnknown() || config.PrivateKeyPassphrase.IsUnknown():
		key = unknownYet
	case credentialsOf(config).InlineKey != prev.InlineKey:
		key = yes
	}
	return or(changeOf(plan.values(), state.values()), key)
}

// observesOnUpdate says whether applying plan over state probes: an enabled
// executor is probed when its record describes an older generation (its
// connection changed, now or while it was disabled) or when it has just
// been enabled.
func observesOnUpdate(state, plan executorModel, change maybe) maybe {
	outdated := unknownYet
	if change != unknownYet {
		outdated = maybeOf(state.ObservedGeneration.ValueInt64() < plan.Generation.ValueInt64())
	}
	return and(maybeBool(plan.Enabled), or(maybeOf(!state.Enabled.ValueBool()), outdated))
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

	rec := reachability.Reset(plan.Host.ValueString())
	conds, err := reachability.ResetConditions(1, plan.Host.ValueString(), r.data.clock.Now())
	if err != nil {
		resp.Diagnostics.AddError("Internal error building conditions", err.Error())
		return
	}
	if plan.Enabled.ValueBool() {
		rec, conds, _ = r.probe(ctx, &resp.Diagnostics, plan, withSecrets(plan, config), "", rec, conds)
		r.warn(&resp.Diagnostics, plan, rec, conds, true)
	}
	r.store(&plan, rec, conds)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	resp.Diagnostics.Append(writePrivateCredentials(ctx, resp.Private, credentialsOf(config))...)
}

func (r *executorResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state executorModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	pc, diags := readPrivateCredentials(ctx, req.Private)
	resp.Diagnostics.Append(diags...)
	rec, _, diags := recordFrom(ctx, state.Reachability)
	resp.Diagnostics.Append(diags...)
	conds, diags := conditionsFrom(ctx, state.Conditions)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	// A disabled executor's record stays exactly as it was. A probe that
	// confirms the record leaves it as it was too, times included
	// (reachability.Observe): a refresh that observes nothing new writes
	// nothing, and drift detection sees no change.
	probed := false
	if state.Enabled.ValueBool() {
		if rec.Due(r.data.clock.Now(), r.data.interval.Duration()) {
			withheld := pc.withheld()
			// An import knows no credential of its own, but the provider
			// block's key and the agent are there at every refresh: with one
			// of them the refresh logs in as any other does, and the
			// executor is no longer one whose credentials are unknown.
			knows := pc.Imported && pc.InlineKey == "" && !pc.Passphrase && r.canLogIn(state)
			if knows {
				withheld = ""
			}
			rec, conds, probed = r.probe(ctx, &resp.Diagnostics, state, state, withheld, rec, conds)
			if probed {
				state.ObservedGeneration = state.Generation
			}
			if probed && knows {
				pc.Imported = false
				resp.Diagnostics.Append(writePrivateCredentials(ctx, resp.Private, pc)...)
			}
		}
		r.warn(&resp.Diagnostics, state, rec, conds, probed)
	}
	// The response starts as the state read. A refresh that probed nothing
	// and finds the record and conditions stored as store writes them
	// leaves it so: encoding the whole executor again is most of what a
	// refresh with no probe due would cost the provider in a large fleet.
	stored := state
	r.store(&stored, rec, conds)
	if probed || !stored.Reachability.Equal(state.Reachability) || !stored.Conditions.Equal(state.Conditions) {
		resp.Diagnostics.Append(resp.State.Set(ctx, &stored)...)
	}
	r.data.refreshed(executorKind, state.ID.ValueString(), nil)
	resp.Diagnostics.Append(dropLegacyMark(ctx, req.Private, resp.Private)...)
}

func (r *executorResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state, config executorModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// The final plan decided, with every input known, whether the
	// connection changed (it raised the generation) and whether to probe.
	change := maybeOf(plan.Generation.ValueInt64() > state.Generation.ValueInt64())
	plan.ID = state.ID
	plan.Connection = plan.exported()
	if observesOnUpdate(state, plan, change) == yes {
		gen := plan.Generation.ValueInt64()
		rec, _, diags := recordFrom(ctx, state.Reachability)
		resp.Diagnostics.Append(diags...)
		conds, diags := conditionsFrom(ctx, state.Conditions)
		resp.Diagnostics.Append(diags...)
		if resp.Diagnostics.HasError() {
			return
		}
		if state.ObservedGeneration.ValueInt64() < gen {
			// The old streak and success describe a different target.
			rec = reachability.Reset(plan.Host.ValueString())
			var err error
			if conds, err = reachability.ResetConditions(gen, plan.Host.ValueString(), r.data.clock.Now()); err != nil {
				resp.Diagnostics.AddError("Internal error building conditions", err.Error())
				return
			}
			tflog.Info(ctx, "executor connection changed: reachability record reset", map[string]any{"host": plan.Host.ValueString(), "generation": gen})
		}
		rec, conds, _ = r.probe(ctx, &resp.Diagnostics, plan, withSecrets(plan, config), "", rec, conds)
		plan.ObservedGeneration = types.Int64Value(gen)
		r.store(&plan, rec, conds)
		r.warn(&resp.Diagnostics, plan, rec, conds, true)
	}
	// Otherwise the plan carries the record, conditions and observed
	// generation exactly as they were, and so does the new state.
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	resp.Diagnostics.Append(writePrivateCredentials(ctx, resp.Private, credentialsOf(config))...)
}

const executorKind = "fleet_executor"

// wasRefreshed reports whether this run's refresh read the executor (and
// warned about its record).
func (r *executorResource) wasRefreshed(id types.String) bool {
	_, ok := r.data.refreshedBy(executorKind, id.ValueString())
	return ok
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
			Agent:                types.BoolValue(imp.privateKeyFile == "" && !r.data.defaults.hasKey()),
			HostKeyFingerprint:   nullable(imp.hostKeyFingerprint),
			ProxyJump:            nullable(imp.proxyJump),
		},
		Enabled:            types.BoolValue(true),
		Generation:         types.Int64Value(1),
		ObservedGeneration: types.Int64Value(1),
	}
	if m.User.ValueString() == "" {
		m.User = types.StringValue(r.data.defaults.user)
	}
	m.Connection = m.exported()
	now := r.data.clock.Now()
	conds, err := reachability.ResetConditions(1, imp.host, now)
	if err != nil {
		resp.Diagnostics.AddError("Internal error building conditions", err.Error())
		return
	}
	r.store(&m, reachability.Reset(imp.host), conds)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	// The refresh that follows probes the imported executor without knowing
	// its credentials (an inline key, a passphrase): what it cannot check
	// it reports as not checked, never as a failure.
	resp.Diagnostics.Append(writePrivateCredentials(ctx, resp.Private, privateCredentials{Imported: true})...)
}

func nullable(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// canLogIn reports whether the connection of m, as kept in state, has a
// credential a refresh can use: its key file, the provider's key, or the
// agent. It asks what a dial would (sshdial.Dialer.Check), with no network.
func (r *executorResource) canLogIn(m executorModel) bool {
	t, err := m.target(r.data.defaults, "")
	return err == nil && r.data.prober.Dialer.Check(t) == nil
}

// withSecrets is the plan's connection with the write-only secrets of the
// configuration, which the plan never carries.
func withSecrets(plan, config executorModel) executorModel {
	plan.PrivateKey = config.PrivateKey
	plan.PrivateKeyPassphrase = config.PrivateKeyPassphrase
	return plan
}

// probe probes the executor and applies the outcome to its record and
// conditions. withheld says why some credential is not available (see
// connectionModel.target). observed is false when the probe was cancelled
// (an interrupted probe changes nothing) or could not re-check the host.
func (r *executorResource) probe(ctx context.Context, diags *diag.Diagnostics, m, creds executorModel, withheld string, rec reachability.Record, conds []conditions.Condition) (reachability.Record, []conditions.Condition, bool) {
	target, err := creds.target(r.data.defaults, withheld)
	if err != nil {
		diags.AddAttributeError(path.Root("host_key_fingerprint"), "Invalid connection in state", fmt.Sprintf("fleet_executor %q: %s", m.Name.ValueString(), err))
		return rec, conds, false
	}
	fields := map[string]any{"executor": m.Name.ValueString(), "id": m.ID.ValueString(), "host": target.Host, "port": target.Port}
	tflog.Debug(ctx, "probing executor", fields)
	o := r.data.prober.Probe(ctx, target)
	if o.Canceled {
		tflog.Info(ctx, "probe cancelled: nothing recorded", fields)
		return rec, conds, false
	}
	next := rec
	obs, observed := reachability.ObservationOf(o)
	if observed {
		next = reachability.Observe(rec, obs)
	}
	fields["reason"], fields["state"], fields["latency_ms"] = string(o.Reason), string(next.State), o.Latency.Milliseconds()
	fields["consecutive_failures"] = next.ConsecutiveFailures
	switch {
	case o.Auth == sshdial.AuthWithheld:
		fields["not_checked"] = o.Withheld
		tflog.Info(ctx, "executor probed without its write-only credentials: authentication not re-checked", fields)
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
	out, err := reachability.ObservedConditions(conds, next, o, m.Generation.ValueInt64(), o.CheckedAt)
	if err != nil {
		diags.AddError("Internal error building conditions", err.Error())
		return rec, conds, false
	}
	// A host this probe could not re-check (its bastion needs credentials
	// the probe did not have) was not probed by this run, as far as its
	// record goes: the warnings say how old the record is.
	return next, out, observed
}

// store writes a record and its conditions into the model. Staleness is
// not stored: a probe that confirms a record writes nothing, so the record's
// age says nothing of when the host was last looked at; the run that reads
// the record decides it (reachability.Seen), in its warnings.
func (r *executorResource) store(m *executorModel, rec reachability.Record, conds []conditions.Condition) {
	m.Reachability = recordValue(rec, false)
	m.Conditions = conditionsValue(conds)
}

// warn adds the warning for a record that needs a reviewer's eye (see
// reachability.Warning). When the last probe could not re-check the host
// for want of credentials, the warning says so: the condition holds why.
func (r *executorResource) warn(diags *diag.Diagnostics, m executorModel, rec reachability.Record, conds []conditions.Condition, probed bool) {
	seen := reachability.Seen{Now: r.data.clock.Now(), Interval: r.data.interval.Duration(), Probed: probed}
	if c, found := conditions.Find(conds, reachability.ConditionAuthenticated); found && c.Reason == reachability.ReasonCredentialWithheld {
		seen.AuthWithheldSince = c.LastTransitionTime
	}
	summary, detail, ok := reachability.Warning(m.Name.ValueString(), rec, seen)
	if !ok {
		return
	}
	if c, found := conditions.Find(conds, reachability.ConditionReachable); found && c.Reason == reachability.ReasonCredentialWithheld {
		detail += "\n" + c.Message + "."
	}
	diags.AddAttributeWarning(path.Root("reachability"), summary, detail)
}
