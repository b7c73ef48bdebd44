"""Small helpers for tests against the testbed hosts."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Callable, Iterator

from orchestrator.edges.services.systemd import SystemdManager
from orchestrator.edges.transport.ssh import SshTransport

from .fixture import Testbed


def transport(tb: Testbed, host: str, **overrides: object) -> SshTransport:
    """An SshTransport to a testbed host, as the inventory describes it."""
    kwargs: dict[str, object] = {
        "key_filename": str(tb.key),
        "known_hosts": str(tb.known_hosts),
        "connect_timeout": 5.0,
    }
    kwargs.update(overrides)
    return SshTransport(host, tb.host(host).ip, **kwargs)  # type: ignore[arg-type]


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """(status, body); status 0 when nothing answered in full (a server stopped in the middle of its
    answer raises http.client.IncompleteRead, which is neither URLError nor OSError)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, exc.read().decode()
        except (http.client.HTTPException, OSError):
            return exc.code, ""
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        return 0, str(exc)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> float:
    """Seconds until predicate() held; AssertionError naming `what` on timeout."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(poll)
    return time.monotonic() - t0


def wait_healthy(url: str, timeout: float = 15.0) -> float:
    return wait_for(lambda: http_get(url, 1.0)[0] == 200, timeout, f"{url} answers 200")


def server_flags(base_url: str) -> dict[str, object]:
    """What the simulator says it runs with (/get_server_info answers as soon as it listens,
    before warm-up ends)."""
    answer: list[tuple[int, str]] = []

    def listening() -> bool:
        answer[:] = [http_get(base_url + "/get_server_info", 1.0)]
        return answer[0][0] == 200

    wait_for(listening, 10, f"{base_url} listening")
    return json.loads(answer[0][1])["flags"]


@contextmanager
def restored(tb: Testbed, host: str, units: list[str], paths: list[str]) -> Iterator[SshTransport]:
    """Snapshot env files (read with the OpenSSH client, independent of the code under test)
    and, whatever the test did, put them back byte for byte and restart the units healthy."""
    saved = {p: tb.ssh(host, f"base64 -w0 {p}").stdout for p in paths}
    t = transport(tb, host)
    try:
        yield t
    finally:
        for p, b64 in saved.items():
            tb.ssh(host, f"echo {b64} | base64 -d > {p}")
        tb.ssh(host, "systemctl reset-failed " + " ".join(units) + " 2>/dev/null; systemctl restart " + " ".join(units))
        h = tb.host(host)
        for u in units:
            unit = h.unit(u)
            wait_healthy(f"http://{h.ip}:{unit.port}/health")
        t.close()


def manager(t: SshTransport, host: str) -> SystemdManager:
    return SystemdManager(t, host)
