package provider

import (
	"context"
	"maps"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/validators"
)

var (
	_ resource.ResourceWithConfigure      = (*deploymentResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*deploymentResource)(nil)
	_ resource.ResourceWithValidateConfig = (*deploymentResource)(nil)
	_ resource.ResourceWithUpgradeState   = (*deploymentResource)(nil)
)

func newDeploymentResource() resource.Resource { return &deploymentResource{} }

type deploymentResource struct{ data *providerData }

func (r *deploymentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_ssh_deployment"
}

func sshOptsAttribute(desc string) schema.ListAttribute {
	return schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: desc,
		Validators: []validator.List{listvalidator.ValueStringsAre(sshOptValidator{})}}
}

func optionalString(desc string, validators ...validator.String) schema.StringAttribute {
	return schema.StringAttribute{Optional: true, MarkdownDescription: desc, Validators: validators}
}

const useSudoDescription = "The login user is not root: every command that needs root runs through `sudo -n` (never a prompt), and the closure is copied into the host's store by root through sudo. " +
	"The user needs passwordless sudo for every command on the host. Default `false`: the login user must be root."

// buildOnAttribute is where a node's system is built when this machine's
// store lacks it.
var buildOnAttribute = optionalString("Where a system this machine's store lacks is built from its `derivation`: `local` (default: this machine, and the remote `builders` its Nix configuration names) "+
	"or `target` (the derivation's closure is copied to the host and built there, with the host's Nix: for a host of another platform, or a system cheaper to build than to copy; it needs root's rights there, or `use_sudo`).",
	stringvalidator.OneOf(string(deploy.BuildLocal), string(deploy.BuildTarget)))

const keyFileDescription = "Private key file, given to ssh as `-i`. A plan refuses one it cannot read, and an encrypted one unless an ssh-agent (`SSH_AUTH_SOCK`) holds it: ssh never asks for a passphrase."

// sshOptHints say where the connection settings a deployment node has no
// key of its own for go.
var sshOptHints = map[string]string{
	"port":                 `The SSH port goes in ssh_opts: ssh_opts = ["Port=2222"].`,
	"ssh_port":             `The SSH port goes in ssh_opts: ssh_opts = ["Port=2222"].`,
	"bastion":              `A jump host goes in ssh_opts: ssh_opts = ["ProxyJump=bastion.example.org"].`,
	"proxy_jump":           `A jump host goes in ssh_opts: ssh_opts = ["ProxyJump=bastion.example.org"].`,
	"identity_file":        `Did you mean "private_key_file"?`,
	"ssh_user":             `Did you mean "user"?`,
	"host_key_fingerprint": `The deployment takes the host's public key line in host_key (ssh-keyscan prints it); OpenSSH cannot check a fingerprint.`,
}

// keyHints say where colmena's and NixOps' key settings go.
var keyHints = map[string]string{
	"destDir":    `destination takes the file's whole path: destination = "/run/keys/<name>".`,
	"dest_dir":   `destination takes the file's whole path: destination = "/run/keys/<name>".`,
	"name":       `The key's name is its key in keys; destination takes the file's whole path.`,
	"owner":      `Did you mean "user"?`,
	"uploadAt":   `upload takes "before-activation" or "after-verdict".`,
	"text":       `A key's content goes in key_contents_wo, by the key's name: key_contents_wo = { "<name>" = var.<name> }.`,
	"keyFile":    `A key's content goes in key_contents_wo, by the key's name: key_contents_wo = { "<name>" = file("<path>") }.`,
	"keyCommand": `A key's content goes in key_contents_wo, by the key's name: an ephemeral resource's value, or a variable.`,
	"content":    `A key's content goes in key_contents_wo, by the key's name: key_contents_wo = { "<name>" = var.<name> }.`,
}

