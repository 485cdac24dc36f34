package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/health"
)

// A node health policy travels between Terraform and the evaluator as a
// policy document: the resource builds it from its configuration and
// exports it as JSON (`policy`), the data source builds it from its inline
// attributes or reads it from that JSON. One document, one translation into
// health.Policy.

type policyDoc struct {
	StorageRoot        string              `json:"storage_root,omitempty"`
	ProbeTimeout       string              `json:"probe_timeout,omitempty"`
	WriteProbeInterval string              `json:"write_probe_interval,omitempty"`
	Checks             map[string]checkDoc `json:"checks"`
	ObjectTypes        map[string]typeDoc  `json:"object_types"`
	Roles              map[string]roleDoc  `json:"roles"`
	Nodes              map[string]nodeDoc  `json:"nodes"`
}

type checkDoc struct {
	Path        string   `json:"path,omitempty"`
	Command     string   `json:"command,omitempty"`
	TCP         string   `json:"tcp,omitempty"`
	SystemdUnit string   `json:"systemd_unit,omitempty"`
	HTTP        *httpDoc `json:"http,omitempty"`
	Description string   `json:"description,omitempty"`
	Severity    string   `json:"severity,omitempty"`
}

type httpDoc struct {
	URL          string `json:"url"`
	ExpectStatus *int64 `json:"expect_status,omitempty"`
	Retries      *int64 `json:"retries,omitempty"`
}

type typeDoc struct {
	Checks []string `json:"checks"`
}

type roleDoc struct {
	Hosts       []string `json:"hosts"`
	Description string   `json:"description,omitempty"`
}

type nodeDoc struct {
	Roles      []string `json:"roles"`
	Local      bool     `json:"local,omitempty"`
	Connection *connDoc `json:"connection,omitempty"`
}

type connDoc struct {
	Host               string `json:"host"`
	Port               int64  `json:"port,omitempty"`
	User               string `json:"user,omitempty"`
	PrivateKeyFile     string `json:"private_key_file,omitempty"`
	Agent              *bool  `json:"agent,omitempty"`
	HostKeyFingerprint string `json:"host_key_fingerprint,omitempty"`
	ProxyJump          string `json:"proxy_jump,omitempty"`
}

// The HCL shape, shared by the resource and the data source.
type checkModel struct {
	Path        types.String `tfsdk:"path"`
	Command     types.String `tfsdk:"command"`
	TCP         types.String `tfsdk:"tcp"`
	SystemdUnit types.String `tfsdk:"systemd_unit"`
	HTTP        types.Object `tfsdk:"http"`
	Description types.String `tfsdk:"description"`
	Severity    types.String `tfsdk:"severity"`
}

type httpModel struct {
	URL          types.String `tfsdk:"url"`
	ExpectStatus types.Int64  `tfsdk:"expect_status"`
	Retries      types.Int64  `tfsdk:"retries"`
}

type typeModel struct {
	Checks types.List `tfsdk:"checks"`
}

type roleModel struct {
	Hosts       types.List   `tfsdk:"hosts"`
	Description types.String `tfsdk:"description"`
}

type nodeModel struct {
	Roles      types.List   `tfsdk:"roles"`
	Local      types.Bool   `tfsdk:"local"`
	Connection types.Object `tfsdk:"connection"`
}

// policyInputs are the policy attributes as configured.
type policyInputs struct {
	StorageRoot        types.String  `tfsdk:"storage_root"`
	ProbeTimeout       types.String  `tfsdk:"probe_timeout"`
	WriteProbeInterval types.String  `tfsdk:"write_probe_interval"`
	ChecksInput        types.Dynamic `tfsdk:"checks"`
	ObjectTypesInput   types.Dynamic `tfsdk:"object_types"`
	RolesInput         types.Dynamic `tfsdk:"roles"`
	NodesInput         types.Dynamic `tfsdk:"nodes"`

	// The nested inputs, checked and typed by decode.
	Checks      types.Map `tfsdk:"-"`
	ObjectTypes types.Map `tfsdk:"-"`
	Roles       types.Map `tfsdk:"-"`
	Nodes       types.Map `tfsdk:"-"`
}

