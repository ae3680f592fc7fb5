"""gRPC plumbing every process shares: servers and channels, TLS, tokens, fencing, health, wire bounds."""
