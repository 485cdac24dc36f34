package provider_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	pemlib "encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"golang.org/x/crypto/ssh"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// A static configuration fault (one that no connection is needed to see)
// is an error at plan, naming what is affected, its host and the attribute
// to fix. Nothing is dialled and nothing is saved. These tests read the
// diagnostics of `plan -json`, whose detail is not wrapped.

// jsonDiagnostic is a diagnostic of a -json run with the configuration it
// points at.
type jsonDiagnostic struct {
	acctest.Diagnostic
	Snippet *struct {
		Code string `json:"code"`
	} `json:"snippet"`
}

func errorDiagnostics(t *testing.T, out string) []jsonDiagnostic {
	t.Helper()
	var ds []jsonDiagnostic
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var line struct {
			Type       string         `json:"type"`
			Diagnostic jsonDiagnostic `json:"diagnostic"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON UI line: %q: %v", sc.Text(), err)
		}
		if line.Type == "diagnostic" && line.Diagnostic.Severity == "error" {
			ds = append(ds, line.Diagnostic)
		}
	}
	return ds
}

// savedResources returns the resources of the session's state file; none
// when there is no state file.
func savedResources(t *testing.T, s *acctest.Session) []json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Dir, "terraform.tfstate"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Resources []json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("state file: %v\n%s", err, b)
	}
	return st.Resources
}

// faultHosts are the hosts a faulty configuration names; none may be dialled.
type faultHosts struct {
	target, bastion *sshtest.Server
	keyFile         string // a key the target accepts
}

// staticFault is one fault: setup edits the provider block's arguments and
// the connection's attributes (HCL expressions) and returns what the detail
// must say after its "who (host): " prefix.
type staticFault struct {
	name    string
	setup   func(t *testing.T, h faultHosts, providerArgs, conn map[string]string) []string
	summary string
	// attr is the connection attribute the error is about; empty when the
	// fault is in the provider block.
	attr string
	// set says attr is in the configuration, so the CLI shows its line.
	set bool
}

var staticFaults = []staticFault{
	{
		name: "missing key file", summary: "Invalid private_key_file", attr: "private_key_file", set: true,
		setup: func(t *testing.T, _ faultHosts, _, conn map[string]string) []string {
			path := filepath.Join(t.TempDir(), "absent", "id_ed25519")
			conn["private_key_file"] = q(path)
			return []string{"cannot read " + path + ": no such file or directory"}
		},
	},
	{
		name: "directory as key file", summary: "Invalid private_key_file", attr: "private_key_file", set: true,
		setup: func(t *testing.T, _ faultHosts, _, conn map[string]string) []string {
			dir := t.TempDir()
			conn["private_key_file"] = q(dir)
			return []string{dir + " is a directory, not a private key file"}
		},
	},
	{
		name: "encrypted key without passphrase", summary: "Invalid private_key_passphrase", attr: "private_key_passphrase",
		setup: func(t *testing.T, _ faultHosts, _, conn map[string]string) []string {
			path := writeEncryptedKey(t)
			conn["private_key_file"] = q(path)
			return []string{path + ": the key is encrypted: set private_key_passphrase"}
		},
	},
	{
		name: "wrong passphrase", summary: "Invalid private_key_passphrase", attr: "private_key_passphrase", set: true,
		setup: func(t *testing.T, _ faultHosts, _, conn map[string]string) []string {
			path := writeEncryptedKey(t)
			conn["private_key_file"] = q(path)
			conn["private_key_passphrase"] = q("wrong-passphrase")
			return []string{path + ": private_key_passphrase does not decrypt the key"}
		},
	},
	{
		name: "no pin", summary: "Invalid host_key_fingerprint", attr: "host_key_fingerprint",
		setup: func(_ *testing.T, h faultHosts, _, conn map[string]string) []string {
			delete(conn, "host_key_fingerprint")
			return []string{"no host key pin is set", fmt.Sprintf("`ssh-keyscan -t ed25519 -p %d 127.0.0.1 | ssh-keygen -lf -`", h.target.Port)}
		},
	},
	{
		name: "jump without known_hosts directory", summary: "Invalid provider known_hosts_file",
		setup: func(t *testing.T, h faultHosts, providerArgs, conn map[string]string) []string {
			dir := filepath.Join(t.TempDir(), "no-such-dir")
			path := filepath.Join(dir, "known_hosts")
			providerArgs["known_hosts_file"] = q(path)
			conn["proxy_jump"] = q(h.bastion.Addr)
			return []string{"the provider's known_hosts_file: " + path + ": directory " + dir + " does not exist"}
		},
	},
	{
		name: "missing provider key file", summary: "Invalid provider private_key_file",
		setup: func(t *testing.T, _ faultHosts, providerArgs, conn map[string]string) []string {
			path := filepath.Join(t.TempDir(), "absent", "id_default")
			providerArgs["private_key_file"] = q(path)
			delete(conn, "private_key_file") // the provider's key is the executor's
			return []string{"the provider's private_key_file: cannot read " + path + ": no such file or directory"}
		},
	},
}

// encryptedKeyPEM is one encrypted key for every case that needs one:
// encrypting (bcrypt) takes seconds under the race detector.
var encryptedKeyPEM = sync.OnceValue(func() []byte {
	pem, err := ssh.MarshalPrivateKeyWithPassphrase(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)), "", []byte(encryptedKeyPassphrase))
	if err != nil {
		panic(err)
	}
	return pemlib.EncodeToMemory(pem)
})

const encryptedKeyPassphrase = "right-passphrase"

func writeEncryptedKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "id_encrypted")
	if err := os.WriteFile(path, encryptedKeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newFaultHosts starts the hosts of a fault case and returns them with the
// provider arguments and the connection attributes of a good configuration.
func newFaultHosts(t *testing.T) (h faultHosts, providerArgs, conn map[string]string) {
	h.target = sshtest.NewServer(t, sshtest.Healthy)
	h.bastion = sshtest.NewServer(t, sshtest.Bastion)
	h.keyFile = h.target.ClientKey.WriteFile(t, t.TempDir())
	providerArgs = map[string]string{"probe_interval": "60", "known_hosts_file": q(filepath.Join(t.TempDir(), "known_hosts"))}
	conn = map[string]string{
		"host": q("127.0.0.1"), "port": fmt.Sprint(h.target.Port),
		"private_key_file": q(h.keyFile), "host_key_fingerprint": q(h.target.HostKey.Fingerprint()),
	}
	return h, providerArgs, conn
}

func (h faultHosts) wantNotDialled(t *testing.T) {
	t.Helper()
	if n := h.target.Accepted(); n != 0 {
		t.Errorf("the target was dialled %d times, want never", n)
	}
	if n := h.bastion.Accepted(); n != 0 {
		t.Errorf("the bastion was dialled %d times, want never", n)
	}
}

// wantFault checks that out holds exactly one error, the fault's, about who.
func wantFault(t *testing.T, out string, c staticFault, address, who string, detail []string) jsonDiagnostic {
	t.Helper()
	errs := errorDiagnostics(t, out)
	if len(errs) != 1 {
		t.Fatalf("want one error, got %d: %+v\n%s", len(errs), errs, out)
	}
	d := errs[0]
	if d.Summary != c.summary {
		t.Errorf("summary %q, want %q", d.Summary, c.summary)
	}
	if d.Address != address {
		t.Errorf("address %q, want %q", d.Address, address)
	}
	if !strings.HasPrefix(d.Detail, who+": ") {
		t.Errorf("detail %q does not begin with %q", d.Detail, who+": ")
	}
	for _, p := range detail {
		if !strings.Contains(d.Detail, p) {
			t.Errorf("detail %q does not contain %q", d.Detail, p)
		}
	}
	return d
}

func TestStaticFaultsFailExecutorPlan(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		for _, c := range staticFaults {
			t.Run(cli.Name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				h, providerArgs, conn := newFaultHosts(t)
				detail := c.setup(t, h, providerArgs, conn)
				s := acctest.NewSession(t, cli, server(provider.WithClock(clock.NewFake(start))))
				s.WriteConfig("provider \"fleet\" {\n" + hcl(providerArgs) + "}\n" + executor("web", conn))
				s.Run("init", "-input=false")

				out, stderr, err := s.Try("plan", "-json", "-input=false")
				if err == nil {
					t.Fatalf("plan succeeded, want the fault refused\n%s\n%s", out, stderr)
				}
				d := wantFault(t, out, c, "fleet_executor.web", `fleet_executor "web" (127.0.0.1)`, detail)
				// An attribute error points at the attribute's line.
				if c.set && (d.Snippet == nil || !strings.HasPrefix(strings.TrimSpace(d.Snippet.Code), c.attr+" ")) {
					t.Errorf("the error points at %+v, want the line of %s", d.Snippet, c.attr)
				}

				if out, stderr, err := s.Try("apply", "-auto-approve", "-input=false", "-no-color"); err == nil || !strings.Contains(stderr, c.summary) {
					t.Errorf("apply: %v, want it to fail with %q\n%s\n%s", err, c.summary, out, stderr)
				}
				if rs := savedResources(t, s); len(rs) != 0 {
					t.Errorf("state holds %s, want nothing saved", rs)
				}
				h.wantNotDialled(t)
			})
		}
	}
}

// Only an enabled executor is checked: a disabled one is never dialled, so
// a key file that is not there (yet) is no fault.
func TestDisabledExecutorIsNotChecked(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			h, providerArgs, conn := newFaultHosts(t)
			conn["private_key_file"] = q(filepath.Join(t.TempDir(), "absent", "id_ed25519"))
			conn["enabled"] = "false"
			s := acctest.NewSession(t, cli, server(provider.WithClock(clock.NewFake(start))))
			s.WriteConfig("provider \"fleet\" {\n" + hcl(providerArgs) + "}\n" + executor("web", conn))
			s.Run("init", "-input=false")
			out, _ := s.Run("plan", "-json", "-input=false")
			if errs := errorDiagnostics(t, out); len(errs) != 0 {
				t.Fatalf("plan of a disabled executor: %+v", errs)
			}
			s.Run("apply", "-auto-approve", "-input=false")
			attrs := s.Values("fleet_executor.web")
			if attrs["enabled"] != false {
				t.Errorf("enabled = %v, want false", attrs["enabled"])
			}
			if rec, _ := attrs["reachability"].(map[string]any); rec["state"] != "unknown" {
				t.Errorf("reachability = %v, want state unknown (never probed)", attrs["reachability"])
			}
			h.wantNotDialled(t)
		})
	}
}

// The same faults in a data source target fail the read, naming the target;
// no target is probed, not even the good one before it.
func TestStaticFaultsFailReachabilityRead(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		for _, c := range staticFaults {
			t.Run(cli.Name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				h, providerArgs, conn := newFaultHosts(t)
				good := map[string]string{}
				for k, v := range conn {
					good[k] = v
				}
				good["name"], conn["name"] = q("a"), q("b")
				detail := c.setup(t, h, providerArgs, conn)
				s := acctest.NewSession(t, cli, server(provider.WithClock(clock.NewFake(start))))
				s.WriteConfig("provider \"fleet\" {\n" + hcl(providerArgs) + "}\n" +
					"data \"fleet_reachability\" \"d\" {\n  targets = [\n    {\n" + hcl(good) + "    },\n    {\n" + hcl(conn) + "    },\n  ]\n}\n")
				s.Run("init", "-input=false")

				out, stderr, err := s.Try("plan", "-json", "-input=false")
				if err == nil {
					t.Fatalf("plan succeeded, want the read to fail\n%s\n%s", out, stderr)
				}
				wantFault(t, out, c, "data.fleet_reachability.d", `targets[1] "b" (127.0.0.1)`, detail)
				if out, stderr, err := s.Try("apply", "-auto-approve", "-input=false", "-no-color"); err == nil || !strings.Contains(stderr, c.summary) {
					t.Errorf("apply: %v, want it to fail with %q\n%s\n%s", err, c.summary, out, stderr)
				}
				if rs := savedResources(t, s); len(rs) != 0 {
					t.Errorf("state holds %s, want nothing saved", rs)
				}
				h.wantNotDialled(t)
			})
		}
	}
}

// The CLIs place an error on a nested attribute of a list at the data
// source's block, so the target's index is only in the attribute path the
// provider returns: it is targets[1] and the attribute to fix.
func TestStaticFaultsNameTheTargetAttribute(t *testing.T) {
	t.Parallel()
	for _, c := range staticFaults {
		t.Run(c.name, func(t *testing.T) {
			h, providerArgs, conn := newFaultHosts(t)
			good := map[string]string{}
			for k, v := range conn {
				good[k] = v
			}
			good["name"], conn["name"] = q("a"), q("b")
			detail := c.setup(t, h, providerArgs, conn)
			diags := readReachability(t, providerArgs, good, conn)
			if len(diags) != 1 || diags[0].Severity != tfprotov6.DiagnosticSeverityError {
				t.Fatalf("want one error, got %+v", diags)
			}
			d := diags[0]
			if d.Summary != c.summary {
				t.Errorf("summary %q, want %q", d.Summary, c.summary)
			}
			for _, p := range detail {
				if !strings.Contains(d.Detail, p) {
					t.Errorf("detail %q does not contain %q", d.Detail, p)
				}
			}
			if c.attr == "" {
				if d.Attribute != nil {
					t.Errorf("a provider fault is on %s, want no attribute of the target", d.Attribute)
				}
			} else {
				want := tftypes.NewAttributePath().WithAttributeName("targets").WithElementKeyInt(1).WithAttributeName(c.attr)
				if d.Attribute == nil || !d.Attribute.Equal(want) {
					t.Errorf("error on %v, want %s", d.Attribute, want)
				}
			}
			h.wantNotDialled(t)
		})
	}
}

// readReachability configures the provider in process with providerArgs and
// reads fleet_reachability over targets (HCL literals: quoted strings or
// numbers), returning the read's diagnostics.
func readReachability(t *testing.T, providerArgs map[string]string, targets ...map[string]string) []*tfprotov6.Diagnostic {
	t.Helper()
	ctx := context.Background()
	srv, err := server(provider.WithClock(clock.NewFake(start)))(func() string { return "validate" })
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := srv.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil || len(schemas.Diagnostics) > 0 {
		t.Fatalf("provider schema: %v %+v", err, schemas.Diagnostics)
	}
	providerType := schemas.Provider.ValueType().(tftypes.Object)
	cfg := dynamicValue(t, providerType, objectValue(t, providerType, literals(t, providerArgs)))
	configured, err := srv.ConfigureProvider(ctx, &tfprotov6.ConfigureProviderRequest{TerraformVersion: "1.11.0", Config: &cfg})
	if err != nil || len(configured.Diagnostics) > 0 {
		t.Fatalf("configure: %v %+v", err, configured.Diagnostics)
	}
	dsType := schemas.DataSourceSchemas["fleet_reachability"].ValueType().(tftypes.Object)
	targetsType := dsType.AttributeTypes["targets"].(tftypes.List)
	var list []tftypes.Value
	for _, target := range targets {
		list = append(list, objectValue(t, targetsType.ElementType.(tftypes.Object), literals(t, target)))
	}
	config := dynamicValue(t, dsType, objectValue(t, dsType, map[string]tftypes.Value{"targets": tftypes.NewValue(targetsType, list)}))
	resp, err := srv.ReadDataSource(ctx, &tfprotov6.ReadDataSourceRequest{TypeName: "fleet_reachability", Config: &config})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Diagnostics
}

func literals(t *testing.T, attrs map[string]string) map[string]tftypes.Value {
	t.Helper()
	out := map[string]tftypes.Value{}
	for k, v := range attrs {
		if s, err := strconv.Unquote(v); err == nil {
			out[k] = tftypes.NewValue(tftypes.String, s)
		} else if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = tftypes.NewValue(tftypes.Number, big.NewFloat(float64(n)))
		} else if b, err := strconv.ParseBool(v); err == nil {
			out[k] = tftypes.NewValue(tftypes.Bool, b)
		} else {
			t.Fatalf("%s = %s is not a literal", k, v)
		}
	}
	return out
}

// objectValue is an object of typ with vals, every other attribute null.
func objectValue(t *testing.T, typ tftypes.Object, vals map[string]tftypes.Value) tftypes.Value {
	t.Helper()
	all := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		all[name] = tftypes.NewValue(at, nil)
	}
	for name, v := range vals {
		if _, ok := typ.AttributeTypes[name]; !ok {
			t.Fatalf("no attribute %q", name)
		}
		all[name] = v
	}
	return tftypes.NewValue(typ, all)
}

func dynamicValue(t *testing.T, typ tftypes.Type, v tftypes.Value) tfprotov6.DynamicValue {
	t.Helper()
	dv, err := tfprotov6.NewDynamicValue(typ, v)
	if err != nil {
		t.Fatal(err)
	}
	return dv
}

// The no-pin error suggests a command; what that command prints, pasted as
// it is, pins the host: the executor then reaches it with all three
// conditions True.
func TestNoPinErrorCommandPinsTheHost(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			keyFile := sshd.ClientKey.WriteFile(t, t.TempDir())
			s := acctest.NewSession(t, cli, server(provider.WithClock(clock.NewFake(start))))
			config := func(pin string) string {
				return providerBlock(filepath.Join(t.TempDir(), "known_hosts")) + fmt.Sprintf(`
resource "fleet_executor" "web" {
  name             = "web"
  host             = "127.0.0.1"
  port             = %d
  user             = %q
  private_key_file = %q
%s}
`, sshd.Port, sshd.User, keyFile, pin)
			}
			s.WriteConfig(config(""))
			s.Run("init", "-input=false")
			out, stderr, err := s.Try("plan", "-json", "-input=false")
			if err == nil {
				t.Fatalf("plan without a pin succeeded\n%s\n%s", out, stderr)
			}
			errs := errorDiagnostics(t, out)
			if len(errs) != 1 || errs[0].Summary != "Invalid host_key_fingerprint" {
				t.Fatalf("want one Invalid host_key_fingerprint error, got %+v", errs)
			}
			m := regexp.MustCompile("`([^`]+)`").FindStringSubmatch(errs[0].Detail)
			if m == nil {
				t.Fatalf("the error suggests no command: %q", errs[0].Detail)
			}
			cmd := exec.Command("sh", "-c", m[1])
			var cmdErr strings.Builder
			cmd.Stderr = &cmdErr
			pin, err := cmd.Output()
			if err != nil || len(strings.TrimSpace(string(pin))) == 0 {
				t.Fatalf("%s: %v, printed %q\n%s", m[1], err, pin, cmdErr.String())
			}
			// It names the host's own key; a pin of anything else would
			// not reach it.
			if !strings.Contains(string(pin), sshd.HostKeys[0].Fingerprint()) {
				t.Fatalf("%s printed %q, not the host's key %s", m[1], pin, sshd.HostKeys[0].Fingerprint())
			}

			s.WriteConfig(config("  host_key_fingerprint = <<-EOT\n" + string(pin) + "EOT\n"))
			s.Run("apply", "-auto-approve", "-input=false")
			attrs := s.Values("fleet_executor.web")
			if attrs["host_key_fingerprint"] != string(pin) {
				t.Errorf("host_key_fingerprint = %q, want the command's output %q", attrs["host_key_fingerprint"], pin)
			}
			rec, _ := attrs["reachability"].(map[string]any)
			if rec["state"] != "reachable" || rec["reason"] != "" {
				t.Errorf("reachability = %v, want reachable", rec)
			}
			conds, _ := attrs["conditions"].([]any)
			var got []string
			for _, c := range conds {
				c, _ := c.(map[string]any)
				got = append(got, fmt.Sprintf("%v=%v", c["type"], c["status"]))
			}
			if want := "HostKeyVerified=True Authenticated=True Reachable=True"; strings.Join(got, " ") != want {
				t.Errorf("conditions %v, want %s", got, want)
			}
		})
	}
}