// The deployment's nested inputs, checked key by key (see nestedInput).
var (
	deployNodesInput = nestedInput{name: "nodes", decl: schema.ListNestedAttribute{NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
		"name": schema.StringAttribute{Required: true, MarkdownDescription: "Node name, unique; the host when `host` is not set.",
			Validators: []validator.String{stringvalidator.LengthAtLeast(1)}},
		"system": schema.StringAttribute{Required: true, MarkdownDescription: "The system closure to switch to (a `/nix/store/...-nixos-system-...` path): `fleet_nixos_systems`' `systems[name].system`, or a path built on this machine.",
			Validators: []validator.String{storePathValidator{}}},
		"derivation": optionalString("The system's derivation (`fleet_nixos_systems`' `systems[name].derivation`): a system this machine's store lacks is built from it, as the node's `build` step, where `build_on` says. "+
			"Without it, the system must be built already.", derivationValidator{}),
		"build_on": buildOnAttribute,
		"host":     optionalString("Host name or address. Default: `name`.", validators.Host()),
		"host_key": optionalString("The host's public key line (`ssh-ed25519 AAAA...`, as in its `ssh_host_ed25519_key.pub` or from `ssh-keyscan`; a `SHA256:` fingerprint is refused, as OpenSSH needs the key itself): "+
			"only this key is accepted. Without it, the first key seen is remembered in `known_hosts_file` and in `status` (`host_key_seen`), and the node is held to it.", hostKeyLineValidator{}),
		"user":             optionalString("User to log in as."),
		"private_key_file": optionalString(keyFileDescription),
		"ssh_opts":         sshOptsAttribute("Bare OpenSSH options `Key=Value`; replaces the defaults' list."),
		"use_sudo":         schema.BoolAttribute{Optional: true, MarkdownDescription: useSudoDescription},
	}}}, hints: sshOptHints}
	deployKeysInput = nestedInput{name: "keys", decl: schema.MapNestedAttribute{NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
		"destination": optionalString("Where the key is written on the host: an absolute path outside `/nix/store`. Default `/run/keys/<name>` (a tmpfs on NixOS: gone at a reboot; the next refresh sees it missing and the next apply puts it back). "+
			"Every directory of the path must be root's and writable by no other user (a service's own state directory is refused: its user could swap what root writes there); a missing one is created, root's, mode 0755. "+
			"Something other than a file at the destination (a directory, a link) fails the node.", keyDestinationValidator{}),
		"user":        optionalString("The key file's owner on the host. Default `root`. A user the host lacks fails the node before it activates, naming it.", stringvalidator.LengthAtLeast(1)),
		"group":       optionalString("The key file's group on the host. Default `root`.", stringvalidator.LengthAtLeast(1)),
		"permissions": optionalString("The key file's mode, in octal. Default `0400`.", permissionsValidator{}),
		"upload": optionalString("When the key is put in place: `before-activation` (default: a unit the switch starts can read it) or `after-verdict` (only once the new system passed its verdict; refused with goal `boot`, which judges nothing).",
			stringvalidator.OneOf(string(deploy.UploadBeforeActivation), string(deploy.UploadAfterVerdict))),
		"nodes": schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "The nodes whose hosts get the key. Default: every node. A name not in `nodes` is refused.",
			Validators: []validator.List{listvalidator.UniqueValues()}},
		"restart_units": schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Units restarted after this key was written (new, or its content, owner or mode put right): `[\"postgresql.service\"]`; with a switch, once the new system runs and before its verdict. Unit names only: a pattern (`*`) is refused.",
			Validators: []validator.List{listvalidator.ValueStringsAre(stringvalidator.RegexMatches(deploy.UnitNamePattern, "must be a systemd unit name, such as postgresql.service (letters, digits and @ . _ : \\ - only: a pattern such as * is refused, as systemctl would restart every unit it matches)"))}},
	}}}, hints: keyHints}
	deployDefaultsInput = nestedInput{name: "defaults", decl: schema.SingleNestedAttribute{Attributes: map[string]schema.Attribute{
		"user":             optionalString("User to log in as."),
		"private_key_file": optionalString(keyFileDescription),
		"build_on":         buildOnAttribute,
		"ssh_opts":         sshOptsAttribute("Bare OpenSSH options `Key=Value`, each given as `-o Key=Value`. Pattern: `" + deploy.SSHOptPattern + "`. An item that asks for forwarding (`ForwardAgent=yes`, `LocalForward`, `RemoteForward`, `DynamicForward`, `ForwardX11`, `Tunnel`) is refused: nothing of this machine's is forwarded to a host."),
		"use_sudo":         schema.BoolAttribute{Optional: true, MarkdownDescription: useSudoDescription},
	}}, hints: sshOptHints}
	verdictInput = nestedInput{name: "verdict", decl: schema.SingleNestedAttribute{Attributes: map[string]schema.Attribute{
		"confirm_timeout": optionalString("How long the host's watchdog waits without a word from the deployer before switching the host back, counted from the deployer's last word, and never before the activation has ended (so after an interrupt it switches back `confirm_timeout` after the last word, or at the activation's end if that is later), as a Go duration of at least 1s. Default `30s`. "+
			"The deployer speaks to the host at least once a second while it judges (however long `settle_timeout` and the checks take), so a verdict that passes is never undone for being slow; "+
			"a host that stops answering for this long (and a second) during the verdict has switched itself back, unless a confirmation reached it: the deployer asks it over new logins what it did, "+
			"and records that (`RolledBack`), or, when it cannot be asked, `Unknown`, which the next refresh settles. "+
			"During the activation the same silence decides nothing (the watchdog waits for the activation's end): the deployer asks the host over new logins, and one that answers with nothing decided carries on.",
			durationValidator{least: time.Second}),
		"settle_timeout": optionalString("How long `systemctl is-system-running --wait` may take, as a Go duration of at least 1s. Default `90s`.",
			durationValidator{least: time.Second}),
		"allow_failed_units":    schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Units that may fail (exit 4 and `degraded` pass with only these)."},
		"allow_reboot_required": schema.BoolAttribute{Optional: true, MarkdownDescription: "Let exit 100 (reboot required) pass. Default `false`."},
		"http": schema.ListNestedAttribute{Optional: true, MarkdownDescription: "URLs requested from this machine.", NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"url": schema.StringAttribute{Required: true, MarkdownDescription: "`http://` or `https://` URL.", Validators: []validator.String{urlValidator{}}},
			"expect_status": schema.Int64Attribute{Optional: true, MarkdownDescription: "Expected status. Default 200.",
				Validators: []validator.Int64{int64validator.Between(100, 599)}},
		}}},
		"tcp": schema.ListNestedAttribute{Optional: true, MarkdownDescription: "Ports on the node's host, connected to the way SSH reaches it: at the `HostName` the `ssh_config_file` gives it, through its `ProxyJump` (from `ssh_opts` or the file) when it has one, else from this machine.", NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"port": schema.Int64Attribute{Required: true, MarkdownDescription: "Port.", Validators: []validator.Int64{int64validator.Between(1, 65535)}},
		}}},
		"command": schema.ListNestedAttribute{Optional: true, MarkdownDescription: "Commands run on the node, as root, one after the other; each must exit 0. Each runs in a session of its own, stopped (SIGTERM to its process group) once the host has decided the deploy (as its watchdog does `confirm_timeout` after an interrupted or killed apply's last word): no check goes on into the watchdog's switch back.", NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"run": schema.StringAttribute{Required: true, MarkdownDescription: "Shell command.", Validators: []validator.String{stringvalidator.LengthAtLeast(1)}},
		}}},
	}}}
)

