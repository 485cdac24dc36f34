package nixos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
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

// args are the arguments that select attribute path attr of the source
// for a nix command: a flake installable, or -f file and the path.
func (s Source) args(paths ...string) []string {
	var out []string
	if s.Flake == "" {
		out = []string{"-f", s.File}
	}
	for _, p := range paths {
		if s.Flake != "" {
			out = append(out, s.ref()+"#"+p)
		} else {
			out = append(out, p)
		}
	}
	return out
}

// path is the attribute path of name's element of the source's
// configurations, then rest.
func (s Source) path(name string, rest ...string) string {
	parts := []string{}
	if a := s.attribute(); a != "" {
		parts = append(parts, a)
	}
	if name != "" {
		parts = append(parts, attrName(name))
	}
	return strings.Join(append(parts, rest...), ".")
}

var plainAttr = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_'-]*$`)

// attrName is name as one element of a Nix attribute path.
func attrName(name string) string {
	if plainAttr.MatchString(name) {
		return name
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "${", `\${`).Replace(name) + `"`
}

// Check refuses a source that names neither a flake nor a file, or both.
func (s Source) Check() error {
	switch {
	case s.Flake == "" && s.File == "":
		return fmt.Errorf("name the configurations' flake or file")
	case s.Flake != "" && s.File != "":
		return fmt.Errorf("name a flake or a file, not both")
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
	args := append([]string{"--extra-experimental-features", features, "eval", "--json"}, src.args(src.path(""))...)
	stdout, stderr, err := n.output(ctx, "nix", append(args, "--apply", "builtins.attrNames")...)
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
// names is empty) to their systems and derivations, in one Nix process:
// what they share (nixpkgs, the repository's modules) is evaluated once.
// The systems come in the order of names (of Nix's sorted attribute names
// without them); Built says this machine's store has the system. With a
// CacheDir, a flake's evaluation is kept and an unchanged flake is not
// evaluated again. A configuration that does not
// evaluate is named with the head of Nix's error; one that does not exist
// is named with those that do (a MissingError); a source that does not
// evaluate itself is its own error, blamed on no configuration.
func (n Nix) Evaluate(ctx context.Context, src Source, names []string, opts EvaluateOptions) ([]System, error) {
	if err := src.Check(); err != nil {
		return nil, err
	}
	if err := n.Check(ctx); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		names = nil // all of them, in the one evaluation
	}
	kept, key, err := n.cached(ctx, src, names)
	if err != nil || kept != nil {
		return kept, err
	}
	systems, stderr, err := n.evaluate(ctx, src, names)
	if err == nil {
		return systems, n.keep(key, systems)
	}
	if ctx.Err() != nil {
		return nil, interrupted(ctx, fmt.Errorf("%s: %s", src, errorHead(stderr)))
	}
	// The source itself may be what fails (a file that is not there, a
	// flake.nix that does not parse): then no configuration is to blame,
	// and its listing says so with Nix's words.
	all, lerr := n.Names(ctx, src)
	if lerr != nil {
		if ctx.Err() != nil {
			return nil, lerr
		}
		return nil, errors.New(n.localiser(ctx, src)(lerr.Error()))
	}
	if names == nil {
		names = all
	} else if missing := missingOf(src, names, all); missing != nil {
		return nil, missing
	}
	// One evaluation failed: find which configurations, each with its own
	// error, evaluating halves again (a few more processes, only when
	// something is wrong).
	good, bad := n.blame(ctx, src, names, stderr)
	if ctx.Err() != nil {
		return nil, interrupted(ctx, err)
	}
	local := n.localiser(ctx, src)
	if len(bad) == 0 {
		// Together they fail, apart they do not: say what Nix said.
		return nil, fmt.Errorf("%s: %s", src, local(errorHead(stderr)))
	}
	for i := range bad {
		bad[i].Message = local(bad[i].Message)
	}
	if !opts.KeepGoing {
		return nil, bad
	}
	byName := map[string]System{}
	for _, s := range good {
		byName[s.Name] = s
	}
	for _, b := range bad {
		byName[b.Name] = System{Name: b.Name, Error: b.Message}
	}
	out := make([]System, len(names))
	for i, name := range names {
		out[i] = byName[name]
	}
	return out, nil
}

// selection is the Nix function that takes the configurations to the
// system and derivation of each of names (all of them when names is
// nil), by name. Reading drvPath instantiates the derivation: its .drv is
// written to the store, for a later build.
func selection(names []string) string {
	pick := `let t = c.` + toplevel + `; in { drv = t.drvPath; out = t.outPath; }`
	if names == nil {
		return "cs: builtins.mapAttrs (n: c: " + pick + ") cs"
	}
	list := make([]string, len(names))
	for i, n := range names {
		list[i] = nixString(n)
	}
	return "cs: builtins.listToAttrs (map (n: { name = n; value = let c = builtins.getAttr n cs; in " + pick + "; }) [ " + strings.Join(list, " ") + " ])"
}

// nixString is s as a Nix string literal.
func nixString(s string) string {
	b, _ := json.Marshal(s)
	return strings.ReplaceAll(string(b), "${", `\${`)
}

// evaluate evaluates names' systems (all of them for nil) in one nix eval,
// as one would by hand: the configurations' shared imports are evaluated
// once, nothing is built.
func (n Nix) evaluate(ctx context.Context, src Source, names []string) ([]System, string, error) {
	args := append([]string{"--extra-experimental-features", features, "eval", "--json"}, src.args(src.path(""))...)
	stdout, stderr, err := n.output(ctx, "nix", append(args, "--apply", selection(names))...)
	if err != nil {
		return nil, stderr, err
	}
	var results map[string]struct {
		Drv string `json:"drv"`
		Out string `json:"out"`
	}
	if err := json.Unmarshal([]byte(stdout), &results); err != nil {
		return nil, stderr, fmt.Errorf("nix eval printed %.300q, not the configurations' systems", stdout)
	}
	if names == nil {
		for name := range results {
			names = append(names, name)
		}
		slices.Sort(names)
	}
	systems := make([]System, len(names))
	for i, name := range names {
		r := results[name]
		systems[i] = System{Name: name, Path: r.Out, Derivation: r.Drv, Built: r.Out != "" && inStore(r.Out)}
	}
	return systems, stderr, nil
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

// blame evaluates halves of names until each failing configuration is
// alone with its error.
func (n Nix) blame(ctx context.Context, src Source, names []string, stderr string) ([]System, Errors) {
	if len(names) == 1 {
		return nil, Errors{{Name: names[0], Message: errorHead(stderr)}}
	}
	var good []System
	var bad Errors
	half := len(names) / 2
	for _, part := range [][]string{names[:half], names[half:]} {
		if ctx.Err() != nil {
			return good, bad
		}
		systems, errOut, err := n.evaluate(ctx, src, part)
		if err == nil {
			good = append(good, systems...)
			continue
		}
		g, b := n.blame(ctx, src, part, errOut)
		good, bad = append(good, g...), append(bad, b...)
	}
	return good, bad
}
