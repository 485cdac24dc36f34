// Package provider translates between Terraform and the domain packages:
// schemas, CRUD, plan modifiers and the mapping of values. Behaviour lives in
// the domain packages; nothing here dials, classifies or decides a state.
package provider

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/health"
	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// Environment variables read by the provider configuration.
const (
	EnvProbeInterval        = "FLEET_PROBE_INTERVAL"
	EnvProbeConcurrency     = "FLEET_PROBE_CONCURRENCY"
	EnvKnownHostsFile       = "FLEET_KNOWN_HOSTS_FILE"
	EnvSSHUser              = "FLEET_SSH_USER"
	EnvPrivateKey           = "FLEET_PRIVATE_KEY"
	EnvPrivateKeyFile       = "FLEET_PRIVATE_KEY_FILE"
	EnvPrivateKeyPassphrase = "FLEET_PRIVATE_KEY_PASSPHRASE"
	// EnvSSHPrivateKeyFileDeprecated is the deployment's old name for
	// FLEET_PRIVATE_KEY_FILE, still read, with a warning.
	EnvSSHPrivateKeyFileDeprecated = "FLEET_SSH_PRIVATE_KEY_FILE"
)

const (
	defaultKnownHostsFile = "~/.ssh/known_hosts"
	defaultUser           = "root"
)

var _ provider.Provider = (*fleetProvider)(nil)

type fleetProvider struct {
	version      string
	clock        clock.Clock
	probeTimeout time.Duration
	run          func() string
	interrupt    context.Context
	localShell   []string

	// slots is the probe semaphore: one per provider process, made by the
	// first Configure and shared by every probe whoever asks.
	slotsOnce sync.Once
	slots     *semaphore.Weighted
	// marks is what this process's refreshes read, per run (warnings.go).
	marks runMarks
	// sessions are the logins deployments' refreshes keep for their plans.
	sessions  heldSessions
	noPreview bool
}

// Option changes how the provider is built; tests use them to inject time.
type Option func(*fleetProvider)

// WithClock makes the provider read time from c.
func WithClock(c clock.Clock) Option { return func(p *fleetProvider) { p.clock = c } }

// WithProbeTimeout shortens the probe timeout, for tests of black-holed hosts.
func WithProbeTimeout(d time.Duration) Option { return func(p *fleetProvider) { p.probeTimeout = d } }

// WithInterrupt ends every probe in flight or waiting when ctx ends: the
// provider process was interrupted (Ctrl-C).
func WithInterrupt(ctx context.Context) Option { return func(p *fleetProvider) { p.interrupt = ctx } }

// WithRunID tells the provider which command it serves, for tests that
// serve it in-process, where the process that started it is the test's.
func WithRunID(run func() string) Option { return func(p *fleetProvider) { p.run = run } }

// WithoutPlanPreview makes plans only check that the nodes they switch
// are reachable, as they did before they said what each switch will do:
// the baseline of BenchmarkPlanPreview.
func WithoutPlanPreview() Option { return func(p *fleetProvider) { p.noPreview = true } }

// WithLocalShell sets the command that runs local nodes' health checks (a
// shell reading the script on standard input), for tests that run them in
// a mount namespace. Tests only.
func WithLocalShell(argv ...string) Option {
	return func(p *fleetProvider) { p.localShell = argv }
}

// New returns the provider factory that providerserver serves.
func New(version string, opts ...Option) func() provider.Provider {
	return func() provider.Provider {
		p := &fleetProvider{version: version, clock: clock.Real{}, probeTimeout: sshdial.ProbeTimeout, run: parentRun}
		for _, o := range opts {
			o(p)
		}
		return p
	}
}

// providerData is what Configure hands to every resource and data source.
type providerData struct {
	clock    clock.Clock
	interval reachability.Interval
	prober   *reachability.Prober
	health   *health.Evaluator
	defaults connectionDefaults
	// interrupt ends when the process is interrupted (Ctrl-C); nil when
	// only callers cancel.
	interrupt context.Context
	// run identifies the Terraform or OpenTofu command this configuration
	// serves, and marks what its refreshes read (see warnings.go).
	run   string
	marks *runMarks
	// sessions are the logins a deployment's refresh kept for its plan
	// (deployment_preview.go).
	sessions *heldSessions
	// noPreview: plans do not say what each switch will do (benchmarks).
	noPreview bool
}

// connectionDefaults are what the provider block gives every connection that
// does not set its own: the user, and credentials. Provider configuration is
// evaluated at every run and never written to state, so these credentials
// are there at every refresh.
type connectionDefaults struct {
	user        string
	credentials sshdial.Credentials // no Agent; FromProvider set when any key is given
	// keyFrom names where the key came from, for messages: the provider
	// block's attribute or the environment variable.
	keyFrom string
	// knownHosts is the known_hosts file the provider block or
	// FLEET_KNOWN_HOSTS_FILE names; empty when neither does.
	knownHosts string
}

// hasKey reports whether the provider block gives a key.
func (d connectionDefaults) hasKey() bool {
	return len(d.credentials.PrivateKey) > 0 || d.credentials.PrivateKeyFile != ""
}

