# The hosts' NixOS configurations live beside this file, in nixos/: a flake
# whose nixosConfigurations.<name> is each host's configuration. The plan
# evaluates the ones deployed here in one Nix process; the apply builds
# the systems this machine lacks and switches the hosts, in list order.
terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

variable "hosts" {
  description = "The hosts, in deploy order, each named as its configuration: address, SSH port, pinned host key, and where its system is built."
  type = list(object({
    name     = string
    host     = string
    port     = optional(number, 22)
    host_key = string
    build_on = optional(string) # "target": on the host; default: this machine and its Nix builders
  }))
  default = [
    { name = "web1", host = "web1.example.org", host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl" },
    { name = "web2", host = "web2.example.org", host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINGpNgFxDfwcuddK+zWaK0oj3E3cRfpTowRKUXdBQfoV" },
  ]
}

variable "build_at_plan" {
  description = "Build every system during the plan, so that the plan proves each one builds and says exactly what each switch copies and changes (a CI plan: -var build_at_plan=true)."
  type        = bool
  default     = false
}

variable "ssh_key_file" {
  description = "Private key file authorised for root on every host."
  type        = string
  default     = "~/.ssh/deploy_ed25519"
}

provider "fleet" {
  default_user     = "root"
  private_key_file = var.ssh_key_file
}

# Known at plan: each host's system (its store path) and derivation.
data "fleet_nixos_systems" "hosts" {
  flake = "path:${path.module}/nixos"
  names = [for h in var.hosts : h.name]
  build = var.build_at_plan
}

resource "fleet_ssh_deployment" "hosts" {
  nodes = [for h in var.hosts : {
    name       = h.name
    host       = h.host
    host_key   = h.host_key
    ssh_opts   = ["Port=${h.port}"]
    system     = data.fleet_nixos_systems.hosts.systems[h.name].system
    derivation = data.fleet_nixos_systems.hosts.systems[h.name].derivation
    build_on   = h.build_on
  }]
}

output "switched" {
  value = fleet_ssh_deployment.hosts.succeeded_nodes
}

output "failed" {
  value = fleet_ssh_deployment.hosts.failed_nodes
}
