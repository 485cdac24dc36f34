variable "executors" {
  description = "Executors to probe, by name."
  type = map(object({
    host                 = string
    port                 = optional(number, 22)
    host_key_fingerprint = string
  }))
  default = {
    web1 = { host = "web1.example.org", host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s" }
    web2 = { host = "web2.example.org", host_key_fingerprint = "SHA256:Yk3hbRM0vB0PzmjLOj0YfIWWxBf8aT8kSu3cVl2B8mI" }
  }
}

# Probe every host now, during plan.
data "fleet_reachability" "web" {
  targets = [for name, e in var.executors : {
    name                 = name
    host                 = e.host
    port                 = e.port
    user                 = "deploy"
    private_key_file     = "~/.ssh/deploy_ed25519"
    host_key_fingerprint = e.host_key_fingerprint
  }]
}

# A failed assertion in a check block is a plan warning, not an error.
check "web_pool_reachable" {
  assert {
    condition     = data.fleet_reachability.web.all_reachable
    error_message = "Unreachable web hosts: ${join(", ", data.fleet_reachability.web.unreachable_names)}"
  }
}

# Only reachable hosts join the pool.
resource "terraform_data" "pool_member" {
  for_each = toset(data.fleet_reachability.web.reachable_names)
  input    = var.executors[each.key].host
}
