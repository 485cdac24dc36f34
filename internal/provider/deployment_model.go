package provider

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// deploymentState is what every schema version of the deployment keeps
// alike.
type deploymentState struct {
	ID                types.String   `tfsdk:"id"`
	SSHConfigFile     types.String   `tfsdk:"ssh_config_file"`
	KnownHostsFile    types.String   `tfsdk:"known_hosts_file"`
	Goal              types.String   `tfsdk:"goal"`
	OnFailure         types.String   `tfsdk:"on_failure"`
	Hold              types.List     `tfsdk:"hold"`
	RemoteExecTimeout types.Int64    `tfsdk:"remote_exec_timeout"`
	BootLockAttempts  types.Int64    `tfsdk:"boot_lock_attempts"`
	Parallelism       types.Int64    `tfsdk:"parallelism"`
	MaxFailures       types.Int64    `tfsdk:"max_failures"`
	ActivationTimeout types.String   `tfsdk:"activation_timeout"`
	LockTimeout       types.String   `tfsdk:"lock_timeout"`
	Timeouts          timeouts.Value `tfsdk:"timeouts"`
	Actions           types.Map      `tfsdk:"actions"`
	SucceededNodes    types.List     `tfsdk:"succeeded_nodes"`
	FailedNodes       types.List     `tfsdk:"failed_nodes"`
	SkippedNodes      types.List     `tfsdk:"skipped_nodes"`
	Phase             types.String   `tfsdk:"phase"`
}

// deploymentStatus is what the deployment keeps of itself from schema
// version 2: its generation and the conditions its phase is derived from.
type deploymentStatus struct {
	Generation         types.Int64 `tfsdk:"generation"`
	ObservedGeneration types.Int64 `tfsdk:"observed_generation"`
	Conditions         types.List  `tfsdk:"conditions"`
}

type deploymentModel struct {
	deploymentState
	deploymentStatus
	// Status holds each node's record, by name (from schema version 3; a
	// list in node order before).
	Status        types.Map     `tfsdk:"status"`
	DefaultsInput types.Dynamic `tfsdk:"defaults"`
	NodesInput    types.Dynamic `tfsdk:"nodes"`
	VerdictInput  types.Dynamic `tfsdk:"verdict"`
	// PlanDryActivate: a plan dry-activates each switching node's new
	// system to learn the units its switch changes.
	PlanDryActivate types.Bool `tfsdk:"plan_dry_activate"`
	// OnlyNodes, when set, are the only nodes this apply deploys (from
	// schema version 3). Write-only from version 4: null in every plan
	// and state; the plan and the apply read it from the configuration
	// (withOnlyNodes).
	OnlyNodes types.List `tfsdk:"only_nodes"`
	// KeysInput are the keys as written; KeyContents their contents,
	// write-only: null in every plan and state (the plan and the apply
	// read it from the configuration: withKeyContents).
	KeysInput   types.Dynamic `tfsdk:"keys"`
	KeyContents types.Map     `tfsdk:"key_contents_wo"`
	// Reboot and RebootTimeout: when a switch boots its host into the
	// new system (null: never), and how long the host may take.
	Reboot        types.String `tfsdk:"reboot"`
	RebootTimeout types.String `tfsdk:"reboot_timeout"`

	// The nested inputs, checked and typed by decode.
	Keys     types.Map    `tfsdk:"-"`
	Defaults types.Object `tfsdk:"-"`
	Nodes    types.List   `tfsdk:"-"`
	Verdict  types.Object `tfsdk:"-"`
}

// inputs are what changes what the deployment does, in a fixed order: a
// change of any raises the generation. The nested inputs as decoded, so
// that a list written as a tuple is no change.
func (m *deploymentModel) inputs() []attr.Value {
	return []attr.Value{m.Nodes, m.Defaults, m.Verdict, m.SSHConfigFile, m.KnownHostsFile, m.Goal, m.OnFailure, m.Hold,
		m.RemoteExecTimeout, m.BootLockAttempts, m.ActivationTimeout, m.LockTimeout, m.Keys, m.Reboot, m.RebootTimeout}
}

