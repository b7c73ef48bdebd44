"""Thin effectful edges: transports (local, SSH), service managers (local, systemd), the
deployment they make up, health waits, the repro workload, testbed locks and provenance.
Edges use the core and never import sweep, report, team or cli."""
