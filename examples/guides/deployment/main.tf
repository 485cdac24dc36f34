terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

provider "fleet" {}

variable "storage_root" {
  description = "Where the nodes keep their storage."
  type        = string
  default     = "/srv/cloud"
}

variable "nodes" {
  description = "Nodes by name, in deploy order: host, pinned key and the system to switch to."
  type = list(object({
    name     = string
    host     = string
    host_key = string
    system   = string
  }))
  default = [
    {
      name     = "sf-6"
      host     = "sf-6.example.org"
      host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
      system   = "/nix/store/0c5vbxjfjnbqmpyzqhwrn4d0bb7vbyxx-nixos-system-sf-6-24.11"
    },
    {
      name     = "sf-7"
      host     = "sf-7.example.org"
      host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
      system   = "/nix/store/7q1c0m1p2v9cxk6l9q0a9x1f3r7x2lqz-nixos-system-sf-7-24.11"
    },
  ]
}

# Node health of the same nodes: a node in error is held back from the
# deployment until an operator has cleared it.
resource "fleet_node_health_policy" "cloud" {
  name         = "cloud"
  storage_root = var.storage_root
  checks = {
    instances = { path = "instances", description = "instance storage" }
  }
  object_types = { instance = { checks = ["instances"] } }
  roles        = { hypervisor = { hosts = ["instance"], description = "a hypervisor node" } }
  nodes = {
    for n in var.nodes : n.name => {
      roles      = ["hypervisor"]
      connection = { host = n.host, user = "deploy", private_key_file = "~/.ssh/deploy_ed25519", host_key_fingerprint = n.host_key }
    }
  }
}

resource "fleet_ssh_deployment" "cloud" {
  defaults = {
    user             = "deploy"
    private_key_file = "~/.ssh/deploy_ed25519"
  }
  nodes = [for n in var.nodes : { name = n.name, host = n.host, host_key = n.host_key, system = n.system }]
  hold  = fleet_node_health_policy.cloud.error_nodes
}

output "deployed" {
  value = fleet_ssh_deployment.cloud.succeeded_nodes
}

output "held" {
  value = fleet_ssh_deployment.cloud.skipped_nodes
}