// decode checks the nested inputs and types them; faults go to diags
// (validate and plan report them; the apply and the refresh read inputs
// those already passed).
func (m *deploymentModel) decode(ctx context.Context, diags *diag.Diagnostics) {
	m.Defaults = deployDefaultsInput.decodeObject(ctx, m.DefaultsInput, diags)
	m.Nodes = deployNodesInput.decodeList(ctx, m.NodesInput, diags)
	m.Verdict = verdictInput.decodeObject(ctx, m.VerdictInput, diags)
	m.Keys = deployKeysInput.decodeMap(ctx, m.KeysInput, diags)
}

// getDeployment reads a deployment from a plan, state or configuration
// and decodes its nested inputs, whose faults are not reported.
func getDeployment(ctx context.Context, get func(context.Context, any) diag.Diagnostics, m *deploymentModel, diags *diag.Diagnostics) {
	diags.Append(get(ctx, m)...)
	var ignored diag.Diagnostics
	m.decode(ctx, &ignored)
}

type deployNodeModel struct {
	Name           types.String `tfsdk:"name"`
	System         types.String `tfsdk:"system"`
	Derivation     types.String `tfsdk:"derivation"`
	BuildOn        types.String `tfsdk:"build_on"`
	Host           types.String `tfsdk:"host"`
	HostKey        types.String `tfsdk:"host_key"`
	User           types.String `tfsdk:"user"`
	PrivateKeyFile types.String `tfsdk:"private_key_file"`
	SSHOpts        types.List   `tfsdk:"ssh_opts"`
	UseSudo        types.Bool   `tfsdk:"use_sudo"`
}

type deployDefaultsModel struct {
	User           types.String `tfsdk:"user"`
	BuildOn        types.String `tfsdk:"build_on"`
	PrivateKeyFile types.String `tfsdk:"private_key_file"`
	SSHOpts        types.List   `tfsdk:"ssh_opts"`
	UseSudo        types.Bool   `tfsdk:"use_sudo"`
}

type verdictModel struct {
	ConfirmTimeout      types.String `tfsdk:"confirm_timeout"`
	SettleTimeout       types.String `tfsdk:"settle_timeout"`
	AllowFailedUnits    types.List   `tfsdk:"allow_failed_units"`
	AllowRebootRequired types.Bool   `tfsdk:"allow_reboot_required"`
	HTTP                types.List   `tfsdk:"http"`
	TCP                 types.List   `tfsdk:"tcp"`
	Command             types.List   `tfsdk:"command"`
}

// Actions a plan takes on a node, and the outcomes state records.
const (
	actionSwitch = "switch"
	actionNone   = "none"
	actionSkip   = "skip"
	// In state only: the last switch failed (the next plan retries it), or
	// the host runs another system than the last deploy left (drift).
	actionFailed = "failed"
	actionDrift  = "drift"
	// In state only: the node was not reached (an interrupted apply).
	actionPending = "pending"
	// In a plan and in state: only_nodes left the node, which would
	// switch, for a later apply (its record as it was); the next plan
	// without only_nodes switches it.
	actionWaiting = "waiting"
	// In a plan and in state (goal switch): the host runs the node's
	// system after a passing verdict but boots another (after goal test,
	// or a boot entry changed by hand): the apply makes the system its
	// boot entry and activates nothing.
	actionBootEntry = "boot-entry"
)

var deployStatusAttrTypes = map[string]attr.Type{
	"host": types.StringType, "action": types.StringType, "phase": types.StringType,
	"system": types.StringType, "current_system": types.StringType, "previous_system": types.StringType,
	"verified_system": types.StringType, "boot_system": types.StringType, "host_key_seen": types.StringType,
	"exit_code": types.Int64Type, "message": types.StringType, "hint": types.StringType,
	"started_at": types.StringType, "finished_at": types.StringType,
	"observed_generation": types.Int64Type, "conditions": types.ListType{ElemType: nodeConditionObjectType},
}

// deployStatusModel is one node's record in status.
type deployStatusModel struct {
	// Name is the record's key in status.
	Name           types.String `tfsdk:"-"`
	Host           types.String `tfsdk:"host"`
	Action         types.String `tfsdk:"action"`
	Phase          types.String `tfsdk:"phase"`
	System         types.String `tfsdk:"system"`
	CurrentSystem  types.String `tfsdk:"current_system"`
	PreviousSystem types.String `tfsdk:"previous_system"`
	VerifiedSystem types.String `tfsdk:"verified_system"`
	BootSystem     types.String `tfsdk:"boot_system"`
	HostKeySeen    types.String `tfsdk:"host_key_seen"`
	ExitCode       types.Int64  `tfsdk:"exit_code"`
	Message        types.String `tfsdk:"message"`
	Hint           types.String `tfsdk:"hint"`
	StartedAt      types.String `tfsdk:"started_at"`
	FinishedAt     types.String `tfsdk:"finished_at"`
	// The generation the node's conditions were observed at: its last
	// deploy's (or hold's).
	ObservedGeneration types.Int64 `tfsdk:"observed_generation"`
	Conditions         types.List  `tfsdk:"conditions"`
}

