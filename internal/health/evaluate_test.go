package health

import (
	"context"
	"strings"
	"testing"
)

// registerForTest registers a kind for one test and removes it when the
// test ends, so that the registry other tests see is the real one.
func registerForTest(t *testing.T, kind string, f Factory) {
	t.Helper()
	Register(kind, f)
	t.Cleanup(func() {
		kindsMu.Lock()
		defer kindsMu.Unlock()
		delete(kinds, kind)
	})
}

// Checks whose code panics, each in another place of an evaluation: a dial
// check's probe (on a goroutine of its own), a script check's reading of
// its output, and a script check's fragment (while the node's script is
// being built).
type (
	panicProbe     struct{}
	panicInterpret struct{}
	panicScript    struct{}
)

func (panicProbe) Kind() string       { return "panic_probe" }
func (panicProbe) Target() string     { return "probe" }
func (panicInterpret) Kind() string   { return "panic_interpret" }
func (panicInterpret) Target() string { return "interpret" }
func (panicScript) Kind() string      { return "panic_script" }
func (panicScript) Target() string    { return "script" }

func (panicProbe) Probe(context.Context, DialFunc) Result { panic("injected fault in Probe") }
func (panicInterpret) Script(ScriptEnv) string            { return "echo ran" }
func (panicInterpret) Interpret(int, string) Result       { panic("injected fault in Interpret") }
func (panicScript) Script(ScriptEnv) string               { panic("injected fault in Script") }
func (panicScript) Interpret(int, string) Result          { return Result{Tier: TierProbe, Healthy: true} }

// TestEvaluatorContainsPanickingChecks: a check whose code panics is
// unhealthy with the panic in its detail; the node's other checks keep
// their own results, and the other nodes of the same pass are evaluated as
// if nothing happened. The process survives (a panic on an evaluation
// goroutine would end it, and this test with it).
// Serial: it adds kinds to the package's registry, which other tests list.
func TestEvaluatorContainsPanickingChecks(t *testing.T) {
	registerForTest(t, "panic_probe", func(map[string]any, string) (Check, error) { return panicProbe{}, nil })
	registerForTest(t, "panic_interpret", func(map[string]any, string) (Check, error) { return panicInterpret{}, nil })
	registerForTest(t, "panic_script", func(map[string]any, string) (Check, error) { return panicScript{}, nil })
	root := t.TempDir()
	checks, plainA, script, plainB := uniqueNode(t, "checks"), uniqueNode(t, "plain-a"), uniqueNode(t, "script"), uniqueNode(t, "plain-b")
	p := &Policy{
		StorageRoot:  root,
		ProbeTimeout: answers,
		Checks: map[string]CheckDecl{
			"probe":     {Spec: Spec{Kind: "panic_probe"}},
			"interpret": {Spec: Spec{Kind: "panic_interpret"}},
			"script":    {Spec: Spec{Kind: "panic_script"}},
			"sh":        {Spec: Spec{Kind: "command", Settings: map[string]any{"command": "true"}}},
		},
		ObjectTypes: map[string]ObjectType{
			"flaky":  {Checks: []string{"probe", "interpret", "sh"}},
			"broken": {Checks: []string{"script", "sh"}},
			"plain":  {Checks: []string{"sh"}},
		},
		Roles: map[string]Role{"flaky": {Hosts: []string{"flaky"}}, "broken": {Hosts: []string{"broken"}}, "plain": {Hosts: []string{"plain"}}},
		Nodes: map[string]Node{
			checks: {Roles: []string{"flaky"}, Local: true},
			script: {Roles: []string{"broken"}, Local: true},
			plainA: {Roles: []string{"plain"}, Local: true},
			plainB: {Roles: []string{"plain"}, Local: true},
		},
	}
	for n := range p.Nodes {
		forgetMarkers(t, p, n)
	}
	e := newEvaluator(nil)
	ctx, cancel := context.WithTimeout(t.Context(), evalBound)
	defer cancel()
	names := []string{plainA, checks, plainB, script}
	reports, err := e.Evaluate(ctx, p, names)
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]Report{}
	for i, r := range reports {
		if r.Node != names[i] {
			t.Fatalf("report %d is of node %q, want %q", i, r.Node, names[i])
		}
		byNode[r.Node] = r
	}
	panicked := func(who string, res Result, what string) {
		t.Helper()
		if res.Healthy || !strings.Contains(res.Detail, "panicked") || !strings.Contains(res.Detail, "injected fault in "+what) {
			t.Errorf("%s: %+v, want unhealthy with the panic (%q) in its detail", who, res, what)
		}
	}

	r := byNode[checks]
	panicked("dial check whose Probe panics", result(t, r, "panic_probe:probe"), "Probe")
	panicked("script check whose Interpret panics", result(t, r, "panic_interpret:interpret"), "Interpret")
	if res := result(t, r, "command:true"); !res.Healthy {
		t.Errorf("node %s: the command check beside the panicking ones = %+v, want healthy", checks, res)
	}
	if r.State() != StateError || !strings.Contains(r.Reason(p), "panicked") {
		t.Errorf("node %s: %s", checks, describeReport(r, p))
	}

	r = byNode[script]
	panicked("script check whose Script panics", result(t, r, "panic_script:script"), "Script")
	// The script could not be built, so nothing else ran in it either; it
	// says so rather than passing.
	if res := result(t, r, "command:true"); res.Healthy || !strings.Contains(res.Detail, "panicked") {
		t.Errorf("node %s: the command check of a script that could not be built = %+v, want unhealthy naming the panic", script, res)
	}
	if !r.Reached || r.State() != StateError {
		t.Errorf("node %s: %s", script, describeReport(r, p))
	}

	for _, n := range []string{plainA, plainB} {
		if r := byNode[n]; r.State() != StateHealthy {
			t.Errorf("node %s, evaluated in the same pass: %s", n, describeReport(r, p))
		}
	}

	// Nothing is left marked as running: the next pass evaluates every
	// node again, none reported outstanding.
	again, err := e.Evaluate(ctx, p, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range again {
		for i, res := range r.Results {
			if res.Outstanding {
				t.Errorf("second pass: node %s check %s is outstanding: the panicking evaluation was never ended", r.Node, r.Planned[i].ID)
			}
		}
	}
	if got := byNode[plainB]; got.State() != StateHealthy {
		t.Errorf("second pass: %s", describeReport(got, p))
	}
}
