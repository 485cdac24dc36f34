package provider_test

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// acceptedPinForms lists the refusal's accepted forms, as every refusal ends.
const acceptedPinForms = "accepted: SHA256:<base64>, ssh-keygen -lf output, a public key or known_hosts line"

// runTool runs a command and returns its standard output, trimmed, failing
// the test when it fails or prints nothing.
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("%s %s: %v, printed %q\n%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// operatorPins returns, for one host key of sshd, the pin in every form an
// operator has at hand, made by the OpenSSH tools themselves, each checked
// to be of its form.
func operatorPins(t *testing.T, sshd *sshtest.SSHD, key *sshtest.Key, keyscanType, keygenType string) map[string]string {
	t.Helper()
	pub := filepath.Join(t.TempDir(), "host_key.pub")
	if err := os.WriteFile(pub, []byte(key.AuthorizedLine()+" root@web1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(sshd.Port)
	pins := map[string]string{
		"keygen":  runTool(t, "ssh-keygen", "-lf", pub),
		"keyscan": runTool(t, "ssh-keyscan", "-t", keyscanType, "-p", port, "127.0.0.1"),
		"hashed":  runTool(t, "ssh-keyscan", "-H", "-t", keyscanType, "-p", port, "127.0.0.1"),
		"pubkey":  key.AuthorizedLine() + " root@web1",
	}
	algo := regexp.QuoteMeta(key.Public.Type())
	forms := map[string]string{
		"keygen":  `^\d+ ` + regexp.QuoteMeta(key.Fingerprint()) + ` root@web1 \(` + keygenType + `\)$`,
		"keyscan": `^\[127\.0\.0\.1\]:` + port + ` ` + algo + ` AAAA\S+$`,
		"hashed":  `^\|1\|\S+\|\S+ ` + algo + ` AAAA\S+$`,
		"pubkey":  `^` + algo + ` AAAA\S+ root@web1$`,
	}
	for form, pattern := range forms {
		if !regexp.MustCompile(pattern).MatchString(pins[form]) {
			t.Fatalf("%s pin %q does not match %s", form, pins[form], pattern)
		}
	}
	return pins
}

// Every pin form an operator has at hand reaches a real OpenSSH host, for
// both of its keys: the ssh-keygen -lf line, the ssh-keyscan (known_hosts)
// line, a hashed known_hosts line and a public key line; in an executor and
// in the data source. A wrong key in the ssh-keygen form is a host key
// mismatch.
func TestAccPinFormsReachTheHost(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		sshd := sshtest.StartSSHD(t, sshtest.WithHostKeyTypes("ed25519", "ecdsa"))
		keyFile := sshd.ClientKey.WriteFile(t, t.TempDir())
		pins := map[string]string{}
		for form, pin := range operatorPins(t, sshd, sshd.HostKeys[0], "ed25519", "ED25519") {
			pins[form+"_ed25519"] = pin
		}
		for form, pin := range operatorPins(t, sshd, sshd.HostKeys[1], "ecdsa", "ECDSA") {
			pins[form+"_ecdsa"] = pin
		}
		wrong := fmt.Sprintf("256 %s root@web1 (ED25519)", sshtest.NewKey(t).Fingerprint())

		config := providerBlock(filepath.Join(t.TempDir(), "known_hosts"))
		conn := func(pin string) map[string]string {
			return map[string]string{
				"host": q("127.0.0.1"), "port": fmt.Sprint(sshd.Port), "user": q(sshd.User),
				"private_key_file": q(keyFile), "host_key_fingerprint": q(pin),
			}
		}
		var checks []statecheck.StateCheck
		var targets strings.Builder
		var results []knownvalue.Check
		for _, name := range slices.Sorted(maps.Keys(pins)) {
			config += executor(name, conn(pins[name]))
			addr := "fleet_executor." + name
			checks = append(checks, record(addr, "reachable", "", 0, start, start), conditionStatuses(addr, "True", "True", "True"),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("host_key_fingerprint"), knownvalue.StringExact(pins[name])))
			target := conn(pins[name])
			target["name"] = q(name)
			fmt.Fprintf(&targets, "    {\n%s    },\n", hcl(target))
			results = append(results, knownvalue.ObjectPartial(map[string]knownvalue.Check{
				"name": knownvalue.StringExact(name), "reachable": knownvalue.Bool(true), "reason": knownvalue.StringExact(""),
			}))
		}
		config += executor("wrong", conn(wrong))
		target := conn(wrong)
		target["name"] = q("wrong")
		fmt.Fprintf(&targets, "    {\n%s    },\n", hcl(target))
		config += "data \"fleet_reachability\" \"pins\" {\n  targets = [\n" + targets.String() + "  ]\n}\n"

		checks = append(checks,
			record("fleet_executor.wrong", "unreachable", "host_key", 1, start, time.Time{}),
			statecheck.ExpectKnownValue("fleet_executor.wrong", tfjsonpath.New("conditions").AtSliceIndex(0), knownvalue.ObjectPartial(map[string]knownvalue.Check{
				"type": knownvalue.StringExact("HostKeyVerified"), "status": knownvalue.StringExact("False"),
			})),
			statecheck.ExpectKnownValue("data.fleet_reachability.pins", tfjsonpath.New("results"), knownvalue.ListExact(append(results,
				knownvalue.ObjectPartial(map[string]knownvalue.Check{
					"name": knownvalue.StringExact("wrong"), "reachable": knownvalue.Bool(false), "reason": knownvalue.StringExact("host_key"),
					"message": knownvalue.StringRegexp(regexp.MustCompile(`host key mismatch`)),
				})))),
		)
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(clock.NewFake(start))),
			Steps:                    []resource.TestStep{{Config: config, ConfigStateChecks: checks}},
		}
	})
}

