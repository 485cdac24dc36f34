package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/validators"
)

var _ datasource.DataSourceWithConfigure = (*reachabilityDataSource)(nil)

func newReachabilityDataSource() datasource.DataSource { return &reachabilityDataSource{} }

type reachabilityDataSource struct{ data *providerData }

type reachabilityTargetModel struct {
	Name types.String `tfsdk:"name"`
	connectionModel
}

type reachabilityDataModel struct {
	Targets          []reachabilityTargetModel `tfsdk:"targets"`
	Results          types.List                `tfsdk:"results"`
	ReachableNames   types.List                `tfsdk:"reachable_names"`
	UnreachableNames types.List                `tfsdk:"unreachable_names"`
	AllReachable     types.Bool                `tfsdk:"all_reachable"`
}

var resultAttrTypes = map[string]attr.Type{
	"name":           types.StringType,
	"host":           types.StringType,
	"reachable":      types.BoolType,
	"reason":         types.StringType,
	"message":        types.StringType,
	"latency_ms":     types.Int64Type,
	"server_version": types.StringType,
	"checked_at":     timetypes.RFC3339Type{},
}

func (d *reachabilityDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_reachability"
}

func (d *reachabilityDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	target := dataSourceConnectionAttributes()
	target["name"] = schema.StringAttribute{Optional: true, MarkdownDescription: "Name the result is reported under. Required, and unique within `targets`.",
		Validators: []validator.String{stringvalidator.LengthAtLeast(1)}}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Probes a set of SSH hosts now, during plan, and returns the outcome of each. " +
			"Probes run under the provider's `probe_concurrency`, dispatched in order of `name`, each bounded by the 10 second probe timeout, " +
			"so a pass costs at most `ceil(n / probe_concurrency)` probe timeouts. A data source has no memory: it reports observations, not the hysteresis of `fleet_executor`.",
		Attributes: map[string]schema.Attribute{
			"targets": schema.ListNestedAttribute{
				Required: true,
				MarkdownDescription: "Hosts to probe: a `name` plus the connection fields; `name` and `host` are required in each. " +
					"May be empty: no results, and `all_reachable` is true. " +
					"Feed it from the same values as your executors (a variable or a local), not from the executors themselves: " +
					"a data source that depends on a resource with pending changes is read only at apply, so what it feeds is unknown at plan.",
				NestedObject: schema.NestedAttributeObject{Attributes: target, Validators: []validator.Object{validators.RequiredWhenKnown("name", "host")}},
			},
			"results": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "One result per target, in input order.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":           schema.StringAttribute{Computed: true, MarkdownDescription: "The target's name."},
					"host":           schema.StringAttribute{Computed: true, MarkdownDescription: "The target host (never the bastion)."},
					"reachable":      schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the SSH handshake and authentication succeeded with the pinned host key."},
					"reason":         schema.StringAttribute{Computed: true, MarkdownDescription: "Empty on success, else `config`, `network`, `timeout`, `auth`, `host_key` or `unknown`."},
					"message":        schema.StringAttribute{Computed: true, MarkdownDescription: "The failure, naming host and port (and the bastion when the jump hop failed)."},
					"latency_ms":     schema.Int64Attribute{Computed: true, MarkdownDescription: "Time to connect and complete the handshake, in milliseconds."},
					"server_version": schema.StringAttribute{Computed: true, MarkdownDescription: "The SSH banner of the target, on success."},
					"checked_at":     schema.StringAttribute{Computed: true, CustomType: timetypes.RFC3339Type{}, MarkdownDescription: "When the probe finished (RFC 3339, UTC)."},
				}},
			},
			"reachable_names":   schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Names of the reachable targets, in input order."},
			"unreachable_names": schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Names of the unreachable targets, in input order."},
			"all_reachable":     schema.BoolAttribute{Computed: true, MarkdownDescription: "True when every target is reachable."},
		},
	}
}

func (d *reachabilityDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.data = configuredData(req.ProviderData, &resp.Diagnostics)
}

func (d *reachabilityDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m reachabilityDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	names := make([]string, len(m.Targets))
	for i, t := range m.Targets {
		names[i] = t.Name.ValueString()
	}
	if err := reachability.CheckNames(names); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("targets"), "Invalid targets", err.Error())
	}
	named := make([]reachability.Named, len(m.Targets))
	for i, t := range m.Targets {
		at := path.Root("targets").AtListIndex(i)
		who := fmt.Sprintf("targets[%d] %q (%s)", i, t.Name.ValueString(), t.Host.ValueString())
		target, err := t.target(d.data.defaults, "")
		if err == nil {
			// A fault no connection is needed to see fails the read, naming
			// the target and attribute, rather than being reported as a probe.
			err = d.data.prober.Dialer.Check(target)
		}
		if err != nil {
			addConfigFault(&resp.Diagnostics, err, at, who)
			continue
		}
		named[i] = reachability.Named{Name: t.Name.ValueString(), Target: target}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	outcomes, err := d.data.prober.ProbeAll(ctx, named)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("targets"), "Invalid targets", err.Error())
		return
	}

	results := make([]attr.Value, len(outcomes))
	reachable, unreachable := []attr.Value{}, []attr.Value{}
	for i, o := range outcomes {
		name := named[i].Name
		if o.Canceled {
			resp.Diagnostics.AddError("Reachability probe interrupted", fmt.Sprintf("the probe of %q (%s) was cancelled before it finished; nothing was observed", name, o.Target.Addr()))
			return
		}
		tflog.Debug(ctx, "probed target", map[string]any{"name": name, "host": o.Target.Host, "reason": string(o.Reason), "latency_ms": o.Latency.Milliseconds()})
		results[i] = types.ObjectValueMust(resultAttrTypes, map[string]attr.Value{
			"name":           types.StringValue(name),
			"host":           types.StringValue(o.Target.Host),
			"reachable":      types.BoolValue(o.Reachable()),
			"reason":         types.StringValue(string(o.Reason)),
			"message":        types.StringValue(o.Message),
			"latency_ms":     types.Int64Value(o.Latency.Milliseconds()),
			"server_version": types.StringValue(o.ServerVersion),
			"checked_at":     timestamp(o.CheckedAt),
		})
		if o.Reachable() {
			reachable = append(reachable, types.StringValue(name))
		} else {
			unreachable = append(unreachable, types.StringValue(name))
		}
		if o.BastionKeyAdded != "" {
			resp.Diagnostics.AddWarning("Bastion key trusted on first use",
				fmt.Sprintf("target %q: the jump host key %s was not in known_hosts_file and has been added to it (accept-new). Later dials refuse a different key.", name, o.BastionKeyAdded))
		}
	}
	m.Results = types.ListValueMust(types.ObjectType{AttrTypes: resultAttrTypes}, results)
	m.ReachableNames = types.ListValueMust(types.StringType, reachable)
	m.UnreachableNames = types.ListValueMust(types.StringType, unreachable)
	m.AllReachable = types.BoolValue(len(unreachable) == 0)
	// A data source's arguments are saved in state: the secrets used for this
	// read are not.
	for i := range m.Targets {
		m.Targets[i].PrivateKey = types.StringNull()
		m.Targets[i].PrivateKeyPassphrase = types.StringNull()
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