// decode checks the nested inputs and types them; faults go to diags, nil
// when the inputs were checked before (the apply, the refresh).
func (in *policyInputs) decode(ctx context.Context, diags *diag.Diagnostics) {
	var ignored diag.Diagnostics
	if diags == nil {
		diags = &ignored
	}
	decodeMap := func(n nestedInput, v types.Dynamic) types.Map {
		m, _ := n.decode(ctx, v, diags).(types.Map)
		return m
	}
	in.Checks = decodeMap(policyChecksInput, in.ChecksInput)
	in.ObjectTypes = decodeMap(policyObjectTypesInput, in.ObjectTypesInput)
	in.Roles = decodeMap(policyRolesInput, in.RolesInput)
	in.Nodes = decodeMap(policyNodesInput, in.NodesInput)
}

// values are the inputs that change what is observed, in a fixed order.
func (in policyInputs) values() []attr.Value {
	return []attr.Value{in.StorageRoot, in.ProbeTimeout, in.WriteProbeInterval, in.Checks, in.ObjectTypes, in.Roles, in.Nodes}
}

// known reports whether every input is known, to the last nested value.
func (in policyInputs) known() bool {
	for _, v := range in.values() {
		if !fullyKnown(v) {
			return false
		}
	}
	return true
}

func stringsOf(ctx context.Context, l types.List, diags *diag.Diagnostics) []string {
	out := []string{}
	if l.IsNull() || l.IsUnknown() {
		return out
	}
	diags.Append(l.ElementsAs(ctx, &out, false)...)
	return out
}

// doc builds the policy document from known inputs; unknown parts are left
// out (callers only evaluate fully known inputs).
func (in policyInputs) doc(ctx context.Context, diags *diag.Diagnostics) policyDoc {
	d := policyDoc{
		StorageRoot: in.StorageRoot.ValueString(), ProbeTimeout: in.ProbeTimeout.ValueString(), WriteProbeInterval: in.WriteProbeInterval.ValueString(),
		Checks: map[string]checkDoc{}, ObjectTypes: map[string]typeDoc{}, Roles: map[string]roleDoc{}, Nodes: map[string]nodeDoc{},
	}
	var checks map[string]checkModel
	if !in.Checks.IsNull() && !in.Checks.IsUnknown() {
		diags.Append(in.Checks.ElementsAs(ctx, &checks, false)...)
	}
	for name, c := range checks {
		cd := checkDoc{Path: c.Path.ValueString(), Command: c.Command.ValueString(), TCP: c.TCP.ValueString(), SystemdUnit: c.SystemdUnit.ValueString(),
			Description: c.Description.ValueString(), Severity: c.Severity.ValueString()}
		if !c.HTTP.IsNull() && !c.HTTP.IsUnknown() {
			var h httpModel
			diags.Append(c.HTTP.As(ctx, &h, objectAsOptions)...)
			cd.HTTP = &httpDoc{URL: h.URL.ValueString(), ExpectStatus: h.ExpectStatus.ValueInt64Pointer(), Retries: h.Retries.ValueInt64Pointer()}
		}
		d.Checks[name] = cd
	}
	var typesIn map[string]typeModel
	if !in.ObjectTypes.IsNull() && !in.ObjectTypes.IsUnknown() {
		diags.Append(in.ObjectTypes.ElementsAs(ctx, &typesIn, false)...)
	}
	for name, t := range typesIn {
		d.ObjectTypes[name] = typeDoc{Checks: stringsOf(ctx, t.Checks, diags)}
	}
	var roles map[string]roleModel
	if !in.Roles.IsNull() && !in.Roles.IsUnknown() {
		diags.Append(in.Roles.ElementsAs(ctx, &roles, false)...)
	}
	for name, r := range roles {
		d.Roles[name] = roleDoc{Hosts: stringsOf(ctx, r.Hosts, diags), Description: r.Description.ValueString()}
	}
	d.Nodes = nodesDoc(ctx, in.Nodes, diags)
	return d
}