// statusRecords reads status, in the order of m's nodes (then any record
// of a node m does not have, by name); nil when it is null or unknown.
func statusRecords(ctx context.Context, m *deploymentModel, diags *diag.Diagnostics) []deployStatusModel {
	if m == nil || m.Status.IsNull() || m.Status.IsUnknown() {
		return nil
	}
	byName := map[string]deployStatusModel{}
	diags.Append(m.Status.ElementsAs(ctx, &byName, false)...)
	out := make([]deployStatusModel, 0, len(byName))
	add := func(name string) {
		if rec, ok := byName[name]; ok {
			rec.Name = types.StringValue(name)
			out = append(out, rec)
			delete(byName, name)
		}
	}
	var nodes []deployNodeModel
	if !m.Nodes.IsNull() && !m.Nodes.IsUnknown() {
		var ignored diag.Diagnostics
		ignored.Append(m.Nodes.ElementsAs(ctx, &nodes, false)...)
	}
	for _, n := range nodes {
		add(n.Name.ValueString())
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		add(name)
	}
	return out
}

// statusMap is status holding records, by name.
func statusMap(ctx context.Context, records []deployStatusModel, diags *diag.Diagnostics) types.Map {
	elems := make(map[string]attr.Value, len(records))
	for _, rec := range records {
		v, d := types.ObjectValueFrom(ctx, deployStatusAttrTypes, rec)
		diags.Append(d...)
		elems[rec.Name.ValueString()] = v
	}
	m, d := types.MapValue(deployStatusType, elems)
	diags.Append(d...)
	return m
}

var deployStatusType = types.ObjectType{AttrTypes: deployStatusAttrTypes}

// priorNode is what state says of a node.
type priorNode struct {
	action, phase, system, current string
	previous, verified             string
	// boot is what the host boots next, as last read (boot_system); empty
	// when not known.
	boot              string
	host, hostKeySeen string
	conds             []conditions.Condition
	record            deployStatusModel
}

func priorNodes(ctx context.Context, m *deploymentModel, diags *diag.Diagnostics) map[string]priorNode {
	out := map[string]priorNode{}
	records := statusRecords(ctx, m, diags)
	if records == nil {
		return out
	}
	actions := map[string]string{}
	if !m.Actions.IsNull() && !m.Actions.IsUnknown() {
		diags.Append(m.Actions.ElementsAs(ctx, &actions, false)...)
	}
	for _, rec := range records {
		name := rec.Name.ValueString()
		p := priorNode{action: actions[name], phase: rec.Phase.ValueString(), system: rec.System.ValueString(), current: rec.CurrentSystem.ValueString(),
			previous: rec.PreviousSystem.ValueString(), verified: rec.VerifiedSystem.ValueString(), boot: rec.BootSystem.ValueString(), host: rec.Host.ValueString(), hostKeySeen: rec.HostKeySeen.ValueString(),
			record: rec}
		p.conds, _ = nodeConditionsFrom(ctx, rec.Conditions, rec.ObservedGeneration)
		out[name] = p
	}
	return out
}

// boolPtrOf is v, nil when null or unknown.
func boolPtrOf(v types.Bool) *bool {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	b := v.ValueBool()
	return &b
}

// builtin is the layer below a deployment's defaults: the provider's
// default user and key. agentKeys says the key is one ssh cannot read
// from a file (the provider block's private_key, or a key file with a
// passphrase): the deployment's KeyAgent serves it.
func (r *deploymentResource) builtin() (b deploy.Builtin, agentKeys bool) {
	d := r.data.defaults
	b.User = orStr(d.user, deploy.DefaultUser)
	switch {
	case len(d.credentials.PrivateKey) > 0, d.credentials.PrivateKeyFile != "" && len(d.credentials.Passphrase) > 0:
		return b, true
	}
	b.PrivateKeyFile = d.credentials.PrivateKeyFile
	return b, false
}

