"""`orch serve`'s server (or any socketserver, the simulator's too) on a free loopback port, in a
thread of the test process, for as long as a `with` block runs: what every serve test needs, in
one place (it was copied into five files)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from orchestrator.team.serve import make_server

S = TypeVar("S", bound=socketserver.BaseServer)


@contextmanager
def in_thread(server: S) -> Iterator[S]:
    """`server` serving from a thread; stopped, closed and joined on the way out."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def serving(reports: Path) -> Iterator[str]:
    """http://127.0.0.1:PORT serving `reports`."""
    with in_thread(make_server(reports, "127.0.0.1", 0)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def run_folder(path: Path, files: dict[str, str]) -> Path:
    """A run directory (a run.json is what makes one) holding `files`."""
    path.mkdir(parents=True)
    (path / "run.json").write_text("{}")
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return path
