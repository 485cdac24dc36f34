# A host reached directly, with a key file and a pinned host key.
resource "fleet_executor" "web1" {
  name                 = "web1"
  host                 = "web1.example.org"
  user                 = "deploy"
  private_key_file     = "~/.ssh/deploy_ed25519"
  host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"
}

# A host behind a bastion, pinned by its whole public key, using the agent.
resource "fleet_executor" "db1" {
  name                 = "db1"
  host                 = "10.0.3.21"
  port                 = 2222
  agent                = true
  host_key_fingerprint = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
  proxy_jump           = "ops@bastion.example.org"
}

# Other resources take the connection without its secrets.
output "web1_connection" {
  value = fleet_executor.web1.ssh_connection
}

output "web1_reachable" {
  value = fleet_executor.web1.reachability.state == "reachable"
}