// settings resolves node n's SSH settings; a node without host_key is
// held to the key its host showed on first use, while its host is the
// one that key was seen at.
func (r *deploymentResource) settings(ctx context.Context, defaults *deploy.Layer, n deployNodeModel, p priorNode, diags *diag.Diagnostics) deploy.Settings {
	builtin, _ := r.builtin()
	s := deploy.Resolve(builtin, defaults, deploy.Node{Name: n.Name.ValueString(), Host: ptrOf(n.Host), HostKey: ptrOf(n.HostKey),
		Layer: deploy.Layer{User: ptrOf(n.User), PrivateKeyFile: ptrOf(n.PrivateKeyFile), SSHOpts: optsOf(ctx, n.SSHOpts, diags), UseSudo: boolPtrOf(n.UseSudo), BuildOn: buildOnOf(n.BuildOn)}})
	if p.host == s.Host {
		s.SeenHostKey = p.hostKeySeen
	}
	return s
}

func (r *deploymentResource) nodes(ctx context.Context, m *deploymentModel, diags *diag.Diagnostics) []deployNodeModel {
	var nodes []deployNodeModel
	if m.Nodes.IsNull() || m.Nodes.IsUnknown() {
		return nil
	}
	for _, e := range m.Nodes.Elements() {
		obj, ok := e.(types.Object)
		if !ok || obj.IsUnknown() || obj.IsNull() {
			// A whole node not known yet (a module's variable, another
			// resource's output): every part of it unknown, as the parts
			// of a node written out key by key are.
			nodes = append(nodes, unknownNode())
			continue
		}
		var n deployNodeModel
		diags.Append(obj.As(ctx, &n, basetypes.ObjectAsOptions{})...)
		nodes = append(nodes, n)
	}
	return nodes
}

// unknownNode is a node none of whose parts is known yet.
func unknownNode() deployNodeModel {
	u := types.StringUnknown()
	return deployNodeModel{Name: u, System: u, Derivation: u, BuildOn: u, Host: u, HostKey: u, User: u, PrivateKeyFile: u,
		SSHOpts: types.ListUnknown(types.StringType), UseSudo: types.BoolUnknown()}
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func timeString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timestampLayout)
}

func ptrOf(s types.String) *string {
	if s.IsNull() || s.IsUnknown() {
		return nil
	}
	v := s.ValueString()
	return &v
}

func optsOf(ctx context.Context, l types.List, diags *diag.Diagnostics) []string {
	if l.IsNull() || l.IsUnknown() {
		return nil
	}
	return stringsOf(ctx, l, diags)
}

func (r *deploymentResource) defaults(ctx context.Context, m *deploymentModel, diags *diag.Diagnostics) *deploy.Layer {
	if m.Defaults.IsNull() || m.Defaults.IsUnknown() {
		return nil
	}
	var d deployDefaultsModel
	diags.Append(m.Defaults.As(ctx, &d, objectAsOptions)...)
	return &deploy.Layer{User: ptrOf(d.User), PrivateKeyFile: ptrOf(d.PrivateKeyFile), SSHOpts: optsOf(ctx, d.SSHOpts, diags), UseSudo: boolPtrOf(d.UseSudo), BuildOn: buildOnOf(d.BuildOn)}
}

// buildOnOf is v as a BuildOn, nil when null or unknown.
func buildOnOf(v types.String) *deploy.BuildOn {
	if p := ptrOf(v); p != nil {
		b := deploy.BuildOn(*p)
		return &b
	}
	return nil
}

