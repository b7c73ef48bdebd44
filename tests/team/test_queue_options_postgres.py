"""A queued sweep's `orch run` options on a shared PostgreSQL queue (a real server the tests start:
helpers/postgres.py): kept and read back; a version-1 queue's tables gain their column when a
controller may alter them, stay as they are (older orch controllers still run them) when it may
not, and then only options are refused, saying what the tables' owner can run."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.postgres import PgServer

from orchestrator.team.queue import NewItem
from orchestrator.team.queuestore import DEFAULT_CHOICES, QueueError, RunChoices
from orchestrator.team.queuestore_pg import META, SCHEMA_VERSION, TABLE, PgQueue

pytestmark = [pytest.mark.sim, pytest.mark.xdist_group("postgres")]  # as test_queue_postgres.py

# the tables as orch made them before queued options (schema version 1)
V1 = (
    f"""CREATE TABLE {TABLE} (id BIGSERIAL PRIMARY KEY, matrix TEXT NOT NULL, inventory TEXT NOT NULL,
    testbed TEXT, priority BIGINT NOT NULL DEFAULT 0, webhooks TEXT NOT NULL DEFAULT '[]',
    state TEXT NOT NULL DEFAULT 'queued', added TEXT NOT NULL, updated TEXT NOT NULL, run_dir TEXT,
    claimed_by TEXT, message TEXT NOT NULL DEFAULT '', matrix_text TEXT NOT NULL DEFAULT '',
    inventory_text TEXT NOT NULL DEFAULT '', queued_by TEXT NOT NULL DEFAULT '',
    testbeds TEXT NOT NULL DEFAULT '')""",
    f"CREATE INDEX {TABLE}_order ON {TABLE} (state, priority DESC, id)",
    f"CREATE TABLE {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"INSERT INTO {META} VALUES ('schema_version', '1')",
    f"INSERT INTO {TABLE} (matrix, inventory, added, updated) VALUES ('/m/old.yaml', '/i/old.yaml', 't', 't')",
)
CHOICES = RunChoices(replicates=4, seed=9, retries=2, fail_fast=True)


def new_item(name: str, choices: RunChoices = DEFAULT_CHOICES) -> NewItem:
    return NewItem(Path(f"/m/{name}.yaml"), Path("/i/inv.yaml"), None, testbeds=("tb",), choices=choices)


def version(postgres: PgServer, url: str) -> str:
    return str(postgres.sql(url, f"SELECT value FROM {META} WHERE key = 'schema_version'")[0][0])


def test_options_are_kept_on_a_server_queue(postgres: PgServer, pg_url: str) -> None:
    with PgQueue(pg_url, heartbeat_s=0) as q:
        item = q.add_item(new_item("x", CHOICES))
        plain = q.add_item(new_item("y"))
        assert q.get(item.id).choices == CHOICES and [i.choices for i in q.items()] == [CHOICES, RunChoices()]
        assert plain.choices == RunChoices() and not item.defect
        claimed = q.claim()
        assert claimed is not None and claimed.id == item.id and claimed.choices == CHOICES
    assert version(postgres, pg_url) == str(SCHEMA_VERSION) == "2"


def test_a_version_1_queue_gains_the_column_and_its_items_run_as_before(postgres: PgServer, pg_url: str) -> None:
    for statement in V1:
        postgres.sql(pg_url, statement)
    with PgQueue(pg_url, heartbeat_s=0, read_only=True) as ro:  # `orch status` before any upgrade
        assert [(i.matrix, i.choices) for i in ro.items()] == [("/m/old.yaml", RunChoices())]
    assert version(postgres, pg_url) == "1"
    with PgQueue(pg_url, heartbeat_s=0) as q:
        (old,) = q.items()
        assert old.choices == RunChoices() and not old.defect
        assert q.get(q.add_item(new_item("n", CHOICES)).id).choices == CHOICES
    assert version(postgres, pg_url) == "2"


def test_a_role_that_cannot_alter_the_tables_queues_without_options_only(postgres: PgServer, pg_url: str) -> None:
    for statement in V1:
        postgres.sql(pg_url, statement)
    role = "orch_ctl_" + pg_url.rsplit("/", 1)[1]  # one per test database
    postgres.sql(pg_url, f"CREATE ROLE {role} LOGIN")
    postgres.sql(pg_url, f"GRANT SELECT, INSERT, UPDATE, DELETE ON {TABLE}, {META} TO {role}")
    postgres.sql(pg_url, f"GRANT USAGE ON SEQUENCE {TABLE}_id_seq TO {role}")
    as_role = pg_url.replace("postgresql://postgres@", f"postgresql://{role}@")
    with PgQueue(as_role, heartbeat_s=0) as q:
        assert q.add_item(new_item("plain")).choices == RunChoices()  # as an older orch would queue it
        with pytest.raises(QueueError, match="predate queued options") as refused:
            q.add_item(new_item("opts", CHOICES))
        assert f"ALTER TABLE {TABLE} ADD COLUMN options" in str(refused.value)
        assert [i.matrix for i in q.items()] == ["/m/old.yaml", "/m/plain.yaml"]
    assert version(postgres, pg_url) == "1"  # older controllers sharing the queue still run it
