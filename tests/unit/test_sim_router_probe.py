"""The stand-in router's readiness probe of a worker's /health (orchestrator.sim.server.Upstream)
reads a bounded prefix of the answer. Found by the red team: a worker whose /health answered a
4 GB body took the stand-in router (a process of the bundled simulator, beside orch) to 4.8 GB
of memory, since it read the whole body to learn a status code. On a loopback server in a thread."""

from __future__ import annotations

import socket
import threading

from orchestrator.sim.server import Upstream


def test_a_health_answer_of_gigabytes_is_not_read_whole() -> None:
    sent = [0]
    stop = threading.Event()
    server = socket.create_server(("127.0.0.1", 0))

    def flood() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(5)
            while b"\r\n\r\n" not in conn.recv(65536):
                pass
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4000000000\r\n\r\n")
            block = b"x" * 65536
            try:
                while not stop.is_set() and sent[0] < 256 << 20:
                    conn.sendall(block)
                    sent[0] += len(block)
            except OSError:
                pass  # the probe stopped reading and closed: what a bounded read does

    thread = threading.Thread(target=flood)
    thread.start()
    try:
        status = Upstream(f"http://127.0.0.1:{server.getsockname()[1]}").probe("/health")
    finally:
        stop.set()
        thread.join(10)
        server.close()
    assert status == 200
    assert sent[0] < 32 << 20, f"the probe let the worker send {sent[0] >> 20} MiB"
