package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

var (
	_ resource.ResourceWithConfigure  = (*deploymentResource)(nil)
	_ resource.ResourceWithModifyPlan = (*deploymentResource)(nil)
)

func newDeploymentResource() resource.Resource { return &deploymentResource{} }

type deploymentResource struct{ data *providerData }

type deploymentModel struct {
	ID                types.String   `tfsdk:"id"`
	Defaults          types.Object   `tfsdk:"defaults"`
	SSHConfigFile     types.String   `tfsdk:"ssh_config_file"`
	KnownHostsFile    types.String   `tfsdk:"known_hosts_file"`
	Nodes             types.List     `tfsdk:"nodes"`
	Goal              types.String   `tfsdk:"goal"`
	OnFailure         types.String   `tfsdk:"on_failure"`
	Hold              types.List     `tfsdk:"hold"`
	RemoteExecTimeout types.Int64    `tfsdk:"remote_exec_timeout"`
	BootLockAttempts  types.Int64    `tfsdk:"boot_lock_attempts"`
	ActivationTimeout types.String   `tfsdk:"activation_timeout"`
	LockTimeout       types.String   `tfsdk:"lock_timeout"`
	Verdict           types.Object   `tfsdk:"verdict"`
	Timeouts          timeouts.Value `tfsdk:"timeouts"`
	Actions           types.Map      `tfsdk:"actions"`
	Status            types.List     `tfsdk:"status"`
	SucceededNodes    types.List     `tfsdk:"succeeded_nodes"`
	FailedNodes       types.List     `tfsdk:"failed_nodes"`
	SkippedNodes      types.List     `tfsdk:"skipped_nodes"`
	Phase             types.String   `tfsdk:"phase"`
}

type deployNodeModel struct {
	Name           types.String `tfsdk:"name"`
	System         types.String `tfsdk:"system"`
	Host           types.String `tfsdk:"host"`
	HostKey        types.String `tfsdk:"host_key"`
	User           types.String `tfsdk:"user"`
	PrivateKeyFile types.String `tfsdk:"private_key_file"`
	SSHOpts        types.List   `tfsdk:"ssh_opts"`
}

type deployDefaultsModel struct {
	User           types.String `tfsdk:"user"`
	PrivateKeyFile types.String `tfsdk:"private_key_file"`
	SSHOpts        types.List   `tfsdk:"ssh_opts"`
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
)

var deployStatusAttrTypes = map[string]attr.Type{
	"name": types.StringType, "host": types.StringType, "action": types.StringType, "phase": types.StringType,
	"system": types.StringType, "current_system": types.StringType, "previous_system": types.StringType,
	"verified_system": types.StringType, "host_key_seen": types.StringType,
	"exit_code": types.Int64Type, "message": types.StringType, "hint": types.StringType,
	"started_at": types.StringType, "finished_at": types.StringType,
	"conditions": types.ListType{ElemType: conditionObjectType},
}

// deployStatusModel is one node's record in status.
type deployStatusModel struct {
	Name           types.String `tfsdk:"name"`
	Host           types.String `tfsdk:"host"`
	Action         types.String `tfsdk:"action"`
	Phase          types.String `tfsdk:"phase"`
	System         types.String `tfsdk:"system"`
	CurrentSystem  types.String `tfsdk:"current_system"`
	PreviousSystem types.String `tfsdk:"previous_system"`
	VerifiedSystem types.String `tfsdk:"verified_system"`
	HostKeySeen    types.String `tfsdk:"host_key_seen"`
	ExitCode       types.Int64  `tfsdk:"exit_code"`
	Message        types.String `tfsdk:"message"`
	Hint           types.String `tfsdk:"hint"`
	StartedAt      types.String `tfsdk:"started_at"`
	FinishedAt     types.String `tfsdk:"finished_at"`
	Conditions     types.List   `tfsdk:"conditions"`
}

// statusRecords reads status; nil when it is null or unknown.
func statusRecords(ctx context.Context, m *deploymentModel, diags *diag.Diagnostics) []deployStatusModel {
	if m == nil || m.Status.IsNull() || m.Status.IsUnknown() {
		return nil
	}
	var out []deployStatusModel
	diags.Append(m.Status.ElementsAs(ctx, &out, false)...)
	return out
}

// statusList is status holding records.
func statusList(ctx context.Context, records []deployStatusModel, diags *diag.Diagnostics) types.List {
	l, d := types.ListValueFrom(ctx, deployStatusType, orEmpty(records))
	diags.Append(d...)
	return l
}

var deployStatusType = types.ObjectType{AttrTypes: deployStatusAttrTypes}

func (r *deploymentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_ssh_deployment"
}

func sshOptsAttribute(desc string) schema.ListAttribute {
	return schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: desc,
		Validators: []validator.List{listvalidator.ValueStringsAre(sshOptValidator{})}}
}

