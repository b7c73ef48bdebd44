"""LocalTransport keeps at most MAX_OUTPUT_BYTES of each stream *while* it reads, not only after
the command ended: the path of a `repro.on: ROLE` repro on a local host and of `command:`
collectors. Found in review: communicate() buffered everything, 1 GiB of output cost ~2 GiB.
Measured with tracemalloc (what Python allocated at its peak), not with the process's RSS."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from orchestrator.edges.transport import local
from orchestrator.edges.transport.local import MAX_OUTPUT_BYTES, LocalTransport
from orchestrator.errors import CommandTimedOut

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]

FLOOD = 50_000_000  # bytes a runaway command prints: over ten times the cap
HELD_AT_MOST = 6 * MAX_OUTPUT_BYTES  # two capped streams, their copies and the decoded text


def _peak_while(call: object) -> tuple[object, int]:
    """call()'s value (or the exception it raised) and the peak of Python allocations meanwhile."""
    tracemalloc.start()
    try:
        try:
            value = call()  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001 - handed to the test
            value = exc
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_flood_on_both_streams_keeps_only_each_tail() -> None:
    script = (
        f"head -c {FLOOD} /dev/zero | tr '\\0' o; echo OUT-END; "
        f"head -c {FLOOD} /dev/zero | tr '\\0' e >&2; echo ERR-END >&2"
    )
    result, peak = _peak_while(lambda: LocalTransport().run(script, timeout=30))
    assert not isinstance(result, BaseException), result
    assert len(result.stdout) == MAX_OUTPUT_BYTES and result.stdout.endswith("oooOUT-END\n")  # type: ignore[attr-defined]
    assert len(result.stderr) == MAX_OUTPUT_BYTES and result.stderr.endswith("eeeERR-END\n")  # type: ignore[attr-defined]
    assert peak < HELD_AT_MOST, f"{2 * FLOOD >> 20} MiB of output held {peak >> 20} MiB at once"


def test_a_flood_then_a_hang_times_out_with_the_capped_tail() -> None:
    started = time.monotonic()
    error, peak = _peak_while(lambda: LocalTransport().run(f"head -c {FLOOD} /dev/zero; echo END; sleep 30", timeout=2))
    assert isinstance(error, CommandTimedOut), error
    assert time.monotonic() - started < 2 + local.KILL_GRACE_S + 3
    assert len(error.result.stdout) == MAX_OUTPUT_BYTES and error.result.stdout.endswith("\0END\n")
    assert peak < HELD_AT_MOST, f"{FLOOD >> 20} MiB of output held {peak >> 20} MiB at once"


def test_small_outputs_and_exit_codes_are_unchanged() -> None:
    r = LocalTransport().run("printf out; printf err >&2; exit 3", check=False, timeout=10)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out", "err")
    r = LocalTransport().run(["true"])
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")
