"""edges.remote_leftovers' round trip as the controller sees it (mutation round eleven): the check's
timeout covers the script's own waits, and a host that cannot be looked at is named by the last
line it said, bounded. On the fakes, no process (the script itself runs in test_remote_leftovers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from fakes import FakeTransport, Reply

from orchestrator.edges.leftovers import KILL_ROUNDS
from orchestrator.edges.remote_leftovers import CHECK_SLACK_S, SCRIPT, parse, stop_marked
from orchestrator.edges.transport import Result
from orchestrator.errors import TransportError

MARK = "0123456789abcdef"


class TimedTransport(FakeTransport):
    """A FakeTransport that also keeps each run's timeout and check (the fake's log has neither)."""

    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.asked: list[dict[str, Any]] = []

    def run(self, command: str | Sequence[str], **kw: Any) -> Result:
        self.asked.append({k: kw.get(k) for k in ("timeout", "check", "sudo")})
        return super().run(command, **kw)


def test_the_check_waits_as_long_as_the_script_may_and_some_slack() -> None:
    """The script settles for settle_s, then gives SIGTERM a grace and each KILL round another: a
    timeout shorter than that kills the check while it stops a leftover (the trial then failed as
    "cannot look"), and a negative or tiny one at once."""
    t = TimedTransport("decode")
    t.script(("sh", "-c", SCRIPT), Reply())
    assert stop_marked(t, MARK, settle_s=0.5, grace_s=2.0) == []
    [asked] = t.asked
    assert asked["timeout"] == pytest.approx(0.5 + 2.0 + KILL_ROUNDS * 2.0 + CHECK_SLACK_S)
    assert asked["timeout"] > 0.5 + (1 + KILL_ROUNDS) * 2.0  # beyond the script's longest wait
    assert asked["check"] is False  # its exit code is read here, to word the error


def test_a_host_that_cannot_be_looked_at_is_named_by_the_last_line_it_said() -> None:
    """A login banner on stderr first, the script's own refusal last: the error quotes the last."""
    t = TimedTransport("decode")
    t.script(("sh", "-c", SCRIPT), exit_code=3, stderr="Welcome to decode\norch-left: base64 not found\n")
    with pytest.raises(TransportError, match="left running: orch-left: base64 not found \\(orch needs sh") as exc:
        stop_marked(t, MARK, settle_s=0.0, grace_s=0.0)
    assert "Welcome" not in str(exc.value)


def test_a_silent_failure_says_its_exit_code() -> None:
    t = TimedTransport("decode")
    t.script(("sh", "-c", SCRIPT), exit_code=126)
    with pytest.raises(TransportError, match="left running: exit code 126 \\(orch needs"):
        stop_marked(t, MARK, settle_s=0.0, grace_s=0.0)


def test_what_the_host_said_is_quoted_at_most_300_characters() -> None:
    t = TimedTransport("decode")
    t.script(("sh", "-c", SCRIPT), exit_code=2, stderr="e" * 1000 + "\n")
    with pytest.raises(TransportError) as exc:
        stop_marked(t, MARK, settle_s=0.0, grace_s=0.0)
    assert "e" * 300 + " (orch needs" in str(exc.value)
    assert "e" * 301 not in str(exc.value)


def test_only_the_scripts_own_kinds_of_line_are_read() -> None:
    """A login script's chatter shaped like an answer line (`WORD|NUMBER`) names no process: a
    stray `load|42` read as "pid 42 outlived SIGKILL" would void the trial for nothing."""
    assert parse("load|42\nusers|3\nalive|x\nmore|\nmore|-1\n") == []
    assert parse("alive|42\n") == ["still running, could not be stopped: pid 42"]