func (r *deploymentResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	str := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, MarkdownDescription: desc}
	}
	computedStr := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Rolls NixOS system closures onto existing hosts over SSH with the system OpenSSH client and `nix-copy-closure`, " +
			"one host after the other in list order, each with a verdict: the bootloader is finalised only after a passing verdict, a failing host is rolled back " +
			"(on the host itself when the new system cuts off SSH), and a failure never stops the hosts after it. Plans show each node's action in `actions`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, MarkdownDescription: "Identifier generated at create.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"defaults": schema.SingleNestedAttribute{Optional: true, MarkdownDescription: "SSH settings every node inherits unless it sets its own (built-in: user `FLEET_SSH_USER`, else `root`; key `FLEET_SSH_PRIVATE_KEY_FILE`, else the ssh-agent).",
				Attributes: map[string]schema.Attribute{
					"user":             str("User to log in as."),
					"private_key_file": str("Private key file, given to ssh as `-i`. A plan refuses one it cannot read, and an encrypted one unless an ssh-agent (`SSH_AUTH_SOCK`) holds it: ssh never asks for a passphrase."),
					"ssh_opts":         sshOptsAttribute("Bare OpenSSH options `Key=Value`, each given as `-o Key=Value`. Pattern: `" + deploy.SSHOptPattern + "`."),
				}},
			"ssh_config_file":  str("An OpenSSH client configuration file, given to every ssh as `-F`. Host-key options it sets are left to it."),
			"known_hosts_file": str("The accept-new trust store for nodes without `host_key` and for jump hosts. Default: `fleet-known-hosts` beside the key file, else in the temporary directory."),
			"nodes": schema.ListNestedAttribute{Required: true, MarkdownDescription: "The nodes, deployed in this order.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name": schema.StringAttribute{Required: true, MarkdownDescription: "Node name, unique; the host when `host` is not set.",
						Validators: []validator.String{stringvalidator.LengthAtLeast(1)}},
					"system": schema.StringAttribute{Required: true, MarkdownDescription: "The system closure to switch to (a `/nix/store/...-nixos-system-...` path built on this machine)."},
					"host":   str("Host name or address. Default: `name`."),
					"host_key": schema.StringAttribute{Optional: true, Validators: []validator.String{hostKeyLineValidator{}},
						MarkdownDescription: "The host's public key line (`ssh-ed25519 AAAA...`, as in its `ssh_host_ed25519_key.pub` or from `ssh-keyscan`; a `SHA256:` fingerprint is refused, as OpenSSH needs the key itself): only this key is accepted. Without it, the first key seen is remembered in `known_hosts_file` and in `status` (`host_key_seen`), and the node is held to it."},
					"user":             str("User to log in as."),
					"private_key_file": str("Private key file, given to ssh as `-i`. A plan refuses one it cannot read, and an encrypted one unless an ssh-agent (`SSH_AUTH_SOCK`) holds it: ssh never asks for a passphrase."),
					"ssh_opts":         sshOptsAttribute("Bare OpenSSH options `Key=Value`; replaces the defaults' list."),
				}}},
			"goal": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(string(deploy.GoalSwitch)),
				MarkdownDescription: "`switch` (activate, judge, make the boot default), `boot` (boot default only), `test` (activate and judge only) or `dry-activate`.",
				Validators:          []validator.String{stringvalidator.OneOf("switch", "boot", "test", "dry-activate")}},
			"on_failure": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("rollback"),
				MarkdownDescription: "`rollback` (default): a failing verdict switches the node back. `keep`: leave the new system active for inspection.",
				Validators:          []validator.String{stringvalidator.OneOf("rollback", "keep")}},
			"hold": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Nodes to skip, with the reason shown in the plan: for example `fleet_node_health_policy.x.error_nodes`."},
			"remote_exec_timeout": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(60),
				MarkdownDescription: "Seconds a remote command may stay silent before the keepalive ends it. Default 60.", Validators: []validator.Int64{int64validator.Between(5, 3600)}},
			"boot_lock_attempts": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(60),
				MarkdownDescription: "Attempts, 5 s apart, while the switch lock is held (exit 11). Default 60.", Validators: []validator.Int64{int64validator.Between(1, 1000)}},
			"activation_timeout": str("How long an activation may take, as a Go duration. Default `5m`."),
			"lock_timeout":       str("How long to wait for another deployment's lock on a host, as a Go duration. Default `0s`: fail at once, naming the holder."),
			"verdict": schema.SingleNestedAttribute{Optional: true, MarkdownDescription: "What a passing verdict needs besides a clean activation, a new SSH login and `/run/current-system` pointing at the new system.",
				Attributes: map[string]schema.Attribute{
					"confirm_timeout":       str("How long the host waits for the deployer's confirmation before rolling itself back. Default `30s`."),
					"settle_timeout":        str("How long `systemctl is-system-running --wait` may take. Default `90s`."),
					"allow_failed_units":    schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Units that may fail (exit 4 and `degraded` pass with only these)."},
					"allow_reboot_required": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false), MarkdownDescription: "Let exit 100 (reboot required) pass."},
					"http": schema.ListNestedAttribute{Optional: true, MarkdownDescription: "URLs requested from this machine.", NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
						"url":           schema.StringAttribute{Required: true, MarkdownDescription: "URL."},
						"expect_status": schema.Int64Attribute{Optional: true, MarkdownDescription: "Expected status. Default 200."},
					}}},
					"tcp": schema.ListNestedAttribute{Optional: true, MarkdownDescription: "Ports on the node's host, connected to from this machine.", NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
						"port": schema.Int64Attribute{Required: true, MarkdownDescription: "Port.", Validators: []validator.Int64{int64validator.Between(1, 65535)}},
					}}},
					"command": schema.ListNestedAttribute{Optional: true, MarkdownDescription: "Commands run on the node; each must exit 0.", NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
						"run": schema.StringAttribute{Required: true, MarkdownDescription: "Shell command."},
					}}},
				}},
			"timeouts": timeouts.Attributes(ctx, timeouts.Opts{Create: true, Update: true}),
			"actions": schema.MapAttribute{Computed: true, ElementType: types.StringType,
				MarkdownDescription: "Per node, the action: `switch`, `none` or `skip` in a plan; in state, the last outcome (`switch` done, `failed`: the next plan retries it, `drift`: the host was changed outside, `skip`)."},
			"status": schema.ListNestedAttribute{Computed: true, MarkdownDescription: "Per node, in node order, its record.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name": computedStr("Node name."), "host": computedStr("Host."), "action": computedStr("Action of the last apply."),
					"phase":  computedStr("`Succeeded`, `Failed` (an interrupted node too: its message names the step it stopped in and what the host runs), `RolledBack`, `Skipped`, or `Pending` (not reached before an interrupt)."),
					"system": computedStr("The system the last deploy of the node aimed at."), "current_system": computedStr("What `/run/current-system` pointed at when last read."),
					"previous_system": computedStr("The system before the last deploy."),
					"verified_system": computedStr("The last system a deploy finished on the host with a passing verdict, as the host itself records it (read with `current_system`). " +
						"A node whose host runs its configured system, and records that system as verified, has nothing to do: after a failed switch is rolled back and the configuration is set back, or after a failed first apply."),
					"host_key_seen": computedStr("The host key (`type base64`) the host offered when last reached. A node without `host_key` is held to it from then on, " +
						"also from a runner whose `known_hosts_file` is new: another key fails the node, naming both keys. Changing the node's `host` forgets it."),
					"exit_code": schema.Int64Attribute{Computed: true, MarkdownDescription: "Exit status of the failing step, 0 on success."},
					"message":   computedStr("What happened."), "hint": computedStr("How to fix a failure, where one helps."),
					"started_at": computedStr("When the node's deploy started (RFC 3339)."), "finished_at": computedStr("When it ended."),
					"conditions": conditionsAttribute("`Reachable`, `ClosureCopied`, `Activated`, `VerdictPassed`, `BootloaderFinalized`, `Ready`"),
				}}},
			"succeeded_nodes": schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Nodes whose last deploy succeeded."},
			"failed_nodes":    schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Nodes whose last deploy failed."},
			"skipped_nodes":   schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Nodes held back."},
			"phase":           schema.StringAttribute{Computed: true, MarkdownDescription: "`Succeeded` when every node is, `Failed` when one failed, else `Partial`."},
		},
	}
}

