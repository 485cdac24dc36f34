package provider

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

var (
	_ datasource.DataSourceWithConfigure      = (*nixosSystemsDataSource)(nil)
	_ datasource.DataSourceWithValidateConfig = (*nixosSystemsDataSource)(nil)
)

func newNixOSSystemsDataSource() datasource.DataSource { return &nixosSystemsDataSource{} }

type nixosSystemsDataSource struct{ data *providerData }

type nixosSystemsModel struct {
	Flake     types.String `tfsdk:"flake"`
	File      types.String `tfsdk:"file"`
	Attribute types.String `tfsdk:"attribute"`
	Names     types.List   `tfsdk:"names"`
	Build     types.Bool   `tfsdk:"build"`
	KeepGoing types.Bool   `tfsdk:"keep_going"`
	Workers   types.Int64  `tfsdk:"workers"`
	MaxMemory types.Int64  `tfsdk:"worker_memory_mib"`
	Systems   types.Map    `tfsdk:"systems"`
}

var nixosSystemAttrTypes = map[string]attr.Type{
	"system":     types.StringType,
	"derivation": types.StringType,
	"built":      types.BoolType,
	"error":      types.StringType,
}

func (d *nixosSystemsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_nixos_systems"
}

func (d *nixosSystemsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Evaluates a repository's NixOS configurations now, during plan, to the store paths of their systems " +
			"(`config.system.build.toplevel`) and derivations: in `workers` Nix processes at once, each over a share of consecutive configurations, " +
			"so what a share imports (nixpkgs, the repository's modules) is evaluated once per process. Everything it returns is known at plan. " +
			"Nix runs as the user configured it (`NIX_CONFIG`, `nix.conf`, substituters, `builders`); only the `nix-command` and `flakes` " +
			"experimental features are added to each invocation.",
		Attributes: map[string]schema.Attribute{
			"flake": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "A flake reference as Nix takes it (`\"path:${path.root}/nixos\"`, `\"git+file:///srv/infra\"`, `\".\"`), " +
					"optionally with `#attribute`, the attribute holding the configurations (default `nixosConfigurations`). " +
					"A flake's evaluation is kept under its locked content, so a read of an unchanged flake costs next to nothing. Exactly one of `flake` and `file`.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"file": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "A Nix file whose value (or its `attribute`) is an attribute set of NixOS configurations, such as a `hosts.nix`. " +
					"Relative paths are relative to the directory Terraform runs in. Evaluated again at every read: Nix caches flakes' evaluations only. " +
					"Exactly one of `flake` and `file`.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"attribute": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "With `file`: the attribute path in the file's value that holds the configurations (`nixosConfigurations`); " +
					"default: the file's value itself. A flake names its attribute after `#` in `flake`.",
			},
			"names": schema.ListAttribute{
				Optional: true, Computed: true, ElementType: types.StringType,
				MarkdownDescription: "The configurations to evaluate. Default: all of the source's, and then this is their names, sorted, for `for_each` and `for`. " +
					"An empty list evaluates nothing. A name the source lacks fails the read, naming the configurations it has.",
				Validators: []validator.List{listvalidator.UniqueValues(), listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))},
			},
			"build": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Build the systems this machine's store lacks during the read (default `false`): all of them in one Nix invocation, " +
					"so that a CI plan proves every configuration builds. A configuration that fails to build is named with Nix's words.",
			},
			"keep_going": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Record a configuration that fails to evaluate (or, with `build`, to build) in its entry's `error`, with a warning, " +
					"and return the others (default `false`: the read fails, naming each failing configuration and the head of Nix's error).",
			},
			"workers": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: "How many Nix processes evaluate at once, each over a share of the configurations (consecutive names, as Nix sorts them: " +
					"hosts of one role, which import the same modules, tend to share a process). Default: this machine's cores. " +
					"Each process holds what its share imports once, and a configuration's evaluation is single-threaded: more workers than cores gain nothing.",
				Validators: []validator.Int64{int64validator.Between(1, 256)},
			},
			"worker_memory_mib": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: "The resident size, in MiB, past which a worker's Nix process is replaced by a new one for the rest of its share, " +
					"once it has evaluated a configuration (as `nix-eval-jobs --max-memory-size` does): a fleet's evaluation is bounded in memory by " +
					"`workers` times this, plus one configuration. Default 2048.",
				Validators: []validator.Int64{int64validator.AtLeast(64)},
			},
			"systems": schema.MapNestedAttribute{
				Computed:            true,
				MarkdownDescription: "Per configuration name, what it evaluates to.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"system": schema.StringAttribute{Computed: true, MarkdownDescription: "The store path of the system, `config.system.build.toplevel`; null when it did not evaluate."},
					"derivation": schema.StringAttribute{Computed: true, MarkdownDescription: "The store path of the system's derivation (`.drv`), in this machine's store after the read; " +
						"null when it did not evaluate."},
					"built": schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether this machine's store has the system."},
					"error": schema.StringAttribute{Computed: true, MarkdownDescription: "With `keep_going`: why the configuration did not evaluate or build " +
						"(the head of Nix's error); null when it did."},
				}},
			},
		},
	}
}

