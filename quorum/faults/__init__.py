"""The fault harness: real processes, real faults, every client history checked
(docs/faults.md)."""
