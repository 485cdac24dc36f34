package provider

import (
	"context"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// timestampLayout is RFC 3339 in UTC with millisecond precision.
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

func timestamp(t time.Time) timetypes.RFC3339 {
	if t.IsZero() {
		return timetypes.NewRFC3339Null()
	}
	return timetypes.NewRFC3339ValueMust(t.UTC().Format(timestampLayout))
}

func parseTimestamp(v timetypes.RFC3339) time.Time {
	if v.IsNull() || v.IsUnknown() {
		return time.Time{}
	}
	t, diags := v.ValueRFC3339Time()
	if diags.HasError() {
		return time.Time{}
	}
	return t.UTC()
}

// conditionAttrTypes is the shape of one entry of a `conditions` list.
var conditionAttrTypes = map[string]attr.Type{
	"type":                 types.StringType,
	"status":               types.StringType,
	"reason":               types.StringType,
	"message":              types.StringType,
	"last_transition_time": timetypes.RFC3339Type{},
	"observed_generation":  types.Int64Type,
}

var conditionObjectType = types.ObjectType{AttrTypes: conditionAttrTypes}

// A deployment's node records hold their conditions without a generation
// each: the six are always observed together, at the node's last deploy,
// and the record says that generation once (its observed_generation), as
// a resource's status does for its own conditions. A switch that succeeds
// then plans as one changed number, not six.
var nodeConditionAttrTypes = withoutGeneration(conditionAttrTypes)

var nodeConditionObjectType = types.ObjectType{AttrTypes: nodeConditionAttrTypes}

func withoutGeneration(m map[string]attr.Type) map[string]attr.Type {
	out := map[string]attr.Type{}
	for k, v := range m {
		if k != "observed_generation" {
			out[k] = v
		}
	}
	return out
}

func conditionsAttribute(kinds string) rschema.ListNestedAttribute {
	a := nodeConditionsAttribute(kinds)
	a.NestedObject.Attributes["observed_generation"] = rschema.Int64Attribute{Computed: true, MarkdownDescription: "The `generation` this condition was observed at."}
	return a
}

// nodeConditionsAttribute is a deployment node's conditions, whose
// generation their record holds.
func nodeConditionsAttribute(kinds string) rschema.ListNestedAttribute {
	return rschema.ListNestedAttribute{
		Computed: true,
		MarkdownDescription: "Kubernetes-style conditions (metav1.Condition), always in the fixed order " + kinds +
			". `last_transition_time` changes only when `status` changes.",
		NestedObject: rschema.NestedAttributeObject{Attributes: map[string]rschema.Attribute{
			"type":                 rschema.StringAttribute{Computed: true, MarkdownDescription: "Condition type, CamelCase."},
			"status":               rschema.StringAttribute{Computed: true, MarkdownDescription: "`True`, `False` or `Unknown`."},
			"reason":               rschema.StringAttribute{Computed: true, MarkdownDescription: "Machine-readable CamelCase reason, e.g. `HostKeyMismatch`."},
			"message":              rschema.StringAttribute{Computed: true, MarkdownDescription: "Human-readable message naming the host."},
			"last_transition_time": rschema.StringAttribute{Computed: true, CustomType: timetypes.RFC3339Type{}, MarkdownDescription: "When `status` last changed (RFC 3339, UTC)."},
		}},
	}
}

func conditionsValue(cs []conditions.Condition) types.List {
	return conditionsList(cs, true, false)
}

// nodeConditionsValue is a deployment node's conditions (no generation
// each); planned, a time not known yet (zero) is unknown.
func nodeConditionsValue(cs []conditions.Condition, planned bool) types.List {
	return conditionsList(cs, false, planned)
}

func conditionsList(cs []conditions.Condition, generation, planned bool) types.List {
	typ := conditionObjectType
	if !generation {
		typ = nodeConditionObjectType
	}
	elems := make([]attr.Value, 0, len(cs))
	for _, c := range cs {
		t := timestamp(c.LastTransitionTime)
		if planned && c.LastTransitionTime.IsZero() {
			t = timetypes.NewRFC3339Unknown()
		}
		attrs := map[string]attr.Value{
			"type":                 types.StringValue(c.Type),
			"status":               types.StringValue(string(c.Status)),
			"reason":               types.StringValue(c.Reason),
			"message":              types.StringValue(c.Message),
			"last_transition_time": t,
		}
		if generation {
			attrs["observed_generation"] = types.Int64Value(c.ObservedGeneration)
		}
		elems = append(elems, types.ObjectValueMust(typ.AttrTypes, attrs))
	}
	return types.ListValueMust(typ, elems)
}

// nodeConditionModel is a condition in state but its generation, which a
// deployment node's record holds for all its conditions.
type nodeConditionModel struct {
	Type               types.String      `tfsdk:"type"`
	Status             types.String      `tfsdk:"status"`
	Reason             types.String      `tfsdk:"reason"`
	Message            types.String      `tfsdk:"message"`
	LastTransitionTime timetypes.RFC3339 `tfsdk:"last_transition_time"`
}

type conditionModel struct {
	nodeConditionModel
	ObservedGeneration types.Int64 `tfsdk:"observed_generation"`
}

func (m nodeConditionModel) condition(gen types.Int64) conditions.Condition {
	return conditions.Condition{
		Type: m.Type.ValueString(), Status: conditions.Status(m.Status.ValueString()),
		Reason: m.Reason.ValueString(), Message: m.Message.ValueString(),
		LastTransitionTime: parseTimestamp(m.LastTransitionTime), ObservedGeneration: gen.ValueInt64(),
	}
}

func conditionsFrom(ctx context.Context, l types.List) ([]conditions.Condition, diag.Diagnostics) {
	if l.IsNull() || l.IsUnknown() {
		return nil, nil
	}
	var ms []conditionModel
	diags := l.ElementsAs(ctx, &ms, false)
	out := make([]conditions.Condition, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.condition(m.ObservedGeneration))
	}
	return out, diags
}

