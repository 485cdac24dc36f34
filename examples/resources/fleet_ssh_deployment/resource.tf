# Two hosts, switched one after the other in list order, each with a
# verdict. web1 is pinned to its host key; web2 is reached on a port only
# its own ssh_opts names, and its key is remembered on first use.
resource "fleet_ssh_deployment" "web" {
  defaults = {
    user             = "deploy"
    private_key_file = "~/.ssh/deploy_ed25519"
  }

  nodes = [
    {
      name     = "web1"
      host     = "web1.example.org"
      system   = "/nix/store/0c5vbxjfjnbqmpyzqhwrn4d0bb7vbyxx-nixos-system-web1-24.11"
      host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    },
    {
      name     = "web2"
      system   = "/nix/store/7q1c0m1p2v9cxk6l9q0a9x1f3r7x2lqz-nixos-system-web2-24.11"
      ssh_opts = ["Port=2222"]
    },
  ]

  goal       = "switch"
  on_failure = "rollback"

  verdict = {
    confirm_timeout    = "30s"
    allow_failed_units = ["cups.service"]
    http               = [{ url = "https://web1.example.org/", expect_status = 200 }]
    command            = [{ run = "systemctl is-active nginx" }]
  }

  timeouts = {
    create = "30m"
    update = "30m"
  }
}

output "failed" {
  value = fleet_ssh_deployment.web.failed_nodes
}
