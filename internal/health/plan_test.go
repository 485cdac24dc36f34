package health

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func mkdirs(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(root, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func pathDecl(p, description string) CheckDecl {
	return CheckDecl{Spec: Spec{Kind: "path", Settings: map[string]any{"path": p}}, Description: description}
}

func commandDecl(c string) CheckDecl {
	return CheckDecl{Spec: Spec{Kind: "command", Settings: map[string]any{"command": c}}}
}

// TestPlanDeduplicatesByIdentity: a path declared twice (relative and
// absolute, with a trailing slash) and needed by three types is one check,
// probed once; the evaluator's probes are the distinct checks.
func TestPlanDeduplicatesByIdentity(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mkdirs(t, root, "blobs", "scratch")
	node := uniqueNode(t, "dedup")
	p := &Policy{
		StorageRoot:  root,
		ProbeTimeout: answers,
		Checks: map[string]CheckDecl{
			"blobs":      pathDecl("blobs", "blob storage"),
			"blob-store": {Spec: Spec{Kind: "path", Settings: map[string]any{"path": root + "/blobs/"}}, Severity: SeverityDegraded},
			"scratch":    pathDecl("scratch", ""),
			"agent":      commandDecl("true"),
		},
		ObjectTypes: map[string]ObjectType{
			"blob":   {Checks: []string{"blobs"}},
			"image":  {Checks: []string{"blob-store", "scratch"}},
			"volume": {Checks: []string{"blobs", "agent"}},
		},
		Roles: map[string]Role{
			"hypervisor": {Hosts: []string{"blob", "image"}},
			"storage":    {Hosts: []string{"volume", "blob"}},
		},
		Nodes: map[string]Node{node: {Roles: []string{"storage", "hypervisor"}, Local: true}},
	}
	if errs := p.Validate(); len(errs) != 0 {
		t.Fatalf("Validate: %v", errs)
	}
	forgetMarkers(t, p, node)
	blobs := filepath.Join(root, "blobs")

	planned := p.Plan(node)
	var ids []string
	for _, pl := range planned {
		ids = append(ids, pl.ID)
	}
	wantIDs := []string{"command:true", "path:" + blobs, "path:" + filepath.Join(root, "scratch")}
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("planned %q, want %q", ids, wantIDs)
	}
	pl := planned[1]
	if !slices.Equal(pl.Names, []string{"blob-store", "blobs"}) || !slices.Equal(pl.Types, []string{"blob", "image", "volume"}) ||
		!slices.Equal(pl.Roles, []string{"hypervisor", "storage"}) || pl.Description != "blob storage" || pl.Severity != SeverityError {
		t.Errorf("blobs planned as %+v: want names [blob-store blobs], types [blob image volume], roles [hypervisor storage], blob storage, severity error (one declaration is error)", pl)
	}

	e := newEvaluator(nil)
	r, _ := evalNode(t, e, p, node)
	if r.State() != StateHealthy {
		t.Fatalf("%s", describeReport(r, p))
	}
	if c, s, ch, probes := e.Counters.Snapshot(); probes != 3 || c != 0 || s != 0 || ch != 0 {
		t.Errorf("counters: connections %d, sessions %d, channels %d, probes %d; want 0, 0, 0, 3 (distinct checks)", c, s, ch, probes)
	}
	if n := len(heartbeatWriters(blobs)); n != 0 {
		t.Errorf("%d heartbeat writers left", n)
	}
}

// TestNodeWithoutStorageNeverProbesStorage: a node whose roles host no type
// that needs a path never touches that path; a node whose roles host nothing
// probes nothing at all.
func TestNodeWithoutStorageNeverProbesStorage(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mkdirs(t, root, "blobs", "uploads")
	gw, bare, st := uniqueNode(t, "gateway"), uniqueNode(t, "bare"), uniqueNode(t, "storage")
	p := &Policy{
		StorageRoot:  root,
		ProbeTimeout: answers,
		Checks: map[string]CheckDecl{
			"blobs":   pathDecl("blobs", "blob storage"),
			"uploads": pathDecl("uploads", "upload storage"),
			"agent":   commandDecl("echo agent ok"),
		},
		ObjectTypes: map[string]ObjectType{
			"blob":     {Checks: []string{"blobs"}},
			"upload":   {Checks: []string{"uploads"}},
			"endpoint": {Checks: []string{"agent"}},
		},
		Roles: map[string]Role{
			"storage": {Hosts: []string{"blob", "upload"}},
			"gateway": {Hosts: []string{"endpoint"}},
			"spare":   {},
		},
		Nodes: map[string]Node{
			gw:   {Roles: []string{"gateway"}, Local: true},
			bare: {Roles: []string{"spare"}, Local: true},
			st:   {Roles: []string{"storage"}, Local: true},
		},
	}
	for _, n := range []string{gw, bare, st} {
		forgetMarkers(t, p, n)
	}
	for _, d := range []string{"blobs", "uploads"} {
		untouch(t, filepath.Join(root, d))
	}
	heartbeats := func() (n int) {
		for _, d := range []string{"blobs", "uploads"} {
			if touched(t, filepath.Join(root, d)) {
				n++
			}
		}
		return n
	}

	e := newEvaluator(nil)
	r, _ := evalNode(t, e, p, gw)
	if r.State() != StateHealthy || len(r.Planned) != 1 || r.Planned[0].ID != "command:echo agent ok" {
		t.Fatalf("gateway: %s", describeReport(r, p))
	}
	if types := r.Types(p); len(types) != 1 || types[0].Name != "endpoint" {
		t.Errorf("gateway types %+v, want endpoint only", types)
	}
	if _, _, _, probes := e.Counters.Snapshot(); probes != 1 {
		t.Errorf("gateway: %d probes, want 1 (its command only)", probes)
	}
	if n := heartbeats(); n != 0 {
		t.Errorf("gateway: %d storage paths took a heartbeat, want none", n)
	}

	r, _ = evalNode(t, e, p, bare)
	if !r.Reached || r.State() != StateHealthy || len(r.Planned) != 0 {
		t.Errorf("bare: %s", describeReport(r, p))
	}
	wantContains(t, "bare reason", r.Reason(p), "node "+bare+" is healthy: its roles (spare) host no object type with checks")
	if _, _, _, probes := e.Counters.Snapshot(); probes != 1 {
		t.Errorf("after bare: %d probes, want still 1", probes)
	}
	if n := heartbeats(); n != 0 {
		t.Errorf("bare: %d storage paths took a heartbeat, want none", n)
	}

	// The storage node does probe them: the counts above could have moved.
	r, _ = evalNode(t, e, p, st)
	if r.State() != StateHealthy {
		t.Fatalf("storage: %s", describeReport(r, p))
	}
	if _, _, _, probes := e.Counters.Snapshot(); probes != 3 {
		t.Errorf("after storage: %d probes, want 3", probes)
	}
	if n := heartbeats(); n != 2 {
		t.Errorf("storage: %d storage paths took a heartbeat, want 2", n)
	}
}

// TestBlastRadiusUploadsFailure: a failing upload store makes the node
// unhealthy for uploads only; the other type it hosts stays healthy and is
// not named in the reason.
func TestBlastRadiusUploadsFailure(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mkdirs(t, root, "images") // root/uploads is missing
	node := uniqueNode(t, "blast")
	p := &Policy{
		StorageRoot:  root,
		ProbeTimeout: answers,
		Checks: map[string]CheckDecl{
			"images":  pathDecl("images", "image storage"),
			"uploads": pathDecl("uploads", "upload storage"),
		},
		ObjectTypes: map[string]ObjectType{
			"instance": {Checks: []string{"images"}},
			"upload":   {Checks: []string{"uploads"}},
		},
		Roles: map[string]Role{"storage": {Hosts: []string{"instance", "upload"}, Description: "a storage node"}},
		Nodes: map[string]Node{node: {Roles: []string{"storage"}, Local: true}},
	}
	forgetMarkers(t, p, node)
	r, _ := evalNode(t, newEvaluator(nil), p, node)
	if r.State() != StateError {
		t.Fatalf("%s", describeReport(r, p))
	}
	types := r.Types(p)
	want := []TypeHealth{
		{Name: "instance", Healthy: true, FailedChecks: []string{}},
		{Name: "upload", Healthy: false, FailedChecks: []string{"uploads"}},
	}
	if len(types) != len(want) {
		t.Fatalf("types %+v, want %+v", types, want)
	}
	for i := range want {
		if types[i].Name != want[i].Name || types[i].Healthy != want[i].Healthy || !slices.Equal(types[i].FailedChecks, want[i].FailedChecks) {
			t.Errorf("type %d = %+v, want %+v", i, types[i], want[i])
		}
	}
	reason := r.Reason(p)
	wantContains(t, "reason", reason, "node "+node+" is unhealthy because it is a storage node and upload storage (needed by upload) is unhealthy: "+filepath.Join(root, "uploads")+": no such file or directory")
	if strings.Contains(reason, "instance") || strings.Contains(reason, "image storage") {
		t.Errorf("reason names the healthy type or its check: %s", reason)
	}
}

// TestDegradedSeverity: a failing check declared degraded makes the node
// degraded (still schedulable); one failing error check makes it error.
func TestDegradedSeverity(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mkdirs(t, root, "images")
	node := uniqueNode(t, "degraded")
	p := &Policy{
		StorageRoot:  root,
		ProbeTimeout: answers,
		Checks: map[string]CheckDecl{
			"images": pathDecl("images", "image storage"),
			"thumbs": {Spec: Spec{Kind: "path", Settings: map[string]any{"path": "thumbs"}}, Description: "thumbnail cache", Severity: SeverityDegraded},
		},
		ObjectTypes: map[string]ObjectType{"instance": {Checks: []string{"images", "thumbs"}}},
		Roles:       map[string]Role{"hypervisor": {Hosts: []string{"instance"}}},
		Nodes:       map[string]Node{node: {Roles: []string{"hypervisor"}, Local: true}},
	}
	forgetMarkers(t, p, node)
	e := newEvaluator(nil)
	r, _ := evalNode(t, e, p, node)
	if r.State() != StateDegraded || !r.State().Schedulable() {
		t.Fatalf("%s", describeReport(r, p))
	}
	wantContains(t, "degraded reason", r.Reason(p), "node "+node+" is degraded because it is a hypervisor node and thumbnail cache (needed by instance) is degraded: ")

	if err := os.Remove(filepath.Join(root, "images")); err != nil {
		t.Fatal(err)
	}
	r, _ = evalNode(t, e, p, node)
	if r.State() != StateError || r.State().Schedulable() {
		t.Errorf("with the error check failing too: %s", describeReport(r, p))
	}
}
