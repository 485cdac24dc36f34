# The hosts' NixOS configurations, in a flake beside the Terraform code
# (nixos/flake.nix, whose nixosConfigurations.<host> are the hosts): all of
# them, evaluated during plan in one Nix process.
data "fleet_nixos_systems" "hosts" {
  flake = "path:${path.module}/nixos"
}

# The store path each host will run, by host: known at plan.
output "systems" {
  value = { for name, s in data.fleet_nixos_systems.hosts.systems : name => s.system }
}

# A CI plan that proves every web host's configuration builds, from a
# Nix file of configurations (hosts.nix, whose nixosConfigurations holds
# them): a host that fails to evaluate or build is recorded with its error
# and a warning, and the others still come back.
data "fleet_nixos_systems" "web" {
  file       = "${path.module}/hosts.nix"
  attribute  = "nixosConfigurations"
  names      = ["web1", "web2"]
  build      = true
  keep_going = true
}

output "web_ready" {
  value = [for name, s in data.fleet_nixos_systems.web.systems : name if s.error == null && s.built]
}

output "web_failing" {
  value = { for name, s in data.fleet_nixos_systems.web.systems : name => s.error if s.error != null }
}
