package health

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPolicyValidateDanglingReferences(t *testing.T) {
	t.Parallel()
	p := &Policy{
		StorageRoot: "/srv",
		Checks:      map[string]CheckDecl{"blobs": pathDecl("blobs", "")},
		ObjectTypes: map[string]ObjectType{"instance": {Checks: []string{"blobs", "nope"}}},
		Roles:       map[string]Role{"hypervisor": {Hosts: []string{"instance", "ghost"}}},
		Nodes:       map[string]Node{"n1": {Roles: []string{"hypervisor", "nobody"}, Local: true}},
	}
	errs := p.Validate()
	want := []string{
		`object_types.instance.checks: check "nope" is not declared in checks (declared: blobs)`,
		`roles.hypervisor.hosts: object type "ghost" is not declared in object_types (declared: instance)`,
		`nodes.n1.roles: role "nobody" is not declared in roles (declared: hypervisor)`,
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("Validate:\n got %q\nwant %q", got, want)
	}
	if len(errs) == 3 && (!slices.Equal(errs[0].Path, []string{"object_types", "instance", "checks"}) ||
		!slices.Equal(errs[1].Path, []string{"roles", "hypervisor", "hosts"}) || !slices.Equal(errs[2].Path, []string{"nodes", "n1", "roles"})) {
		t.Errorf("paths %q, %q, %q", errs[0].Path, errs[1].Path, errs[2].Path)
	}
	// The plan of an invalid policy skips what dangles.
	if pl := p.Plan("n1"); len(pl) != 1 || pl[0].ID != "path:/srv/blobs" {
		t.Errorf("Plan of the dangling policy: %+v", pl)
	}

	empty := &Policy{Checks: map[string]CheckDecl{}, ObjectTypes: map[string]ObjectType{"t": {Checks: []string{"x"}}}}
	if errs := empty.Validate(); len(errs) != 1 || !strings.Contains(errs[0].Msg, "(declared: none)") {
		t.Errorf("nothing declared: %v", errs)
	}
}

func TestPolicyValidateChecks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		root  string
		decl  CheckDecl
		path  []string
		parts []string
	}{
		{"relative path, no storage_root", "", pathDecl("blobs", ""), []string{"checks", "c"},
			[]string{`path "blobs" is relative and no storage_root is set`, "give an absolute path or set storage_root"}},
		{"relative storage_root", "srv", pathDecl("blobs", ""), []string{"storage_root"}, []string{`"srv" is not an absolute path`}},
		{"unknown kind", "", CheckDecl{Spec: Spec{Kind: "ping", Settings: map[string]any{}}}, []string{"checks", "c"},
			[]string{`unknown check kind "ping"`, "[command http path systemd_unit tcp]"}},
		{"bad severity", "", CheckDecl{Spec: Spec{Kind: "command", Settings: map[string]any{"command": "true"}}, Severity: "fatal"},
			[]string{"checks", "c", "severity"}, []string{`"fatal" is not "error" or "degraded"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Policy{StorageRoot: c.root, Checks: map[string]CheckDecl{"c": c.decl}}
			errs := p.Validate()
			if len(errs) != 1 || !slices.Equal(errs[0].Path, c.path) {
				t.Fatalf("Validate = %v, want one error at %q", errs, c.path)
			}
			wantContains(t, "error", errs[0].Msg, c.parts...)
		})
	}

	valid := &Policy{StorageRoot: "/srv", Checks: map[string]CheckDecl{
		"rel":   pathDecl("blobs", ""),
		"abs":   pathDecl("/var/lib/x", ""),
		"deg":   {Spec: Spec{Kind: "tcp", Settings: map[string]any{"tcp": "db:5432"}}, Severity: SeverityDegraded},
		"err":   {Spec: Spec{Kind: "systemd_unit", Settings: map[string]any{"systemd_unit": "libvirtd.service"}}, Severity: SeverityError},
		"plain": {Spec: Spec{Kind: "http", Settings: map[string]any{"url": "https://example.test/health"}}},
	}}
	if errs := valid.Validate(); len(errs) != 0 {
		t.Errorf("valid policy: %v", errs)
	}
}

func TestBuildRejectsBadSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind     string
		settings map[string]any
		root     string
		want     string
	}{
		{"path", map[string]any{}, "/srv", "path is required"},
		{"path", map[string]any{"path": nil}, "/srv", "path is required"},
		{"path", map[string]any{"path": int64(5)}, "/srv", "path must be a string"},
		{"path", map[string]any{"path": "  "}, "/srv", "path must not be empty"},
		{"path", map[string]any{"path": "blobs"}, "", `path "blobs" is relative and no storage_root`},
		{"command", map[string]any{}, "", "command is required"},
		{"command", map[string]any{"command": ""}, "", "command must not be empty"},
		{"command", map[string]any{"command": true}, "", "command must be a string"},
		{"systemd_unit", map[string]any{}, "", "systemd_unit is required"},
		{"systemd_unit", map[string]any{"systemd_unit": "libvirtd service"}, "", `systemd_unit "libvirtd service" is not a unit name`},
		{"systemd_unit", map[string]any{"systemd_unit": "/etc/systemd/x.service"}, "", "is not a unit name"},
		{"tcp", map[string]any{}, "", "tcp is required"},
		{"tcp", map[string]any{"tcp": "db"}, "", `tcp "db" is not host:port`},
		{"tcp", map[string]any{"tcp": ":5432"}, "", `tcp ":5432" is not host:port`},
		{"tcp", map[string]any{"tcp": "db:0"}, "", `tcp "db:0": port must be 1-65535`},
		{"tcp", map[string]any{"tcp": "db:70000"}, "", "port must be 1-65535"},
		{"tcp", map[string]any{"tcp": "db:postgres"}, "", "port must be 1-65535"},
		{"http", map[string]any{}, "", "url is required"},
		{"http", map[string]any{"url": "ftp://example.test/"}, "", `url "ftp://example.test/" is not an http:// or https:// URL with a host`},
		{"http", map[string]any{"url": "http:///health"}, "", "is not an http:// or https:// URL with a host"},
		{"http", map[string]any{"url": "http://exa mple.test/"}, "", "is not an http:// or https:// URL with a host"},
		{"http", map[string]any{"url": "http://example.test/", "expect_status": int64(99)}, "", "expect_status 99 is not an HTTP status (100-599)"},
		{"http", map[string]any{"url": "http://example.test/", "expect_status": int64(600)}, "", "expect_status 600 is not an HTTP status"},
		{"http", map[string]any{"url": "http://example.test/", "retries": int64(-1)}, "", "retries -1 must be 0-10"},
		{"http", map[string]any{"url": "http://example.test/", "retries": int64(11)}, "", "retries 11 must be 0-10"},
		{"nope", map[string]any{}, "", `unknown check kind "nope"`},
	} {
		_, err := Build(Spec{Kind: c.kind, Settings: c.settings}, c.root)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Build(%s %v, root %q) = %v; want an error containing %q", c.kind, c.settings, c.root, err, c.want)
		}
	}
}