// deployer builds the engine for m: its transport (a control directory of
// its own, removed by cleanup) and options.
func (r *deploymentResource) deployer(ctx context.Context, m *deploymentModel) (*deploy.Deployer, func(), error) {
	known, err := r.knownHostsFile(ctx, m)
	if err != nil {
		return nil, nil, err
	}
	control, err := deploy.NewControlDir()
	if err != nil {
		return nil, nil, err
	}
	var diags diag.Diagnostics
	dur := func(s string, def time.Duration) time.Duration {
		if v, err := time.ParseDuration(s); err == nil && s != "" {
			return v
		}
		return def
	}
	opts := deploy.Options{
		Goal:              deploy.Goal(m.Goal.ValueString()),
		Keep:              m.OnFailure.ValueString() == "keep",
		BootLockAttempts:  int(m.BootLockAttempts.ValueInt64()),
		Parallelism:       int(max(1, m.Parallelism.ValueInt64())),
		ActivationTimeout: dur(m.ActivationTimeout.ValueString(), 5*time.Minute),
		LockTimeout:       dur(m.LockTimeout.ValueString(), 0),
		Holder:            holder(m.ID.ValueString()),
		Deployment:        m.ID.ValueString(),
		Reboot:            deploy.RebootPolicy(orStr(m.Reboot.ValueString(), string(deploy.RebootNever))),
		RebootTimeout:     dur(m.RebootTimeout.ValueString(), 0),
		Log: func(e deploy.Event) {
			fields := map[string]any{"node": e.Node}
			if e.Step != "" {
				fields["step"] = string(e.Step)
			}
			if e.Outcome != "" {
				fields["outcome"] = e.Outcome
				fields["duration"] = e.Took.Round(time.Millisecond).String()
			}
			tflog.Info(ctx, e.Message, fields)
		},
	}
	if dir, ok := deploy.StateDir(); ok {
		// A plan's dry activations are kept there for the apply's own
		// plan (see deploy.Options.DryActivations).
		opts.DryActivations = filepath.Join(dir, "dry-activations")
	}
	if !m.MaxFailures.IsNull() && !m.MaxFailures.IsUnknown() {
		budget := int(m.MaxFailures.ValueInt64())
		opts.MaxFailures = &budget
	}
	if !m.Verdict.IsNull() && !m.Verdict.IsUnknown() {
		var v verdictModel
		diags.Append(m.Verdict.As(ctx, &v, objectAsOptions)...)
		opts.Verdict.ConfirmTimeout = dur(v.ConfirmTimeout.ValueString(), 0)
		opts.Verdict.SettleTimeout = dur(v.SettleTimeout.ValueString(), 0)
		opts.Verdict.Rules = deploy.VerdictRules{AllowFailedUnits: optsOf(ctx, v.AllowFailedUnits, &diags), AllowRebootRequired: v.AllowRebootRequired.ValueBool()}
		var https []struct {
			URL          types.String `tfsdk:"url"`
			ExpectStatus types.Int64  `tfsdk:"expect_status"`
		}
		if !v.HTTP.IsNull() {
			diags.Append(v.HTTP.ElementsAs(ctx, &https, false)...)
		}
		for _, h := range https {
			opts.Verdict.HTTP = append(opts.Verdict.HTTP, deploy.HTTPCheck{URL: h.URL.ValueString(), ExpectStatus: int(h.ExpectStatus.ValueInt64())})
		}
		var tcps []struct {
			Port types.Int64 `tfsdk:"port"`
		}
		if !v.TCP.IsNull() {
			diags.Append(v.TCP.ElementsAs(ctx, &tcps, false)...)
		}
		for _, t := range tcps {
			opts.Verdict.TCP = append(opts.Verdict.TCP, int(t.Port.ValueInt64()))
		}
		var cmds []struct {
			Run types.String `tfsdk:"run"`
		}
		if !v.Command.IsNull() {
			diags.Append(v.Command.ElementsAs(ctx, &cmds, false)...)
		}
		for _, c := range cmds {
			opts.Verdict.Command = append(opts.Verdict.Command, c.Run.ValueString())
		}
	}
	if diags.HasError() {
		_ = os.RemoveAll(control)
		return nil, nil, fmt.Errorf("reading the configuration: %v", diags)
	}
	d := &deploy.Deployer{
		Transport: &deploy.Transport{ConfigFile: m.SSHConfigFile.ValueString(), RemoteExecTimeout: time.Duration(m.RemoteExecTimeout.ValueInt64()) * time.Second,
			KnownHostsFile: known, ControlDir: control},
		Options: opts,
	}
	cleanup := func() { _ = os.RemoveAll(control) }
	if _, agentKeys := r.builtin(); agentKeys {
		signers, err := r.data.defaults.credentials.Signers()
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("the provider's key, from %s: %w", r.data.defaults.keyFrom, err)
		}
		a, err := deploy.StartKeyAgent(control, signers)
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("serving the provider's key to ssh: %w", err)
		}
		d.Transport.Agent = a.Socket
		cleanup = func() { a.Close(); _ = os.RemoveAll(control) }
	}
	return d, cleanup, nil
}

