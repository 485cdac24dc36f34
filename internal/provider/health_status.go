package provider

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/health"
)

// The per-node status of node health, shared by the resource (which keeps
// it between evaluations) and the data source (which has no memory).

var checkStatusAttrTypes = map[string]attr.Type{
	"id": types.StringType, "kind": types.StringType, "target": types.StringType, "names": types.ListType{ElemType: types.StringType},
	"healthy": types.BoolType, "detail": types.StringType, "tier": types.StringType, "duration_ms": types.Int64Type,
}

var objectTypeStatusAttrTypes = map[string]attr.Type{
	"name": types.StringType, "healthy": types.BoolType, "failed_checks": types.ListType{ElemType: types.StringType},
}

var lastClearAttrTypes = map[string]attr.Type{"note": types.StringType, "at": timetypes.RFC3339Type{}}

var nodeStatusAttrTypes = map[string]attr.Type{
	"state":              types.StringType,
	"reason":             types.StringType,
	"roles":              types.ListType{ElemType: types.StringType},
	"checks":             types.ListType{ElemType: types.ObjectType{AttrTypes: checkStatusAttrTypes}},
	"object_types":       types.ListType{ElemType: types.ObjectType{AttrTypes: objectTypeStatusAttrTypes}},
	"last_heartbeat_at":  types.MapType{ElemType: timetypes.RFC3339Type{}},
	"error_since":        timetypes.RFC3339Type{},
	"last_clear":         types.ObjectType{AttrTypes: lastClearAttrTypes},
	"healthy_streak":     types.Int64Type,
	"unreachable_streak": types.Int64Type,
	"evaluated_at":       timetypes.RFC3339Type{},
	"conditions":         types.ListType{ElemType: conditionObjectType},
}

var nodeStatusType = types.ObjectType{AttrTypes: nodeStatusAttrTypes}

var statusDescriptions = map[string]string{
	"state": "`healthy`, `degraded` (only checks with `severity = \"degraded\"` fail; still schedulable), `error` (a check a hosted object type depends on failed; not schedulable), `missing` (the node could not be reached, or its checks could not run there; never reported as `error`) " +
		"or, in `fleet_node_health_policy` only, `pending` (the node was added by the last apply and is first evaluated by the next refresh; in no summary). " +
		"`fleet_node_health_policy` marks a node `missing` at once for a host key mismatch or a configuration fault, and on the second evaluation in a row for a transient failure; " +
		"after the first it keeps its last state.",
	"reason":            "The state in prose: the node, the role and object types concerned, each failed check's path or target and its cause.",
	"roles":             "The node's roles.",
	"checks":            "Every check the node ran, de-duplicated by identity (kind and resolved target), in order of `id`.",
	"check.id":          "The check's identity: kind and resolved target, e.g. `path:/srv/cloud/blobs`.",
	"check.kind":        "`path`, `command`, `tcp`, `http` or `systemd_unit`.",
	"check.target":      "The resolved target: absolute path, command line, `host:port`, URL or unit.",
	"check.names":       "The keys of `checks` that declare this check.",
	"check.healthy":     "Whether the check passed.",
	"check.detail":      "What the check found: `mounted read-only`, `probe timed out`, `exit 3: ...`.",
	"check.tier":        "Which probe decided: `statvfs` or `heartbeat` for paths, `probe` for other kinds.",
	"check.duration_ms": "How long the probe ran, in milliseconds.",
	"object_types":      "Health of every object type the node's roles host: a type is unhealthy exactly when a check it lists failed.",
	"type.name":         "The object type.",
	"type.healthy":      "Whether every check the type lists passed.",
	"type.failed":       "The keys of the type's failed checks.",
	"last_heartbeat_at": "Per checked path, when a heartbeat write with fsync last succeeded (\"last seen live\").",
	"error_since":       "When the node entered `error`; null otherwise.",
	"last_clear":        "The last clear of the node's error: the `clear_errors` note (or the automatic clear) and when it took effect.",
	"healthy_streak":    "Evaluations in a row with every check passing while the node stays in `error` awaiting a clear.",
	"unreachable_streak": "Evaluations in a row that could not reach the node. `fleet_node_health_policy` marks a node `missing` when this reaches 2 " +
		"(a dropped connection, a timeout, a refused login), or at once for a host key mismatch or a configuration fault; after one transient failure " +
		"the node keeps its last state, with a warning. The data source has no memory: a node it cannot reach is `missing` at once.",
	"evaluated_at": "When the node was last evaluated (RFC 3339, UTC).",
}

