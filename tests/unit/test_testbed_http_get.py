"""The testbed tests' http_get reads a server that stops in the middle of its answer as "nothing
answered" (status 0) instead of raising: a watcher thread polling a unit that orch restarts must
keep watching (it died on http.client.IncompleteRead once, and its test saw no look at all)."""

from __future__ import annotations

import socket
import threading

from testbed.helpers import http_get


def test_an_answer_cut_short_is_status_0_not_an_exception() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]

        def answer_half() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n")  # then no body: the server died

        thread = threading.Thread(target=answer_half, daemon=True)
        thread.start()
        status, _ = http_get(f"http://127.0.0.1:{port}/health", 2.0)
        thread.join(timeout=5)
    assert status == 0
