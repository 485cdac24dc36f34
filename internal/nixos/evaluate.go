package nixos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Source is where the configurations are: a flake, or a Nix file.
type Source struct {
	// Flake is a flake reference Nix accepts ("path:/repo", "git+file:///repo",
	// "."), with an optional "#attribute" that holds the configurations.
	Flake string
	// File is a Nix file whose value (or Attribute of it) holds the
	// configurations, when Flake is empty.
	File string
	// Attribute is the attribute path that holds the configurations: for a
	// flake "nixosConfigurations" when neither it nor the reference names
	// one; for a file, empty for the file's value itself.
	Attribute string
}

// DefaultFlakeAttribute holds a flake's NixOS configurations.
const DefaultFlakeAttribute = "nixosConfigurations"

// toplevel is the attribute of a configuration that is its system.
const toplevel = "config.system.build.toplevel"

// String names the source in messages.
func (s Source) String() string {
	if s.Flake != "" {
		return fmt.Sprintf("flake %s#%s", s.ref(), s.attribute())
	}
	if s.attribute() == "" {
		return "file " + s.File
	}
	return fmt.Sprintf("file %s, attribute %s", s.File, s.attribute())
}

func (s Source) ref() string {
	ref, _, _ := strings.Cut(s.Flake, "#")
	return ref
}

func (s Source) attribute() string {
	if s.Attribute != "" {
		return s.Attribute
	}
	if s.Flake != "" {
		if _, attr, ok := strings.Cut(s.Flake, "#"); ok && attr != "" {
			return attr
		}
		return DefaultFlakeAttribute
	}
	return ""
}

// args are the arguments that select attribute paths of the source for a
// nix command, to come after its options: -f file for a file, then "--"
// and each path (a flake installable, or the path itself), so that
// nothing a configuration names is read as an option.
func (s Source) args(paths ...string) []string {
	var out []string
	if s.Flake == "" {
		out = []string{"-f", s.File}
	}
	out = append(out, "--")
	for _, p := range paths {
		if s.Flake != "" {
			out = append(out, s.ref()+"#"+p)
		} else {
			out = append(out, p)
		}
	}
	return out
}

// Check refuses a source that names neither a flake nor a file, or both,
// and a flake reference or attribute that begins with a dash: Nix would
// read it as an option ("--impure" taken as a flake evaluates impurely).
func (s Source) Check() error {
	switch {
	case s.Flake == "" && s.File == "":
		return fmt.Errorf("name the configurations' flake or file")
	case s.Flake != "" && s.File != "":
		return fmt.Errorf("name a flake or a file, not both")
	case strings.HasPrefix(s.Flake, "-"):
		return fmt.Errorf("the flake reference %q begins with a dash, which Nix reads as an option: give a reference (path:./nixos, git+file:///repo, github:owner/repo)", s.Flake)
	case strings.HasPrefix(s.Attribute, "-"):
		return fmt.Errorf("the attribute %q begins with a dash, which Nix reads as an option: give an attribute path (nixosConfigurations)", s.Attribute)
	}
	return nil
}

// System is what a configuration evaluates to.
type System struct {
	// Name is the configuration's attribute name.
	Name string
	// Path is the store path of its system (config.system.build.toplevel).
	Path string
	// Derivation is the store path of the system's derivation.
	Derivation string
	// Built says this machine's store has the system.
	Built bool
	// Error is why the configuration did not evaluate, with KeepGoing;
	// the other fields are then empty.
	Error string
}

// ConfigError is a configuration that did not evaluate.
type ConfigError struct {
	Name    string
	Message string // the head of Nix's own error
}

// Errors are the configurations that did not evaluate, and why.
type Errors []ConfigError

func (e Errors) Error() string {
	parts := make([]string, len(e))
	for i, c := range e {
		parts[i] = fmt.Sprintf("configuration %s: %s", c.Name, c.Message)
	}
	return strings.Join(parts, "; ")
}

// EvaluateOptions change what Evaluate does.
type EvaluateOptions struct {
	// KeepGoing records a configuration that does not evaluate in its
	// System's Error instead of failing the evaluation.
	KeepGoing bool
	// Workers is how many Nix processes evaluate at once, each over a
	// share of the configurations; 0: the machine's cores.
	Workers int
	// MaxMemory is the resident size, in bytes, past which a worker's
	// process is replaced by a new one for the rest of its share, once it
	// has done a configuration; 0: DefaultMaxMemory.
	MaxMemory int64
}

