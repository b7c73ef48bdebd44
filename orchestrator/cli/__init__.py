"""The `orch` command: argparse in, typed requests to the sweep API out; the one place that
maps errors to exit codes. The entry point is orchestrator.cli.main:main (`python -m
orchestrator.cli.main` runs it too, as the overnight timer's unit does)."""
