"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
messages separated by NUL bytes on fds 3 and 4), standard library only; shared by the report's
and `orch serve`'s browser tests. The `browser` fixture is registered in tests/conftest.py."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
IN_CI = os.environ.get("CI", "").lower() == "true"
TIMEOUT_S = 30.0
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> {{ 7*7 }}'


class DevTools:
    """A minimal CDP client over Chromium's debugging pipe."""

    def __init__(self, binary: str, profile: Path, log: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds() -> None:  # runs in the child before exec: CDP wants fds 3 (in) and 4 (out)
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--mute-audio",
            f"--user-data-dir={profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        self._log = log.open("wb")
        self.proc = subprocess.Popen(  # noqa: S603 - fixed argv
            [binary, *flags],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            pass_fds=(3, 4),
            preexec_fn=wire_fds,  # noqa: PLW1509 - single-threaded here
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 65536)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                self._inbox.put(json.loads(message))

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._next(deadline, f"{method} reply")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session:
                return event
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            event = self._next(deadline, method)
            if event.get("method") == method and event.get("sessionId") == session:
                return event

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            try:
                self._next(deadline, "")
            except TimeoutError:
                return

    def _next(self, deadline: float, what: str) -> dict[str, Any]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"chromium: no {what} within {TIMEOUT_S} s")
        try:
            message = self._inbox.get(timeout=remaining)
        except queue.Empty as exc:
            raise TimeoutError(f"chromium: no {what} within {TIMEOUT_S} s") from exc
        if "method" in message:
            self.events.append(message)
        return message

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (AssertionError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # by PID: only the process this test started
            self.proc.wait(timeout=10)
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    """One Chromium per test module (its start costs more than the checks of a page): each test
    opens its own pages in it (a target and session of its own; page_problems and page_requests
    look at that session's events only)."""
    if not Path(CHROMIUM).exists():
        if IN_CI:
            pytest.fail(f"chromium not found at {CHROMIUM} (CI must run the browser tests)")
        pytest.skip("chromium not installed")
    folder = tmp_path_factory.mktemp("chromium")
    tools = DevTools(CHROMIUM, folder / "profile", folder / "chromium.log")
    try:
        yield tools
    finally:
        tools.close()


def open_page(tools: DevTools, url: str) -> str:
    target = tools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = tools.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Network", "Runtime", "Log", "Page"):
        tools.call(f"{domain}.enable", session=session)
    tools.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": False},
        session,
    )
    tools.call("Page.navigate", {"url": url}, session)
    tools.wait_event("Page.loadEventFired", session)
    tools.drain(0.5)  # let late requests or errors show up
    return session


def evaluate(tools: DevTools, session: str, expression: str) -> Any:
    result = tools.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
    assert "exceptionDetails" not in result, result
    return result["result"].get("value")


def page_problems(tools: DevTools, session: str) -> list[str]:
    found = []
    for event in tools.events:
        if event.get("sessionId") != session:
            continue
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.exceptionThrown":
            found.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            found.append(f"log: {params['entry'].get('text')}")
    return found


def page_requests(tools: DevTools, session: str) -> list[str]:
    urls = [
        e["params"]["request"]["url"]
        for e in tools.events
        if e.get("sessionId") == session and e["method"] == "Network.requestWillBeSent"
    ]
    return [u for u in urls if not u.startswith("data:")]  # inline data is not the network


VISIBLE = """(function (sel) {
  var el = document.querySelector(sel);
  if (!el) { return 'missing'; }
  var box = el.getBoundingClientRect(), style = getComputedStyle(el);
  return (box.width > 0 && box.height > 0 && style.visibility !== 'hidden'
          && style.display !== 'none') ? 'visible' : 'invisible';
})(%s)"""


def visible_text(tools: DevTools, session: str, selector: str) -> str:
    return evaluate(tools, session, VISIBLE % json.dumps(selector))
