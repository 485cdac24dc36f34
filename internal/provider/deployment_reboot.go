package provider

import (
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// rebootPolicy is m's reboot, never when unset or not known.
func rebootPolicy(m *deploymentModel) deploy.RebootPolicy {
	if m.Reboot.IsNull() || m.Reboot.IsUnknown() {
		return deploy.RebootNever
	}
	return deploy.RebootPolicy(m.Reboot.ValueString())
}

// checkReboot refuses a reboot policy with a goal that does not switch,
// and (warn: at validate, not again at plan) warns of a reboot_timeout
// that no reboot uses.
func checkReboot(m *deploymentModel, diags *diag.Diagnostics, warn bool) {
	if m.Reboot.IsUnknown() || m.Goal.IsUnknown() {
		return
	}
	if warn && !m.RebootTimeout.IsNull() && !m.RebootTimeout.IsUnknown() && rebootPolicy(m) == deploy.RebootNever {
		diags.AddAttributeWarning(path.Root("reboot_timeout"), "reboot_timeout without reboots",
			"reboot_timeout bounds how long a host rebooted by the deploy may take to come back, and reboot is \"never\" (or unset): no host is rebooted. Set reboot = \"when-required\" or \"always\", or remove reboot_timeout.")
	}
	goal := orStr(m.Goal.ValueString(), string(deploy.GoalSwitch))
	if r := rebootPolicy(m); r != deploy.RebootNever && goal != string(deploy.GoalSwitch) {
		diags.AddAttributeError(path.Root("reboot"), "Reboot without a switch",
			fmt.Sprintf("reboot = %q boots a host into its new system, which only goal \"switch\" does; goal is %q: set reboot = \"never\" (or leave it unset), or goal = \"switch\"", r, goal))
	}
}

// rebooting says whether a plan's switch of a node may reboot its host:
// whether it does is decided at apply (the host's booted kernel, initrd
// and modules against the new system's), so the conditions it records
// are not known.
func rebooting(m *deploymentModel, action string) bool {
	return rebootPolicy(m) != deploy.RebootNever && action == actionSwitch && deploy.Goal(m.Goal.ValueString()) == deploy.GoalSwitch
}

// warnReboots names, once for a reason, the nodes whose switch will
// reboot their hosts, as far as the plan can tell: every switching node
// with reboot = always; with when-required, those whose preview says a
// reboot is required (and why), and those whose preview could not say.
func warnReboots(m *deploymentModel, previews map[string]deploy.Preview, switching []string, diags *diag.Diagnostics) {
	policy := rebootPolicy(m)
	if policy == deploy.RebootNever || deploy.Goal(m.Goal.ValueString()) != deploy.GoalSwitch {
		return
	}
	byWhy := map[string][]string{}
	var whys []string
	for _, name := range switching {
		why := ""
		p, ok := previews[name]
		switch {
		case policy == deploy.RebootAlways:
			why = "reboot = always"
		case !ok || !p.RebootKnown:
			why = "reboot = when-required, and whether the new system needs a reboot is not known now: the apply reads the host's booted kernel, initrd and modules"
		case len(p.Reboot) > 0:
			why = strings.Join(p.Reboot, ", ") + " change"
		default:
			continue
		}
		if byWhy[why] == nil {
			whys = append(whys, why)
		}
		byWhy[why] = append(byWhy[why], name)
	}
	for _, why := range whys {
		names := byWhy[why]
		will := "will reboot"
		if strings.Contains(why, "not known now") {
			will = "may reboot"
		}
		title := "Node " + names[0] + " " + will
		if len(names) > 1 {
			title = "Nodes " + strings.Join(names, ", ") + " " + will
		}
		diags.AddAttributeWarning(path.Root("reboot"), title,
			fmt.Sprintf("%s: %s. The apply makes the new system the boot entry (the system before stays the fallback entry), reboots the host and judges it once it is back; a failing verdict boots it back into the system before.",
				strings.Join(names, ", "), why))
	}
}
