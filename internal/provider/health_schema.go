package provider

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The policy's input attributes, described once for the resource and the
// data source.
var policyDescriptions = map[string]string{
	"storage_root": "Absolute directory that relative `path` checks resolve under, e.g. `/srv/cloud`.",
	"probe_timeout": "Deadline of every probe, as a Go duration (`\"10s\"`). A probe that does not finish in time is itself the unhealthy signal " +
		"(\"probe timed out\"): a hard NFS mount hangs instead of failing. Reaching a node over SSH is bounded by it too (and by 10 s at most); " +
		"then all the node's checks together are bounded by it, however many paths hang. Default `10s`.",
	"write_probe_interval": "How often, at most, a path check writes and fsyncs a heartbeat file (a new `.fleet-heartbeat.XXXXXX`, removed once written), per path and node, as a Go duration. " +
		"Between heartbeats a path is checked with `statvfs` and the read-only flags of its mount and of its file system (the superblock). `0s` writes at every evaluation. Default `300s`.",
	"checks": "The checks, by name. Each sets exactly one kind: `path`, `command`, `tcp`, `http` or `systemd_unit`. " +
		"A check's identity is its kind and resolved target, so the same path declared twice is probed once.",
	"check.path":         "A directory that must be healthy: `statvfs` succeeds, neither its mount nor its file system is read-only, and a heartbeat write with fsync succeeds. Relative paths resolve under `storage_root`.",
	"check.command":      "A shell command run on the node; healthy when it exits 0 within `probe_timeout`.",
	"check.tcp":          "`host:port` the node must be able to connect to (from the node: over its SSH connection, which needs `AllowTcpForwarding` on the node, or locally).",
	"check.http":         "A URL requested from the node (as for `tcp`); healthy when it answers `expect_status`. Failed requests are retried (`retries`) within `probe_timeout`.",
	"check.url":          "`http://` or `https://` URL.",
	"check.expect":       "Expected status. Default 200.",
	"check.retries":      "Retries of a failed request (connection error or 5xx other than the expected status), 0-10. Default 2.",
	"check.systemd_unit": "A systemd unit that must be active (`systemctl is-active`).",
	"check.description":  "What the check protects, in words the reason uses: \"instance storage\". Default: the check's name.",
	"check.severity":     "`error` (default): a failure puts the node in `error`, not schedulable. `degraded`: a failure makes the node `degraded`, still schedulable.",
	"object_types":       "Object types, by name, each listing the checks it depends on. A failed check marks unhealthy exactly the types that list it.",
	"type.checks":        "Names of `checks` this object type depends on.",
	"roles":              "Roles, by name, each listing the object types a node in that role hosts.",
	"role.hosts":         "Names of `object_types` a node in this role hosts.",
	"role.description":   "The role in words the reason uses: \"a hypervisor node\". Default: \"a <role> node\".",
	"nodes": "Nodes, by name, with their roles and where their checks run: `connection` (checks run over one SSH connection per evaluation) or `local = true` " +
		"(on the machine running Terraform). A node's checks are the union over the object types its roles host.",
	"node.roles": "Names of `roles` the node plays.",
	"node.local": "Run the node's checks on the machine running Terraform instead of over SSH.",
	"node.connection": "How to reach the node: `fleet_executor.<name>.ssh_connection`, or the same fields inline (`host`, `port`, `user`, `private_key_file`, " +
		"`agent`, `host_key_fingerprint`, `proxy_jump`). An inline key is not accepted here: give the provider's `private_key`, a key file or the agent.",
}

func policyDesc(k string) string { return policyDescriptions[k] }

var nodeConnectionTypes = exportedConnectionTypes

// The policy's nested inputs, checked key by key (see nestedInput): maps
// of named objects, written as HCL objects.
var (
	policyChecksInput      = nestedInput{name: "checks", decl: policyDecls()["checks"]}
	policyObjectTypesInput = nestedInput{name: "object_types", decl: policyDecls()["object_types"]}
	policyRolesInput       = nestedInput{name: "roles", decl: policyDecls()["roles"]}
	policyNodesInput       = nestedInput{name: "nodes", decl: policyDecls()["nodes"]}
)