type providerModel struct {
	ProbeInterval        types.Int64  `tfsdk:"probe_interval"`
	ProbeConcurrency     types.Int64  `tfsdk:"probe_concurrency"`
	KnownHostsFile       types.String `tfsdk:"known_hosts_file"`
	DefaultUser          types.String `tfsdk:"default_user"`
	PrivateKey           types.String `tfsdk:"private_key"`
	PrivateKeyFile       types.String `tfsdk:"private_key_file"`
	PrivateKeyPassphrase types.String `tfsdk:"private_key_passphrase"`
}

func (p *fleetProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "fleet"
	resp.Version = p.version
}

func (p *fleetProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Tells whether the SSH hosts of a fleet are reachable, why not, and since when, with host keys always verified, " +
			"and keeps what it observed as Kubernetes-style conditions in state. " +
			"Every argument can also come from an environment variable; the configuration wins.",
		Attributes: map[string]schema.Attribute{
			"probe_interval": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: "Seconds between reachability probes of an executor during refresh (env `FLEET_PROBE_INTERVAL`). " +
					"Default 60; supported 15 to 3600; `0` turns refresh probing off (the `fleet_reachability` data source still probes). " +
					"Values out of range are normalised with one warning: below 0 gives 60, 1 to 14 gives 15, above 3600 gives 3600. " +
					"The effective value also sets staleness: a record older than three intervals is stale, and a reachable record whose credentials no probe has checked for three intervals is warned about. " +
					"With `0` nothing is stale.",
			},
			"probe_concurrency": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: "Most probes in flight at once, across every resource and data source of this provider process (env `FLEET_PROBE_CONCURRENCY`). " +
					"Default 10, Terraform's default `-parallelism`; a value below 1 gives 10 with a warning.",
			},
			"known_hosts_file": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "known_hosts file that verifies jump hosts (`proxy_jump`), with OpenSSH's accept-new rule: an unknown bastion's key is added, " +
					"a changed one is refused (env `FLEET_KNOWN_HOSTS_FILE`, default `~/.ssh/known_hosts`). Targets are verified against their own `host_key_fingerprint`, never against this file. " +
					"A `fleet_ssh_deployment` that names no `known_hosts_file` of its own uses it too (for its jump hosts, and nodes without `host_key`).",
			},
			"default_user": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "User for connections that set none, every resource's (env `FLEET_SSH_USER`, default `root`).",
			},
			"private_key": schema.StringAttribute{
				Optional: true, Sensitive: true,
				MarkdownDescription: "Default private key (PEM) for every connection that gives no key of its own (env `FLEET_PRIVATE_KEY`). " +
					"Provider configuration is never written to state, so unlike a resource's write-only `private_key` it is available at every refresh: " +
					"this is how to keep authentication checked at refresh without a secret in state.",
				Validators: []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("private_key_file"))},
			},
			"private_key_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Default private key file for every connection that gives no key of its own, every resource's (env `FLEET_PRIVATE_KEY_FILE`; the old `FLEET_SSH_PRIVATE_KEY_FILE` is read too, with a warning); `~` is expanded.",
			},
			"private_key_passphrase": schema.StringAttribute{
				Optional: true, Sensitive: true,
				MarkdownDescription: "Passphrase of an encrypted default `private_key` or `private_key_file` (env `FLEET_PRIVATE_KEY_PASSPHRASE`).",
			},
		},
	}
}

