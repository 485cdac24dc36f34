package provider_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/clock"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

const interval = 60 * time.Second

func providerBlock(knownHosts string) string {
	return fmt.Sprintf("provider \"fleet\" {\n  probe_interval   = 60\n  known_hosts_file = %q\n}\n", knownHosts)
}

func executor(name string, attrs map[string]string) string {
	attrs["name"] = q(name)
	return fmt.Sprintf("resource \"fleet_executor\" %q {\n%s}\n", name, hcl(attrs))
}

func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// record checks an executor's reachability record.
func record(addr, state, reason string, failures int64, checked, success time.Time) statecheck.StateCheck {
	want := map[string]knownvalue.Check{
		"state":                knownvalue.StringExact(state),
		"reason":               knownvalue.StringExact(reason),
		"consecutive_failures": knownvalue.Int64Exact(failures),
		"host":                 knownvalue.StringExact("127.0.0.1"),
		"stale":                knownvalue.Bool(false),
		"checked_at":           knownvalue.StringExact(ts(checked)),
		"last_success_at":      knownvalue.Null(),
	}
	if !success.IsZero() {
		want["last_success_at"] = knownvalue.StringExact(ts(success))
	}
	if reason == "" {
		want["message"] = knownvalue.StringExact("")
	} else {
		want["message"] = knownvalue.StringRegexp(regexp.MustCompile(`127\.0\.0\.1:\d+`))
	}
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("reachability"), knownvalue.ObjectExact(want))
}

func generations(addr string, generation, observed int64) []statecheck.StateCheck {
	return []statecheck.StateCheck{
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.Int64Exact(generation)),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("observed_generation"), knownvalue.Int64Exact(observed)),
	}
}

func conditionStatuses(addr string, hostKey, auth, reachable string) statecheck.StateCheck {
	cond := func(typ, status string) knownvalue.Check {
		return knownvalue.ObjectPartial(map[string]knownvalue.Check{"type": knownvalue.StringExact(typ), "status": knownvalue.StringExact(status)})
	}
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("conditions"), knownvalue.ListExact([]knownvalue.Check{
		cond("HostKeyVerified", hostKey), cond("Authenticated", auth), cond("Reachable", reachable),
	}))
}

