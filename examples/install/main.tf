# A repository of your own, using the provider that make install put in
# the plugin directory: the root module names the versions it accepts; the
# modules that use it name only its source. The source names its registry
# host, so that Terraform and OpenTofu record the provider under one
# address and one .terraform.lock.hcl serves both.
terraform {
  required_providers {
    fleet = {
      source  = "registry.terraform.io/fleetops/fleet"
      version = "~> 0.1"
    }
  }
}

provider "fleet" {
  default_user = "deploy"
}

module "hosts" {
  source = "./modules/hosts"
  hosts = {
    web1 = { host = "web1.example.org", host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s" }
  }
}

output "reachable_names" {
  value = module.hosts.reachable_names
}
