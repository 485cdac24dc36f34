resource "fleet_executor" "sf6" {
  name                 = "sf-6"
  host                 = "sf-6.example.org"
  user                 = "deploy"
  private_key_file     = "~/.ssh/deploy_ed25519"
  host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"
}

# What each object type depends on, which types each role hosts, and which
# roles each node plays. sf-6 is checked over SSH, sf-7 (the machine running
# Terraform) locally.
resource "fleet_node_health_policy" "cloud" {
  name                 = "cloud"
  storage_root         = "/srv/cloud" # relative check paths resolve under it
  probe_timeout        = "10s"
  write_probe_interval = "300s"

  checks = {
    blobs     = { path = "blobs", description = "blob storage" }
    instances = { path = "instances", description = "instance storage" }
    uploads   = { path = "uploads", description = "upload storage" }
    libvirtd  = { command = "virsh -c qemu:///system version", description = "libvirtd" }
    api       = { http = { url = "http://127.0.0.1:13000/", expect_status = 200 }, severity = "degraded" }
  }
  object_types = {
    instance = { checks = ["blobs", "instances", "libvirtd"] }
    blob     = { checks = ["blobs"] }
    upload   = { checks = ["uploads", "api"] }
  }
  roles = {
    hypervisor = { hosts = ["instance", "blob"], description = "a hypervisor node" }
    storage    = { hosts = ["blob", "upload"], description = "a storage node" }
  }
  nodes = {
    "sf-6" = { roles = ["hypervisor"], connection = fleet_executor.sf6.ssh_connection }
    "sf-7" = { roles = ["storage"], local = true }
  }

  # A node in error stays there until cleared: add or change its note once
  # the fault is repaired. The clear takes effect only if its checks pass.
  clear_errors = {
    "sf-6" = "NVMe replaced, ticket 4711"
  }
}

output "error_nodes" {
  value = fleet_node_health_policy.cloud.error_nodes
}

output "sf6_reason" {
  value = fleet_node_health_policy.cloud.status["sf-6"].reason
}