func (r *deploymentResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = configuredData(req.ProviderData, &resp.Diagnostics)
}

// priorNode is what state says of a node.
type priorNode struct {
	action, phase, system, current string
	previous, verified             string
	host, hostKeySeen              string
	conds                          []conditions.Condition
	record                         deployStatusModel
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
			previous: rec.PreviousSystem.ValueString(), verified: rec.VerifiedSystem.ValueString(), host: rec.Host.ValueString(), hostKeySeen: rec.HostKeySeen.ValueString(),
			record: rec}
		p.conds, _ = conditionsFrom(ctx, rec.Conditions)
		out[name] = p
	}
	return out
}

// settings resolves node n's SSH settings; a node without host_key is
// held to the key its host showed on first use, while its host is the
// one that key was seen at.
func (r *deploymentResource) settings(ctx context.Context, defaults *deploy.Layer, n deployNodeModel, p priorNode, diags *diag.Diagnostics) deploy.Settings {
	s := deploy.Resolve(deploy.BuiltinFromEnv(os.Getenv), defaults, deploy.Node{Name: n.Name.ValueString(), Host: ptrOf(n.Host), HostKey: ptrOf(n.HostKey),
		Layer: deploy.Layer{User: ptrOf(n.User), PrivateKeyFile: ptrOf(n.PrivateKeyFile), SSHOpts: optsOf(ctx, n.SSHOpts, diags)}})
	if p.host == s.Host {
		s.SeenHostKey = p.hostKeySeen
	}
	return s
}

func (r *deploymentResource) nodes(ctx context.Context, m *deploymentModel, diags *diag.Diagnostics) []deployNodeModel {
	var nodes []deployNodeModel
	if !m.Nodes.IsNull() && !m.Nodes.IsUnknown() {
		diags.Append(m.Nodes.ElementsAs(ctx, &nodes, false)...)
	}
	return nodes
}