func (d *nixosSystemsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.data = configuredData(req.ProviderData, &resp.Diagnostics)
}

// ValidateConfig refuses a configuration that names no source, or two:
// a fault no evaluation is needed to see.
func (d *nixosSystemsDataSource) ValidateConfig(ctx context.Context, req datasource.ValidateConfigRequest, resp *datasource.ValidateConfigResponse) {
	var m nixosSystemsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Flake.IsUnknown() || m.File.IsUnknown() {
		return
	}
	switch {
	case m.Flake.IsNull() && m.File.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("flake"), "No NixOS configurations named",
			"fleet_nixos_systems needs where the configurations are: set flake to a flake reference (\"path:${path.root}/nixos\", \"git+file:///srv/infra\"), "+
				"or file to a Nix file of configurations (with attribute naming the attribute that holds them, if any).")
	case !m.Flake.IsNull() && !m.File.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("file"), "Both flake and file are set",
			"fleet_nixos_systems reads its configurations from one source: remove flake or file.")
	case !m.Flake.IsNull() && !m.Attribute.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("attribute"), "attribute is for a file",
			fmt.Sprintf("fleet_nixos_systems: a flake names the attribute holding its configurations after # in the reference: remove attribute and set flake = %q.",
				flakeWithAttribute(m.Flake.ValueString(), m.Attribute.ValueString())))
	case m.Attribute.IsUnknown():
	default:
		src := nixos.Source{Flake: m.Flake.ValueString(), File: m.File.ValueString(), Attribute: m.Attribute.ValueString()}
		if err := src.Check(); err != nil {
			at := path.Root("flake")
			if strings.HasPrefix(src.Attribute, "-") {
				at = path.Root("attribute")
			}
			resp.Diagnostics.AddAttributeError(at, "Not a source Nix can take", "fleet_nixos_systems: "+err.Error()+".")
		}
	}
}

func flakeWithAttribute(ref, attribute string) string {
	ref, _, _ = strings.Cut(ref, "#")
	return ref + "#" + attribute
}