// nodeConditionsFrom reads a deployment node's conditions, each at the
// generation gen its record holds.
func nodeConditionsFrom(ctx context.Context, l types.List, gen types.Int64) ([]conditions.Condition, diag.Diagnostics) {
	if l.IsNull() || l.IsUnknown() {
		return nil, nil
	}
	var ms []nodeConditionModel
	diags := l.ElementsAs(ctx, &ms, false)
	out := make([]conditions.Condition, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.condition(gen))
	}
	return out, diags
}

// recordAttrTypes is the shape of an executor's `reachability` attribute.
var recordAttrTypes = map[string]attr.Type{
	"state":                types.StringType,
	"reason":               types.StringType,
	"message":              types.StringType,
	"consecutive_failures": types.Int64Type,
	"host":                 types.StringType,
	"checked_at":           timetypes.RFC3339Type{},
	"last_success_at":      timetypes.RFC3339Type{},
	"stale":                types.BoolType,
}

func recordAttribute() rschema.SingleNestedAttribute {
	return rschema.SingleNestedAttribute{
		Computed:            true,
		MarkdownDescription: "The reachability record: what the last probes found, kept in state between runs.",
		Attributes: map[string]rschema.Attribute{
			"state": rschema.StringAttribute{Computed: true, MarkdownDescription: "`unknown` (not probed since created or since its connection changed), `reachable` or `unreachable`. " +
				"A sticky failure (`config`, `host_key`) makes the host unreachable at once; a transient one only on the second failure in a row. One success makes it reachable."},
			"reason": rschema.StringAttribute{Computed: true, MarkdownDescription: "Why the last probe failed: `config`, `network`, `timeout`, `auth`, `host_key` or `unknown`; empty after a success. " +
				"A reason under `reachable` or `unknown` is a failure below the threshold."},
			"message": rschema.StringAttribute{Computed: true, MarkdownDescription: "The last failure, naming host and port (and the bastion when the jump hop failed); empty after a success."},
			"consecutive_failures": rschema.Int64Attribute{Computed: true, MarkdownDescription: "Failed probes in a row, counted up to 2, where a transient failure makes the host unreachable. " +
				"How long it has been unreachable is the `Reachable` condition's `last_transition_time`."},
			"host": rschema.StringAttribute{Computed: true, MarkdownDescription: "The target host the record is about (never the bastion)."},
			"checked_at": rschema.StringAttribute{Computed: true, CustomType: timetypes.RFC3339Type{},
				MarkdownDescription: "When the record last changed: the probe that first saw what it holds (RFC 3339, UTC); null until the first probe. " +
					"A probe that finds what the record says writes nothing, so a refresh that observes nothing new leaves state exactly as it was and drift detection stays quiet; " +
					"whether this run probed the host is in its warnings."},
			"last_success_at": rschema.StringAttribute{Computed: true, CustomType: timetypes.RFC3339Type{},
				MarkdownDescription: "When a successful probe last changed the record (the host became reachable, or recovered from failures), host key and authentication checked; " +
					"null until the first such success, and cleared only when the connection changes. A success that only confirms a reachable record does not move it, " +
					"nor does one that could not authenticate (write-only credentials)."},
			"stale": rschema.BoolAttribute{Computed: true,
				DeprecationMessage: "Always false: a probe that confirms a record writes nothing, so whether a record is stale is decided by the run that reads it, in its warnings.",
				MarkdownDescription: "Always false. A probe that confirms the record writes nothing (so that drift detection sees no change), so the record's age says nothing of when the host was last looked at: " +
					"a run that did not probe the host and finds its record older than three probe intervals says so in its warnings instead."},
		},
	}
}

