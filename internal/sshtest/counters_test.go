package sshtest

import (
	"testing"
	"time"
)

// The counters a "probe opens nothing" test relies on see what a client
// opens: a bare login counts nothing, a session and a refused channel
// type count one channel each, a global request counts one, and Open
// drops to 0 once the client has gone.
func TestServerCountsChannelsAndRequests(t *testing.T) {
	t.Parallel()
	s := NewServer(t, Healthy)
	c := dial(t, s.Addr, clientConfig(s.ClientKey, s.HostKey.Public))
	if s.Channels() != 0 || s.GlobalRequests() != 0 {
		t.Fatalf("after a bare login: %d channels, %d requests; want none", s.Channels(), s.GlobalRequests())
	}
	run(t, c, "true")
	if got, sessions := s.Channels(), s.Sessions(); got != 1 || sessions != 1 {
		t.Errorf("after one command: %d channels, %d sessions; want 1 session", got, sessions)
	}
	if _, _, err := c.OpenChannel("x-fleet-test", nil); err == nil {
		t.Errorf("an unknown channel type was accepted")
	}
	if got, sessions := s.Channels(), s.Sessions(); got != 2 || sessions != 1 {
		t.Errorf("after a refused channel: %d channels, %d sessions; want 2 channels (refused ones count too), 1 session", got, sessions)
	}
	if ok, _, err := c.SendRequest("x-fleet-test", true, nil); ok || err != nil {
		t.Errorf("global request: ok %v, err %v; want refused", ok, err)
	}
	if got := s.GlobalRequests(); got != 1 {
		t.Errorf("after one global request: %d requests, want 1", got)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.Open() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Open(); n != 0 {
		t.Errorf("%d connections still open 5s after the client closed", n)
	}
}