func (p *fleetProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, unknown := range map[string]bool{
		"probe_interval": cfg.ProbeInterval.IsUnknown(), "probe_concurrency": cfg.ProbeConcurrency.IsUnknown(),
		"known_hosts_file": cfg.KnownHostsFile.IsUnknown(), "default_user": cfg.DefaultUser.IsUnknown(),
		"private_key": cfg.PrivateKey.IsUnknown(), "private_key_file": cfg.PrivateKeyFile.IsUnknown(),
		"private_key_passphrase": cfg.PrivateKeyPassphrase.IsUnknown(),
	} {
		if unknown {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Provider argument not known at plan time",
				"fleet provider: "+name+" depends on a value known only after apply. Give it a literal, a variable, or an environment variable instead.")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}

	interval := resolveInterval(cfg.ProbeInterval)
	if interval.Warning != "" {
		resp.Diagnostics.AddAttributeWarning(path.Root("probe_interval"), "Probe interval normalised", interval.Warning)
	}
	concurrency := resolveConcurrency(cfg.ProbeConcurrency)
	if concurrency.Warning != "" {
		resp.Diagnostics.AddAttributeWarning(path.Root("probe_concurrency"), "Probe concurrency normalised", concurrency.Warning)
	}
	// A path the operator chose must be in a directory that exists; the
	// default is OpenSSH's, whose ~/.ssh is created on first use.
	knownHostsPath := stringOr(cfg.KnownHostsFile, EnvKnownHostsFile, "")
	chosen := knownHostsPath != ""
	if !chosen {
		knownHostsPath = defaultKnownHostsFile
	}
	knownHosts, err := sshdial.ExpandHome(knownHostsPath)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("known_hosts_file"), "Invalid known_hosts_file", err.Error())
		return
	}
	defaults := connectionDefaults{user: stringOr(cfg.DefaultUser, EnvSSHUser, defaultUser)}
	if chosen {
		defaults.knownHosts = knownHostsPath
	}
	defaults.credentials = sshdial.Credentials{
		PrivateKey:     []byte(stringOr(cfg.PrivateKey, EnvPrivateKey, "")),
		PrivateKeyFile: stringOr(cfg.PrivateKeyFile, EnvPrivateKeyFile, os.Getenv(EnvSSHPrivateKeyFileDeprecated)),
		Passphrase:     []byte(stringOr(cfg.PrivateKeyPassphrase, EnvPrivateKeyPassphrase, "")),
		FromProvider:   true,
	}
	switch {
	case !cfg.PrivateKey.IsNull():
		defaults.keyFrom = "the provider block's private_key"
	case !cfg.PrivateKeyFile.IsNull():
		defaults.keyFrom = "the provider block's private_key_file"
	case os.Getenv(EnvPrivateKey) != "":
		defaults.keyFrom = EnvPrivateKey
	case os.Getenv(EnvPrivateKeyFile) != "":
		defaults.keyFrom = EnvPrivateKeyFile
	default:
		defaults.keyFrom = EnvSSHPrivateKeyFileDeprecated
	}
	if os.Getenv(EnvSSHPrivateKeyFileDeprecated) != "" {
		resp.Diagnostics.AddWarning("Deprecated environment variable "+EnvSSHPrivateKeyFileDeprecated,
			EnvSSHPrivateKeyFileDeprecated+" is the old, deployment-only name of "+EnvPrivateKeyFile+", which every resource of this provider reads: rename it. "+
				"It is still read, as "+EnvPrivateKeyFile+" (which wins when both are set), by every resource.")
	}
	if len(defaults.credentials.PrivateKey) > 0 && defaults.credentials.PrivateKeyFile != "" {
		resp.Diagnostics.AddError("Conflicting default credentials",
			"fleet provider: both a default private_key and a default private_key_file are given (in the provider block or through FLEET_PRIVATE_KEY and FLEET_PRIVATE_KEY_FILE): give one.")
		return
	}

	p.slotsOnce.Do(func() { p.slots = semaphore.NewWeighted(concurrency.Slots) })
	data := &providerData{
		clock:     p.clock,
		interval:  interval,
		defaults:  defaults,
		run:       p.run(),
		marks:     &p.marks,
		sessions:  &p.sessions,
		noPreview: p.noPreview,
		interrupt: p.interrupt,
		prober: &reachability.Prober{
			Dialer:    &sshdial.Dialer{KnownHosts: &sshdial.KnownHosts{Path: knownHosts, CreateDir: !chosen}},
			Slots:     p.slots,
			Timeout:   p.probeTimeout,
			Clock:     p.clock,
			Interrupt: p.interrupt,
		},
	}
	data.health = &health.Evaluator{
		Dialer:         data.prober.Dialer,
		Slots:          p.slots,
		Clock:          p.clock,
		LocalShell:     p.localShell,
		ConnectTimeout: p.probeTimeout,
		Interrupt:      p.interrupt,
	}
	resp.ResourceData = data
	resp.DataSourceData = data
}

// configuredData is the providerData a resource or data source receives; nil
// before the provider is configured (validation calls Configure early).
func configuredData(v any, diags *diag.Diagnostics) *providerData {
	if v == nil {
		return nil
	}
	data, ok := v.(*providerData)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("expected *providerData, got %T; this is a bug in the provider", v))
	}
	return data
}

// resolveInterval: the configuration wins; otherwise the environment, with
// its own fallback rules. Either way the value is clamped the same way.
func resolveInterval(v types.Int64) reachability.Interval {
	if !v.IsNull() {
		return reachability.ClampInterval(v.ValueInt64(), "probe_interval")
	}
	value, present := os.LookupEnv(EnvProbeInterval)
	return reachability.IntervalFromEnv(EnvProbeInterval, value, present)
}

func resolveConcurrency(v types.Int64) reachability.Concurrency {
	if !v.IsNull() {
		return reachability.ClampConcurrency(v.ValueInt64(), "probe_concurrency")
	}
	value, present := os.LookupEnv(EnvProbeConcurrency)
	return reachability.ConcurrencyFromEnv(EnvProbeConcurrency, value, present)
}

// stringOr is the configured value, else the environment's, else def.
func stringOr(v types.String, env, def string) string {
	if !v.IsNull() && v.ValueString() != "" {
		return v.ValueString()
	}
	if e := os.Getenv(env); e != "" {
		return e
	}
	return def
}

func (p *fleetProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newExecutorResource, newNodeHealthPolicyResource, newDeploymentResource}
}

func (p *fleetProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newReachabilityDataSource, newNodeHealthDataSource, newNixOSSystemsDataSource}
}