func (r *deploymentResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = r.schema(ctx, 5)
}

// schema is the resource's schema at a version: 0 took the nested inputs
// as nested attributes, which Terraform converts to their type before the
// provider sees them, dropping misspelt keys; 1 takes them as dynamic
// attributes that nestedInput checks; 2 says a node's generation once in
// its record (observed_generation), not in each of its conditions; 3 keys
// status by node name (a list in node order before, where a node added or
// removed in the middle rewrote every record after it).
func (r *deploymentResource) schema(ctx context.Context, version int64) schema.Schema {
	computedStr := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	input := func(in nestedInput, required bool, desc string) schema.Attribute {
		if version >= 1 {
			return in.attribute(required, desc)
		}
		switch d := in.decl.(type) {
		case schema.ListNestedAttribute:
			d.Required, d.Optional = required, !required
			return d
		case schema.SingleNestedAttribute:
			d.Required, d.Optional = required, !required
			return d
		}
		panic("unreachable")
	}
	keysAttr := deployKeysInput.attribute(false, "Secret files put on the nodes' hosts, by name (`/` is refused in a name), as colmena's `deployment.keys`: each written atomically with its owner, group and mode, from `key_contents_wo`. "+
		"Neither the content nor a digest of it is kept in state or a plan: a plan asks each host for its key files' digest, owner, group and mode, and plans the action `keys` for a node whose host lacks a key, holds another content or owner or mode, or holds a key no longer configured (removed). "+
		"A node that switches gets its keys in the same deploy, before the activation or after the verdict as `upload` says. Destroying the deployment removes its keys from the hosts.")
	keyContentsAttr := schema.MapAttribute{Optional: true, Sensitive: true, WriteOnly: true, ElementType: types.StringType,
		MarkdownDescription: "The keys' contents, by the names in `keys`: one for each key, and none other. Write-only (Terraform 1.11, OpenTofu 1.11 or later): never in state or a saved plan; it may come from an ephemeral resource or an ephemeral variable. " +
			"It reaches each host over the SSH session's standard input, never a command line."}
	s := schema.Schema{
		Version: version,
		MarkdownDescription: "Rolls NixOS system closures onto existing hosts over SSH with the system OpenSSH client and `nix-copy-closure`, " +
			"one host after the other in list order, each with a verdict: the bootloader is finalised only after a passing verdict, a failing host is rolled back " +
			"(on the host itself when the new system cuts off SSH), and a failure never stops the hosts after it. Plans show each node's action in `actions`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, MarkdownDescription: "Identifier generated at create.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"defaults":        input(deployDefaultsInput, false, "SSH settings every node inherits unless it sets its own. Below them are the provider's: its `default_user` (or `FLEET_SSH_USER`, else `root`) and key (`private_key`, `private_key_file`, or `FLEET_PRIVATE_KEY_FILE`), else the ssh-agent."),
			"ssh_config_file": optionalString("An OpenSSH client configuration file, given to every ssh as `-F`; a plan refuses one that does not exist. Host-key options it sets for a node (under `Host` lines that take its host, or under any `Match` line, which is not evaluated) are left to it."),
			"known_hosts_file": optionalString("The accept-new trust store for nodes without `host_key` and for jump hosts. Default: `fleet-known-hosts` beside the defaults' key file when its directory is yours alone, " +
				"else `known_hosts` in the provider's private directory (`$XDG_STATE_HOME`, else `~/.local/state`, then `terraform-provider-fleet/`), else, when neither directory can be written, ssh's own `~/.ssh/known_hosts`. " +
				"A plan refuses one in a directory that does not exist, and a file or directory another user owns or others can write."),
			"nodes": input(deployNodesInput, true, "The nodes, deployed in this order."),
			"goal": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(string(deploy.GoalSwitch)),
				MarkdownDescription: "`switch` (activate, judge, make the boot default), `boot` (boot default only), `test` (activate and judge only) or `dry-activate`.",
				Validators:          []validator.String{stringvalidator.OneOf("switch", "boot", "test", "dry-activate")}},
			"on_failure": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("rollback"),
				MarkdownDescription: "`rollback` (default): a failing verdict switches the node back. `keep`: leave the new system active for inspection; the system profile (`boot_system`) points back at the system before, which the host boots.",
				Validators:          []validator.String{stringvalidator.OneOf("rollback", "keep")}},
			"hold": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Nodes to skip, with the reason shown in the plan: for example `fleet_node_health_policy.x.error_nodes`."},
			"remote_exec_timeout": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(60),
				MarkdownDescription: "Seconds a remote command may stay silent before the keepalive ends it, and a read of a host at refresh may take after the login. A host that hears nothing for this long from the deployer holding its deploy lock (a deployer that vanished) ends that lock. From 5 to 3600; default 60.", Validators: []validator.Int64{int64validator.Between(5, 3600)}},
			"boot_lock_attempts": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(60),
				MarkdownDescription: "Attempts, 5 s apart, while the switch lock is held (exit 11). Default 60.", Validators: []validator.Int64{int64validator.Between(1, 1000)}},
			"parallelism": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(1),
				MarkdownDescription: "How many nodes deploy at once. Default 1: one after the other. Nodes start in list order, each once the node before it has logged in, holds its host's lock and has copied its closure or copied for half a second (or waits for the lock, or has failed), so logins and copies come one after the other; each keeps its own lock, verdict, rollback and record.",
				Validators:          []validator.Int64{int64validator.Between(1, 1000)}},
			"max_failures": schema.Int64Attribute{Optional: true,
				MarkdownDescription: "The failure budget: once more nodes than this have failed, no new node starts, the nodes not started stay `Pending`, the apply fails naming the budget, " +
					"and the next plan retries the failed and the pending nodes. Default: no limit, every node is tried. `0` stops at the first failure.",
				Validators: []validator.Int64{int64validator.AtLeast(0)}},
			"plan_dry_activate": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "Whether a plan asks each node it switches what the switch will restart, start, stop and reload by running the new system's own `switch-to-configuration dry-activate` on the host, as `nixos-rebuild dry-activate` does. " +
					"That needs the closure on the host: the plan copies it there first (the running system is not touched; the apply then finds it copied) and dry-activates under the host's deploy lock. " +
					"The answer is kept for ten minutes (in `terraform-provider-fleet/dry-activations` under `$XDG_STATE_HOME`, else `~/.local/state`) for the same host on the same running system, so the apply's own plan does not dry-activate again. " +
					"Default `false`: the plan compares the two systems' unit files instead, a lower bound. Either way the plan says, per switching node, what is copied, how the packages change and whether a reboot is needed.",
			},
			"only_nodes": schema.ListAttribute{Optional: true, ElementType: types.StringType, WriteOnly: version >= 4,
				MarkdownDescription: "Deploy only these nodes in this apply, as `colmena apply --on` or `deploy .#web1` do: every other node that would switch waits, its record and action as they were, " +
					"and the next apply without it deploys them (the plan names them). Meant for the command line: `only_nodes = var.only_nodes`, a variable that defaults to `null`, " +
					"and `terraform apply -var 'only_nodes=[\"web1\"]'`. Default `null`: every node. A name not in `nodes` is refused. " +
					"Write-only (Terraform 1.11, OpenTofu 1.11 or later): an instruction for one run, never kept in state or in a saved plan, so that a plan without it after an apply that used it shows no change on a fleet with nothing left to deploy.",
				Validators: []validator.List{listvalidator.UniqueValues(), listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))}},
			"activation_timeout": optionalString("How long an activation may take, as a Go duration of at least 1s. Default `5m`.", durationValidator{least: time.Second}),
			"lock_timeout":       optionalString("How long to wait for another deployment's lock on a host, as a Go duration. Default `0s`: fail at once, naming the holder.", durationValidator{}),
			"verdict":            input(verdictInput, false, "What a passing verdict needs besides a clean activation, a new SSH login and `/run/current-system` pointing at the new system."),
			"timeouts":           timeouts.Attributes(ctx, timeouts.Opts{Create: true, Update: true}),
			"actions": schema.MapAttribute{Computed: true, ElementType: types.StringType,
				MarkdownDescription: "Per node, the action: `switch`, `none` or `skip` in a plan; in state, the last outcome (`switch` done, `none`: nothing was to do, the host ran the system after a passing verdict, `failed`: the next plan retries it (a node whose outcome is not known too), `pending`: not started, stopped by an interrupt, the failure budget or a deployment that could not start on this machine, the next plan switches it, `drift`: the host was changed outside, `skip`); `boot-entry` (goal `switch`), in a plan and in state: the host runs the node's system after a passing verdict but boots another, and the apply makes the system its boot entry, activating nothing (see `boot_system`); " +
					"`waiting`, in a plan and in state: `only_nodes` left the node, which would switch, for a later apply (its record as it was), and the next plan without `only_nodes` switches it; " +
					"`keys`, in a plan and in state: the node's system stands and its keys alone are put in place or removed (see `keys`), then the units of the keys that changed are restarted (a node whose keys failed keeps it, its phase `Failed`, and the next plan puts them in place again)."},
			"status": schema.MapNestedAttribute{Computed: true, MarkdownDescription: "Per node, by name, its record (`status[\"web1\"].phase`). A node added, removed or renamed changes its own record only.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"host": computedStr("Host."), "action": computedStr("Action of the last apply."),
					"phase": computedStr("Derived from the node's `Ready` condition: `Succeeded`, `Failed` (an interrupted node too: exit 130, its message names the step it stopped in and what the host does now; and a node a refresh found changed outside since the last apply left it converged, `Ready` False with reason `Drifted`, running another system, or `BootsAnother`, booting another, until the next apply mends it), " +
						"`RolledBack`, `Skipped`, `Pending` (not started: an interrupt, the failure budget, or a deployment that could not start on this machine; no exit code, and the message says why), " +
						"or `Unknown` (the host stopped answering between its decision and its answer, and could not be asked: the next refresh reads the host and settles the record, its message starting `settled by a refresh`)."),
					"system": computedStr("The system the last deploy of the node aimed at."), "current_system": computedStr("What `/run/current-system` pointed at when last read."),
					"previous_system": computedStr("The system before the last deploy."),
					"verified_system": computedStr("The last system a deploy finished on the host with a passing verdict, as the host itself records it (read with `current_system`). " +
						"A node whose host runs its configured system, and records that system as verified, has nothing to do: after a failed switch is rolled back and the configuration is set back, or after a failed first apply. " +
						"Goal `boot` verifies nothing (no verdict judges the system it makes the boot default). Empty while the host settles a run on its own (its watchdog waits for its decision or switches back, as after an interrupted apply): " +
						"what the host runs may change any moment then, so the plan switches the node, and the apply waits for the host's deploy lock (`lock_timeout`) or fails naming what holds it."),
					"boot_system": computedStr("What the host boots next, when last read (with `current_system`) or deployed: its system profile (`/nix/var/nix/profiles/system`), from which NixOS installs the default boot entry; empty when not known (the host has no profile, or a deploy that did not finish may have moved it). " +
						"Under goal `switch`, a node whose host runs its system after a passing verdict but boots another (after goal `test`, or a boot entry changed by hand) plans the action `boot-entry`: the apply makes the system its boot entry and activates nothing; under goal `boot` it plans `switch`. " +
						"After a failed boot entry (`BootloaderFinalized` False) the bootloader may still hold the system before, whatever the profile says: the next apply makes the entry again."),
					"host_key_seen": computedStr("The host key (`type base64`) the host showed when last reached. A node without `host_key` is held to it from then on, " +
						"also from a runner whose `known_hosts_file` is new: another key fails the node, naming both keys. Changing the node's `host` forgets it."),
					"exit_code": schema.Int64Attribute{Computed: true, MarkdownDescription: "Exit status of the failing step, 0 on success; null for a node never started (`Pending`). The step's own command's status where it has one (`switch-to-configuration`: 4 units failed, 11 its switch lock held, 100 a reboot required; `nix-store --realise` on the host with `build_on = \"target\"`: 100 to 104 a build failed, in Nix's terms (the message and `reason` `BuildFailed` say which step it was); 124 a bound ran out), else the deployer's: 1 a failed verdict, a lost or unknown outcome; 3 the host's deploy lock held past `lock_timeout`; 75 the host refused an action of a lease that had ended (`LeaseLost`); 130 an interrupt or an expired `timeouts` block; 255 SSH itself failed (the host unreachable, the session lost)."},
					"message":   computedStr("What happened."), "hint": computedStr("How to fix a failure, where one helps."),
					"started_at": computedStr("When the node's deploy started (RFC 3339)."), "finished_at": computedStr("When it ended."),
					"observed_generation": schema.Int64Attribute{Computed: true, MarkdownDescription: "The `generation` the node's conditions were observed at: that of its last deploy (or hold)."},
					"conditions":          nodeConditionsAttribute(nodeConditionKinds),
				}}},
			"succeeded_nodes": schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Nodes whose last deploy succeeded."},
			"failed_nodes":    schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Nodes whose last deploy failed, that an interrupted apply did not start, or whose outcome is not known (`Unknown`)."},
			"skipped_nodes":   schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Nodes held back."},
			"phase": schema.StringAttribute{Computed: true, MarkdownDescription: "Derived from the deployment's `Ready` condition: `Succeeded` when every node is, " +
				"`Failed` when one failed, was not started or has an outcome not known, else (a node held) `Partial`."},
			"generation": schema.Int64Attribute{Computed: true, MarkdownDescription: "Starts at 1 and increases by one whenever an input changes what the deployment does " +
				"(`nodes`, `defaults`, `verdict`, `goal`, `hold`, `keys`, `reboot`, the timeouts and files); each node's record says the generation of that node's last deploy (its `observed_generation`)."},
			"observed_generation": schema.Int64Attribute{Computed: true, MarkdownDescription: "The `generation` the last apply deployed."},
			"conditions":          conditionsAttribute("`Ready`, and `KeysUploaded` for a deployment with keys (True when every node's keys are in place, else False naming the nodes whose are not)"),
		},
	}
	if version >= 3 {
		// Added in version 5 with no change of version, as plan-time
		// inputs: null in the states of versions 3 to 5 written before
		// them (versions 0 to 2 are upgraded by hand, with their own
		// models).
		s.Attributes["keys"] = keysAttr
		s.Attributes["key_contents_wo"] = keyContentsAttr
		s.Attributes["reboot"] = optionalString("When a switch boots its host into the new system instead of activating it live (goal `switch` only): `never` (the default, also when unset: "+
			"a system that needs a reboot fails its verdict with exit 100, unless `verdict.allow_reboot_required`), `when-required` (the new system's kernel, initrd or kernel modules differ from those the host booted) or `always`. "+
			"Such a node's boot entry is made under the host's deploy lock (the system before stays the fallback entry), the host is rebooted and waited for (a new boot id within `reboot_timeout`), "+
			"and the verdict judges the booted host (`/run/booted-system` and `/run/current-system` the new system, then the usual checks); a failing verdict puts the boot entry back and reboots into the system before (`RolledBack`). "+
			"Reboots follow `parallelism`, `max_failures`, `hold` and `only_nodes`; the plan names each node that will reboot and why; the node's `Rebooted` condition says how its last reboot went.",
			stringvalidator.OneOf(string(deploy.RebootNever), string(deploy.RebootWhenRequired), string(deploy.RebootAlways)))
		s.Attributes["reboot_timeout"] = optionalString("How long a host may take to come back from a reboot (`reboot`), as a Go duration of at least 10s. Default `10m`: a host not back by then is recorded `Unknown`, and the next refresh reads what it runs.",
			durationValidator{least: 10 * time.Second})
	}
	if version < 5 {
		rec, _ := s.Attributes["status"].(schema.MapNestedAttribute)
		attrs := maps.Clone(rec.NestedObject.Attributes)
		delete(attrs, "boot_system")
		rec.NestedObject.Attributes = attrs
		s.Attributes["status"] = rec
	}
	if version < 3 {
		delete(s.Attributes, "only_nodes")
		rec, _ := s.Attributes["status"].(schema.MapNestedAttribute)
		attrs := maps.Clone(rec.NestedObject.Attributes)
		attrs["name"] = computedStr("Node name.")
		if version < 2 {
			delete(attrs, "observed_generation")
			attrs["conditions"] = conditionsAttribute(nodeConditionKinds)
		}
		s.Attributes["status"] = schema.ListNestedAttribute{Computed: true, MarkdownDescription: "Per node, in node order, its record.",
			NestedObject: schema.NestedAttributeObject{Attributes: attrs}}
	}
	if version == 0 {
		// Added in version 1, with no change of version: a plan-time
		// option, null in states written before it.
		delete(s.Attributes, "plan_dry_activate")
	}
	return s
}

