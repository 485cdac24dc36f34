package provider_test

import (
	"fmt"
	"os"
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

// An executor re-pointed while disabled, then enabled again: its record
// describes the old target (the generation it observed is older than the
// connection's), so the update resets it before it probes the new one. The
// new target cannot be reached: once, a transient failure, which leaves a
// record's state as it was. Kept, the old record would go on saying
// reachable, with the old target's last success and conditions; reset, it
// says unknown, with no success, as a first failure of any new target does.
func TestAccExecutorEnabledAfterARepointWhileDisabledForgetsTheOldTarget(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		sshd := sshtest.StartSSHD(t)
		gate := sshtest.NewGate(t, sshd.Addr)  // the old target's path: open
		other := sshtest.NewGate(t, sshd.Addr) // the new target's: broken
		other.SetMode(sshtest.GateReset)
		keyFile := sshd.ClientKey.WriteFile(t, t.TempDir())
		knownHosts := filepath.Join(t.TempDir(), "known_hosts")
		fake := clock.NewFake(start)
		addr := "fleet_executor.web"
		conn := func(port int, enabled bool) string {
			return providerBlock(knownHosts) + executor("web", map[string]string{
				"host": q("127.0.0.1"), "port": fmt.Sprint(port), "user": q(sshd.User),
				"private_key_file":     q(keyFile),
				"host_key_fingerprint": q(sshd.HostKeys[0].Fingerprint()),
				"enabled":              fmt.Sprint(enabled),
			})
		}
		t0, t1, t2 := start, start.Add(interval+time.Second), start.Add(2*(interval+time.Second))
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(fake)),
			Steps: []resource.TestStep{
				{
					Config: conn(gate.Port, true),
					ConfigStateChecks: append(generations(addr, 1, 1),
						record(addr, "reachable", "", 0, t0, t0),
						conditionStatuses(addr, "True", "True", "True")),
				},
				{
					// Disabled and re-pointed: nothing is probed, and the
					// record, untouched, still describes generation 1.
					PreConfig: func() { fake.Set(t1) },
					Config:    conn(other.Port, false),
					ConfigStateChecks: append(generations(addr, 2, 1),
						record(addr, "reachable", "", 0, t0, t0),
						conditionStatuses(addr, "True", "True", "True")),
				},
				{
					// Enabled again: reset, then the new target's probe.
					PreConfig: func() { fake.Set(t2) },
					Config:    conn(other.Port, true),
					ConfigStateChecks: append(generations(addr, 2, 2),
						record(addr, "unknown", "network", 1, t2, time.Time{}),
						conditionStatuses(addr, "Unknown", "Unknown", "Unknown"),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("conditions").AtSliceIndex(2).AtMapKey("last_transition_time"), knownvalue.StringExact(ts(t2))),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("conditions").AtSliceIndex(2).AtMapKey("observed_generation"), knownvalue.Int64Exact(2))),
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
					// The refresh of an apply that changes nothing: the
					// probe confirms the record, which keeps its times.
					Config: config,
					ConfigStateChecks: []statecheck.StateCheck{
						record(addr, "reachable", "", 0, start, start),
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

// Through a bastion, write-only credentials leave a refresh nothing to log
// in to the bastion with: the refresh checks nothing of the target and says
// so, and it is never counted as a failure, however many refreshes run.
func TestAccExecutorWriteOnlyCredentialsThroughBastion(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		sshd := sshtest.StartSSHD(t)
		bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, sshd.ClientKey)
		fake := clock.NewFake(start)
		encrypted := filepath.Join(t.TempDir(), "id_encrypted")
		if err := os.WriteFile(encrypted, sshd.ClientKey.EncryptedPEM(t, "correct horse"), 0o600); err != nil {
			t.Fatal(err)
		}
		jump := fmt.Sprintf("%s@127.0.0.1:%d", sshd.User, bastion.Port)
		config := providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
resource "fleet_executor" "inline" {
  name                 = "inline"
  host                 = "127.0.0.1"
  port                 = %[1]d
  user                 = %[2]q
  private_key          = <<-EOT
%[3]s
EOT
  host_key_fingerprint = %[4]q
  proxy_jump           = %[5]q
}

resource "fleet_executor" "passphrase" {
  name                   = "passphrase"
  host                   = "127.0.0.1"
  port                   = %[1]d
  user                   = %[2]q
  private_key_file       = %[6]q
  private_key_passphrase = "correct horse"
  host_key_fingerprint   = %[4]q
  proxy_jump             = %[5]q
}
`, sshd.Port, sshd.User, strings.TrimSpace(string(sshd.ClientKey.PEM())), sshd.HostKeys[0].Fingerprint(), jump, encrypted)
		notRechecked := func(addr string) []statecheck.StateCheck {
			return []statecheck.StateCheck{
				// The record is as the create left it: nothing was observed.
				record(addr, "reachable", "", 0, start, start),
				conditionStatuses(addr, "True", "Unknown", "Unknown"),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("conditions").AtSliceIndex(2), knownvalue.ObjectPartial(map[string]knownvalue.Check{
					"reason":  knownvalue.StringExact("CredentialWithheld"),
					"message": knownvalue.StringRegexp(regexp.MustCompile(`not re-checked: its bastion needs credentials`)),
				})),
			}
		}
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(fake)),
			Steps: []resource.TestStep{
				{
					Config: config,
					ConfigStateChecks: []statecheck.StateCheck{
						record("fleet_executor.inline", "reachable", "", 0, start, start),
						record("fleet_executor.passphrase", "reachable", "", 0, start, start),
						conditionStatuses("fleet_executor.inline", "True", "True", "True"),
					},
				},
				{
					PreConfig:         func() { fake.Advance(interval) },
					Config:            config,
					ConfigStateChecks: append(notRechecked("fleet_executor.inline"), notRechecked("fleet_executor.passphrase")...),
				},
				{
					PreConfig:         func() { fake.Advance(interval) },
					Config:            config,
					ConfigStateChecks: append(notRechecked("fleet_executor.inline"), notRechecked("fleet_executor.passphrase")...),
				},
			},
		}
	})
}

// Credentials in the provider block are never written to state and are
// there at every refresh: authentication is checked each time, so a key
// removed from the host is seen.
func TestAccProviderCredentialsCheckedAtRefresh(t *testing.T) {
	acctest.Test(t, func(t *testing.T, cli acctest.CLI) resource.TestCase {
		sshd := sshtest.StartSSHD(t)
		fake := clock.NewFake(start)
		addr := "fleet_executor.web"
		config := fmt.Sprintf(`
provider "fleet" {
  probe_interval   = 60
  known_hosts_file = %q
  private_key      = <<-EOT
%s
EOT
}

resource "fleet_executor" "web" {
  name                 = "web"
  host                 = "127.0.0.1"
  port                 = %d
  user                 = %q
  host_key_fingerprint = %q
}
`, filepath.Join(t.TempDir(), "kh"), strings.TrimSpace(string(sshd.ClientKey.PEM())), sshd.Port, sshd.User, sshd.HostKeys[0].Fingerprint())
		t1, t2 := start.Add(interval), start.Add(2*interval)
		return resource.TestCase{
			ProtoV6ProviderFactories: factories(provider.WithClock(fake)),
			Steps: []resource.TestStep{
				{
					Config: config,
					ConfigStateChecks: []statecheck.StateCheck{
						record(addr, "reachable", "", 0, start, start),
						conditionStatuses(addr, "True", "True", "True"),
						// The provider's key is not the executor's: no agent by default.
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("agent"), knownvalue.Bool(false)),
					},
				},
				{
					// A probe that logs in again confirms the record: its
					// times stay (a refresh that saw nothing new writes
					// nothing), and Authenticated stays True, which a probe
					// without the credentials could not say.
					PreConfig:         func() { fake.Set(t1) },
					Config:            config,
					ConfigStateChecks: []statecheck.StateCheck{record(addr, "reachable", "", 0, start, start), conditionStatuses(addr, "True", "True", "True")},
				},
				{
					PreConfig:         func() { sshd.SetAuthorizedKeys(t); fake.Set(t2) },
					Config:            config,
					ConfigStateChecks: []statecheck.StateCheck{record(addr, "reachable", "auth", 1, t2, start), conditionStatuses(addr, "True", "False", "True")},
				},
			},
		}
	})
}

// An import knows the host but not the credentials the configuration gives
// (an inline key is write-only): its refresh records what it could check
// and says authentication was not, rather than a false config failure from
// an agent nobody asked for. The apply that follows checks it in full.
func TestExecutorImportWithInlineKey(t *testing.T) {
	// No agent: TestMain unsets SSH_AUTH_SOCK for the provider served in
	// this process.
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			sshd := sshtest.StartSSHD(t)
			s := acctest.NewSession(t, cli, server(provider.WithClock(clock.NewFake(start))))
			s.WriteConfig(providerBlock(filepath.Join(t.TempDir(), "kh")) + fmt.Sprintf(`
variable "key" {
  type      = string
  sensitive = true
}

resource "fleet_executor" "web" {
  name                 = "web"
  host                 = "127.0.0.1"
  port                 = %d
  user                 = %q
  private_key          = var.key
  host_key_fingerprint = %q
}
`, sshd.Port, sshd.User, sshd.HostKeys[0].Fingerprint()))
			s.Setenv("TF_VAR_key", string(sshd.ClientKey.PEM()))
			s.Run("init", "-input=false")
			s.Run("import", "-input=false", "fleet_executor.web",
				fmt.Sprintf("%s@127.0.0.1:%d,name=web,host_key_fingerprint=%s", sshd.User, sshd.Port, sshd.HostKeys[0].Fingerprint()))
			web := s.Values("fleet_executor.web")
			rec := recordOf(t, web)
			wantValue(t, "reason after import", rec["reason"], "")
			wantValue(t, "state after import", rec["state"], "reachable")
			wantValue(t, "last_success_at after import", rec["last_success_at"], nil)
			conds, _ := web["conditions"].([]any)
			if len(conds) != 3 {
				t.Fatalf("conditions %v", web["conditions"])
			}
			auth, _ := conds[1].(map[string]any)
			wantValue(t, "Authenticated after import", auth["status"], "Unknown")
			if !strings.Contains(fmt.Sprint(auth["message"]), "imported") {
				t.Errorf("Authenticated message %q does not say the import does not know the credentials", auth["message"])
			}
			// The warning says so, and nothing about intervals that never passed.
			out, _ := s.Run("plan", "-input=false", "-json")
			w := findWarning(t, warnings(t, out), `^Executor "web" has no authenticated probe yet$`)
			if !strings.Contains(w.Detail, "no probe has checked its credentials yet") || strings.Contains(w.Detail, "more than three probe intervals") {
				t.Errorf("warning after the import: %q", w.Detail)
			}

			s.Run("apply", "-auto-approve", "-input=false")
			s.WantNoChanges()
			rec = recordOf(t, s.Values("fleet_executor.web"))
			wantValue(t, "state after apply", rec["state"], "reachable")
			wantValue(t, "last_success_at after apply", rec["last_success_at"], ts(start))
		})
	}
}

// An import does not know the credentials a configuration gives, but the
// provider block's key and the agent are there at every refresh: the
// refresh that follows the import logs in with them, so authentication is
// checked (Authenticated is True, last_success_at set) and stays checked at
// later refreshes, and no warning claims otherwise. Through both CLIs, with
// `import` and with an import block.
func TestExecutorImportChecksAuthenticationAtRefresh(t *testing.T) { // serial: the provider served in-process reads SSH_AUTH_SOCK from the process
	for _, cli := range acctest.CLIs(t) {
		for _, c := range []struct {
			name  string
			agent bool // credentials from the agent, else the provider block's key
			block bool // an import block, else the import command
		}{
			{name: "provider key, import command"},
			{name: "provider key, import block", block: true},
			{name: "agent, import command", agent: true},
		} {
			t.Run(cli.Name+"/"+c.name, func(t *testing.T) {
				sshd := sshtest.StartSSHD(t)
				fake := clock.NewFake(start)
				s := acctest.NewSession(t, cli, server(provider.WithClock(fake)))
				provider := providerBlock(filepath.Join(t.TempDir(), "kh"))
				if c.agent {
					t.Setenv("SSH_AUTH_SOCK", sshtest.StartAgent(t, sshd.ClientKey)) // the provider runs in this process
				} else {
					t.Setenv("SSH_AUTH_SOCK", "") // only the provider block's key can log in
					provider = fmt.Sprintf("provider \"fleet\" {\n  probe_interval   = 60\n  known_hosts_file = %q\n  private_key      = <<-EOT\n%s\nEOT\n}\n",
						filepath.Join(t.TempDir(), "kh"), strings.TrimSpace(string(sshd.ClientKey.PEM())))
				}
				id := fmt.Sprintf("%s@127.0.0.1:%d,name=web,host_key_fingerprint=%s", sshd.User, sshd.Port, sshd.HostKeys[0].Fingerprint())
				config := provider + fmt.Sprintf(`
resource "fleet_executor" "web" {
  name                 = "web"
  host                 = "127.0.0.1"
  port                 = %d
  user                 = %q
  host_key_fingerprint = %q
}
`, sshd.Port, sshd.User, sshd.HostKeys[0].Fingerprint())
				var out string
				if c.block {
					s.WriteConfig(config + fmt.Sprintf("\nimport {\n  to = fleet_executor.web\n  id = %q\n}\n", id))
					s.Run("init", "-input=false")
					out, _ = s.Run("apply", "-auto-approve", "-input=false", "-json")
				} else {
					s.WriteConfig(config)
					s.Run("init", "-input=false")
					s.Run("import", "-input=false", "fleet_executor.web", id)
					out, _ = s.Run("plan", "-input=false", "-json")
				}
				for _, w := range warnings(t, out) {
					if strings.Contains(w.Summary, "web") {
						t.Errorf("after the import: warning %q: %s", w.Summary, w.Detail)
					}
				}
				checkAuthenticated := func(when string, checked time.Time) {
					t.Helper()
					web := s.Values("fleet_executor.web")
					rec := recordOf(t, web)
					wantValue(t, "state "+when, rec["state"], "reachable")
					wantValue(t, "reason "+when, rec["reason"], "")
					wantValue(t, "last_success_at "+when, rec["last_success_at"], ts(checked))
					conds, _ := web["conditions"].([]any)
					if len(conds) != 3 {
						t.Fatalf("conditions %v", web["conditions"])
					}
					auth, _ := conds[1].(map[string]any)
					wantValue(t, "Authenticated "+when, auth["status"], "True")
				}
				checkAuthenticated("after the import's refresh", start)

				// Later refreshes go on checking it: Authenticated stays
				// True (a refresh without the credentials would turn it
				// Unknown), and the record, confirmed, keeps its times.
				fake.Set(start.Add(interval))
				s.Run("apply", "-refresh-only", "-auto-approve", "-input=false")
				checkAuthenticated("at the next refresh", start)
				fake.Set(start.Add(2 * interval))
				s.Run("apply", "-auto-approve", "-input=false")
				s.WantNoChanges()
			})
		}
	}
}