func (r *deploymentResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	var plan deploymentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	var prior *deploymentModel
	if !req.State.Raw.IsNull() {
		prior = &deploymentModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, prior)...)
	}
	if resp.Diagnostics.HasError() || plan.Nodes.IsUnknown() {
		return
	}
	nodes := r.nodes(ctx, &plan, &resp.Diagnostics)
	seen := map[string]bool{}
	for i, n := range nodes {
		if n.Name.IsUnknown() {
			continue
		}
		if seen[n.Name.ValueString()] {
			resp.Diagnostics.AddAttributeError(path.Root("nodes").AtListIndex(i).AtName("name"), "Duplicate node", fmt.Sprintf("node %q is listed twice", n.Name.ValueString()))
		}
		seen[n.Name.ValueString()] = true
		if sys := n.System.ValueString(); !n.System.IsUnknown() {
			if !strings.HasPrefix(sys, "/nix/store/") {
				resp.Diagnostics.AddAttributeError(path.Root("nodes").AtListIndex(i).AtName("system"), "Not a system closure",
					fmt.Sprintf("node %s: system %q is not a path in the Nix store (/nix/store/...-nixos-system-...)", n.Name.ValueString(), sys))
			} else if _, err := os.Stat(sys); err != nil {
				resp.Diagnostics.AddAttributeError(path.Root("nodes").AtListIndex(i).AtName("system"), "System not built",
					fmt.Sprintf("node %s: system %s does not exist on this machine: build it first (for example nix build .#nixosConfigurations.%s.config.system.build.toplevel)", n.Name.ValueString(), sys, n.Name.ValueString()))
			}
		}
	}
	r.checkKeyFiles(ctx, &plan, nodes, &resp.Diagnostics)
	if fullyKnown(plan.Defaults) && !plan.KnownHostsFile.IsUnknown() {
		if _, err := r.knownHostsFile(ctx, &plan); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("known_hosts_file"), "Unusable known_hosts file", err.Error())
		}
	}
	type duration struct {
		at    path.Path
		v     string
		least time.Duration
	}
	durations := []duration{{path.Root("activation_timeout"), plan.ActivationTimeout.ValueString(), time.Second}, {path.Root("lock_timeout"), plan.LockTimeout.ValueString(), 0}}
	if !plan.Verdict.IsNull() && !plan.Verdict.IsUnknown() {
		var v verdictModel
		resp.Diagnostics.Append(plan.Verdict.As(ctx, &v, objectAsOptions)...)
		durations = append(durations,
			duration{path.Root("verdict").AtName("confirm_timeout"), v.ConfirmTimeout.ValueString(), time.Second},
			duration{path.Root("verdict").AtName("settle_timeout"), v.SettleTimeout.ValueString(), time.Second})
	}
	for _, d := range durations {
		if d.v == "" {
			continue
		}
		if v, err := time.ParseDuration(d.v); err != nil || v < d.least {
			resp.Diagnostics.AddAttributeError(d.at, "Invalid duration", fmt.Sprintf("%s: %q is not a Go duration of at least %s, such as \"5m\"", d.at, d.v, d.least))
		}
	}
	hold, holdKnown := stringSet(ctx, plan.Hold, &resp.Diagnostics)
	if holdKnown {
		for name := range hold {
			if !seen[name] {
				resp.Diagnostics.AddAttributeWarning(path.Root("hold"), "Unknown node in hold", fmt.Sprintf("hold names %q, which is not in nodes.", name))
			}
		}
	}
	priors := priorNodes(ctx, prior, &resp.Diagnostics)
	actions := map[string]attr.Value{}
	switching := false
	for _, n := range nodes {
		if n.Name.IsUnknown() {
			plan.Actions = types.MapUnknown(types.StringType)
			resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
			return
		}
		name := n.Name.ValueString()
		p, known := priors[name]
		switch {
		case !holdKnown || n.System.IsUnknown():
			actions[name] = types.StringUnknown()
			switching = true
		case hold[name]:
			actions[name] = types.StringValue(actionSkip)
			switching = switching || p.action != actionSkip
			resp.Diagnostics.AddAttributeWarning(path.Root("hold"), "Node "+name+" is held", fmt.Sprintf("Node %s is in hold: it will not be deployed in this apply.", name))
		case needsSwitch(p, known, n.System.ValueString(), deploy.Goal(plan.Goal.ValueString())):
			switching = true
			actions[name] = types.StringValue(actionSwitch)
		case p.action == actionSwitch || p.action == actionNone:
			actions[name] = types.StringValue(p.action) // nothing to do: the last outcome stands
		default:
			actions[name] = types.StringValue(actionNone)
		}
	}
	plan.Actions = types.MapValueMust(types.StringType, actions)
	if switching || prior == nil || !req.Plan.Raw.Equal(req.State.Raw) {
		// Any apply records what it does: every record is new.
		plan.Status = types.ListUnknown(deployStatusType)
		plan.Phase = types.StringUnknown()
		plan.SucceededNodes, plan.FailedNodes, plan.SkippedNodes = types.ListUnknown(types.StringType), types.ListUnknown(types.StringType), types.ListUnknown(types.StringType)
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
	if !resp.Diagnostics.HasError() {
		// Nodes the refresh of this run read were logged in to a moment
		// ago (and warned about if that failed): they are not probed again.
		var readNow map[string]deploy.Settings
		if prior != nil && readRefreshMark(ctx, req.Private).Run == r.data.run &&
			prior.SSHConfigFile.Equal(plan.SSHConfigFile) && prior.KnownHostsFile.Equal(plan.KnownHostsFile) {
			readNow = map[string]deploy.Settings{}
			priorDefaults := r.defaults(ctx, prior, &resp.Diagnostics)
			for _, n := range r.nodes(ctx, prior, &resp.Diagnostics) {
				if p, ok := priors[n.Name.ValueString()]; ok && p.action != actionSkip {
					readNow[n.Name.ValueString()] = r.settings(ctx, priorDefaults, n, p, &resp.Diagnostics)
				}
			}
		}
		r.probe(ctx, &plan, nodes, priors, readNow, actions, &resp.Diagnostics)
	}
}