func statusDesc(k string) string { return statusDescriptions[k] }

func resourceNodeStatusAttributes() map[string]rschema.Attribute {
	str := func(k string) rschema.StringAttribute {
		return rschema.StringAttribute{Computed: true, MarkdownDescription: statusDesc(k)}
	}
	ts := func(k string) rschema.StringAttribute {
		return rschema.StringAttribute{Computed: true, CustomType: timetypes.RFC3339Type{}, MarkdownDescription: statusDesc(k)}
	}
	return map[string]rschema.Attribute{
		"state": str("state"), "reason": str("reason"),
		"roles": rschema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: statusDesc("roles")},
		"checks": rschema.ListNestedAttribute{Computed: true, MarkdownDescription: statusDesc("checks"), NestedObject: rschema.NestedAttributeObject{Attributes: map[string]rschema.Attribute{
			"id": str("check.id"), "kind": str("check.kind"), "target": str("check.target"),
			"names":   rschema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: statusDesc("check.names")},
			"healthy": rschema.BoolAttribute{Computed: true, MarkdownDescription: statusDesc("check.healthy")},
			"detail":  str("check.detail"), "tier": str("check.tier"),
			"duration_ms": rschema.Int64Attribute{Computed: true, MarkdownDescription: statusDesc("check.duration_ms")},
		}}},
		"object_types": rschema.ListNestedAttribute{Computed: true, MarkdownDescription: statusDesc("object_types"), NestedObject: rschema.NestedAttributeObject{Attributes: map[string]rschema.Attribute{
			"name":          str("type.name"),
			"healthy":       rschema.BoolAttribute{Computed: true, MarkdownDescription: statusDesc("type.healthy")},
			"failed_checks": rschema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: statusDesc("type.failed")},
		}}},
		"last_heartbeat_at": rschema.MapAttribute{Computed: true, ElementType: timetypes.RFC3339Type{}, MarkdownDescription: statusDesc("last_heartbeat_at")},
		"error_since":       ts("error_since"),
		"last_clear": rschema.SingleNestedAttribute{Computed: true, MarkdownDescription: statusDesc("last_clear"), Attributes: map[string]rschema.Attribute{
			"note": rschema.StringAttribute{Computed: true, MarkdownDescription: "The clear's note."},
			"at":   rschema.StringAttribute{Computed: true, CustomType: timetypes.RFC3339Type{}, MarkdownDescription: "When the clear took effect."},
		}},
		"healthy_streak":     rschema.Int64Attribute{Computed: true, MarkdownDescription: statusDesc("healthy_streak")},
		"unreachable_streak": rschema.Int64Attribute{Computed: true, MarkdownDescription: statusDesc("unreachable_streak")},
		"evaluated_at":       ts("evaluated_at"),
		"conditions":         conditionsAttribute("`Evaluated`, `Healthy`, `Schedulable`"),
	}
}

// dataSourceNodeStatusAttributes are the resource's status fields, as a
// data source's: one schema, converted.
func dataSourceNodeStatusAttributes() map[string]dschema.Attribute {
	return nestedForDataSource(resourceNodeStatusAttributes())
}

func stringList(s []string) types.List {
	elems := make([]attr.Value, len(s))
	for i, v := range s {
		elems[i] = types.StringValue(v)
	}
	return types.ListValueMust(types.StringType, elems)
}

