package provider

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflogtest"
	"golang.org/x/sync/semaphore"

	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// executorAt is an executor named web1 that logs in to host:port with an
// inline key and a pin.
func executorAt(host string, port int, key *sshtest.Key, pin string) executorModel {
	return executorModel{
		ID: types.StringValue("0190aaaa-0000-7000-8000-000000000001"), Name: types.StringValue("web1"),
		connectionModel: connectionModel{
			Host: types.StringValue(host), Port: types.Int64Value(int64(port)), User: types.StringValue("root"),
			PrivateKey: types.StringValue(string(key.PEM())), PrivateKeyPassphrase: types.StringNull(), PrivateKeyFile: types.StringNull(),
			Agent: types.BoolNull(), HostKeyFingerprint: types.StringValue(pin), ProxyJump: types.StringNull(),
		},
		Generation: types.Int64Value(1),
	}
}

// Requirement "transition logs" (reachability seed, Observability: "A
// transition logs at Warn for reachable to unreachable and Info for the
// reverse, with executor id, host, reason and failure count. Unchanged
// results do not log, so a steady host stays silent."): one executor's
// probes, in sequence, through the resource's own probe path, with the
// provider's log captured. Every probe whose state does not move logs
// nothing at Info or above, below-threshold failures included.
func TestExecutorTransitionLogs(t *testing.T) {
	t.Parallel()
	up := sshtest.NewServer(t, sshtest.Healthy)
	host, closed := sshtest.ClosedPort(t)
	healthy := executorAt(up.Host, up.Port, up.ClientKey, up.HostKey.Fingerprint())
	down := executorAt(host, closed, up.ClientKey, up.HostKey.Fingerprint())
	r := &executorResource{data: &providerData{prober: &reachability.Prober{
		Dialer: &sshdial.Dialer{}, Slots: semaphore.NewWeighted(1), Timeout: 5 * time.Second}}}

	steps := []struct {
		what  string
		m     executorModel
		state reachability.State
		level string // the one entry at Info or above; "" for none
		msg   string
	}{
		{"first success", healthy, reachability.StateReachable, "info", "executor reachability changed"},
		{"success again", healthy, reachability.StateReachable, "", ""},
		{"one failure, below the threshold", down, reachability.StateReachable, "", ""},
		{"the failure that reaches the threshold", down, reachability.StateUnreachable, "warn", "executor became unreachable"},
		{"failure again", down, reachability.StateUnreachable, "", ""},
		{"recovery", healthy, reachability.StateReachable, "info", "executor reachability changed"},
		{"success once recovered", healthy, reachability.StateReachable, "", ""},
	}
	rec := reachability.Reset(up.Host)
	conds, err := reachability.ResetConditions(1, up.Host, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		var buf bytes.Buffer
		ctx := tflogtest.RootLogger(context.Background(), &buf)
		var diags diag.Diagnostics
		var probed bool
		rec, conds, probed = r.probe(ctx, &diags, s.m, s.m, "", rec, conds)
		if !probed || diags.HasError() || rec.State != s.state {
			t.Fatalf("%s: probed %v, state %s (want %s), diagnostics %v", s.what, probed, rec.State, s.state, diags)
		}
		entries, err := tflogtest.MultilineJSONDecode(&buf)
		if err != nil {
			t.Fatalf("%s: decoding the log: %v\n%s", s.what, err, buf.String())
		}
		var loud []map[string]any
		for _, e := range entries {
			if lvl := fmt.Sprint(e["@level"]); lvl != "trace" && lvl != "debug" {
				loud = append(loud, e)
			}
		}
		if s.level == "" {
			if len(loud) != 0 {
				t.Errorf("%s: the state stayed %s, yet it logged %v; want nothing at Info or above", s.what, s.state, loud)
			}
			continue
		}
		if len(loud) != 1 || loud[0]["@level"] != s.level || loud[0]["@message"] != s.msg {
			t.Errorf("%s: logged %v at Info or above; want one %s entry %q", s.what, loud, strings.ToUpper(s.level), s.msg)
			continue
		}
		e := loud[0]
		want := map[string]any{"executor": "web1", "id": s.m.ID.ValueString(), "host": s.m.Host.ValueString(),
			"reason": string(rec.Reason), "state": string(s.state), "consecutive_failures": float64(rec.ConsecutiveFailures)}
		for k, v := range want {
			if e[k] != v {
				t.Errorf("%s: field %s = %v, want %v (entry %v)", s.what, k, e[k], v, e)
			}
		}
	}
}
