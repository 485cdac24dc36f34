terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

provider "fleet" {}

# The plan says, for each node it switches, what the switch copies, how the
# packages change, which units it restarts, starts, stops or reloads, and
# whether a reboot is needed. plan_dry_activate makes the units come from
# the new system's own dry activation: the plan copies the closure to the
# host first, which the running system does not notice.
resource "fleet_ssh_deployment" "web" {
  plan_dry_activate = true
  defaults = {
    user             = "deploy"
    use_sudo         = true
    private_key_file = "~/.ssh/deploy_ed25519"
  }
  nodes = [
    {
      name     = "web1"
      host     = "web1.example.org"
      host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
      system   = "/nix/store/0c5vbxjfjnbqmpyzqhwrn4d0bb7vbyxx-nixos-system-web1-24.11"
    },
  ]
}