// nodeStatusValue is a node's record as the status object.
func nodeStatusValue(p *health.Policy, r health.Report, rec health.Record) types.Object {
	checks := make([]attr.Value, len(r.Planned))
	for i, pl := range r.Planned {
		res := r.Results[i]
		checks[i] = types.ObjectValueMust(checkStatusAttrTypes, map[string]attr.Value{
			"id": types.StringValue(pl.ID), "kind": types.StringValue(pl.Check.Kind()), "target": types.StringValue(pl.Check.Target()),
			"names": stringList(pl.Names), "healthy": types.BoolValue(res.Healthy), "detail": types.StringValue(res.Detail),
			"tier": types.StringValue(res.Tier), "duration_ms": types.Int64Value(res.Duration.Milliseconds()),
		})
	}
	var typesOut []attr.Value
	if r.Reached {
		for _, th := range r.Types(p) {
			typesOut = append(typesOut, types.ObjectValueMust(objectTypeStatusAttrTypes, map[string]attr.Value{
				"name": types.StringValue(th.Name), "healthy": types.BoolValue(th.Healthy), "failed_checks": stringList(th.FailedChecks),
			}))
		}
	}
	if !r.Reached {
		checks = []attr.Value{} // nothing ran
	}
	hb := map[string]attr.Value{}
	for k, v := range rec.Heartbeats {
		hb[k] = timestamp(v)
	}
	lastClear := types.ObjectNull(lastClearAttrTypes)
	if rec.LastClear != nil {
		lastClear = types.ObjectValueMust(lastClearAttrTypes, map[string]attr.Value{"note": types.StringValue(rec.LastClear.Note), "at": timestamp(rec.LastClear.At)})
	}
	conds := conditionsValue(rec.Conditions)
	return types.ObjectValueMust(nodeStatusAttrTypes, map[string]attr.Value{
		"state": types.StringValue(string(rec.State)), "reason": types.StringValue(rec.Reason), "roles": stringList(r.Roles),
		"checks":             types.ListValueMust(types.ObjectType{AttrTypes: checkStatusAttrTypes}, checks),
		"object_types":       types.ListValueMust(types.ObjectType{AttrTypes: objectTypeStatusAttrTypes}, orEmpty(typesOut)),
		"last_heartbeat_at":  types.MapValueMust(timetypes.RFC3339Type{}, hb),
		"error_since":        timestamp(rec.ErrorSince),
		"last_clear":         lastClear,
		"healthy_streak":     types.Int64Value(int64(rec.HealthyStreak)),
		"unreachable_streak": types.Int64Value(int64(rec.UnreachableStreak)),
		"evaluated_at":       timestamp(r.EvaluatedAt),
		"conditions":         conds,
	})
}

// settled reports whether a node's new status says what its prior one
// says, whenever and however long it was looked at: then the prior one
// stands, times included, and a refresh that observes nothing new leaves
// state as it was (drift detection stays quiet). Left out of the
// comparison: when the node was evaluated, how long each probe took,
// which tier decided a passing path check (a heartbeat is written every
// write_probe_interval, statvfs suffices between) and its words for
// passing, the heartbeat times, which move at every heartbeat written,
// and the generation the conditions were observed at: a record that a
// policy change (another node's, another check's) leaves as it was keeps
// the generation it last changed at.
func settled(prior, next types.Object) bool {
	if prior.IsNull() || prior.IsUnknown() {
		return false
	}
	return lookedAtOnly(prior).Equal(lookedAtOnly(next))
}

// lookedAtOnly is a status with what describes the look itself blanked.
func lookedAtOnly(o types.Object) types.Object {
	attrs := maps.Clone(o.Attributes())
	attrs["evaluated_at"] = timetypes.NewRFC3339Null()
	attrs["last_heartbeat_at"] = types.MapNull(timetypes.RFC3339Type{})
	if l, ok := attrs["checks"].(types.List); ok && !l.IsNull() && !l.IsUnknown() {
		var checks []attr.Value
		for _, c := range l.Elements() {
			co, ok := c.(types.Object)
			if !ok || co.IsNull() || co.IsUnknown() {
				checks = append(checks, c)
				continue
			}
			checks = append(checks, lookedAtCheck(co))
		}
		attrs["checks"] = types.ListValueMust(types.ObjectType{AttrTypes: checkStatusAttrTypes}, orEmpty(checks))
	}
	if l, ok := attrs["conditions"].(types.List); ok && !l.IsNull() && !l.IsUnknown() {
		var conds []attr.Value
		for _, c := range l.Elements() {
			co, ok := c.(types.Object)
			if !ok || co.IsNull() || co.IsUnknown() {
				conds = append(conds, c)
				continue
			}
			ca := maps.Clone(co.Attributes())
			ca["observed_generation"] = types.Int64Null()
			conds = append(conds, types.ObjectValueMust(co.AttributeTypes(context.Background()), ca))
		}
		attrs["conditions"] = types.ListValueMust(l.ElementType(context.Background()), orEmpty(conds))
	}
	return types.ObjectValueMust(nodeStatusAttrTypes, attrs)
}

// lookedAtCheck is a check's status with what describes the look itself
// blanked: how long it took, and a passing check's tier and words.
func lookedAtCheck(co types.Object) types.Object {
	ca := maps.Clone(co.Attributes())
	ca["duration_ms"] = types.Int64Null()
	if h, _ := ca["healthy"].(types.Bool); h.ValueBool() {
		ca["tier"], ca["detail"] = types.StringNull(), types.StringNull()
	}
	return types.ObjectValueMust(checkStatusAttrTypes, ca)
}