// The executor's whole life through each CLI: create probes; refreshes
// advance the streak (a transient failure first leaves the state alone, the
// second makes it unreachable, one success recovers); a connection change
// resets then probes; a disabled executor is left untouched; enabling it
// again probes the new connection; import; destroy.
func TestAccExecutorLifecycle(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		sshd := sshtest.StartSSHD(t)
		gate := sshtest.NewGate(t, sshd.Addr)  // the executor's path to the host
		other := sshtest.NewGate(t, sshd.Addr) // a second path, broken, for the reset
		other.SetMode(sshtest.GateReset)
		keyFile := sshd.ClientKey.WriteFile(t, t.TempDir())
		fake := clock.NewFake(start)
		addr := "fleet_executor.web"
		conn := func(port int, enabled bool) string {
			return providerBlock(filepath.Join(t.TempDir(), "known_hosts")) + executor("web", map[string]string{
				"host": q("127.0.0.1"), "port": fmt.Sprint(port), "user": q(sshd.User),
				"private_key_file":     q(keyFile),
				"host_key_fingerprint": q(sshd.HostKeys[0].Fingerprint()),
				"enabled":              fmt.Sprint(enabled),
			})
		}
		var t0, t1, t2, t3, t4 = start, start.Add(interval + time.Second), start.Add(2 * (interval + time.Second)), start.Add(3 * (interval + time.Second)), start.Add(4 * (interval + time.Second))
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(fake)),
			Steps: []resource.TestStep{
				{
					Config: conn(gate.Port, true),
					ConfigStateChecks: append(generations(addr, 1, 1),
						record(addr, "reachable", "", 0, t0, t0),
						conditionStatuses(addr, "True", "True", "True"),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringRegexp(regexp.MustCompile(`^[0-9a-f-]{36}$`))),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("ssh_connection"), knownvalue.ObjectExact(map[string]knownvalue.Check{
							"host": knownvalue.StringExact("127.0.0.1"), "port": knownvalue.Int64Exact(int64(gate.Port)),
							"user": knownvalue.StringExact(sshd.User), "private_key_file": knownvalue.StringExact(keyFile),
							"agent": knownvalue.Bool(false), "host_key_fingerprint": knownvalue.StringExact(sshd.HostKeys[0].Fingerprint()),
							"proxy_jump": knownvalue.Null(),
						})),
					),
				},
				{
					// One transient failure, seen by `refresh`: still
					// reachable, the reason shows it.
					PreConfig:    func() { gate.SetMode(sshtest.GateReset); fake.Set(t1) },
					RefreshState: true,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr(addr, "reachability.state", "reachable"),
						resource.TestCheckResourceAttr(addr, "reachability.reason", "network"),
						resource.TestCheckResourceAttr(addr, "reachability.consecutive_failures", "1"),
						resource.TestCheckResourceAttr(addr, "reachability.checked_at", ts(t1)),
						resource.TestCheckResourceAttr(addr, "reachability.last_success_at", ts(t0)),
					),
				},
				{
					// The second, seen by the refresh of an apply that
					// changes nothing, makes it unreachable.
					PreConfig:         func() { fake.Set(t2) },
					Config:            conn(gate.Port, true),
					ConfigStateChecks: []statecheck.StateCheck{record(addr, "unreachable", "network", 2, t2, t0), conditionStatuses(addr, "True", "True", "False")},
				},
				{
					// One success recovers.
					PreConfig:         func() { gate.SetMode(sshtest.GateOpen); fake.Set(t3) },
					Config:            conn(gate.Port, true),
					ConfigStateChecks: []statecheck.StateCheck{record(addr, "reachable", "", 0, t3, t3)},
				},
				{
					// A connection change resets the record (last success
					// cleared, state unknown), then probes the new target:
					// one transient failure leaves it unknown.
					Config: conn(other.Port, true),
					ConfigStateChecks: append(generations(addr, 2, 2),
						record(addr, "unknown", "network", 1, t3, time.Time{}),
						conditionStatuses(addr, "Unknown", "Unknown", "Unknown")),
				},
				{
					// Disabled and re-pointed: nothing is reset or probed.
					Config: conn(gate.Port, false),
					ConfigStateChecks: append(generations(addr, 3, 2),
						record(addr, "unknown", "network", 1, t3, time.Time{})),
				},
				{
					// Enabled again, later: the refresh leaves the disabled
					// record alone; the update sees it describes an older
					// connection, resets it and probes the new one.
					PreConfig: func() { fake.Set(t4) },
					Config:    conn(gate.Port, true),
					ConfigStateChecks: append(generations(addr, 3, 3),
						record(addr, "reachable", "", 0, t4, t4),
						conditionStatuses(addr, "True", "True", "True")),
				},
				{
					ResourceName:  addr,
					ImportState:   true,
					ImportStateId: fmt.Sprintf("%s@127.0.0.1:%d,name=web,host_key_fingerprint=%s,private_key_file=%s", sshd.User, gate.Port, sshd.HostKeys[0].Fingerprint(), keyFile),
					// An import is a new identity (a new id, generation 1) and
					// probes at once.
					ImportStateCheck: func(states []*terraform.InstanceState) error {
						if len(states) != 1 {
							return fmt.Errorf("imported %d instances, want 1", len(states))
						}
						want := map[string]string{
							"name": "web", "host": "127.0.0.1", "port": fmt.Sprint(gate.Port), "user": sshd.User,
							"private_key_file": keyFile, "agent": "false", "enabled": "true",
							"host_key_fingerprint": sshd.HostKeys[0].Fingerprint(),
							"generation":           "1", "observed_generation": "1",
							"reachability.state": "reachable", "reachability.consecutive_failures": "0",
							"reachability.checked_at": ts(t4), "reachability.last_success_at": ts(t4),
							"ssh_connection.port": fmt.Sprint(gate.Port),
						}
						for k, v := range want {
							if got := states[0].Attributes[k]; got != v {
								return fmt.Errorf("imported %s = %q, want %q", k, got, v)
							}
						}
						return nil
					},
				},
			},
		}
	})
}

