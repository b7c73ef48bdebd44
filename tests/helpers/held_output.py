"""A repro that leaves a child holding its output, run through a real transport (local or SSH):
the transport must return at the repro's exit, and the leftover check then stop the child."""

from __future__ import annotations

import threading
import time

from orchestrator.edges import leftovers
from orchestrator.edges.leftovers import MARK_VAR
from orchestrator.edges.remote_leftovers import stop_marked
from orchestrator.edges.transport import Transport


def assert_returns_at_exit(t: Transport, sleeper: str, timeout: float, within_s: float) -> None:
    """`setsid sleep SLEEPER & echo done` (no redirection: the sleeper keeps stdout open) returns
    its exit code and output within `within_s`; the check (run whatever happened) names the sleeper."""
    mark = leftovers.new_mark()
    t0 = time.monotonic()
    try:
        res = t.run(
            f"setsid sleep {sleeper} & echo done",
            timeout=timeout,
            check=False,
            stop=threading.Event(),
            env={MARK_VAR: mark},
        )
        took = time.monotonic() - t0
    finally:
        left = stop_marked(t, mark, settle_s=0.0, grace_s=1.0)
    assert (res.exit_code, res.stdout) == (0, "done\n")
    assert took < within_s, f"the repro's exit was noticed after {took:.2f} s"
    assert len(left) == 1 and left[0].endswith(f"(sleep {sleeper})"), left