// orEmpty is v, or an empty slice for nil: state tells a null list from an
// empty one.
func orEmpty[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// nodeStatusModel is one status entry read back from state.
type nodeStatusModel struct {
	State           types.String      `tfsdk:"state"`
	Reason          types.String      `tfsdk:"reason"`
	Roles           types.List        `tfsdk:"roles"`
	Checks          types.List        `tfsdk:"checks"`
	ObjectTypes     types.List        `tfsdk:"object_types"`
	LastHeartbeatAt types.Map         `tfsdk:"last_heartbeat_at"`
	ErrorSince      timetypes.RFC3339 `tfsdk:"error_since"`
	LastClear       *lastClearModel   `tfsdk:"last_clear"`
	HealthyStreak   types.Int64       `tfsdk:"healthy_streak"`
	// UnreachableStreak is null in a status written before it existed.
	UnreachableStreak types.Int64       `tfsdk:"unreachable_streak"`
	EvaluatedAt       timetypes.RFC3339 `tfsdk:"evaluated_at"`
	Conditions        types.List        `tfsdk:"conditions"`
}

type lastClearModel struct {
	Note types.String      `tfsdk:"note"`
	At   timetypes.RFC3339 `tfsdk:"at"`
}

func nodeStatusFrom(ctx context.Context, o types.Object) (nodeStatusModel, diag.Diagnostics) {
	var m nodeStatusModel
	diags := o.As(ctx, &m, objectAsOptions)
	return m, diags
}

// nodeRecordFrom reads back what a status object keeps between evaluations.
func nodeRecordFrom(ctx context.Context, o types.Object) (*health.Record, diag.Diagnostics) {
	if o.IsNull() || o.IsUnknown() {
		return nil, nil
	}
	m, diags := nodeStatusFrom(ctx, o)
	if diags.HasError() || health.State(m.State.ValueString()) == health.StatePending {
		return nil, diags // a pending node has no memory yet
	}
	rec := &health.Record{
		State: health.State(m.State.ValueString()), Reason: m.Reason.ValueString(),
		ErrorSince: parseTimestamp(m.ErrorSince), HealthyStreak: int(m.HealthyStreak.ValueInt64()),
		UnreachableStreak: int(m.UnreachableStreak.ValueInt64()),
		Heartbeats:        map[string]time.Time{},
	}
	if m.LastClear != nil {
		rec.LastClear = &health.Clear{Note: m.LastClear.Note.ValueString(), At: parseTimestamp(m.LastClear.At)}
	}
	var hb map[string]timetypes.RFC3339
	diags.Append(m.LastHeartbeatAt.ElementsAs(ctx, &hb, false)...)
	for k, v := range hb {
		rec.Heartbeats[k] = parseTimestamp(v)
	}
	conds, d := conditionsFrom(ctx, m.Conditions)
	diags.Append(d...)
	rec.Conditions = conds
	return rec, diags
}

// logPlanned logs, at debug, what each node is about to run and where: the
// remote command is `sh -s` reading one script of these checks. A policy
// holds no secret.
func logPlanned(ctx context.Context, p *health.Policy) {
	for _, name := range slices.Sorted(maps.Keys(p.Nodes)) {
		n := p.Nodes[name]
		where := "local /bin/sh -s"
		if !n.Local {
			where = "ssh " + n.Target.String() + " sh -s"
		}
		var ids []string
		for _, pl := range p.Plan(name) {
			ids = append(ids, pl.ID)
		}
		tflog.Debug(ctx, "evaluating node", map[string]any{"node": name, "command": where, "checks": ids})
	}
}

// summaries are the sorted lists of node names by state.
func summaries(states map[string]health.State) (healthy, schedulable, errored, missing types.List) {
	s := health.Summarize(states)
	return stringList(s.Healthy), stringList(s.Schedulable), stringList(s.Error), stringList(s.Missing)
}

// nodeWarning is the warning shown for a node in error or missing, or
// that could not be reached and keeps its last state for now; ok is false
// when the node needs no warning.
func nodeWarning(node string, m nodeStatusModel) (summary, detail string, ok bool) {
	state, reason := health.State(m.State.ValueString()), strings.TrimSpace(m.Reason.ValueString())
	switch {
	case state == health.StateError:
		return "Node " + node + " is in error", reason, true
	case state == health.StateMissing:
		return "Node " + node + " is missing", reason, true
	case m.UnreachableStreak.ValueInt64() > 0:
		return "Node " + node + " could not be reached", reason, true
	}
	return "", "", false
}