// knownHostsFile is the deployment's accept-new trust store: the one it
// names, else the default beside the key file or in the user's private
// state directory; one another user could have written is refused.
func (r *deploymentResource) knownHostsFile(ctx context.Context, m *deploymentModel) (string, error) {
	if path := m.KnownHostsFile.ValueString(); path != "" {
		if err := deploy.CheckKnownHostsFile(path); err != nil {
			return "", fmt.Errorf("known_hosts_file %s: %w", path, err)
		}
		return sshdial.ExpandHome(path)
	}
	if path := r.data.defaults.knownHosts; path != "" {
		// The provider's, which every resource's jump hosts use.
		if err := deploy.CheckKnownHostsFile(path); err != nil {
			return "", fmt.Errorf("the provider's known_hosts_file %s: %w", path, err)
		}
		return sshdial.ExpandHome(path)
	}
	var diags diag.Diagnostics
	builtin, _ := r.builtin()
	keyFile := builtin.PrivateKeyFile
	if defaults := r.defaults(ctx, m, &diags); defaults != nil && defaults.PrivateKeyFile != nil {
		keyFile = *defaults.PrivateKeyFile
	}
	path, err := deploy.DefaultKnownHostsFile(keyFile)
	if err != nil {
		return "", fmt.Errorf("the default known_hosts file: %w", err)
	}
	return path, nil
}

// holder names a deployment to another one that finds the host locked:
// the resource, and where it runs.
func holder(id string) string {
	host, _ := os.Hostname()
	dir, _ := os.Getwd() // the provider runs in the configuration's directory
	return fmt.Sprintf("fleet_ssh_deployment %s, run on %s in %s (pid %d)", id, orStr(host, "an unknown machine"), orStr(dir, "an unknown directory"), os.Getpid())
}

// completeStatus gives a deployment an earlier version wrote the
// generation and conditions it did not keep: generation 1, observed, and
// the Ready condition its nodes' records say.
func completeStatus(ctx context.Context, m *deploymentModel, diags *diag.Diagnostics) {
	if !m.Generation.IsNull() && !m.Conditions.IsNull() {
		return
	}
	m.Generation, m.ObservedGeneration = types.Int64Value(1), types.Int64Value(1)
	var names []string
	var phases []deploy.Phase
	for _, rec := range statusRecords(ctx, m, diags) {
		names, phases = append(names, rec.Name.ValueString()), append(phases, deploy.Phase(rec.Phase.ValueString()))
	}
	conds, err := deploy.DeploymentConditions(nil, names, phases, 1, time.Now())
	if err != nil {
		diags.AddError("Deployment conditions not written", err.Error())
		return
	}
	m.Conditions = conditionsValue(conds)
}

// deploymentPhase is the deployment's phase, derived from its conditions
// (deploy.DeploymentPhases): the plan and the apply derive it alike.
func deploymentPhase(conds []conditions.Condition) types.String {
	return types.StringValue(conditions.Phase(conds, deploy.DeploymentPhases, "Partial"))
}

// deploySummaries are the node lists of a deployment's records.
func deploySummaries(records []deployStatusModel) (succeeded, failed, skipped types.List) {
	var s, f, k []string
	for _, rec := range records {
		switch deploy.Phase(rec.Phase.ValueString()) {
		case deploy.PhaseSucceeded:
			s = append(s, rec.Name.ValueString())
		case deploy.PhaseSkipped:
			k = append(k, rec.Name.ValueString())
		case deploy.PhaseFailed, deploy.PhaseRolledBack, deploy.PhasePending, deploy.PhaseUnknown:
			f = append(f, rec.Name.ValueString())
		case deploy.PhaseCopying, deploy.PhaseActivating, deploy.PhaseVerifying, deploy.PhaseFinalizing:
		}
	}
	return stringList(orEmpty(s)), stringList(orEmpty(f)), stringList(orEmpty(k))
}

// withOnlyNodes sets m.OnlyNodes from the configuration, where a
// write-only attribute's value is (a plan and state hold null).
func (m *deploymentModel) withOnlyNodes(ctx context.Context, config tfsdk.Config, diags *diag.Diagnostics) {
	diags.Append(config.GetAttribute(ctx, path.Root("only_nodes"), &m.OnlyNodes)...)
}