func TestBuildResolvesTargets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind     string
		settings map[string]any
		root     string
		id       string
	}{
		{"path", map[string]any{"path": "blobs"}, "/srv", "path:/srv/blobs"},
		{"path", map[string]any{"path": "blobs/../images/"}, "/srv/", "path:/srv/images"},
		{"path", map[string]any{"path": "/var//lib/x/"}, "", "path:/var/lib/x"},
		{"command", map[string]any{"command": "pgrep -x qemu"}, "", "command:pgrep -x qemu"},
		{"systemd_unit", map[string]any{"systemd_unit": "libvirtd.service"}, "", "systemd_unit:libvirtd.service"},
		{"tcp", map[string]any{"tcp": "[::1]:5432"}, "", "tcp:[::1]:5432"},
		{"http", map[string]any{"url": "http://127.0.0.1:8080/health"}, "", "http:http://127.0.0.1:8080/health"},
		{"http", map[string]any{"url": "http://127.0.0.1:8080/health", "expect_status": int64(200)}, "", "http:http://127.0.0.1:8080/health"},
		{"http", map[string]any{"url": "http://127.0.0.1:8080/health", "expect_status": int64(204)}, "", "http:http://127.0.0.1:8080/health (expect 204)"},
	} {
		ch, err := Build(Spec{Kind: c.kind, Settings: c.settings}, c.root)
		if err != nil || ID(ch) != c.id {
			t.Errorf("Build(%s %v, root %q): %v, %v; want identity %q", c.kind, c.settings, c.root, ch, err, c.id)
		}
	}
	ch, err := Build(Spec{Kind: "http", Settings: map[string]any{"url": "https://example.test/"}}, "")
	if h, ok := ch.(HTTPCheck); err != nil || !ok || h.ExpectStatus != 200 || h.Retries != 2 {
		t.Errorf("http defaults: %+v, %v; want expect_status 200, retries 2", ch, err)
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	if got := Kinds(); !slices.Equal(got, []string{"command", "http", "path", "systemd_unit", "tcp"}) {
		t.Errorf("Kinds() = %q", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `kind path registered twice`) {
			t.Errorf("registering path twice: recovered %v, want a panic", r)
		}
	}()
	Register("path", newPathCheck)
}