// policyDecls declares the keys of the policy's nested inputs.
func policyDecls() map[string]rschema.Attribute {
	str := func(k string) rschema.StringAttribute {
		return rschema.StringAttribute{Optional: true, MarkdownDescription: policyDesc(k)}
	}
	names := func(k string) rschema.ListAttribute {
		return rschema.ListAttribute{Required: true, ElementType: types.StringType, MarkdownDescription: policyDesc(k),
			Validators: []validator.List{listvalidator.UniqueValues(), listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))}}
	}
	conn := map[string]rschema.Attribute{}
	for name, a := range resourceConnectionAttributes() {
		if _, ok := nodeConnectionTypes[name]; !ok {
			continue
		}
		switch a := a.(type) {
		case rschema.StringAttribute:
			conn[name] = rschema.StringAttribute{Optional: name != "host", Required: name == "host", MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
		case rschema.Int64Attribute:
			conn[name] = rschema.Int64Attribute{Optional: true, MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
		case rschema.BoolAttribute:
			conn[name] = rschema.BoolAttribute{Optional: true, MarkdownDescription: a.MarkdownDescription}
		}
	}
	return map[string]rschema.Attribute{
		"checks": rschema.MapNestedAttribute{NestedObject: rschema.NestedAttributeObject{Attributes: map[string]rschema.Attribute{
			"path": str("check.path"), "command": str("check.command"), "tcp": str("check.tcp"), "systemd_unit": str("check.systemd_unit"),
			"http": rschema.SingleNestedAttribute{Optional: true, MarkdownDescription: policyDesc("check.http"), Attributes: map[string]rschema.Attribute{
				"url":           rschema.StringAttribute{Required: true, MarkdownDescription: policyDesc("check.url")},
				"expect_status": rschema.Int64Attribute{Optional: true, MarkdownDescription: policyDesc("check.expect")},
				"retries":       rschema.Int64Attribute{Optional: true, MarkdownDescription: policyDesc("check.retries")},
			}},
			"description": str("check.description"),
			"severity":    str("check.severity"),
		}}},
		"object_types": rschema.MapNestedAttribute{NestedObject: rschema.NestedAttributeObject{Attributes: map[string]rschema.Attribute{
			"checks": names("type.checks"),
		}}},
		"roles": rschema.MapNestedAttribute{NestedObject: rschema.NestedAttributeObject{Attributes: map[string]rschema.Attribute{
			"hosts": names("role.hosts"), "description": str("role.description"),
		}}},
		"nodes": rschema.MapNestedAttribute{NestedObject: rschema.NestedAttributeObject{Attributes: map[string]rschema.Attribute{
			"roles":      names("node.roles"),
			"local":      rschema.BoolAttribute{Optional: true, MarkdownDescription: policyDesc("node.local")},
			"connection": rschema.SingleNestedAttribute{Optional: true, MarkdownDescription: policyDesc("node.connection"), Attributes: conn},
		}}},
	}
}

// resourcePolicyAttributes are the policy's inputs as the resource takes
// them at a schema version: 0 took the maps as nested attributes, which
// Terraform converts to their type before the provider sees them, dropping
// misspelt keys; 1 takes them as dynamic attributes checked by
// nestedInput.
func resourcePolicyAttributes(version int64) map[string]rschema.Attribute {
	str := func(k string) rschema.StringAttribute {
		return rschema.StringAttribute{Optional: true, MarkdownDescription: policyDesc(k)}
	}
	attrs := map[string]rschema.Attribute{
		"storage_root": str("storage_root"),
		// Durations are checked where the policy is read (ValidateConfig and
		// the data source's policy document), by the one parser; timetypes'
		// GoDuration would add a second, location-less error of its own.
		"probe_timeout":        str("probe_timeout"),
		"write_probe_interval": str("write_probe_interval"),
	}
	for _, in := range []nestedInput{policyChecksInput, policyObjectTypesInput, policyRolesInput, policyNodesInput} {
		if version == 0 {
			m, _ := in.decl.(rschema.MapNestedAttribute)
			m.Required = true
			attrs[in.name] = m
			continue
		}
		attrs[in.name] = in.attribute(true, policyDesc(in.name))
	}
	return attrs
}

// dataSourcePolicyAttributes are the same inputs, as a data source's, all
// optional: they are given inline or through `policy`.
func dataSourcePolicyAttributes() map[string]dschema.Attribute {
	out := map[string]dschema.Attribute{}
	for name, a := range resourcePolicyAttributes(1) {
		out[name] = toDataSource(a, true)
	}
	return out
}

// toDataSource converts an attribute of the resource's schema into the
// same attribute of a data source's, keeping descriptions, validators and
// whether it is computed; top makes an input optional (the data source
// takes its policy inline or as a document).
func toDataSource(a rschema.Attribute, top bool) dschema.Attribute {
	opt := func(optional, required bool) (bool, bool) { return optional || top, required && !top }
	switch a := a.(type) {
	case rschema.DynamicAttribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.DynamicAttribute{Optional: o, Required: r, MarkdownDescription: a.MarkdownDescription}
	case rschema.StringAttribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.StringAttribute{Optional: o, Required: r, Computed: a.Computed, CustomType: a.CustomType, MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
	case rschema.Int64Attribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.Int64Attribute{Optional: o, Required: r, Computed: a.Computed, MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
	case rschema.BoolAttribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.BoolAttribute{Optional: o, Required: r, Computed: a.Computed, MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
	case rschema.ListAttribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.ListAttribute{Optional: o, Required: r, Computed: a.Computed, ElementType: a.ElementType, MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
	case rschema.MapAttribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.MapAttribute{Optional: o, Required: r, Computed: a.Computed, ElementType: a.ElementType, MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
	case rschema.SingleNestedAttribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.SingleNestedAttribute{Optional: o, Required: r, Computed: a.Computed, Attributes: nestedForDataSource(a.Attributes),
			MarkdownDescription: a.MarkdownDescription, Validators: a.Validators}
	case rschema.ListNestedAttribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.ListNestedAttribute{Optional: o, Required: r, Computed: a.Computed, MarkdownDescription: a.MarkdownDescription,
			NestedObject: dschema.NestedAttributeObject{Attributes: nestedForDataSource(a.NestedObject.Attributes), Validators: a.NestedObject.Validators}}
	case rschema.MapNestedAttribute:
		o, r := opt(a.Optional, a.Required)
		return dschema.MapNestedAttribute{Optional: o, Required: r, Computed: a.Computed, MarkdownDescription: a.MarkdownDescription,
			NestedObject: dschema.NestedAttributeObject{Attributes: nestedForDataSource(a.NestedObject.Attributes), Validators: a.NestedObject.Validators}}
	}
	panic(fmt.Sprintf("toDataSource: unexpected attribute %T", a))
}

func nestedForDataSource(attrs map[string]rschema.Attribute) map[string]dschema.Attribute {
	out := make(map[string]dschema.Attribute, len(attrs))
	for n, x := range attrs {
		out[n] = toDataSource(x, false)
	}
	return out
}
