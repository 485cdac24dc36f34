package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/health"
)

var (
	_ resource.ResourceWithConfigure      = (*nodeHealthPolicyResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*nodeHealthPolicyResource)(nil)
	_ resource.ResourceWithValidateConfig = (*nodeHealthPolicyResource)(nil)
	_ resource.ResourceWithUpgradeState   = (*nodeHealthPolicyResource)(nil)
)

func newNodeHealthPolicyResource() resource.Resource { return &nodeHealthPolicyResource{} }

type nodeHealthPolicyResource struct{ data *providerData }

type nodeHealthPolicyModel struct {
	ID   types.String `tfsdk:"id"`
	Name types.String `tfsdk:"name"`
	policyInputs
	policyState
}

// policyState is what the resource keeps beside its inputs, alike at
// every schema version.
type policyState struct {
	AutoClearAfter   types.Int64  `tfsdk:"auto_clear_after"`
	ClearErrors      types.Map    `tfsdk:"clear_errors"`
	Policy           types.String `tfsdk:"policy"`
	Generation       types.Int64  `tfsdk:"generation"`
	Status           types.Map    `tfsdk:"status"`
	HealthyNodes     types.List   `tfsdk:"healthy_nodes"`
	SchedulableNodes types.List   `tfsdk:"schedulable_nodes"`
	ErrorNodes       types.List   `tfsdk:"error_nodes"`
	MissingNodes     types.List   `tfsdk:"missing_nodes"`
}

func (r *nodeHealthPolicyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node_health_policy"
}

func summaryAttribute(what string) schema.ListAttribute {
	return schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Names of the nodes " + what + ", sorted."}
}

func (r *nodeHealthPolicyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = r.schema(1)
}

// schema is the resource's schema at a version (see resourcePolicyAttributes).
func (r *nodeHealthPolicyResource) schema(version int64) schema.Schema {
	attrs := resourcePolicyAttributes(version)
	attrs["id"] = schema.StringAttribute{Computed: true, MarkdownDescription: "Identifier generated at create.",
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
	attrs["name"] = schema.StringAttribute{Required: true, MarkdownDescription: "Name of the policy, used in messages.",
		Validators: []validator.String{stringvalidator.LengthAtLeast(1)}}
	attrs["auto_clear_after"] = schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.AtLeast(0)},
		MarkdownDescription: "Clear a node's `error` by itself after this many evaluations in a row with every check passing. Default 0: off, an error is cleared only through `clear_errors`."}
	attrs["clear_errors"] = schema.MapAttribute{Optional: true, ElementType: types.StringType,
		MarkdownDescription: "Operator clears of sticky errors: node name to a note (\"NVMe replaced, ticket 4711\"). Adding or changing a node's entry clears its `error` at that apply " +
			"if its last evaluation (the plan's refresh) found its checks passing, as the plan shows; if they still failed, the error stands and the plan warns. To clear again later, change the note."}
	attrs["policy"] = schema.StringAttribute{Computed: true,
		MarkdownDescription: "The policy as a JSON document (checks, object types, roles, nodes and timing), for `fleet_node_health`'s `policy`. Known at plan time whenever the configuration is."}
	attrs["generation"] = schema.Int64Attribute{Computed: true,
		MarkdownDescription: "Starts at 1 and increases by one whenever the policy (checks, object types, roles, nodes, storage root or timing) changes. A node's conditions carry the generation its record last changed at: below this one until a refresh observes what the change changed for that node."}
	attrs["status"] = schema.MapNestedAttribute{Computed: true, MarkdownDescription: "Per node, its health as last evaluated (at create and at every refresh), or `pending` for a node added since.",
		NestedObject: schema.NestedAttributeObject{Attributes: resourceNodeStatusAttributes()}}
	attrs["healthy_nodes"] = summaryAttribute("in state `healthy`")
	attrs["schedulable_nodes"] = summaryAttribute("that may take work: `healthy` or `degraded`")
	attrs["error_nodes"] = summaryAttribute("in state `error`: hold them back from deployments")
	attrs["missing_nodes"] = summaryAttribute("that could not be evaluated (not reached, or their checks could not run)")
	return schema.Schema{
		Version: version,
		MarkdownDescription: "Declares what each object type depends on (checks), which object types each role hosts, and which roles each node plays; " +
			"evaluates every node at create and at every refresh, over one SSH connection per node (or locally), and keeps each node's health in state; a change of the policy is planned from those records (a node added is `pending` until the next refresh). " +
			"A node whose checks fail is in `error` and stays there until an operator clears it through `clear_errors`. " +
			"A node that cannot be reached is `missing` (at once for a host key mismatch or a configuration fault, on the second evaluation in a row for a transient failure). " +
			"Plans warn about every node in `error` or `missing`, and about every node that could not be reached at its last evaluation.",
		Attributes: attrs,
	}
}

