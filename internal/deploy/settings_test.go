package deploy

import (
	"slices"
	"testing"
)

func ptr(s string) *string { return &s }

// The seed's user story 2, scenario by scenario.
func TestResolve(t *testing.T) {
	t.Parallel()
	builtin := Builtin{User: "root", PrivateKeyFile: "/keys/env"}
	cases := []struct {
		name     string
		builtin  Builtin
		defaults *Layer
		node     Node
		want     Settings
	}{
		{"1: no overrides: root, the environment's key, the node's name as host", builtin, nil, Node{Name: "web1"},
			Settings{Name: "web1", Host: "web1", User: "root", PrivateKeyFile: "/keys/env", SSHOpts: []string{}}},
		{"1: no key anywhere: the agent", Builtin{User: "root"}, nil, Node{Name: "web1"},
			Settings{Name: "web1", Host: "web1", User: "root", SSHOpts: []string{}}},
		{"2: the node wins over the defaults, the defaults over the built-in values", builtin,
			&Layer{User: ptr("deploy"), PrivateKeyFile: ptr("/keys/defaults"), SSHOpts: []string{"Port=2222"}},
			Node{Name: "web1", Layer: Layer{User: ptr("ops")}},
			Settings{Name: "web1", Host: "web1", User: "ops", PrivateKeyFile: "/keys/defaults", SSHOpts: []string{"Port=2222"}}},
		{"3: a node's ssh_opts replace the defaults' list", builtin,
			&Layer{SSHOpts: []string{"Port=2222", "Compression=yes"}},
			Node{Name: "web1", Layer: Layer{SSHOpts: []string{"Port=2200"}}},
			Settings{Name: "web1", Host: "web1", User: "root", PrivateKeyFile: "/keys/env", SSHOpts: []string{"Port=2200"}}},
		{"3: an empty node list replaces too", builtin,
			&Layer{SSHOpts: []string{"Port=2222"}}, Node{Name: "web1", Layer: Layer{SSHOpts: []string{}}},
			Settings{Name: "web1", Host: "web1", User: "root", PrivateKeyFile: "/keys/env", SSHOpts: []string{}}},
		{"4: a node with nothing set gets no override", builtin,
			&Layer{User: ptr("deploy"), SSHOpts: []string{"Port=2222"}}, Node{Name: "web1"},
			Settings{Name: "web1", Host: "web1", User: "deploy", PrivateKeyFile: "/keys/env", SSHOpts: []string{"Port=2222"}}},
		{"5: a null field inherits the defaults; a null host gives the name", builtin,
			&Layer{User: ptr("deploy"), PrivateKeyFile: ptr("/keys/defaults")},
			Node{Name: "web1", Layer: Layer{PrivateKeyFile: nil, User: nil}},
			Settings{Name: "web1", Host: "web1", User: "deploy", PrivateKeyFile: "/keys/defaults", SSHOpts: []string{}}},
		{"5: a node's host and host key are its own", builtin, &Layer{},
			Node{Name: "web1", Host: ptr("10.0.0.5"), HostKey: ptr("ssh-ed25519 AAAA")},
			Settings{Name: "web1", Host: "10.0.0.5", User: "root", PrivateKeyFile: "/keys/env", HostKey: "ssh-ed25519 AAAA", SSHOpts: []string{}}},
		{"7: the provider's user replaces root, below both layers", Builtin{User: "ci"}, nil, Node{Name: "web1"},
			Settings{Name: "web1", Host: "web1", User: "ci", SSHOpts: []string{}}},
		{"7: ... and the defaults still win over it", Builtin{User: "ci"}, &Layer{User: ptr("deploy")}, Node{Name: "web1"},
			Settings{Name: "web1", Host: "web1", User: "deploy", SSHOpts: []string{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Resolve(c.builtin, c.defaults, c.node)
			if got.Name != c.want.Name || got.Host != c.want.Host || got.User != c.want.User ||
				got.PrivateKeyFile != c.want.PrivateKeyFile || got.HostKey != c.want.HostKey || !slices.Equal(got.SSHOpts, c.want.SSHOpts) {
				t.Errorf("Resolve = %+v\nwant      %+v", got, c.want)
			}
		})
	}
}

// The resolved list is the node's own: changing it changes no layer.
func TestResolveCopiesSSHOpts(t *testing.T) {
	t.Parallel()
	defaults := &Layer{SSHOpts: []string{"Port=2222"}}
	s := Resolve(Builtin{User: "root"}, defaults, Node{Name: "a"})
	s.SSHOpts[0] = "Port=1"
	if defaults.SSHOpts[0] != "Port=2222" {
		t.Errorf("the defaults' list was changed through a node's settings")
	}
}