// An inline private_key is write-only: it is used at create, never stored,
// and a refresh, which cannot read it back, proves transport and host key
// and says it did not re-check authentication. It claims nothing more: the
// key was removed from the host meanwhile, and the record neither moves its
// last success nor keeps saying the credentials are accepted.
func TestAccExecutorInlineKey(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		sshd := sshtest.StartSSHD(t)
		fake := clock.NewFake(start)
		addr := "fleet_executor.inline"
		config := providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
resource "fleet_executor" "inline" {
  name                 = "inline"
  host                 = "127.0.0.1"
  port                 = %d
  user                 = %q
  private_key          = <<-EOT
%s
EOT
  host_key_fingerprint = %q
}
`, sshd.Port, sshd.User, strings.TrimSpace(string(sshd.ClientKey.PEM())), sshd.HostKeys[0].AuthorizedLine())
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(fake)),
			Steps: []resource.TestStep{
				{
					Config: config,
					ConfigStateChecks: []statecheck.StateCheck{
						record(addr, "reachable", "", 0, start, start),
						conditionStatuses(addr, "True", "True", "True"),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("private_key"), knownvalue.Null()),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("agent"), knownvalue.Bool(false)),
					},
				},
				{
					PreConfig: func() {
						sshd.SetAuthorizedKeys(t) // the key no longer logs in
						fake.Advance(interval)
					},
					// The refresh of an apply that changes nothing.
					Config: config,
					ConfigStateChecks: []statecheck.StateCheck{
						record(addr, "reachable", "", 0, start.Add(interval), start),
						conditionStatuses(addr, "True", "Unknown", "True"),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("conditions").AtSliceIndex(1), knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"reason":  knownvalue.StringExact("CredentialWithheld"),
							"message": knownvalue.StringRegexp(regexp.MustCompile(`not re-checked: the inline private_key is write-only.*provider block`)),
						})),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("conditions").AtSliceIndex(2).AtMapKey("message"),
							knownvalue.StringRegexp(regexp.MustCompile(`authentication was not re-checked`))),
					},
				},
			},
		}
	})
}

// Invalid values are refused at validate time with the attribute named and
// the expected form spelled out.
func TestAccExecutorRejectsInvalidValues(t *testing.T) {
	cases := []struct {
		name  string
		attrs map[string]string
		want  string
	}{
		{"pin", map[string]string{"host_key_fingerprint": q("MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48")},
			`host_key_fingerprint.*MD5 fingerprint: use the SHA256 form; accepted: SHA256:<base64>, ssh-keygen -lf output`},
		{"jump", map[string]string{"proxy_jump": q("a@b,c@d")}, `proxy_jump.*only one hop is supported`},
		{"port", map[string]string{"port": "0"}, `port.*between 1 and 65535`},
		{"host", map[string]string{"host": q("web 1")}, `host.*contains a space`},
		{"key conflict", map[string]string{"private_key": q("x"), "private_key_file": q("/k")}, `private_key_file" cannot be specified when "private_key" is specified`},
	}
	// The CLIs wrap long messages: any run of spaces may be a line break.
	pattern := func(p string) *regexp.Regexp {
		return regexp.MustCompile("(?s)" + strings.ReplaceAll(p, " ", `\s+`))
	}
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		var steps []resource.TestStep
		for _, c := range cases {
			attrs := map[string]string{"host": q("127.0.0.1"), "host_key_fingerprint": q("SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU")}
			for k, v := range c.attrs {
				attrs[k] = v
			}
			steps = append(steps, resource.TestStep{
				Config:      executor("bad", attrs),
				PlanOnly:    true,
				ExpectError: pattern(c.want),
			})
		}
		return resource.TestCase{ProtoV6ProviderFactories: factories(), Steps: steps}
	})
}

// An update that changes no connection field resets nothing and probes
// nothing: the generation and the record stay.
func TestAccExecutorRenameKeepsRecord(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		srv := sshtest.NewServer(t, sshtest.Healthy)
		fake := clock.NewFake(start)
		keyFile := srv.ClientKey.WriteFile(t, t.TempDir())
		config := func(name string) string {
			return fmt.Sprintf(`resource "fleet_executor" "web" {
  name                 = %q
  host                 = "127.0.0.1"
  port                 = %d
  private_key_file     = %q
  host_key_fingerprint = %q
}
`, name, srv.Port, keyFile, srv.HostKey.Fingerprint())
		}
		addr := "fleet_executor.web"
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(fake)),
			Steps: []resource.TestStep{
				{Config: config("web"), ConfigStateChecks: append(generations(addr, 1, 1), record(addr, "reachable", "", 0, start, start))},
				{
					PreConfig: func() { fake.Advance(time.Second) },
					Config:    config("web-renamed"),
					ConfigStateChecks: append(generations(addr, 1, 1),
						record(addr, "reachable", "", 0, start, start),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("name"), knownvalue.StringExact("web-renamed"))),
					Check: func(*terraform.State) error {
						if n := srv.Accepted(); n != 1 {
							return fmt.Errorf("the host was dialled %d times, want once (at create)", n)
						}
						return nil
					},
				},
			},
		}
	})
}
