package deploy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
)

// Exit codes of switch-to-configuration that mean something particular.
const (
	ExitUnitsFailed    = 4                          // some units failed to start
	ExitSwitchLocked   = agreement.SwitchLockedExit // another switch holds the lock
	ExitRebootRequired = 100                        // the new system needs a reboot to take effect
)

// Observed is what the deployer saw of a node after activating a system.
type Observed struct {
	// ActivationExit is switch-to-configuration test's exit status, -1
	// when it is not known (the session dropped: decided from the host).
	ActivationExit int
	// ActivationSaid is the last of what an activation that failed
	// printed ("" when it said nothing, or passed).
	ActivationSaid string
	// FailedUnits are the units systemd lists as failed.
	FailedUnits []string
	// Reconnected says a new SSH connection succeeded after activation;
	// ReconnectError is why not.
	Reconnected    bool
	ReconnectError string
	// CurrentSystem is where /run/current-system points now.
	CurrentSystem string
	// SystemState is `systemctl is-system-running --wait`'s answer within
	// the settle timeout ("running", "degraded", "starting", ...).
	SystemState string
	// CheckFailures are the user checks that failed, each described.
	CheckFailures []string
}

// VerdictRules are the deployment's verdict settings.
type VerdictRules struct {
	AllowFailedUnits    []string
	AllowRebootRequired bool
}

// Verdict is the decision on an activation.
type Verdict struct {
	Passed  bool
	Reason  string // CamelCase condition reason
	Message string
	Hint    string
}

// Decide judges an activation of system, every rule in order; the first
// failure decides, and its message names what failed.
func Decide(system string, o Observed, r VerdictRules) Verdict {
	disallowed := func(units []string) []string {
		var out []string
		for _, u := range units {
			if !slices.Contains(r.AllowFailedUnits, u) {
				out = append(out, u)
			}
		}
		return out
	}
	switch o.ActivationExit {
	case 0, -1:
	case ExitUnitsFailed:
		if bad := disallowed(o.FailedUnits); len(bad) > 0 || len(o.FailedUnits) == 0 {
			return Verdict{Reason: "UnitsFailed", Message: "the activation failed units: " + unitList(bad, o.FailedUnits),
				Hint: "inspect them with journalctl -u on the host, or list them in verdict.allow_failed_units"}
		}
	case ExitRebootRequired:
		if !r.AllowRebootRequired {
			return Verdict{Reason: "RebootRequired", Message: "the new system needs a reboot to take effect (exit 100)",
				Hint: "deploy with goal boot and reboot the host, or set verdict.allow_reboot_required"}
		}
	case ExitSwitchLocked:
		return Verdict{Reason: "SwitchLockBusy", Message: "another switch held the switch lock (exit 11) for every attempt",
			Hint: "another deployment or nixos-rebuild is running on the host"}
	default:
		msg := fmt.Sprintf("switch-to-configuration test exited %d", o.ActivationExit)
		if o.ActivationSaid != "" {
			msg += ": " + o.ActivationSaid
		}
		return Verdict{Reason: "ActivationFailed", Message: msg}
	}
	if !o.Reconnected {
		return Verdict{Reason: "HostUnreachableAfterActivation", Message: "a new SSH connection after the activation failed: " + o.ReconnectError,
			Hint: "the new configuration cuts off SSH (firewall, sshd settings, network); the host rolls itself back when no confirmation arrives"}
	}
	if o.CurrentSystem != system {
		return Verdict{Reason: "SystemNotActive", Message: fmt.Sprintf("/run/current-system is %s, not the new system %s", orNone(o.CurrentSystem), system)}
	}
	switch o.SystemState {
	case "running":
	case "degraded":
		if bad := disallowed(o.FailedUnits); len(bad) > 0 {
			return Verdict{Reason: "UnitsFailed", Message: "the system is degraded; failed units: " + strings.Join(bad, ", "),
				Hint: "inspect them with journalctl -u on the host, or list them in verdict.allow_failed_units"}
		}
	default:
		return Verdict{Reason: "SystemNotSettled", Message: fmt.Sprintf("the system did not settle within verdict.settle_timeout: systemctl is-system-running says %q", o.SystemState)}
	}
	if len(o.CheckFailures) > 0 {
		return Verdict{Reason: "ChecksFailed", Message: "verdict checks failed: " + strings.Join(o.CheckFailures, "; ")}
	}
	return Verdict{Passed: true, Reason: "VerdictPassed", Message: "the new system is active, reachable and settled"}
}

func unitList(bad, all []string) string {
	if len(bad) == 0 {
		if len(all) == 0 {
			return "(systemd named none)"
		}
		return strings.Join(all, ", ")
	}
	return strings.Join(bad, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// FailedLine is the one error line of a failed node, as a CI log shows it.
func FailedLine(name string, exit int, message string) string {
	return fmt.Sprintf("DEPLOY FAILED for %s (exit %d): %s", name, exit, message)
}

// ResultLine is the one error line of a node whose deploy did not succeed:
// FailedLine, or, when its outcome is not known, a line that says so.
func ResultLine(r Result) string {
	if r.Phase == PhaseUnknown {
		return fmt.Sprintf("DEPLOY OUTCOME UNKNOWN for %s (exit %d): %s", r.Name, r.ExitCode, r.Message)
	}
	return FailedLine(r.Name, r.ExitCode, r.Message)
}