func (d *nixosSystemsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m nixosSystemsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	src := nixos.Source{Flake: m.Flake.ValueString(), File: m.File.ValueString(), Attribute: m.Attribute.ValueString()}
	at := path.Root("flake")
	if src.Flake == "" {
		at = path.Root("file")
	}
	var names []string
	if !m.Names.IsNull() {
		resp.Diagnostics.Append(m.Names.ElementsAs(ctx, &names, false)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	ctx, stop := d.readContext(ctx)
	defer stop()
	began := time.Now()
	r := nixosRead{nix: loggedNix(ctx), src: src, at: at, diags: &resp.Diagnostics,
		opts: nixos.EvaluateOptions{KeepGoing: m.KeepGoing.ValueBool(), Workers: int(m.Workers.ValueInt64()), MaxMemory: m.MaxMemory.ValueInt64() << 20}}
	var systems []nixos.System
	if m.Names.IsNull() || len(names) > 0 {
		systems = r.evaluate(ctx, names)
		if resp.Diagnostics.HasError() {
			return
		}
		if m.Build.ValueBool() {
			r.build(ctx, systems)
			if resp.Diagnostics.HasError() {
				return
			}
		}
	}
	tflog.Info(ctx, "read NixOS configurations", map[string]any{
		"source": src.String(), "count": len(systems), "failed": failed(systems), "build": m.Build.ValueBool(),
		"duration_ms": time.Since(began).Milliseconds(),
	})

	entries := map[string]attr.Value{}
	read := make([]attr.Value, len(systems))
	for i, s := range systems {
		read[i] = types.StringValue(s.Name)
		entries[s.Name] = types.ObjectValueMust(nixosSystemAttrTypes, map[string]attr.Value{
			"system":     stringOrNull(s.Path),
			"derivation": stringOrNull(s.Derivation),
			"built":      types.BoolValue(s.Built),
			"error":      stringOrNull(s.Error),
		})
	}
	m.Systems = types.MapValueMust(types.ObjectType{AttrTypes: nixosSystemAttrTypes}, entries)
	if m.Names.IsNull() {
		m.Names = types.ListValueMust(types.StringType, read)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// readContext ends the read's Nix processes when the provider process is
// interrupted (Ctrl-C) as well as when Terraform cancels the read.
func (d *nixosSystemsDataSource) readContext(ctx context.Context) (context.Context, func()) {
	ctx, interrupt := context.WithCancelCause(ctx)
	stop := func() bool { return false }
	if d.data.interrupt != nil {
		stop = context.AfterFunc(d.data.interrupt, func() { interrupt(errInterrupted) })
	}
	return ctx, func() { stop(); interrupt(nil) }
}

// loggedNix is the user's Nix, found on PATH, with the provider
// process's environment (NIX_CONFIG and all) as it is; each process it
// starts is logged at DEBUG.
func loggedNix(ctx context.Context) nixos.Nix {
	cache := ""
	if dir, ok := deploy.StateDir(); ok {
		// A flake's evaluation is kept there (see nixos.Nix.CacheDir).
		cache = filepath.Join(dir, "nixos-evaluations")
	}
	return nixos.Nix{CacheDir: cache, Ran: func(args []string) {
		words := make([]string, len(args))
		for i, a := range args {
			words[i] = shell.Quote(a)
		}
		tflog.Debug(ctx, "running Nix", map[string]any{"command": strings.Join(words, " ")})
	}}
}

// nixosRead is one read's evaluation and build, and the diagnostics they
// give.
type nixosRead struct {
	nix   nixos.Nix
	src   nixos.Source
	at    path.Path // the source's attribute
	opts  nixos.EvaluateOptions
	diags *diag.Diagnostics
}

// evaluate evaluates the configurations named (all when none are).
func (r nixosRead) evaluate(ctx context.Context, names []string) []nixos.System {
	if err := r.nix.Check(ctx); err != nil {
		r.diags.AddAttributeError(r.at, "Nix cannot evaluate NixOS configurations", err.Error())
		return nil
	}
	systems, err := r.nix.Evaluate(ctx, r.src, names, r.opts)
	var missing *nixos.MissingError
	var errs nixos.Errors
	switch {
	case ctx.Err() != nil:
		r.diags.AddAttributeError(r.at, "NixOS configurations not read: interrupted",
			fmt.Sprintf("The evaluation of %s was interrupted (%v); nothing was read.", r.src, context.Cause(ctx)))
		return nil
	case errors.As(err, &missing):
		fix := ". Remove it from names, or add the configuration."
		if len(missing.Missing) > 1 {
			fix = ". Remove them from names, or add the configurations."
		}
		r.diags.AddAttributeError(path.Root("names"), "No such NixOS configuration", err.Error()+fix)
		return nil
	case errors.As(err, &errs):
		for _, e := range errs {
			r.diags.AddAttributeError(r.at, fmt.Sprintf("NixOS configuration %s does not evaluate", e.Name),
				fmt.Sprintf("Configuration %s of %s: %s\n\nFix the configuration, leave it out of names, "+
					"or set keep_going = true to read the others and record this error in its entry.", e.Name, r.src, e.Message))
		}
		return nil
	case err != nil:
		r.diags.AddAttributeError(r.at, "NixOS configurations not read", fmt.Sprintf("%v\n\n%s", err, r.sourceHint(err)))
		return nil
	}
	for _, s := range systems {
		if s.Error != "" {
			r.diags.AddAttributeWarning(r.at, fmt.Sprintf("NixOS configuration %s does not evaluate", s.Name),
				fmt.Sprintf("Configuration %s of %s: %s\n\nWith keep_going, its entry in systems holds this error and no system; the others were read.", s.Name, r.src, s.Error))
		}
	}
	return systems
}

// sourceHint is what to do about a source that could not be read: where
// to look for one that is not there, else what Nix pointed at.
func (r nixosRead) sourceHint(err error) string {
	msg := err.Error()
	for _, absent := range []string{"No such file or directory", "does not exist", "does not appear to be a git repository", "is not a directory"} {
		if strings.Contains(msg, absent) {
			return fmt.Sprintf("Check %s (a relative path is relative to the directory Terraform runs in).", r.at)
		}
	}
	return "Fix what Nix names above (the error and its position) in the source."
}

// build builds, in one Nix invocation, the systems this machine's store
// lacks, and marks each built or failed.
func (r nixosRead) build(ctx context.Context, systems []nixos.System) {
	outs := map[string]string{}
	for _, s := range systems {
		if s.Error == "" && !s.Built {
			outs[s.Derivation] = s.Path
		}
	}
	if len(outs) == 0 {
		return
	}
	b, err := r.nix.StartBuild(ctx, outs)
	if err != nil {
		r.diags.AddAttributeError(path.Root("build"), "NixOS systems not built", fmt.Sprintf("Building the systems of %s: %v", r.src, err))
		return
	}
	defer b.Stop()
	for i := range systems {
		s := &systems[i]
		if _, ok := outs[s.Derivation]; !ok {
			continue
		}
		err := b.Wait(ctx, s.Derivation)
		switch {
		case ctx.Err() != nil:
			r.diags.AddAttributeError(path.Root("build"), "NixOS systems not built: interrupted",
				fmt.Sprintf("The build of the systems of %s was interrupted (%v) before configuration %s's was done.", r.src, context.Cause(ctx), s.Name))
			return
		case err == nil:
			s.Built = true
		case r.opts.KeepGoing:
			s.Error = err.Error()
			r.diags.AddAttributeWarning(path.Root("build"), fmt.Sprintf("NixOS configuration %s does not build", s.Name),
				fmt.Sprintf("Configuration %s of %s: %v\n\nWith keep_going, its entry in systems holds this error, built = false; the others were built.", s.Name, r.src, err))
		default:
			r.diags.AddAttributeError(path.Root("build"), fmt.Sprintf("NixOS configuration %s does not build", s.Name),
				fmt.Sprintf("Configuration %s of %s: %v\n\nFix the configuration, leave it out of names, or set keep_going = true to record this error in its entry.", s.Name, r.src, err))
		}
	}
}

func failed(systems []nixos.System) int {
	n := 0
	for _, s := range systems {
		if s.Error != "" {
			n++
		}
	}
	return n
}

func stringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}
