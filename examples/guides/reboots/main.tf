terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

provider "fleet" {}

variable "nodes" {
  description = "Nodes in deploy order, each as fleet_ssh_deployment's nodes takes it (name, host, host_key, system)."
}

# A kernel upgrade across the fleet: each node whose new system changes the
# kernel, initrd or kernel modules is booted into it, two at a time, and
# judged once it is back.
resource "fleet_ssh_deployment" "prod" {
  nodes          = var.nodes
  reboot         = "when-required"
  reboot_timeout = "15m"
  parallelism    = 2
  max_failures   = 0
}