// A value that is no pin is refused at validate, in an executor and in a
// data source target, with the attribute named and the accepted forms
// listed.
func TestInvalidPinRefusedAtValidate(t *testing.T) {
	t.Parallel()
	key := sshtest.NewKey(t)
	invalid := []string{
		"not a pin",
		"SHA256:tooShort",
		"256 " + key.Fingerprint() + " root@web1 (DSA)",
		// ssh-keyscan of a host with two keys, pasted whole.
		"[127.0.0.1]:22 " + key.AuthorizedLine() + "\n[127.0.0.1]:22 " + sshtest.NewKeyOfType(t, "ecdsa").AuthorizedLine(),
		"@cert-authority *.example.org " + key.AuthorizedLine(),
	}
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			srv := sshtest.NewServer(t, sshtest.Healthy)
			var config, targets strings.Builder
			for i, pin := range invalid {
				config.WriteString(executor(fmt.Sprintf("e%d", i), map[string]string{
					"host": q("127.0.0.1"), "port": fmt.Sprint(srv.Port), "host_key_fingerprint": q(pin),
				}))
				fmt.Fprintf(&targets, "    { name = \"t%d\", host = \"127.0.0.1\", port = %d, host_key_fingerprint = %q },\n", i, srv.Port, pin)
			}
			config.WriteString("data \"fleet_reachability\" \"d\" {\n  targets = [\n" + targets.String() + "  ]\n}\n")
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(config.String())
			s.Run("init", "-input=false")
			valid, diags := s.Validate()
			if valid {
				t.Fatalf("validate accepted invalid pins: %+v", diags)
			}
			want := map[string]int{"Invalid host_key_fingerprint": len(invalid)}
			for i := range invalid {
				want[fmt.Sprintf("Invalid targets[%d].host_key_fingerprint", i)] = 1
			}
			got := map[string]int{}
			for _, d := range diags {
				if d.Severity != "error" {
					continue
				}
				got[d.Summary]++
				if !strings.Contains(d.Detail, acceptedPinForms) {
					t.Errorf("%s: detail %q does not list the accepted forms", d.Summary, d.Detail)
				}
			}
			for summary, n := range want {
				if got[summary] != n {
					t.Errorf("%d errors %q, want %d; all: %+v", got[summary], summary, n, diags)
				}
			}
			if len(got) != len(want) {
				t.Errorf("errors %v, want %v", got, want)
			}
			if n := srv.Accepted(); n != 0 {
				t.Errorf("validate dialled the host %d times", n)
			}
		})
	}
}
