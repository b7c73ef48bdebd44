"""Team features: the overnight queue, systemd timers, webhooks, `orch serve` and the live
status. They call the sweep API (orchestrator.sweep.api), never the CLI."""
