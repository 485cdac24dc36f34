package health

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// Defaults of a policy's timing settings.
const (
	DefaultProbeTimeout       = 10 * time.Second
	DefaultWriteProbeInterval = 300 * time.Second
)

// Severities of a check: what its failure makes of the node.
const (
	SeverityError    = "error"
	SeverityDegraded = "degraded"
)

// CheckDecl is one entry of a policy's checks.
type CheckDecl struct {
	Spec        Spec
	Description string // "blob storage"; the reason uses it, else the name
	Severity    string // SeverityError (default) or SeverityDegraded
}

// ObjectType lists the checks an object type depends on.
type ObjectType struct{ Checks []string }

// Role lists the object types a role hosts.
type Role struct {
	Hosts       []string
	Description string // "a hypervisor node"
}

// Node binds a node to roles and says where its checks run.
type Node struct {
	Roles  []string
	Local  bool
	Target sshdial.Target // when not Local
}

// Policy is what is declared: checks, the object types that depend on them,
// the roles that host the types, and the nodes that play the roles.
type Policy struct {
	StorageRoot        string
	ProbeTimeout       time.Duration
	WriteProbeInterval time.Duration
	Checks             map[string]CheckDecl
	ObjectTypes        map[string]ObjectType
	Roles              map[string]Role
	Nodes              map[string]Node
}

// FieldError is a fault of the declaration at one place, Path being the
// attribute path ("object_types", "instance", "checks").
type FieldError struct {
	Path []string
	Msg  string
}

func (e FieldError) Error() string { return strings.Join(e.Path, ".") + ": " + e.Msg }

// Validate reports every dangling reference and every check that cannot be
// built, each naming the key at fault.
func (p *Policy) Validate() []FieldError {
	var errs []FieldError
	if p.StorageRoot != "" && !path.IsAbs(p.StorageRoot) {
		errs = append(errs, FieldError{Path: []string{"storage_root"}, Msg: fmt.Sprintf("%q is not an absolute path, for example \"/srv/cloud\"", p.StorageRoot)})
	}
	for _, name := range slices.Sorted(maps.Keys(p.Checks)) {
		if p.Checks[name].Spec.Kind == "" {
			continue // no kind: the reader of the declaration said why
		}
		if _, err := Build(p.Checks[name].Spec, p.StorageRoot); err != nil {
			errs = append(errs, FieldError{Path: []string{"checks", name}, Msg: err.Error()})
		}
		if s := p.Checks[name].Severity; s != "" && s != SeverityError && s != SeverityDegraded {
			errs = append(errs, FieldError{Path: []string{"checks", name, "severity"}, Msg: fmt.Sprintf("%q is not %q or %q", s, SeverityError, SeverityDegraded)})
		}
	}
	refs := func(kind string, owner []string, names []string, known func(string) bool, what string, keys []string) {
		for _, n := range names {
			if !known(n) {
				errs = append(errs, FieldError{Path: owner, Msg: fmt.Sprintf("%s %q is not declared in %s (declared: %s)", kind, n, what, list(keys))})
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.ObjectTypes)) {
		refs("check", []string{"object_types", name, "checks"}, p.ObjectTypes[name].Checks,
			func(n string) bool { _, ok := p.Checks[n]; return ok }, "checks", slices.Sorted(maps.Keys(p.Checks)))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Roles)) {
		refs("object type", []string{"roles", name, "hosts"}, p.Roles[name].Hosts,
			func(n string) bool { _, ok := p.ObjectTypes[n]; return ok }, "object_types", slices.Sorted(maps.Keys(p.ObjectTypes)))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Nodes)) {
		refs("role", []string{"nodes", name, "roles"}, p.Nodes[name].Roles,
			func(n string) bool { _, ok := p.Roles[n]; return ok }, "roles", slices.Sorted(maps.Keys(p.Roles)))
	}
	return errs
}

func list(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

// Planned is one check a node runs, with everything that depends on it on
// that node.
type Planned struct {
	Check       Check
	ID          string
	Names       []string // the checks keys declaring it
	Description string
	Severity    string
	Types       []string // the hosted object types that depend on it
	Roles       []string // the node's roles hosting those types
}

// Plan returns the checks node runs: the union over the object types its
// roles host, de-duplicated by identity, in order of identity. A check that
// cannot be built is left out (Validate reports it).
func (p *Policy) Plan(node string) []Planned {
	byID := map[string]*Planned{}
	n := p.Nodes[node]
	for _, role := range sorted(n.Roles) {
		for _, typ := range sorted(p.Roles[role].Hosts) {
			for _, name := range sorted(p.ObjectTypes[typ].Checks) {
				decl, ok := p.Checks[name]
				if !ok {
					continue
				}
				c, err := Build(decl.Spec, p.StorageRoot)
				if err != nil {
					continue
				}
				id := ID(c)
				pl := byID[id]
				if pl == nil {
					pl = &Planned{Check: c, ID: id, Severity: SeverityDegraded}
					byID[id] = pl
				}
				pl.Names = addSorted(pl.Names, name)
				pl.Types = addSorted(pl.Types, typ)
				pl.Roles = addSorted(pl.Roles, role)
				if pl.Description == "" {
					pl.Description = decl.Description
				}
				if decl.Severity != SeverityDegraded {
					pl.Severity = SeverityError
				}
			}
		}
	}
	out := make([]Planned, 0, len(byID))
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		out = append(out, *byID[id])
	}
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func addSorted(s []string, v string) []string {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}

func (p *Policy) probeTimeout() time.Duration {
	if p.ProbeTimeout > 0 {
		return p.ProbeTimeout
	}
	return DefaultProbeTimeout
}

// writeProbeInterval is how long a heartbeat stays good; 0 writes one at
// every evaluation.
func (p *Policy) writeProbeInterval() time.Duration { return max(p.WriteProbeInterval, 0) }
