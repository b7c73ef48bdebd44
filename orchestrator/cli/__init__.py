"""The `orch` command: argparse in, typed requests to the sweep API out; the one place that
maps errors to exit codes."""

from orchestrator.cli.main import main

__all__ = ["main"]
