# Import by connection string: [user@]host[:port], then optional ,key=value
# pairs (name, host_key_fingerprint, proxy_jump, private_key_file).
terraform import fleet_executor.web1 'deploy@web1.example.org:22,name=web1,host_key_fingerprint=SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s,private_key_file=~/.ssh/deploy_ed25519'