// Names lists the source's configurations, sorted as Nix sorts attribute
// names. The configurations themselves are not evaluated.
func (n Nix) Names(ctx context.Context, src Source) ([]string, error) {
	if err := src.Check(); err != nil {
		return nil, err
	}
	if err := n.Check(ctx); err != nil {
		return nil, err
	}
	args := append([]string{"--extra-experimental-features", features, "eval", "--json", "--apply", "builtins.attrNames"}, src.args(src.attribute())...)
	stdout, stderr, err := n.output(ctx, "nix", args...)
	if err != nil {
		return nil, interrupted(ctx, fmt.Errorf("%s: %s", src, errorHead(stderr)))
	}
	var names []string
	if err := json.Unmarshal([]byte(stdout), &names); err != nil {
		return nil, fmt.Errorf("%s: the configurations are not an attribute set (nix eval printed %.200q)", src, stdout)
	}
	return names, nil
}

// Evaluate evaluates the configurations named (all of the source's when
// names is empty) to their systems and derivations, in opts' workers, each
// a Nix process at a time over a share of them (see workers.go): what a
// share's configurations import (nixpkgs, the repository's modules) is
// evaluated once per process. The systems come in the order of names (of
// Nix's sorted attribute names without them); Built says this machine's
// store has the system. With a CacheDir, a flake's evaluation is kept and
// an unchanged flake is not evaluated again. A configuration that does
// not evaluate is named with the head of Nix's error; one that does not
// exist is named with those that do (a MissingError); a source that does
// not evaluate itself is its own error, blamed on no configuration.
func (n Nix) Evaluate(ctx context.Context, src Source, names []string, opts EvaluateOptions) ([]System, error) {
	if err := src.Check(); err != nil {
		return nil, err
	}
	if err := n.Check(ctx); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		names = nil // all of them
	}
	kept, key, err := n.cached(ctx, src, names)
	if err != nil || kept != nil {
		return kept, dirError(src, err)
	}
	asked := names
	if names == nil {
		if names, err = n.Names(ctx, src); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, dirError(src, errors.New(n.localiser(ctx, src)(err.Error())))
		}
	}
	out := n.evaluateAll(ctx, src, names, opts)
	if ctx.Err() != nil {
		return nil, interrupted(ctx, fmt.Errorf("%s: the evaluation stopped", src))
	}
	if out.sourceErr == nil && len(out.failed) == 0 {
		systems := make([]System, len(names))
		for i, name := range names {
			systems[i] = out.systems[name]
		}
		return systems, n.keep(key, systems)
	}
	// The source itself may be what fails (a file that is not there, a
	// flake.nix that does not parse), or a name it lacks: then no
	// configuration is to blame, and its listing says so with Nix's words.
	all, lerr := n.Names(ctx, src)
	if lerr != nil {
		if ctx.Err() != nil {
			return nil, lerr
		}
		return nil, dirError(src, errors.New(n.localiser(ctx, src)(lerr.Error())))
	}
	if missing := missingOf(src, names, all); asked != nil && missing != nil {
		return nil, missing
	}
	local := n.localiser(ctx, src)
	if out.sourceErr != nil {
		// The configurations' attribute set fails as a whole.
		return nil, fmt.Errorf("%s: %s", src, local(errorHead(out.source)))
	}
	var bad Errors
	for _, name := range names {
		if head, ok := out.failed[name]; ok {
			bad = append(bad, ConfigError{Name: name, Message: local(head)})
		}
	}
	if !opts.KeepGoing {
		return nil, bad
	}
	systems := make([]System, len(names))
	for i, name := range names {
		systems[i] = out.systems[name]
		if head, ok := out.failed[name]; ok {
			systems[i] = System{Name: name, Error: local(head)}
		}
	}
	return systems, nil
}

// Literal is s as a Nix string literal, which Nix reads back as s: a
// backslash escapes a quote, a backslash and the dollar of an
// interpolation, and \n, \r, \t are the only other escapes it knows
// (JSON's \u0026 would read as u0026); every other byte stands as it is.
func Literal(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "${", `\${`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s) + `"`
}

func inStore(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// missingOf names the requested configurations the source lacks, with
// those it has (all), or is nil.
func missingOf(src Source, names, all []string) error {
	var absent []string
	for _, name := range names {
		if !slices.Contains(all, name) {
			absent = append(absent, name)
		}
	}
	if len(absent) == 0 {
		return nil
	}
	return &MissingError{Source: src, Missing: absent, Existing: all}
}

// MissingError is a request for configurations the source lacks: the
// fix is in the names asked for, so callers point there.
type MissingError struct {
	Source   Source
	Missing  []string // asked for, absent
	Existing []string // what the source has, sorted
}

func (e *MissingError) Error() string {
	what := "configuration"
	if len(e.Missing) > 1 {
		what = "configurations"
	}
	return fmt.Sprintf("%s has no %s %s; it has %s", e.Source, what, strings.Join(quoteAll(e.Missing), ", "), orNoneList(quoteAll(e.Existing)))
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}

func orNoneList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
