"""team.queuestore's values, shared by the SQLite and PostgreSQL stores (mutation round eleven):
who queued an item, who claimed it, the options and webhooks stored with it, and the exit code of
a queue file that is no queue. Pure, except one `orch queue list` in process."""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.team import queuestore
from orchestrator.team.queuestore import DEFAULT_CHOICES, Claimer, QueueError, RunChoices


def test_who_queued_falls_back_to_the_uid_without_a_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container's arbitrary uid has no name: the item still says who (the number)."""

    def no_name() -> str:
        raise KeyError("getpwuid(): uid not found: 1000770000")

    monkeypatch.setattr(getpass, "getuser", no_name)
    assert queuestore.who() == f"{os.getuid()}@{socket.gethostname()}"


def test_a_claimer_is_read_back_from_host_pid_start_even_with_colons_in_the_host() -> None:
    me = Claimer("decode-1", 4242, 123456)
    assert Claimer.parse(me.encode()) == me == Claimer.decode(me.encode())
    assert Claimer.parse("fe80::1:77:9") == Claimer("fe80::1", 77, 9)


@pytest.mark.parametrize("stored", ["", "decode-1", "decode-1:77", "h:x:9", "h:7:start"])
def test_a_claim_written_by_another_tool_is_none_to_parse_and_an_error_naming_it_to_decode(stored: str) -> None:
    assert Claimer.parse(stored) is None
    with pytest.raises(QueueError, match=f"claimed_by {stored!r} is not host:pid:start"):
        Claimer.decode(stored)


def test_an_item_added_before_options_were_stored_runs_with_orch_runs_defaults() -> None:
    """Its options column is NULL (a queue from before the column): the defaults, no complaint;
    the item must not fail at its claim for a value nobody wrote."""
    assert RunChoices.decode(None) == (DEFAULT_CHOICES, "")
    assert RunChoices.decode("") == (DEFAULT_CHOICES, "")


@pytest.mark.parametrize("decode", [RunChoices.decode, queuestore._webhooks])
def test_an_unreadable_stored_value_is_quoted_whole_up_to_60_characters(decode) -> None:  # type: ignore[no-untyped-def]
    at_60 = "x" * 60
    _, why = decode(at_60)
    assert repr(at_60) in why
    _, why = decode("y" * 61)
    assert repr("y" * 57 + "...") in why and "y" * 58 not in why


def test_a_queue_file_that_is_no_queue_is_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As a bad matrix is: a file that is not an orch queue, not a runtime fault (exit 1)."""
    (tmp_path / "queue.db").write_bytes(b"this is no SQLite file\n" * 10)
    assert main(["queue", "list", "--reports", str(tmp_path)]) == 2
    assert "cannot read the queue: file is not a database" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:secret@h:5/db", "postgresql://u:***@h:5/db"),
        ("postgresql://u:secret@[2001:db8::5]:5432/db", "postgresql://u:***@[2001:db8::5]:5432/db"),
        ("postgresql://u:secret@[::1]/db", "postgresql://u:***@[::1]/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),  # no password: shown as given
    ],
)
def test_a_store_url_is_shown_without_its_password_and_still_reads_as_its_server(url: str, shown: str) -> None:
    """An IPv6 server lost its brackets (`u:***@2001:db8::5:5432`: another address on no port)."""
    from orchestrator.team.queuestore_pg import shown_url

    assert shown_url(url) == shown