type recordModel struct {
	State               types.String      `tfsdk:"state"`
	Reason              types.String      `tfsdk:"reason"`
	Message             types.String      `tfsdk:"message"`
	ConsecutiveFailures types.Int64       `tfsdk:"consecutive_failures"`
	Host                types.String      `tfsdk:"host"`
	CheckedAt           timetypes.RFC3339 `tfsdk:"checked_at"`
	LastSuccessAt       timetypes.RFC3339 `tfsdk:"last_success_at"`
	Stale               types.Bool        `tfsdk:"stale"`
}

func recordValue(r reachability.Record, stale bool) types.Object {
	return types.ObjectValueMust(recordAttrTypes, map[string]attr.Value{
		"state":                types.StringValue(string(r.State)),
		"reason":               types.StringValue(string(r.Reason)),
		"message":              types.StringValue(r.Message),
		"consecutive_failures": types.Int64Value(int64(r.ConsecutiveFailures)),
		"host":                 types.StringValue(r.Host),
		"checked_at":           timestamp(r.CheckedAt),
		"last_success_at":      timestamp(r.LastSuccessAt),
		"stale":                types.BoolValue(stale),
	})
}

func recordFrom(ctx context.Context, o types.Object) (reachability.Record, bool, diag.Diagnostics) {
	if o.IsNull() || o.IsUnknown() {
		return reachability.Record{}, false, nil
	}
	var m recordModel
	diags := o.As(ctx, &m, objectAsOptions)
	return reachability.Record{
		State:               reachability.State(m.State.ValueString()),
		Reason:              sshdial.Reason(m.Reason.ValueString()),
		Message:             m.Message.ValueString(),
		ConsecutiveFailures: int(m.ConsecutiveFailures.ValueInt64()),
		Host:                m.Host.ValueString(),
		CheckedAt:           parseTimestamp(m.CheckedAt),
		LastSuccessAt:       parseTimestamp(m.LastSuccessAt),
	}, true, diags
}