func (r *nodeHealthPolicyResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = configuredData(req.ProviderData, &resp.Diagnostics)
}

// ValidateConfig refuses dangling references and malformed checks as soon
// as the parts concerned are known.
func (r *nodeHealthPolicyResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m nodeHealthPolicyModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.decode(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	validatePolicyInputs(ctx, m.policyInputs, &resp.Diagnostics)
	if !m.ClearErrors.IsNull() && !m.ClearErrors.IsUnknown() && fullyKnown(m.Nodes) && !m.Nodes.IsNull() {
		for name := range m.ClearErrors.Elements() {
			if _, ok := m.Nodes.Elements()[name]; !ok {
				resp.Diagnostics.AddAttributeError(path.Root("clear_errors").AtMapKey(name), "Unknown node in clear_errors",
					fmt.Sprintf("clear_errors names node %q, which is not in nodes (%s): remove the entry (a node retired or renamed has no error left to clear), or correct its name.", name, list(slices.Sorted(maps.Keys(m.Nodes.Elements())))))
			}
		}
	}
}

// validatePolicyInputs reports the faults of whatever part of the policy is
// known; static connection faults wait for the plan (they need the
// provider's configuration).
func validatePolicyInputs(ctx context.Context, in policyInputs, diags *diag.Diagnostics) {
	if !in.known() {
		return
	}
	doc := in.doc(ctx, diags)
	_, errs := doc.policy(connectionDefaults{}, nil)
	for _, e := range errs {
		diags.AddAttributeError(e.where(), "Invalid node health policy", e.detail())
	}
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// compile builds the policy the evaluator runs, with static connection
// faults (no pin, a missing key file) refused naming the node.
func (r *nodeHealthPolicyResource) compile(ctx context.Context, in policyInputs, diags *diag.Diagnostics) (*health.Policy, policyDoc) {
	doc := in.doc(ctx, diags)
	p, errs := doc.policy(r.data.defaults, func(n health.Node) error { return r.data.prober.Dialer.Check(n.Target) })
	for _, e := range errs {
		diags.AddAttributeError(e.where(), "Invalid node health policy", e.detail())
	}
	return p, doc
}

func (r *nodeHealthPolicyResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	var plan nodeHealthPolicyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	// Parts known only now are checked now; validate checked the rest.
	plan.decode(ctx, &resp.Diagnostics)
	var prior *nodeHealthPolicyModel
	if !req.State.Raw.IsNull() {
		prior = &nodeHealthPolicyModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, prior)...)
		prior.decode(ctx, nil)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	if plan.known() {
		_, doc := r.compile(ctx, plan.policyInputs, &resp.Diagnostics)
		plan.Policy = types.StringValue(doc.json())
	} else {
		plan.Policy = types.StringUnknown()
	}
	if prior == nil {
		plan.Generation = types.Int64Value(1)
	} else {
		plan.Generation = nextGeneration(prior.Generation, changeOf(plan.values(), prior.values()))
		if _, refreshed := r.data.refreshedBy(nodeHealthPolicyKind, prior.ID.ValueString()); !refreshed {
			// Nor about what a plan of this process warned about
			// already (in-process, the plan and apply walks share it).
			warnNodes(ctx, prior.Status, r.warnedBy(prior.ID), &resp.Diagnostics)
			// The apply that follows in this process does not warn
			// about the same again.
			r.data.marks.set(r.data.run, nodeHealthPolicyPlanned, prior.ID.ValueString(), warnedAbout(ctx, prior.Status, &resp.Diagnostics))
		}
		warnDroppedErrors(ctx, prior.Status, plan.Nodes, &resp.Diagnostics)
		if plan.known() && prior.known() && samePolicy(ctx, plan.policyInputs, prior.policyInputs) {
			// A change of spelling only ("30s" for "30000ms", a default
			// written out): the same policy, the same generation.
			plan.Generation = prior.Generation
		}
		if plan.known() && !prior.Status.IsUnknown() && !r.planStatus(ctx, &plan, prior, &resp.Diagnostics) {
			return
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// warnNodes warns about every node of a status map in error or missing,
// or held in its last state because it could not be reached, except those
// whose state and reason are already in warned.
func warnNodes(ctx context.Context, status types.Map, warned map[string]string, diags *diag.Diagnostics) {
	for name, m := range nodeStatuses(ctx, status, diags) {
		summary, detail, ok := nodeWarning(name, m)
		if !ok || warned[name] == m.State.ValueString()+"\x00"+m.Reason.ValueString() {
			continue
		}
		diags.AddAttributeWarning(path.Root("status").AtMapKey(name), summary, detail)
	}
}

// nodeStatuses reads a status map, by node.
func nodeStatuses(ctx context.Context, status types.Map, diags *diag.Diagnostics) map[string]nodeStatusModel {
	out := map[string]nodeStatusModel{}
	if status.IsNull() || status.IsUnknown() {
		return out
	}
	for name, v := range status.Elements() {
		o, ok := v.(types.Object)
		if !ok || o.IsNull() || o.IsUnknown() {
			continue
		}
		m, d := nodeStatusFrom(ctx, o)
		diags.Append(d...)
		out[name] = m
	}
	return out
}

const (
	nodeHealthPolicyKind = "fleet_node_health_policy"
	// nodeHealthPolicyPlanned marks what a plan of this process warned
	// about when no refresh of it had (-refresh=false, and the apply walk
	// of every apply, a process of its own).
	nodeHealthPolicyPlanned = nodeHealthPolicyKind + "/plan"
)

// warnedBy is what this run's refresh or plan of the policy, in this
// process, warned about: the state and reason of each node (empty when
// neither did).
func (r *nodeHealthPolicyResource) warnedBy(id types.String) map[string]string {
	warned := map[string]string{}
	for _, kind := range []string{nodeHealthPolicyKind, nodeHealthPolicyPlanned} {
		v, _ := r.data.marks.get(r.data.run, kind, id.ValueString())
		m, _ := v.(map[string]string)
		maps.Copy(warned, m)
	}
	return warned
}

// warnedAbout is what warnNodes warns about in a status map, as warnedBy
// keeps it.
func warnedAbout(ctx context.Context, status types.Map, diags *diag.Diagnostics) map[string]string {
	out := map[string]string{}
	for name, m := range nodeStatuses(ctx, status, diags) {
		out[name] = m.State.ValueString() + "\x00" + m.Reason.ValueString()
	}
	return out
}

// evaluate evaluates every node of the policy in m and advances the
// records of prior (nil at create) into m's status and summaries. clears
// are the nodes whose clear_errors entry this apply adds or changes.
func (r *nodeHealthPolicyResource) evaluate(ctx context.Context, m *nodeHealthPolicyModel, prior types.Map, clears, warned map[string]string, diags *diag.Diagnostics) bool {
	p, _ := r.compile(ctx, m.policyInputs, diags)
	if diags.HasError() {
		return false
	}
	logPlanned(ctx, p)
	reports, err := r.data.health.Evaluate(ctx, p, nil)
	if err != nil {
		diags.AddError("Node health not evaluated", fmt.Sprintf("fleet_node_health_policy %q: %s. Nothing was recorded; run again.", m.Name.ValueString(), err))
		return false
	}
	priorElems := map[string]attr.Value{}
	if !prior.IsNull() && !prior.IsUnknown() {
		priorElems = prior.Elements()
	}
	status := map[string]attr.Value{}
	states := map[string]health.State{}
	for _, rep := range reports {
		var prev *health.Record
		if o, ok := priorElems[rep.Node].(types.Object); ok {
			var d diag.Diagnostics
			prev, d = nodeRecordFrom(ctx, o)
			diags.Append(d...)
		}
		var clearNote *string
		if note, ok := clears[rep.Node]; ok {
			clearNote = &note
		}
		rec, result, err := health.Advance(prev, rep, p, clearNote, int(m.AutoClearAfter.ValueInt64()), m.Generation.ValueInt64())
		if err != nil {
			diags.AddError("Node health record not updated", fmt.Sprintf("node %s: %s; this is a bug in the provider", rep.Node, err))
			return false
		}
		if result == health.ClearRefused {
			diags.AddAttributeWarning(path.Root("clear_errors").AtMapKey(rep.Node), "Clear of node "+rep.Node+" not applied",
				fmt.Sprintf("The checks of node %s still fail, so its error stands: %s\nChange the note in clear_errors[%q] again once they pass.", rep.Node, rec.Reason, rep.Node))
		}
		tflog.Debug(ctx, "node evaluated", map[string]any{"node": rep.Node, "state": string(rec.State), "reason": rec.Reason})
		v := nodeStatusValue(p, rep, rec)
		if o, ok := priorElems[rep.Node].(types.Object); ok && settled(o, v) {
			v = o // what the refresh found is what state says: nothing is written
		}
		status[rep.Node] = v
		states[rep.Node] = rec.State
	}
	m.Status = types.MapValueMust(nodeStatusType, status)
	m.HealthyNodes, m.SchedulableNodes, m.ErrorNodes, m.MissingNodes = summaries(states)
	warnNodes(ctx, m.Status, warned, diags)
	return true
}

func (r *nodeHealthPolicyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m nodeHealthPolicyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.decode(ctx, nil)
	id, err := uuid.NewV7()
	if err != nil {
		resp.Diagnostics.AddError("Cannot generate an ID", err.Error())
		return
	}
	m.ID = types.StringValue(id.String())
	m.Generation = types.Int64Value(1)
	m.Policy = types.StringValue(m.doc(ctx, &resp.Diagnostics).json())
	if !r.evaluate(ctx, &m, types.MapNull(nodeStatusType), nil, nil, &resp.Diagnostics) {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *nodeHealthPolicyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m nodeHealthPolicyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.decode(ctx, nil)
	if !r.evaluate(ctx, &m, m.Status, nil, nil, &resp.Diagnostics) {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	r.data.refreshed(nodeHealthPolicyKind, m.ID.ValueString(), warnedAbout(ctx, m.Status, &resp.Diagnostics))
	resp.Diagnostics.Append(dropLegacyMark(ctx, req.Private, resp.Private)...)
}

// Update records what the plan made of the policy's records (planStatus):
// the apply observes nothing itself. A plan that could not make them (an
// input known only at apply) leaves the apply to evaluate every node.
func (r *nodeHealthPolicyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, prior nodeHealthPolicyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.decode(ctx, nil)
	prior.decode(ctx, nil)
	m.ID = prior.ID
	m.Policy = types.StringValue(m.doc(ctx, &resp.Diagnostics).json())
	// What this run's refresh or plan warned about is not warned about again.
	warned := r.warnedBy(prior.ID)
	if m.Status.IsUnknown() {
		if !r.evaluate(ctx, &m, prior.Status, changedClears(m.ClearErrors, prior.ClearErrors), warned, &resp.Diagnostics) {
			return
		}
	} else {
		warnNodes(ctx, m.Status, warned, &resp.Diagnostics)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// warnDroppedErrors warns when a node in error leaves the policy: its
// sticky record goes with it, and a node added under another name starts
// without it.
func warnDroppedErrors(ctx context.Context, prior types.Map, planned types.Map, diags *diag.Diagnostics) {
	if planned.IsNull() || planned.IsUnknown() {
		return
	}
	for name, m := range nodeStatuses(ctx, prior, diags) {
		if _, kept := planned.Elements()[name]; kept || m.State.ValueString() != string(health.StateError) {
			continue
		}
		diags.AddAttributeWarning(path.Root("nodes"), "Node "+name+" leaves the policy in error",
			fmt.Sprintf("Node %s is in error and is no longer in nodes: its error record is dropped with it. "+
				"Error memory belongs to a node's name, so the same machine added under another name starts without it. Its last reason: %s",
				name, m.Reason.ValueString()))
	}
}

// samePolicy reports whether two fully known policies say the same once
// durations are read and defaults applied.
func samePolicy(ctx context.Context, a, b policyInputs) bool {
	var diags diag.Diagnostics
	pa, errsA := a.doc(ctx, &diags).policy(connectionDefaults{}, nil)
	pb, errsB := b.doc(ctx, &diags).policy(connectionDefaults{}, nil)
	if diags.HasError() || len(errsA) > 0 || len(errsB) > 0 {
		return false
	}
	na, nb := a.doc(ctx, &diags), b.doc(ctx, &diags)
	na.ProbeTimeout, nb.ProbeTimeout = pa.ProbeTimeout.String(), pb.ProbeTimeout.String()
	na.WriteProbeInterval, nb.WriteProbeInterval = pa.WriteProbeInterval.String(), pb.WriteProbeInterval.String()
	return na.json() == nb.json()
}

// changedClears are the clear_errors entries added or changed.
func changedClears(planned, prior types.Map) map[string]string {
	out := map[string]string{}
	old := map[string]attr.Value{}
	if !prior.IsNull() && !prior.IsUnknown() {
		old = prior.Elements()
	}
	if planned.IsNull() || planned.IsUnknown() {
		return out
	}
	for name, v := range planned.Elements() {
		if was, ok := old[name]; ok && was.Equal(v) {
			continue
		}
		if s, ok := v.(types.String); ok && !s.IsNull() && !s.IsUnknown() {
			out[name] = s.ValueString()
		}
	}
	return out
}

func (r *nodeHealthPolicyResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {
	// Nothing lives outside state: markers and heartbeat files on the nodes
	// are the checks' own and stay.
}

// nodeHealthPolicyModelV0 is the state of schema version 0, whose nested
// inputs were typed maps.
type nodeHealthPolicyModelV0 struct {
	ID                 types.String `tfsdk:"id"`
	Name               types.String `tfsdk:"name"`
	StorageRoot        types.String `tfsdk:"storage_root"`
	ProbeTimeout       types.String `tfsdk:"probe_timeout"`
	WriteProbeInterval types.String `tfsdk:"write_probe_interval"`
	Checks             types.Map    `tfsdk:"checks"`
	ObjectTypes        types.Map    `tfsdk:"object_types"`
	Roles              types.Map    `tfsdk:"roles"`
	Nodes              types.Map    `tfsdk:"nodes"`
	policyState
}

// UpgradeState turns a version 0 state's nested inputs into the values a
// configuration writes (objects holding the keys that were set), so that
// a configuration unchanged since plans no change.
func (r *nodeHealthPolicyResource) UpgradeState(context.Context) map[int64]resource.StateUpgrader {
	prior := r.schema(0)
	return map[int64]resource.StateUpgrader{0: {PriorSchema: &prior,
		StateUpgrader: func(ctx context.Context, req resource.UpgradeStateRequest, resp *resource.UpgradeStateResponse) {
			var old nodeHealthPolicyModelV0
			resp.Diagnostics.Append(req.State.Get(ctx, &old)...)
			if resp.Diagnostics.HasError() {
				return
			}
			m := nodeHealthPolicyModel{ID: old.ID, Name: old.Name, policyState: old.policyState,
				policyInputs: policyInputs{StorageRoot: old.StorageRoot, ProbeTimeout: old.ProbeTimeout, WriteProbeInterval: old.WriteProbeInterval,
					ChecksInput: writtenValue(old.Checks), ObjectTypesInput: writtenValue(old.ObjectTypes),
					RolesInput: writtenValue(old.Roles), NodesInput: writtenValue(old.Nodes)}}
			resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
		}}}
}
