package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/health"
)

var (
	_ datasource.DataSourceWithConfigure      = (*nodeHealthDataSource)(nil)
	_ datasource.DataSourceWithValidateConfig = (*nodeHealthDataSource)(nil)
)

func newNodeHealthDataSource() datasource.DataSource { return &nodeHealthDataSource{} }

type nodeHealthDataSource struct{ data *providerData }

type nodeHealthDataModel struct {
	Policy types.String `tfsdk:"policy"`
	policyInputs
	Status           types.Map  `tfsdk:"status"`
	HealthyNodes     types.List `tfsdk:"healthy_nodes"`
	SchedulableNodes types.List `tfsdk:"schedulable_nodes"`
	ErrorNodes       types.List `tfsdk:"error_nodes"`
	MissingNodes     types.List `tfsdk:"missing_nodes"`
}

func (d *nodeHealthDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node_health"
}

func (d *nodeHealthDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := dataSourcePolicyAttributes()
	nodes := policyNodesInput.attribute(false, policyDesc("nodes")+
		" With `policy`, the nodes to evaluate instead of the policy's own (a subset, say); without `policy`, required.")
	attrs["nodes"] = schema.DynamicAttribute{Optional: true, MarkdownDescription: nodes.MarkdownDescription}
	attrs["policy"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "A policy document: `fleet_node_health_policy.<name>.policy`. Excludes `checks`, `object_types`, `roles`, `storage_root`, `probe_timeout` and `write_probe_interval`. " +
			"A data source that reads a resource with pending changes is read only at apply, so feed `for_each` from the inline attributes built from variables instead (see the wiring guide)."}
	summary := func(what string) schema.ListAttribute {
		return schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Names of the nodes " + what + ", sorted."}
	}
	attrs["status"] = schema.MapNestedAttribute{Computed: true, MarkdownDescription: "Per node, its health now. Without memory: a node is `error` exactly while a check fails (`error_since`, `last_clear` and `healthy_streak` stay empty).",
		NestedObject: schema.NestedAttributeObject{Attributes: dataSourceNodeStatusAttributes()}}
	attrs["healthy_nodes"] = summary("in state `healthy`")
	attrs["schedulable_nodes"] = summary("that may take work: `healthy` or `degraded`")
	attrs["error_nodes"] = summary("in state `error`")
	attrs["missing_nodes"] = summary("that could not be evaluated (not reached, or their checks could not run)")
	resp.Schema = schema.Schema{
		MarkdownDescription: "Evaluates a node health policy now, during plan, and returns each node's health and the summaries: the feed for other modules " +
			"(a scheduler takes `schedulable_nodes`, a deployment holds back `error_nodes`). The policy is given inline, with the same attributes as `fleet_node_health_policy`, " +
			"or as that resource's `policy` document.",
		Attributes: attrs,
	}
}

func (d *nodeHealthDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.data = configuredData(req.ProviderData, &resp.Diagnostics)
}

var policyOnlyAttributes = []string{"checks", "object_types", "roles", "storage_root", "probe_timeout", "write_probe_interval"}

func (d *nodeHealthDataSource) ValidateConfig(ctx context.Context, req datasource.ValidateConfigRequest, resp *datasource.ValidateConfigResponse) {
	var m nodeHealthDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !m.Policy.IsNull() {
		for _, name := range policyOnlyAttributes {
			var v attr.Value
			resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root(name), &v)...)
			if v != nil && !v.IsNull() {
				resp.Diagnostics.AddAttributeError(path.Root(name), "Conflicting policy",
					fmt.Sprintf("%s is part of the policy document given in policy: give the policy inline or as a document, not both.", name))
			}
		}
		return
	}
	for _, name := range []string{"checks", "object_types", "roles", "nodes"} {
		var v attr.Value
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root(name), &v)...)
		if v != nil && v.IsNull() {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Missing policy attribute",
				name+" is required unless the policy is given as a document in policy (fleet_node_health_policy.<name>.policy).")
		}
	}
	if !resp.Diagnostics.HasError() {
		m.decode(ctx, &resp.Diagnostics)
	}
	if !resp.Diagnostics.HasError() {
		validatePolicyInputs(ctx, m.policyInputs, &resp.Diagnostics)
	}
}

func (d *nodeHealthDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m nodeHealthDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Parts known only now are checked now; validate checked the rest.
	if m.decode(ctx, &resp.Diagnostics); resp.Diagnostics.HasError() {
		return
	}
	var doc policyDoc
	if !m.Policy.IsNull() {
		var err error
		if doc, err = parsePolicyDoc(m.Policy.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("policy"), "Invalid policy", err.Error())
			return
		}
		if !m.Nodes.IsNull() {
			doc.Nodes = nodesDoc(ctx, m.Nodes, &resp.Diagnostics)
		}
	} else {
		doc = m.doc(ctx, &resp.Diagnostics)
	}
	p, errs := doc.policy(d.data.defaults, func(n health.Node) error { return d.data.prober.Dialer.Check(n.Target) })
	for _, e := range errs {
		at := e.where()
		if !m.Policy.IsNull() && !nodesPath(at) {
			at = path.Root("policy")
		}
		resp.Diagnostics.AddAttributeError(at, "Invalid node health policy", e.detail())
	}
	if resp.Diagnostics.HasError() {
		return
	}
	logPlanned(ctx, p)
	reports, err := d.data.health.Evaluate(ctx, p, nil)
	if err != nil {
		resp.Diagnostics.AddError("Node health not evaluated", err.Error())
		return
	}
	status := map[string]attr.Value{}
	states := map[string]health.State{}
	for _, rep := range reports {
		rec, err := health.Instant(rep, p, 1)
		if err != nil {
			resp.Diagnostics.AddError("Node health not recorded", fmt.Sprintf("node %s: %s; this is a bug in the provider", rep.Node, err))
			return
		}
		status[rep.Node], states[rep.Node] = nodeStatusValue(p, rep, rec), rec.State
	}
	m.Status = types.MapValueMust(nodeStatusType, status)
	m.HealthyNodes, m.SchedulableNodes, m.ErrorNodes, m.MissingNodes = summaries(states)
	warnNodes(ctx, m.Status, nil, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func nodesPath(p path.Path) bool {
	steps := p.Steps()
	if len(steps) == 0 {
		return false
	}
	name, ok := steps[0].(path.PathStepAttributeName)
	return ok && string(name) == "nodes"
}