func nodesDoc(ctx context.Context, m types.Map, diags *diag.Diagnostics) map[string]nodeDoc {
	out := map[string]nodeDoc{}
	var nodes map[string]nodeModel
	if !m.IsNull() && !m.IsUnknown() {
		diags.Append(m.ElementsAs(ctx, &nodes, false)...)
	}
	for name, n := range nodes {
		nd := nodeDoc{Roles: stringsOf(ctx, n.Roles, diags), Local: n.Local.ValueBool()}
		if !n.Connection.IsNull() && !n.Connection.IsUnknown() {
			var c connectionModel
			attrs := n.Connection.Attributes()
			c.Host, _ = attrs["host"].(types.String)
			c.Port, _ = attrs["port"].(types.Int64)
			c.User, _ = attrs["user"].(types.String)
			c.PrivateKeyFile, _ = attrs["private_key_file"].(types.String)
			c.Agent, _ = attrs["agent"].(types.Bool)
			c.HostKeyFingerprint, _ = attrs["host_key_fingerprint"].(types.String)
			c.ProxyJump, _ = attrs["proxy_jump"].(types.String)
			nd.Connection = &connDoc{Host: c.Host.ValueString(), Port: c.Port.ValueInt64(), User: c.User.ValueString(),
				PrivateKeyFile: c.PrivateKeyFile.ValueString(), Agent: c.Agent.ValueBoolPointer(),
				HostKeyFingerprint: c.HostKeyFingerprint.ValueString(), ProxyJump: c.ProxyJump.ValueString()}
		}
		out[name] = nd
	}
	return out
}

// json is the document as exported: stable (Go sorts map keys) and compact.
func (d policyDoc) json() string {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err) // only strings, numbers and maps of them
	}
	return string(b)
}

func parsePolicyDoc(s string) (policyDoc, error) {
	var d policyDoc
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return d, fmt.Errorf("not a policy document (export it with fleet_node_health_policy.<name>.policy): %w", err)
	}
	return d, nil
}

// connection is the node's connection as the shared connection model.
func (c *connDoc) model() connectionModel {
	m := connectionModel{
		Host: types.StringValue(c.Host), Port: types.Int64Null(), User: types.StringNull(),
		PrivateKey: types.StringNull(), PrivateKeyPassphrase: types.StringNull(), PrivateKeyFile: types.StringNull(),
		Agent: types.BoolPointerValue(c.Agent), HostKeyFingerprint: types.StringNull(), ProxyJump: types.StringNull(),
	}
	if c.Port != 0 {
		m.Port = types.Int64Value(c.Port)
	}
	set := func(dst *types.String, v string) {
		if v != "" {
			*dst = types.StringValue(v)
		}
	}
	set(&m.User, c.User)
	set(&m.PrivateKeyFile, c.PrivateKeyFile)
	set(&m.HostKeyFingerprint, c.HostKeyFingerprint)
	set(&m.ProxyJump, c.ProxyJump)
	return m
}

// policyError is a fault of a policy document at an attribute path.
type policyError struct {
	at  path.Path
	msg string
}

// detail is the message with the attribute it concerns, spelled as in
// HCL: the CLIs do not point at a key inside a map of objects.
func (e policyError) detail() string { return e.at.String() + ": " + e.msg }

// where is the attribute the CLIs highlight: the top-level one. Given a
// path into a map of objects written as an HCL object, they highlight
// another attribute altogether.
func (e policyError) where() path.Path {
	if steps := e.at.Steps(); len(steps) > 0 {
		if name, ok := steps[0].(path.PathStepAttributeName); ok {
			return path.Root(string(name))
		}
	}
	return e.at
}

func fieldPath(p []string) path.Path {
	at := path.Root(p[0])
	for i, part := range p[1:] {
		if i == 0 {
			at = at.AtMapKey(part)
		} else {
			at = at.AtName(part)
		}
	}
	return at
}

