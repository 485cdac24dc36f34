package reachability

import (
	"fmt"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// The condition types of an executor, in their fixed order.
const (
	ConditionHostKeyVerified = "HostKeyVerified"
	ConditionAuthenticated   = "Authenticated"
	ConditionReachable       = "Reachable"
)

// ConditionTypes is the fixed order of an executor's conditions.
var ConditionTypes = conditions.Types{ConditionHostKeyVerified, ConditionAuthenticated, ConditionReachable}

// Reason codes of the conditions.
const (
	ReasonNotYetProbed         = "NotYetProbed"
	ReasonProbeSucceeded       = "ProbeSucceeded"
	ReasonHostKeyMatchesPin    = "HostKeyMatchesPin"
	ReasonCredentialsAccepted  = "CredentialsAccepted"
	ReasonCredentialWithheld   = "CredentialWithheld"
	ReasonInvalidConfiguration = "InvalidConfiguration"
	ReasonProbeTimedOut        = "ProbeTimedOut"
	ReasonHostKeyMismatch      = "HostKeyMismatch"
	ReasonAuthenticationFailed = "AuthenticationFailed"
	ReasonConnectionFailed     = "ConnectionFailed"
	ReasonProbeFailed          = "ProbeFailed"
)

// ConditionReason is the CamelCase condition reason of a probe failure reason.
func ConditionReason(r sshdial.Reason) string {
	switch r {
	case sshdial.ReasonNone:
		return ReasonProbeSucceeded
	case sshdial.ReasonConfig:
		return ReasonInvalidConfiguration
	case sshdial.ReasonTimeout:
		return ReasonProbeTimedOut
	case sshdial.ReasonHostKey:
		return ReasonHostKeyMismatch
	case sshdial.ReasonAuth:
		return ReasonAuthenticationFailed
	case sshdial.ReasonNetwork:
		return ReasonConnectionFailed
	case sshdial.ReasonUnknown:
		return ReasonProbeFailed
	}
	return ReasonProbeFailed
}

// ResetConditions are the conditions of a record just reset: every type
// Unknown, because nothing has been observed of the new connection.
func ResetConditions(generation int64, host string, now time.Time) ([]conditions.Condition, error) {
	return ConditionTypes.Initial(generation, ReasonNotYetProbed,
		fmt.Sprintf("%s has not been probed since its connection changed", host), now)
}

// ObservedConditions applies one probe to an executor's conditions. rec is
// the record after the probe (Observe; the record as it was when the probe
// observed nothing of the target); o is the probe. A condition the probe
// could not observe (the host key when the TCP connect failed, say) keeps
// its last value: it still describes the last time it was observed. One the
// probe should have re-checked and could not (authentication without the
// write-only credentials) becomes Unknown and says why: a condition never
// claims what was not checked.
func ObservedConditions(prev []conditions.Condition, rec Record, o sshdial.Outcome, generation int64, now time.Time) ([]conditions.Condition, error) {
	addr := o.Target.Addr()
	var set []conditions.Condition

	switch o.HostKey {
	case sshdial.HostKeyVerified:
		set = append(set, conditions.Condition{Type: ConditionHostKeyVerified, Status: conditions.True,
			Reason: ReasonHostKeyMatchesPin, Message: fmt.Sprintf("%s presented the pinned host key", addr)})
	case sshdial.HostKeyMismatch:
		set = append(set, conditions.Condition{Type: ConditionHostKeyVerified, Status: conditions.False,
			Reason: ReasonHostKeyMismatch, Message: o.Message})
	case sshdial.HostKeyNotSeen:
		if o.Field == "host_key_fingerprint" {
			set = append(set, conditions.Condition{Type: ConditionHostKeyVerified, Status: conditions.False,
				Reason: ReasonInvalidConfiguration, Message: o.Message})
		}
	}

	switch o.Auth {
	case sshdial.AuthAccepted:
		set = append(set, conditions.Condition{Type: ConditionAuthenticated, Status: conditions.True,
			Reason: ReasonCredentialsAccepted, Message: fmt.Sprintf("%s accepted the credentials", addr)})
	case sshdial.AuthRefused:
		set = append(set, conditions.Condition{Type: ConditionAuthenticated, Status: conditions.False,
			Reason: ReasonAuthenticationFailed, Message: o.Message})
	case sshdial.AuthWithheld:
		set = append(set, conditions.Condition{Type: ConditionAuthenticated, Status: conditions.Unknown,
			Reason: ReasonCredentialWithheld, Message: fmt.Sprintf("authentication at %s was not re-checked: %s. %s", addr, o.Withheld, recheckAdvice)})
	case sshdial.AuthNotAttempted:
	}

	if o.Unchecked() {
		when := "never"
		if !rec.CheckedAt.IsZero() {
			when = rec.CheckedAt.UTC().Format(time.RFC3339)
		}
		set = append(set, conditions.Condition{Type: ConditionReachable, Status: conditions.Unknown, Reason: ReasonCredentialWithheld,
			Message: fmt.Sprintf("%s was not re-checked: its bastion needs credentials this probe did not have (%s); the record was last checked %s",
				addr, o.Withheld, when)})
	} else {
		set = append(set, reachableCondition(rec, addr, o.Auth == sshdial.AuthWithheld))
	}

	out := prev
	for _, c := range set {
		c.ObservedGeneration = generation
		var err error
		if out, err = ConditionTypes.Set(out, c, now); err != nil {
			return nil, err
		}
	}
	// A type never observed yet is still listed, so the list has one shape.
	for _, t := range ConditionTypes {
		if _, ok := conditions.Find(out, t); !ok {
			var err error
			out, err = ConditionTypes.Set(out, conditions.Condition{Type: t, Status: conditions.Unknown,
				Reason: ReasonNotYetProbed, Message: "not observed yet", ObservedGeneration: generation}, now)
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// recheckAdvice says how to keep authentication checked at every refresh.
const recheckAdvice = "It is checked when the executor is created or its connection changes; " +
	"credentials given in the provider block instead are checked at every refresh"

func reachableCondition(rec Record, addr string, partial bool) conditions.Condition {
	c := conditions.Condition{Type: ConditionReachable, Reason: ConditionReason(rec.Reason)}
	switch rec.State {
	case StateReachable:
		c.Status = conditions.True
		c.Message = fmt.Sprintf("%s answered the SSH handshake", addr)
		if partial {
			c.Message = fmt.Sprintf("%s answered the SSH handshake with the pinned host key; authentication was not re-checked", addr)
		}
		if rec.Failing() {
			c.Message = fmt.Sprintf("still counted reachable after %d of %d failed probes: %s",
				rec.ConsecutiveFailures, FailureThreshold, rec.Message)
		}
	case StateUnreachable:
		c.Status = conditions.False
		c.Message = rec.Message
	case StateUnknown:
		c.Status = conditions.Unknown
		c.Message = fmt.Sprintf("%s has not been probed yet", addr)
		if rec.Failing() {
			c.Message = fmt.Sprintf("%d of %d failed probes before unreachable: %s",
				rec.ConsecutiveFailures, FailureThreshold, rec.Message)
		} else {
			c.Reason = ReasonNotYetProbed
		}
	}
	return c
}
