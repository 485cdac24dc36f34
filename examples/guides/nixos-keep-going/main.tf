# Every configuration of the flake in nixos/ is a host, reached by its name:
# the OpenSSH client configuration says where (HostName, Port) and holds
# the hosts' pinned keys (UserKnownHostsFile, StrictHostKeyChecking yes).
# A configuration that does not evaluate stays out of this apply, named in
# a warning and in not_deployed; the others deploy.
terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

variable "ssh_config_file" {
  description = "OpenSSH client configuration with a Host entry for each configuration's name."
  type        = string
  default     = "~/.ssh/fleet_config"
}

data "fleet_nixos_systems" "all" {
  flake      = "path:${path.module}/nixos"
  keep_going = true
}

resource "fleet_ssh_deployment" "all" {
  ssh_config_file = var.ssh_config_file
  nodes = [for name, s in data.fleet_nixos_systems.all.systems : {
    name       = name
    system     = s.system
    derivation = s.derivation
  } if s.error == null]
}

output "not_deployed" {
  description = "The configurations that did not evaluate, with the head of Nix's error."
  value       = { for name, s in data.fleet_nixos_systems.all.systems : name => s.error if s.error != null }
}

output "failed" {
  value = fleet_ssh_deployment.all.failed_nodes
}
