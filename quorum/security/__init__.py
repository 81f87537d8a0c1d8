"""Transport security and authorization: TLS settings, caller identity, ACLs (docs/security.md)."""
