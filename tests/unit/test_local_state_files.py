"""The local service manager's own files in its state_dir (the inventory names the folder): a
pid or start-time file that is a FIFO or huge is no record of a process, never a hang; a log that
is a FIFO is refused with the file named, never a hang. Found by the hostile-input audit: `state()`
(every restore and resume asks it) blocked in read_text() on a FIFO at <unit>.pid for ever."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.edges.services.local import LocalServiceManager, LocalUnit
from orchestrator.errors import ServiceError


@pytest.mark.parametrize("name", ["decode.pid", "decode.start"])
def test_a_fifo_or_huge_state_file_reads_as_no_record(tmp_path: Path, name: str) -> None:
    env = tmp_path / "decode.env"
    env.write_text("A=1\n")
    state = tmp_path / "state"
    manager = LocalServiceManager({"decode": LocalUnit("decode", (sys.executable, "-V"), env)}, state)
    if name == "decode.start":  # read only for a pid that runs: this test's own process
        (state / "decode.pid").write_text(f"{os.getpid()}\n")
    os.mkfifo(state / name)
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(manager.state("decode")), daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():
        os.close(os.open(state / name, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
        worker.join(5)
        raise AssertionError(f"state() blocked on a FIFO at {name}")
    assert got and not got[0].is_active  # type: ignore[attr-defined]
    (state / name).unlink()
    with open(state / name, "wb") as f:
        f.truncate(1 << 30)  # sparse: read whole it would be 1 GiB
    assert not manager.state("decode").is_active


def _within_5_s(call: Callable[[], object], fifo: Path) -> BaseException | None:
    """What `call` raised (None: it returned), failing the test if it blocks on the FIFO."""
    got: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            got.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))  # both ends once: releases the blocked open
        worker.join(5)
        raise AssertionError(f"blocked on a FIFO at {fifo.name}")
    return got[0]


def test_a_fifo_at_the_units_log_is_refused_never_a_hang(tmp_path: Path) -> None:
    """<unit>.log a FIFO: restart() blocked for ever opening it to append (no reader comes), and
    the log tail of check_alive()/logs_since() opening it to read (no writer comes). Each now
    fails at once with a ServiceError naming the file, and no process is started."""
    env = tmp_path / "decode.env"
    env.write_text("A=1\n")
    state = tmp_path / "state"
    manager = LocalServiceManager({"decode": LocalUnit("decode", (sys.executable, "-c", "pass"), env)}, state)
    log = state / "decode.log"
    os.mkfifo(log)
    for call in (lambda: manager.restart("decode"), lambda: manager.logs_since("decode", 0.0)):
        err = _within_5_s(call, log)
        assert isinstance(err, ServiceError), err
        assert f"{log}: not a regular file (a FIFO" in str(err), err
    state_now = manager.state("decode")  # the start failed as systemd's would on its resources
    assert (state_now.active_state, state_now.result, state_now.main_pid) == ("failed", "resources", None)
    assert log.is_fifo()  # left as it is: not orch's to remove
