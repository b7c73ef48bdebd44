"""What the queue keeps of each item (issue 16): the matrix and inventory text as validated at
`queue add`, who queued it and the testbeds it meant; the sweep runs from copies of that text, and
the inventory copy's relative paths mean what they meant. Also the SQLite store's upgrade of a
version-1 queue. No sweep is started here (the sim and PostgreSQL tests run the copies for real)."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.errors import ConfigError
from orchestrator.sweep.progress import QuietProgress
from orchestrator.team.overnight import QueueSweep, changed_since_queued, sweep_files
from orchestrator.team.queue import NewItem, Queue, QueueItem
from orchestrator.team.queuestore import RunChoices

from .helpers import make_site, matrix_text


def queued(tmp_path: Path) -> tuple[QueueItem, Path, Path]:
    """`orch queue add` of a matrix on a private site: the item, the matrix and the inventory."""
    site = make_site(tmp_path / "site")
    matrix = tmp_path / "m.yaml"
    matrix.write_text(matrix_text("copies"))
    assert main(["queue", "add", str(matrix), "-i", str(site.inventory), "--reports", str(tmp_path / "r")]) == 0
    with Queue.in_reports(tmp_path / "r") as q:
        return q.get(1), matrix, site.inventory


def test_queue_add_keeps_the_text_who_and_testbeds(tmp_path: Path) -> None:
    item, matrix, inventory = queued(tmp_path)
    assert item.matrix_text == matrix.read_text() and item.inventory_text == inventory.read_text()
    assert item.testbeds == ("sim",) and item.testbed is None  # the spec as typed, the names it meant
    assert item.queued_by.endswith("@" + socket.gethostname())


def test_the_sweep_reads_copies_whose_relative_paths_mean_the_same(tmp_path: Path) -> None:
    item, matrix, inventory = queued(tmp_path)
    reports = tmp_path / "r"
    m_copy, i_copy = sweep_files(item, reports)
    assert m_copy.parent == reports and m_copy.name.startswith(".queued-") and i_copy.name.startswith(".queued-")
    matrix.write_text(matrix_text("edited after queue add"))  # the night must not see this
    inventory.unlink()
    assert read_matrix(m_copy).name == "copies"
    original = read_inventory(_restored(inventory, item.inventory_text))
    copy = read_inventory(i_copy)
    assert f'\nbase_dir: "{inventory.parent}"\n' in i_copy.read_text()
    assert {r: h.env_file for r, h in copy.testbeds["sim"].hosts.items()} == {
        r: h.env_file for r, h in original.testbeds["sim"].hosts.items()
    }
    assert copy.testbeds["sim"].state_dir == original.testbeds["sim"].state_dir == inventory.parent / "state"
    before = i_copy.stat().st_mtime_ns
    assert sweep_files(item, reports) == (m_copy, i_copy) and i_copy.stat().st_mtime_ns == before  # written once


def _restored(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_an_inventory_naming_its_base_dir_is_copied_as_it_is(tmp_path: Path) -> None:
    item, _, inventory = queued(tmp_path)
    own = f'base_dir: "{tmp_path}"\n' + item.inventory_text
    _, i_copy = sweep_files(QueueItem(**{**item.__dict__, "inventory_text": own}), tmp_path / "r")
    assert i_copy.read_text() == own
    assert read_inventory(i_copy).testbeds["sim"].state_dir == tmp_path / "state"


def test_items_without_copies_run_from_their_paths(tmp_path: Path) -> None:
    item = QueueItem(1, "/m/x.yaml", "/i/y.yaml", None, 0, (), "queued", "", "", None, None, "")
    assert sweep_files(item, tmp_path) == (Path("/m/x.yaml"), Path("/i/y.yaml"))
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_base_dir_must_be_absolute(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("base_dir: relative/dir\n" + make_site(tmp_path / "s").inventory.read_text())
    with pytest.raises(ConfigError, match=r"inv.yaml:1: .*base_dir 'relative/dir' is not absolute"):
        read_inventory(inv)


def test_sqlite_store_keeps_copies_and_upgrades_a_version_1_queue(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    with sqlite3.connect(db) as old:  # what orch wrote before issue 16
        old.executescript(
            "CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, matrix TEXT NOT NULL, inventory TEXT NOT NULL,"
            " testbed TEXT, priority INTEGER NOT NULL DEFAULT 0, webhooks TEXT NOT NULL DEFAULT '[]', state TEXT NOT"
            " NULL DEFAULT 'queued', added TEXT NOT NULL, updated TEXT NOT NULL, run_dir TEXT, claimed_by TEXT,"
            " message TEXT NOT NULL DEFAULT '');"
            "INSERT INTO items (matrix, inventory, added, updated) VALUES ('/m/old.yaml', '/i/old.yaml', 't', 't');"
            "PRAGMA user_version = 1;"
        )
    old.close()
    with Queue(db, read_only=True) as q:  # `orch status` reads it before any upgrade
        assert [(i.matrix, i.matrix_text, i.testbeds) for i in q.items()] == [("/m/old.yaml", "", ())]
    with Queue(db) as q:
        (legacy,) = q.items()
        assert (legacy.matrix, legacy.matrix_text, legacy.queued_by, legacy.testbeds) == ("/m/old.yaml", "", "", ())
        new = q.add_item(NewItem(Path("/m/n.yaml"), Path("/i/n.yaml"), "a,b", matrix_text="m", inventory_text="i"))
        assert (new.matrix_text, new.inventory_text, new.testbeds) == ("m", "i", ())
        assert new.queued_by.endswith("@" + socket.gethostname()) and q.where == str(db)
        assert q._db.execute("PRAGMA user_version").fetchone()[0] == 3  # version 3: the items' options
        assert legacy.choices == new.choices == RunChoices() and not legacy.defect  # orch run's defaults


class _Refused:
    """A stand-in for sweep.api whose prepare refuses: the item's notes are all that is looked at."""

    def prepare(self, request: object, *, warn: object = None) -> object:
        raise ConfigError("stop here")


def test_a_file_changed_or_gone_since_queue_add_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """From an audit: a matrix edited after `queue add` (replicates 2 -> 1) ran as queued without
    a word, in `queue run` and its --dry-run alike: whoever fixed the file in the evening read the
    morning's report as the fixed matrix. The copy still runs; the change is said, with the way to
    run the file as it is now."""
    item, matrix, inventory = queued(tmp_path)
    matrix.write_text(matrix_text("edited after queue add"))
    inventory.unlink()
    notes: list[str] = []
    sweep = QueueSweep(
        tmp_path / "r",
        terminal=lambda started: QuietProgress(),
        show=lambda outcome: None,
        note=notes.append,
        error=lambda item, message: None,
        warn=lambda message: None,
        sweeps=_Refused(),  # type: ignore[arg-type]
    )
    assert sweep(item, None, lambda run_dir: None).status == "error"
    said = "\n".join(notes)
    assert f"{matrix} changed since it was queued" in said and f"{inventory} is gone" in said, said
    assert "the sweep runs the copy kept at `queue add`" in said and "`orch queue remove 1` and add it again" in said

    assert main(["queue", "run", "--dry-run", "--reports", str(tmp_path / "r")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{matrix} changed since it was queued" in out and f"{inventory} is gone" in out, out


def test_files_as_queued_say_nothing(tmp_path: Path) -> None:
    item, _, _ = queued(tmp_path)
    assert changed_since_queued(item) == []
    assert changed_since_queued(QueueItem(**{**item.__dict__, "matrix_text": ""})) == []  # an older orch's item