// policy translates a document into what the evaluator runs, with every
// fault named at its attribute.
func (d policyDoc) policy(defaults connectionDefaults, dialCheck func(health.Node) error) (*health.Policy, []policyError) {
	var errs []policyError
	p := &health.Policy{StorageRoot: d.StorageRoot, ProbeTimeout: health.DefaultProbeTimeout, WriteProbeInterval: health.DefaultWriteProbeInterval,
		Checks: map[string]health.CheckDecl{}, ObjectTypes: map[string]health.ObjectType{}, Roles: map[string]health.Role{}, Nodes: map[string]health.Node{}}
	duration := func(name, s string, least time.Duration, dst *time.Duration) {
		if s == "" {
			return
		}
		v, err := time.ParseDuration(s)
		if err != nil || v < least {
			errs = append(errs, policyError{path.Root(name), fmt.Sprintf("%q is not a duration of at least %s, for example \"10s\" or \"5m\"", s, least)})
			return
		}
		*dst = v
	}
	duration("probe_timeout", d.ProbeTimeout, 100*time.Millisecond, &p.ProbeTimeout)
	duration("write_probe_interval", d.WriteProbeInterval, 0, &p.WriteProbeInterval)
	for name, c := range d.Checks {
		spec, err := c.spec()
		if err != nil {
			// Kept without a kind, so that references to it stand.
			errs = append(errs, policyError{path.Root("checks").AtMapKey(name), err.Error()})
		}
		p.Checks[name] = health.CheckDecl{Spec: spec, Description: c.Description, Severity: c.Severity}
	}
	for name, t := range d.ObjectTypes {
		p.ObjectTypes[name] = health.ObjectType{Checks: t.Checks}
	}
	for name, r := range d.Roles {
		p.Roles[name] = health.Role{Hosts: r.Hosts, Description: r.Description}
	}
	for _, name := range slices.Sorted(maps.Keys(d.Nodes)) {
		n := d.Nodes[name]
		at := path.Root("nodes").AtMapKey(name)
		node := health.Node{Roles: n.Roles, Local: n.Local}
		switch {
		case n.Local && n.Connection != nil:
			errs = append(errs, policyError{at, fmt.Sprintf("node %q sets both local = true and a connection: give one", name)})
			continue
		case !n.Local && n.Connection == nil:
			errs = append(errs, policyError{at, fmt.Sprintf("node %q has neither a connection (for example connection = fleet_executor.%s.ssh_connection) nor local = true", name, name)})
			continue
		case n.Connection != nil && dialCheck != nil:
			// At plan and apply only: at validate, the connection
			// attributes' own validators report malformed values.
			t, err := n.Connection.model().target(defaults, "")
			if err == nil {
				node.Target = t
				err = dialCheck(node)
			}
			if err != nil {
				errs = append(errs, policyError{at.AtName("connection"), fmt.Sprintf("node %q: %s", name, err)})
				continue
			}
		}
		p.Nodes[name] = node
	}
	for _, fe := range p.Validate() {
		errs = append(errs, policyError{fieldPath(fe.Path), fe.Msg})
	}
	slices.SortFunc(errs, func(a, b policyError) int {
		switch {
		case a.at.String() < b.at.String():
			return -1
		case a.at.String() > b.at.String():
			return 1
		}
		return 0
	})
	return p, errs
}

func (c checkDoc) spec() (health.Spec, error) {
	var specs []health.Spec
	add := func(kind, v string) {
		if v != "" {
			specs = append(specs, health.Spec{Kind: kind, Settings: map[string]any{kind: v}})
		}
	}
	add("path", c.Path)
	add("command", c.Command)
	add("tcp", c.TCP)
	add("systemd_unit", c.SystemdUnit)
	if c.HTTP != nil {
		s := map[string]any{"url": c.HTTP.URL}
		if c.HTTP.ExpectStatus != nil {
			s["expect_status"] = *c.HTTP.ExpectStatus
		}
		if c.HTTP.Retries != nil {
			s["retries"] = *c.HTTP.Retries
		}
		specs = append(specs, health.Spec{Kind: "http", Settings: s})
	}
	if len(specs) != 1 {
		return health.Spec{}, fmt.Errorf("set exactly one of path, command, tcp, http, systemd_unit (%d set)", len(specs))
	}
	return specs[0], nil
}
