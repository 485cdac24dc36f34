// Package sshdial reaches SSH hosts: it turns a target (host, port, user,
// credentials, host-key pin, optional jump host) into an authenticated SSH
// client with the TCP connect and the SSH handshake bounded by one deadline,
// and it classifies every way that can fail into exactly one Reason.
//
// It is the provider's one dialer and one classifier: the reachability probe,
// node health checks and the deployment's plan-time probes all go through it.
package sshdial
