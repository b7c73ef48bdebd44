"""The local service manager's own files in its state_dir (the inventory names the folder): a
pid or start-time file that is a FIFO or huge is no record of a process, never a hang. Found by
the hostile-input audit: `state()` (every restore and resume asks it) blocked in read_text() on a
FIFO at <unit>.pid for ever."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.edges.services.local import LocalServiceManager, LocalUnit


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
