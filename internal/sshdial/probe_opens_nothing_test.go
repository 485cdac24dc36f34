package sshdial_test

import (
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// closedBy waits until s holds no connection open, so that everything the
// client sent has been handled (and counted), and reports whether that
// happened within bound.
func closedBy(s *sshtest.Server, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for s.Open() != 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Requirement "the probe opens nothing" (reachability seed, The probe:
// "dials with the pinned fingerprint, closes immediately, runs no remote
// command"; spec: "On success close at once. No session, no remote
// command."): a successful probe, direct or through a bastion, opens no
// channel and sends no global request to the target, and has closed its
// connection by the time it returns. Through a bastion the only channel
// is the tunnel: no session there either.
func TestProbeOpensNothing(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		s := sshtest.NewServer(t, sshtest.Healthy)
		o, _ := probe(t, &sshdial.Dialer{}, serverTarget(t, s))
		if !o.Reachable() {
			t.Fatalf("probe = %+v, want reachable", o)
		}
		if !closedBy(s, 2*time.Second) {
			t.Errorf("the probe's connection is still open 2s after it returned: a probe closes at once")
		}
		if s.Accepted() != 1 || s.Channels() != 0 || s.GlobalRequests() != 0 {
			t.Errorf("the probe made %d connections, opened %d channels (%d sessions), sent %d global requests; want 1 connection and nothing opened on it",
				s.Accepted(), s.Channels(), s.Sessions(), s.GlobalRequests())
		}
	})
	t.Run("through a bastion", func(t *testing.T) {
		client := sshtest.NewKey(t)
		s := sshtest.NewServerWithKeys(t, sshtest.Healthy, nil, client)
		bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, client)
		d, _ := dialer(t)
		tgt := serverTarget(t, s)
		tgt.Jump = &sshdial.Endpoint{Host: bastion.Host, Port: bastion.Port}
		o, _ := probe(t, d, tgt)
		if !o.Reachable() {
			t.Fatalf("probe = %+v, want reachable", o)
		}
		if !closedBy(s, 2*time.Second) || !closedBy(bastion, 2*time.Second) {
			t.Errorf("connections still open 2s after the probe returned (target %d, bastion %d): a probe closes at once", s.Open(), bastion.Open())
		}
		if s.Accepted() != 1 || s.Channels() != 0 || s.GlobalRequests() != 0 {
			t.Errorf("at the target: %d connections, %d channels (%d sessions), %d global requests; want 1 connection and nothing opened on it",
				s.Accepted(), s.Channels(), s.Sessions(), s.GlobalRequests())
		}
		if bastion.Channels() != 1 || bastion.Sessions() != 0 || bastion.GlobalRequests() != 0 {
			t.Errorf("at the bastion: %d channels (%d sessions), %d global requests; want only the tunnel",
				bastion.Channels(), bastion.Sessions(), bastion.GlobalRequests())
		}
	})
}