const nodeConditionKinds = "`Reachable`, `ClosureCopied`, `Activated`, `VerdictPassed`, `BootloaderFinalized`, `Ready`, then `KeysUploaded` while a node's keys are not all in place and `Rebooted` once a deploy rebooted its host"

func (r *deploymentResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = configuredData(req.ProviderData, &resp.Diagnostics)
}

// ValidateConfig refuses what the configuration shows wrong as soon as
// the parts concerned are known: a misspelt or missing key in a nested
// input, a value of the wrong kind, a name listed twice.
func (r *deploymentResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m deploymentModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.decode(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.Nodes.IsUnknown() {
		// The keys' own faults are known without the nodes.
		checkKeys(ctx, &m, req.Config, nil, false, &resp.Diagnostics)
		return
	}
	nodes := r.nodes(ctx, &m, &resp.Diagnostics)
	seen := checkNodes(nodes, &resp.Diagnostics)
	checkKeys(ctx, &m, req.Config, seen, namesKnown(nodes), &resp.Diagnostics)
	checkReboot(&m, &resp.Diagnostics, true)
	if !resp.Diagnostics.HasError() {
		// Terraform validates the configuration again just before it
		// plans: the logins of this run's refresh that the plan will not
		// use can end now.
		r.endUnasked(ctx, &m, nodes)
	}
}

// deploymentModelV0 is the state of schema version 0, whose nested inputs
// were typed.
type deploymentModelV0 struct {
	deploymentState
	deploymentStatus
	Status   types.List   `tfsdk:"status"`
	Defaults types.Object `tfsdk:"defaults"`
	Nodes    types.List   `tfsdk:"nodes"`
	Verdict  types.Object `tfsdk:"verdict"`
}

// deploymentModelV2 is the state of schema versions 1 and 2, whose status
// is a list in node order.
type deploymentModelV2 struct {
	deploymentState
	deploymentStatus
	Status          types.List    `tfsdk:"status"`
	DefaultsInput   types.Dynamic `tfsdk:"defaults"`
	NodesInput      types.Dynamic `tfsdk:"nodes"`
	VerdictInput    types.Dynamic `tfsdk:"verdict"`
	PlanDryActivate types.Bool    `tfsdk:"plan_dry_activate"`
}

// UpgradeState turns a state of an earlier version into one of version 5:
// the records of versions 0 to 4 gain boot_system, null (not read yet: a
// refresh reads it, and a null plans no boot entry);
// version 3's only_nodes (kept in state then) dropped, now that it is
// write-only;
// version 0's nested inputs into the values a configuration writes (a
// tuple of objects holding the keys that were set), so that a
// configuration unchanged since plans no change; the generation each node
// condition of versions 0 and 1 held into its record's
// observed_generation; and the list of records of versions 0 to 2 into
// records keyed by node name.
func (r *deploymentResource) UpgradeState(ctx context.Context) map[int64]resource.StateUpgrader {
	prior0, prior1, prior2, prior3, prior4 := r.schema(ctx, 0), r.schema(ctx, 1), r.schema(ctx, 2), r.schema(ctx, 3), r.schema(ctx, 4)
	fromList := func(ctx context.Context, req resource.UpgradeStateRequest, resp *resource.UpgradeStateResponse) {
		var old deploymentModelV2
		resp.Diagnostics.Append(req.State.Get(ctx, &old)...)
		if resp.Diagnostics.HasError() {
			return
		}
		m := deploymentModel{deploymentState: old.deploymentState, deploymentStatus: old.deploymentStatus,
			DefaultsInput: old.DefaultsInput, NodesInput: old.NodesInput, VerdictInput: old.VerdictInput, PlanDryActivate: old.PlanDryActivate,
			OnlyNodes: types.ListNull(types.StringType), KeysInput: types.DynamicNull(), KeyContents: types.MapNull(types.StringType), Reboot: types.StringNull(), RebootTimeout: types.StringNull()}
		m.Status = keyedStatus(recordsWithGeneration(old.Status, &resp.Diagnostics), &resp.Diagnostics)
		resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	}
	fromKeyed := func(ctx context.Context, req resource.UpgradeStateRequest, resp *resource.UpgradeStateResponse) {
		var m deploymentModel
		resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
		if resp.Diagnostics.HasError() {
			return
		}
		m.OnlyNodes = types.ListNull(types.StringType)
		m.KeyContents = types.MapNull(types.StringType)
		m.Status = withBootSystem(m.Status, &resp.Diagnostics)
		resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	}
	return map[int64]resource.StateUpgrader{
		4: {PriorSchema: &prior4, StateUpgrader: fromKeyed},
		3: {PriorSchema: &prior3, StateUpgrader: fromKeyed},
		2: {PriorSchema: &prior2, StateUpgrader: fromList},
		1: {PriorSchema: &prior1, StateUpgrader: fromList},
		0: {PriorSchema: &prior0, StateUpgrader: func(ctx context.Context, req resource.UpgradeStateRequest, resp *resource.UpgradeStateResponse) {
			var old deploymentModelV0
			resp.Diagnostics.Append(req.State.Get(ctx, &old)...)
			if resp.Diagnostics.HasError() {
				return
			}
			verdict := old.Verdict
			if !verdict.IsNull() && !verdict.IsUnknown() {
				// Version 0 wrote its default; a configuration does not.
				attrs := verdict.Attributes()
				if b, ok := attrs["allow_reboot_required"].(types.Bool); ok && !b.ValueBool() {
					attrs["allow_reboot_required"] = types.BoolNull()
					verdict = types.ObjectValueMust(verdict.AttributeTypes(ctx), attrs)
				}
			}
			m := deploymentModel{deploymentState: old.deploymentState, deploymentStatus: old.deploymentStatus,
				DefaultsInput: writtenValue(old.Defaults), NodesInput: writtenValue(old.Nodes), VerdictInput: writtenValue(verdict),
				OnlyNodes: types.ListNull(types.StringType), KeysInput: types.DynamicNull(), KeyContents: types.MapNull(types.StringType), Reboot: types.StringNull(), RebootTimeout: types.StringNull()}
			m.Status = keyedStatus(recordsWithGeneration(old.Status, &resp.Diagnostics), &resp.Diagnostics)
			m.decode(ctx, &diag.Diagnostics{})
			completeStatus(ctx, &m, &resp.Diagnostics)
			resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
		}}}
}

// withBootSystem is a status of schema versions 3 and 4, whose records
// had no boot_system, as version 5 has it: boot_system null.
func withBootSystem(status types.Map, diags *diag.Diagnostics) types.Map {
	if status.IsNull() || status.IsUnknown() {
		return types.MapNull(deployStatusType)
	}
	elems := map[string]attr.Value{}
	for name, e := range status.Elements() {
		rec, ok := e.(types.Object)
		if !ok {
			continue
		}
		attrs := maps.Clone(rec.Attributes())
		if _, has := attrs["boot_system"]; !has {
			attrs["boot_system"] = types.StringNull()
		}
		v, d := types.ObjectValue(deployStatusAttrTypes, attrs)
		diags.Append(d...)
		elems[name] = v
	}
	m, d := types.MapValue(deployStatusType, elems)
	diags.Append(d...)
	return m
}

// keyedStatus is a list of records holding their node's name (schema
// versions 0 to 2) as records keyed by it, each with boot_system null.
func keyedStatus(records []types.Object, diags *diag.Diagnostics) types.Map {
	elems := map[string]attr.Value{}
	for _, rec := range records {
		attrs := maps.Clone(rec.Attributes())
		name, _ := attrs["name"].(types.String)
		delete(attrs, "name")
		if _, has := attrs["boot_system"]; !has {
			attrs["boot_system"] = types.StringNull()
		}
		v, d := types.ObjectValue(deployStatusAttrTypes, attrs)
		diags.Append(d...)
		elems[name.ValueString()] = v
	}
	m, d := types.MapValue(deployStatusType, elems)
	diags.Append(d...)
	return m
}

// recordsWithGeneration is a status of schema versions 0 and 1, whose
// node conditions each held their generation, as version 2 has it: the
// generation in the record, once (the six were always written together;
// null for a record without conditions). A record of version 2 keeps
// its own.
func recordsWithGeneration(status types.List, diags *diag.Diagnostics) []types.Object {
	if status.IsNull() || status.IsUnknown() {
		return nil
	}
	recordTypes := maps.Clone(deployStatusAttrTypes)
	recordTypes["name"] = types.StringType
	var records []types.Object
	for _, e := range status.Elements() {
		rec, ok := e.(types.Object)
		if !ok || rec.IsNull() || rec.IsUnknown() {
			continue
		}
		attrs := maps.Clone(rec.Attributes())
		gen, kept := attrs["observed_generation"].(types.Int64)
		if !kept {
			gen = types.Int64Null()
		}
		var conds []attr.Value
		if l, ok := attrs["conditions"].(types.List); ok && !l.IsNull() && !l.IsUnknown() {
			for _, ce := range l.Elements() {
				c, ok := ce.(types.Object)
				if !ok || c.IsNull() || c.IsUnknown() {
					continue
				}
				ca := maps.Clone(c.Attributes())
				if g, ok := ca["observed_generation"].(types.Int64); ok && gen.IsNull() {
					gen = g
				}
				delete(ca, "observed_generation")
				conds = append(conds, types.ObjectValueMust(nodeConditionAttrTypes, ca))
			}
		}
		attrs["observed_generation"] = gen
		attrs["conditions"] = types.ListValueMust(nodeConditionObjectType, orEmpty(conds))
		if _, has := attrs["boot_system"]; !has {
			attrs["boot_system"] = types.StringNull()
		}
		v, d := types.ObjectValue(recordTypes, attrs)
		diags.Append(d...)
		records = append(records, v)
	}
	return records
}