// checkKeyFiles refuses at plan a key file that cannot be read, or that is
// encrypted with no ssh-agent to hold it, naming the attribute that set it
// (the node's, the defaults', or FLEET_SSH_PRIVATE_KEY_FILE).
func (r *deploymentResource) checkKeyFiles(ctx context.Context, plan *deploymentModel, nodes []deployNodeModel, diags *diag.Diagnostics) {
	if plan.Defaults.IsUnknown() {
		return
	}
	var defaults deployDefaultsModel
	if !plan.Defaults.IsNull() {
		diags.Append(plan.Defaults.As(ctx, &defaults, objectAsOptions)...)
	}
	agentSocket := os.Getenv("SSH_AUTH_SOCK")
	reported := map[string]bool{}
	check := func(at path.Path, what, file string) {
		if reported[at.String()] {
			return
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := deploy.CheckKeyFile(actx, file, agentSocket); err != nil {
			reported[at.String()] = true
			diags.AddAttributeError(at, "Unusable private key", fmt.Sprintf("%s: %s", what, err))
		}
	}
	env := os.Getenv(deploy.EnvSSHPrivateKeyFile)
	for i, n := range nodes {
		at := path.Root("nodes").AtListIndex(i)
		switch {
		case n.PrivateKeyFile.IsUnknown() || n.Name.IsUnknown():
		case !n.PrivateKeyFile.IsNull():
			check(at.AtName("private_key_file"), "node "+n.Name.ValueString()+": private_key_file", n.PrivateKeyFile.ValueString())
		case defaults.PrivateKeyFile.IsUnknown():
		case !defaults.PrivateKeyFile.IsNull():
			check(path.Root("defaults").AtName("private_key_file"), "defaults.private_key_file", defaults.PrivateKeyFile.ValueString())
		case env != "":
			check(path.Root("nodes"), deploy.EnvSSHPrivateKeyFile+" (the built-in key of nodes without one)", env)
		}
	}
}

// probe logs in to every node the plan switches, under the provider's
// probe semaphore, and warns about those it cannot reach: the apply would
// fail them. It warns, never decides: the apply plans again, and a host
// seen differently then would make that plan differ.
// Nodes in readNow, whose settings are unchanged, were read by this run's
// refresh and are not probed again.
func (r *deploymentResource) probe(ctx context.Context, m *deploymentModel, nodes []deployNodeModel, priors map[string]priorNode,
	readNow map[string]deploy.Settings, actions map[string]attr.Value, diags *diag.Diagnostics) {
	if !fullyKnown(m.Defaults) || m.SSHConfigFile.IsUnknown() || m.KnownHostsFile.IsUnknown() {
		return
	}
	var nd diag.Diagnostics
	defaults := r.defaults(ctx, m, &nd)
	var switching []deployNodeModel
	var settings []deploy.Settings
	for _, n := range nodes {
		a, ok := actions[n.Name.ValueString()].(types.String)
		if !ok || a.ValueString() != actionSwitch || !fullyKnownNode(n) {
			continue
		}
		s := r.settings(ctx, defaults, n, priors[n.Name.ValueString()], &nd)
		if read, ok := readNow[n.Name.ValueString()]; ok && reflect.DeepEqual(read, s) {
			continue
		}
		switching, settings = append(switching, n), append(settings, s)
	}
	if len(switching) == 0 {
		return
	}
	d, cleanup, err := r.deployer(ctx, m)
	if err != nil {
		return
	}
	defer cleanup()
	failures := make([]string, len(switching))
	var wg sync.WaitGroup
	for i, s := range settings {
		if err := r.data.prober.Slots.Acquire(ctx, 1); err != nil {
			break // interrupted: the probes started still end
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.data.prober.Slots.Release(1)
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if _, err := d.ReadCurrent(pctx, s); err != nil {
				failures[i] = err.Error()
			}
		}()
	}
	wg.Wait()
	for i, f := range failures {
		if f != "" {
			name := switching[i].Name.ValueString()
			diags.AddAttributeWarning(path.Root("nodes"), "Node "+name+" is unreachable",
				fmt.Sprintf("node %s is planned to switch but cannot be reached now: %s. The apply will fail it unless it is reachable by then (the other nodes go on).", name, strings.TrimRight(f, ".")))
		}
	}
}

func fullyKnownNode(n deployNodeModel) bool {
	for _, v := range []attr.Value{n.Name, n.System, n.Host, n.HostKey, n.User, n.PrivateKeyFile, n.SSHOpts} {
		if !fullyKnown(v) {
			return false
		}
	}
	return true
}

// needsSwitch says whether a node must be switched, from its configured
// system and what state says of it (this run's refresh included): it is
// new, its last switch failed or was interrupted, it drifted, or its host
// runs another system. A host that runs the configured system and records
// it as verified (a deploy of it passed its verdict there) has nothing to
// do, whatever the last apply recorded: a failed switch rolled back, and
// the configuration set back to the system the host runs. No live
// observation decides: the apply's plan must come out the same.
func needsSwitch(p priorNode, known bool, system string, goal deploy.Goal) bool {
	if !known {
		return true
	}
	if goal == deploy.GoalBoot || goal == deploy.GoalDryActivate {
		// The running system stays the old one: what counts is the system
		// the last deploy aimed at.
		return p.action == actionFailed || p.action == actionDrift || p.action == actionPending || p.system != system
	}
	if p.current == system && p.verified == system {
		return false
	}
	return p.action == actionFailed || p.action == actionDrift || p.action == actionPending || p.current != system
}

func stringSet(ctx context.Context, l types.List, diags *diag.Diagnostics) (map[string]bool, bool) {
	out := map[string]bool{}
	if l.IsUnknown() || !fullyKnown(l) {
		return out, false
	}
	for _, s := range stringsOf(ctx, l, diags) {
		out[s] = true
	}
	return out, true
}

func (r *deploymentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m deploymentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		resp.Diagnostics.AddError("Cannot generate an ID", err.Error())
		return
	}
	m.ID = types.StringValue(id.String())
	timeout, diags := m.Timeouts.Create(ctx, 60*time.Minute)
	resp.Diagnostics.Append(diags...)
	r.apply(ctx, "create", timeout, &m, nil, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	resp.Diagnostics.Append(setRefreshMark(ctx, resp.Private, "")...)
}

func (r *deploymentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, prior deploymentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.ID = prior.ID
	timeout, diags := m.Timeouts.Update(ctx, 60*time.Minute)
	resp.Diagnostics.Append(diags...)
	r.apply(ctx, "update", timeout, &m, &prior, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	resp.Diagnostics.Append(setRefreshMark(ctx, resp.Private, "")...)
}

// errInterrupted is what an interrupt (Ctrl-C, Terraform stopping the
// provider) records.
var errInterrupted = errors.New("interrupted")

// applyContext bounds an apply by its timeouts block and ends it on an
// interrupt: one event for the engine, whose cause names which.
func (r *deploymentResource) applyContext(ctx context.Context, op string, timeout time.Duration) (context.Context, func()) {
	ctx, interrupt := context.WithCancelCause(ctx)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the timeouts block's %s limit (%s) expired", op, timeout))
	stop := func() bool { return false }
	if r.data.interrupt != nil {
		stop = context.AfterFunc(r.data.interrupt, func() { interrupt(errInterrupted) })
	}
	return ctx, func() { stop(); cancel(); interrupt(nil) }
}

// apply deploys the nodes the plan switches and records every node. It
// follows the plan: a node planned switch is deployed (and found already
// done at apply, if its host runs its system after a passing verdict),
// any other keeps its record. Failures are error diagnostics after all
// nodes ran; so is an interrupt, which leaves later nodes untouched. The
// state is saved whatever happened.
func (r *deploymentResource) apply(ctx context.Context, op string, timeout time.Duration, m, prior *deploymentModel, diags *diag.Diagnostics) {
	ctx, stop := r.applyContext(ctx, op, timeout)
	defer stop()
	nodes := r.nodes(ctx, m, diags)
	priors := priorNodes(ctx, prior, diags)
	planned := map[string]string{}
	diags.Append(m.Actions.ElementsAs(ctx, &planned, false)...)
	hold, _ := stringSet(ctx, m.Hold, diags)
	d, cleanup, err := r.deployer(ctx, m)
	if err != nil {
		diags.AddError("Deployment not started", err.Error())
		return
	}
	defer cleanup()
	defaults := r.defaults(ctx, m, diags)
	var targets []deploy.Target
	for _, n := range nodes {
		name := n.Name.ValueString()
		if !hold[name] && planned[name] == actionSwitch {
			targets = append(targets, deploy.Target{System: n.System.ValueString(), Settings: r.settings(ctx, defaults, n, priors[name], diags)})
		}
	}
	byName := map[string]deploy.Result{}
	for _, res := range d.Deploy(ctx, targets, nil) {
		byName[res.Name] = res
	}
	now := time.Now().UTC()
	actions := map[string]attr.Value{}
	var statuses []deployStatusModel
	var succeeded, failed, skipped, notStarted []string
	var summary []string
	for _, n := range nodes {
		name := n.Name.ValueString()
		p, known := priors[name]
		res, ran := byName[name]
		action := planned[name]
		switch {
		case hold[name]:
			res = deploy.Result{Name: name, Phase: deploy.PhaseSkipped, Message: "held: listed in hold", CurrentSystem: p.current, PreviousSystem: p.previous, VerifiedSystem: p.verified}
			action = actionSkip
			skipped = append(skipped, name)
		case !ran && known && (p.action == actionSwitch || p.action == actionNone):
			// Nothing to do, and nothing new to record: the last record stands.
			actions[name] = types.StringValue(p.action)
			statuses = append(statuses, p.record)
			if p.phase == string(deploy.PhaseSucceeded) {
				succeeded = append(succeeded, name)
			}
			continue
		case !ran:
			// Planned none after a failure: the host runs the configured
			// system, which passed its verdict there.
			res = deploy.Result{Name: name, Phase: deploy.PhaseSucceeded, CurrentSystem: p.current, PreviousSystem: p.previous, VerifiedSystem: p.verified,
				Message: fmt.Sprintf("nothing to do: the host runs %s, which passed its verdict there", n.System.ValueString())}
			succeeded = append(succeeded, name)
		case res.Phase == deploy.PhasePending:
			action = actionPending
			notStarted = append(notStarted, name)
		case res.Failed():
			action = actionFailed
			failed = append(failed, name)
			diags.AddAttributeError(path.Root("nodes"), deploy.FailedLine(name, res.ExitCode, res.Message), orStr(res.Hint, "See status for this node."))
		default:
			succeeded = append(succeeded, name)
		}
		if ran && res.CurrentSystem == "" {
			// Failed before the host was read: what was known stands.
			res.CurrentSystem, res.PreviousSystem, res.VerifiedSystem = p.current, p.previous, p.verified
		}
		actions[name] = types.StringValue(action)
		conds, err := deploy.NodeConditions(p.conds, res, 1, now)
		if err != nil {
			diags.AddError("Node record not written", err.Error())
			return
		}
		cv, d := conditionsValue(conds)
		diags.Append(d...)
		host := orStr(n.Host.ValueString(), name)
		seen := res.HostKeySeen
		if seen == "" && p.host == host {
			seen = p.hostKeySeen // not reached this time: the recorded key stands
		}
		statuses = append(statuses, deployStatusModel{
			Name: types.StringValue(name), Host: types.StringValue(host), Action: types.StringValue(action),
			Phase: types.StringValue(string(res.Phase)), System: n.System, CurrentSystem: types.StringValue(res.CurrentSystem),
			PreviousSystem: types.StringValue(res.PreviousSystem), VerifiedSystem: types.StringValue(res.VerifiedSystem),
			HostKeySeen: types.StringValue(seen), ExitCode: types.Int64Value(int64(res.ExitCode)),
			Message: types.StringValue(res.Message), Hint: types.StringValue(res.Hint),
			StartedAt: types.StringValue(timeString(res.Started)), FinishedAt: types.StringValue(timeString(res.Finished)),
			Conditions: cv,
		})
		if ran {
			summary = append(summary, fmt.Sprintf("%-20s %-10s %s", name, res.Phase, res.Message))
		}
	}
	if len(notStarted) > 0 {
		failed = append(failed, notStarted...)
		diags.AddAttributeError(path.Root("nodes"), "Deployment stopped: "+strings.Join(notStarted, ", ")+" not started",
			fmt.Sprintf("%s before these nodes started; they were not touched, and the next plan switches them.", pendingCause(byName, notStarted)))
	}
	m.Actions = types.MapValueMust(types.StringType, actions)
	m.Status = statusList(ctx, statuses, diags)
	m.SucceededNodes, m.FailedNodes, m.SkippedNodes = stringList(orEmpty(succeeded)), stringList(orEmpty(failed)), stringList(orEmpty(skipped))
	switch {
	case len(failed) > 0:
		m.Phase = types.StringValue("Failed")
	case len(skipped) > 0:
		m.Phase = types.StringValue("Partial")
	default:
		m.Phase = types.StringValue("Succeeded")
	}
	if len(summary) > 0 {
		tflog.Info(ctx, "deployment summary\n"+strings.Join(summary, "\n"))
	}
}

// pendingCause is why the nodes not started were not: the engine's words
// on the first of them.
func pendingCause(results map[string]deploy.Result, names []string) string {
	msg := strings.TrimPrefix(results[names[0]].Message, "not started: ")
	msg, _, _ = strings.Cut(msg, " before this node started")
	return strings.ToUpper(msg[:1]) + msg[1:]
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
	return &deploy.Layer{User: ptrOf(d.User), PrivateKeyFile: ptrOf(d.PrivateKeyFile), SSHOpts: optsOf(ctx, d.SSHOpts, diags)}
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
		ActivationTimeout: dur(m.ActivationTimeout.ValueString(), 5*time.Minute),
		LockTimeout:       dur(m.LockTimeout.ValueString(), 0),
		Holder:            holder(m.ID.ValueString()),
		Log: func(e deploy.Event) {
			fields := map[string]any{"node": e.Node}
			if e.Step != "" {
				fields["step"] = string(e.Step)
			}
			tflog.Info(ctx, e.Message, fields)
		},
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
	return d, func() { _ = os.RemoveAll(control) }, nil
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
	var diags diag.Diagnostics
	keyFile := os.Getenv(deploy.EnvSSHPrivateKeyFile)
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
	return fmt.Sprintf("fleet_ssh_deployment %s, applied on %s in %s (pid %d)", id, orStr(host, "an unknown machine"), orStr(dir, "an unknown directory"), os.Getpid())
}

// Read reads each node's current system: a host switched by hand shows in
// the next plan. An unreachable host keeps its last known value, with a
// warning.
func (r *deploymentResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m deploymentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Status.IsNull() {
		return
	}
	d, cleanup, err := r.deployer(ctx, &m)
	if err != nil {
		resp.Diagnostics.AddWarning("Hosts not read", err.Error())
		return
	}
	defer cleanup()
	defaults := r.defaults(ctx, &m, &resp.Diagnostics)
	actions := map[string]string{}
	resp.Diagnostics.Append(m.Actions.ElementsAs(ctx, &actions, false)...)
	nodes := map[string]deployNodeModel{}
	for _, n := range r.nodes(ctx, &m, &resp.Diagnostics) {
		nodes[n.Name.ValueString()] = n
	}
	priors := priorNodes(ctx, &m, &resp.Diagnostics)
	records := statusRecords(ctx, &m, &resp.Diagnostics)
	for i, rec := range records {
		name := rec.Name.ValueString()
		n, ok := nodes[name]
		if !ok || actions[name] == actionSkip {
			continue
		}
		settings := r.settings(ctx, defaults, n, priors[name], &resp.Diagnostics)
		if err := d.Transport.Remember(ctx, settings, settings.SeenHostKey); err != nil {
			resp.Diagnostics.AddWarning("Node "+name+" key not remembered", fmt.Sprintf("node %s: %s", name, err))
		}
		current, err := d.ReadCurrent(ctx, settings)
		if err != nil {
			resp.Diagnostics.AddWarning("Node "+name+" not read", fmt.Sprintf("node %s: %s; its last known system is kept", name, strings.TrimRight(err.Error(), ".")))
			continue
		}
		records[i].CurrentSystem = types.StringValue(current.System)
		records[i].VerifiedSystem = types.StringValue(current.Succeeded)
		if current.HostKey != "" && rec.Host.ValueString() == orStr(n.Host.ValueString(), name) {
			records[i].HostKeySeen = types.StringValue(current.HostKey)
		}
		if goal := deploy.Goal(m.Goal.ValueString()); goal == deploy.GoalSwitch || goal == deploy.GoalTest {
			sys := rec.System.ValueString()
			switch {
			case current.System != sys && (actions[name] == actionSwitch || actions[name] == actionNone):
				actions[name] = actionDrift // switched by hand since
			case current.System == sys && actions[name] == actionSwitch:
				actions[name] = actionNone // done: a plan shows switch only for what it will switch
			}
			if actions[name] == actionDrift && current.System != sys {
				resp.Diagnostics.AddWarning("Node "+name+" drifted",
					fmt.Sprintf("node %s runs %s, not %s, which the last deploy left on it: it was switched outside this deployment. The next apply switches it back.", name, current.System, sys))
			}
		}
	}
	m.Status = statusList(ctx, records, &resp.Diagnostics)
	av := map[string]attr.Value{}
	for k, v := range actions {
		av[k] = types.StringValue(v)
	}
	m.Actions = types.MapValueMust(types.StringType, av)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	resp.Diagnostics.Append(setRefreshMark(ctx, resp.Private, r.data.run)...)
}

// Delete forgets the deployment; hosts keep running what they run.
func (r *deploymentResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {
}

// sshOptValidator refuses ssh_opts items that are not a bare Key=Value.
type sshOptValidator struct{}

func (sshOptValidator) Description(context.Context) string {
	return "a bare OpenSSH option Key=Value matching " + deploy.SSHOptPattern
}
func (v sshOptValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }
func (sshOptValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := deploy.CheckSSHOpt(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid ssh_opts item", req.Path.String()+": "+err.Error())
	}
}

// hostKeyLineValidator accepts a public key line (type and base64 key, an
// optional comment): OpenSSH is given it in a known_hosts file.
type hostKeyLineValidator struct{}

func (hostKeyLineValidator) Description(context.Context) string {
	return "a public key line such as ssh-ed25519 AAAA..."
}
func (v hostKeyLineValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (hostKeyLineValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := deploy.CheckHostKeyLine(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid host_key", req.Path.String()+": "+err.Error())
	}
}
