"""The overnight queue end to end on the bundled simulator. The `queue run`s that are signalled or
run two at once are separate `orch` processes; those that nothing signals run in the test's process.

Done-when test: two sweeps queued; `orch queue run --until T` finishes the first and is cut short
by T in the second (which stays resumable); a later `queue run` resumes it in the same run
directory; hosts are restored after each, the reports index lists both, and the webhook heard
about every end. Plus two `queue run` processes at once: every item runs exactly once.

How the deadline lands inside the second sweep on any machine: its repro, after running, waits
until T has passed, so its first trial ends after T and the runner starts no second one.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal
from orchestrator.team.queue import Queue

from .helpers import inventory_text, make_site, matrix_text, orch_in_process, start_orch, webhook_receiver

pytestmark = pytest.mark.sim

# the two `queue add`s and the first sweep (2 trials, report, index) must end before the deadline: 25 s
# was not always enough on a loaded 2-core machine (the second sweep started after it: 0/4 trials)
MARGIN_S = 40.0


def queue_add(monkeypatch: pytest.MonkeyPatch, cwd: Path, *args: str) -> int:
    """`orch queue add ARGS` in this process, run from `cwd` as the helper's subprocess would be
    (relative paths as given, no ORCH_WEBHOOKS but the test's): adding an item is no process
    matter, and each `orch` process costs ~1 s of start-up. The `queue run`s stay processes."""
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("ORCH_WEBHOOKS", raising=False)
    return main(["queue", "add", *args])


def finished_trials(run_dir: Path) -> list[TrialRecord]:
    return [
        r
        for r in read_journal(run_dir / "journal.jsonl").records
        if isinstance(r, TrialRecord) and r.status in ("completed", "failed")
    ]


def manifest(run_dir: Path) -> dict[str, object]:
    return json.loads((run_dir / "run.json").read_text())


def test_overnight_queue_with_deadline_then_resume(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site")
    reports = tmp_path / "reports"
    deadline = time.time() + MARGIN_S
    wait_past_deadline = f"{{python}} -c 'import time; time.sleep(max(0.0, {deadline + 0.5} - time.time()))'"
    (tmp_path / "first.yaml").write_text(matrix_text("first"))
    (tmp_path / "second.yaml").write_text(
        matrix_text("second", replicates=2, after_repro=wait_past_deadline, timeout=120)
    )
    with webhook_receiver() as rx:
        for name in ("first", "second"):  # in-process: a new `orch` process can take seconds of the margin
            args = ["queue", "add", str(tmp_path / f"{name}.yaml"), "-i", str(site.inventory)]
            assert main([*args, "--reports", str(reports), "--webhook", rx.url + "/hook"]) == 0
        until = datetime.fromtimestamp(deadline).astimezone().isoformat(timespec="milliseconds")
        night = orch_in_process("queue", "run", "--until", until, "--reports", str(reports), cwd=tmp_path)
        log = night.stdout + night.stderr
        assert night.returncode == 0, log
        with Queue.in_reports(reports) as q:
            first, second = q.items(("completed", "resumable", "queued", "running", "failed"))
        assert first.state == "completed", (first, log)
        assert second.state == "resumable" and "deadline reached after 1/4 trials" in second.message, (second, log)

        first_dir, second_dir = Path(first.run_dir or ""), Path(second.run_dir or "")
        assert manifest(first_dir)["status"] == "completed" and len(finished_trials(first_dir)) == 2
        assert manifest(second_dir)["status"] == "interrupted" and len(finished_trials(second_dir)) == 1
        assert json.loads((second_dir / "status.json").read_text())["state"] == "finished"
        assert site.env_files_unchanged() == [] and site.listening() == []  # restored after the cut
        assert [b["status"] for _, b in rx.received] == ["completed", "interrupted"]  # type: ignore[index]

        morning = orch_in_process("queue", "run", "--reports", str(reports), cwd=tmp_path)
        assert morning.returncode == 0, morning.stdout + morning.stderr
        assert "resuming" in morning.stderr
        with Queue.in_reports(reports) as q:
            assert q.get(second.id).state == "completed" and q.get(second.id).run_dir == str(second_dir)
        assert manifest(second_dir)["status"] == "completed"
        assert sorted(t.trial for t in finished_trials(second_dir)) == [0, 1, 2, 3]  # trial 0 not rerun

    assert site.env_files_unchanged() == [] and site.listening() == []
    assert sorted(p.name for p in reports.iterdir() if p.is_dir()) == sorted([first_dir.name, second_dir.name])
    index = (reports / "index.html").read_text()
    for run_dir in (first_dir, second_dir):
        assert f'href="{run_dir.name}/index.html"' in index
    bodies = [b for _, b in rx.received]
    assert [(b["name"], b["status"]) for b in bodies] == [  # type: ignore[index]
        ("first", "completed"),
        ("second", "interrupted"),
        ("second", "completed"),
    ]
    last = bodies[-1]
    assert {"run_id", "name", "status", "headline", "link", "trials", "failed"} <= set(last)  # type: ignore[arg-type]
    assert last["run_id"] == second_dir.name and last["trials"] == 4 and last["failed"] == 0  # type: ignore[index]
    assert last["link"] == (second_dir.resolve() / "index.html").as_uri()  # type: ignore[index]


def test_two_queue_runners_never_run_the_same_item(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Items on two private deployments; two `queue run` processes at once. Each item runs
    exactly once; an item whose testbed the other process holds is skipped, not waited on."""
    sites = [make_site(tmp_path / "site-a"), make_site(tmp_path / "site-b")]
    reports = tmp_path / "reports"
    (tmp_path / "m.yaml").write_text(matrix_text("pair"))
    for site in (sites[0], sites[1], sites[0]):
        assert queue_add(monkeypatch, tmp_path, "m.yaml", "-i", str(site.inventory), "--reports", str(reports)) == 0
    procs = [
        start_orch("queue", "run", "--reports", str(reports), cwd=tmp_path, log=tmp_path / f"runner-{k}.log")
        for k in range(2)
    ]
    codes = [p.wait(timeout=240) for p in procs]
    logs = "\n".join((tmp_path / f"runner-{k}.log").read_text() for k in range(2))
    assert codes == [0, 0], logs

    with Queue.in_reports(reports) as q:
        items = q.items(("completed", "resumable", "queued", "running", "failed"))
    assert [i.state for i in items] == ["completed"] * 3, logs
    run_dirs = sorted(p for p in reports.iterdir() if p.is_dir())
    assert len(run_dirs) == 3 and sorted(i.run_dir for i in items) == [str(p) for p in run_dirs]
    for item in items:
        assert Path(item.run_dir or "").name.endswith(f"-q{item.id}")
        assert manifest(Path(item.run_dir or ""))["status"] == "completed"
    starts = [line for line in logs.splitlines() if ": starting" in line]
    assert len(starts) == 3, logs  # no item started twice
    for site in sites:
        assert site.env_files_unchanged() == [] and site.listening() == []


def test_live_status_while_running_and_sigterm_leaves_it_resumable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `systemctl stop` of a schedule does: SIGTERM to `queue run` mid-sweep. Before that,
    the live status (status.json, `orch status`) shows the sweep running through the queue."""
    site = make_site(tmp_path / "site")
    reports = tmp_path / "reports"
    (tmp_path / "slow.yaml").write_text(matrix_text("slow", replicates=4, after_repro="sleep 0.5"))
    assert queue_add(monkeypatch, tmp_path, "slow.yaml", "-i", str(site.inventory), "--reports", str(reports)) == 0
    capsys.readouterr()  # what the add printed: `orch status --json` below is read alone
    proc = start_orch("queue", "run", "--reports", str(reports), cwd=tmp_path, log=tmp_path / "run.log")
    try:
        status = wait_for_status(reports, lambda s: s["state"] == "running" and s["done"] >= 1, proc)
        assert status["total"] == 8 and status["current_cell"] in ("overlap=on", "overlap=off")
        assert status["pid"] == proc.pid and status["eta_s"] is not None
        from orchestrator.cli.main import main

        assert main(["status", "--reports", str(reports), "--json"]) == 0
        seen = json.loads(capsys.readouterr().out)
        assert seen["runs"][0]["state"] == "running" and seen["queue"][0]["state"] == "running"
        proc.terminate()  # SIGTERM, by PID
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (tmp_path / "run.log").read_text()
    assert code == 130, log
    with Queue.in_reports(reports) as q:
        (item,) = q.items(("completed", "resumable", "queued", "running", "failed"))
    assert item.state == "resumable" and item.claimed_by is None, (item, log)
    run_dir = Path(item.run_dir or "")
    assert manifest(run_dir)["status"] == "interrupted"
    assert 1 <= len(finished_trials(run_dir)) < 8
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    assert site.env_files_unchanged() == [] and site.listening() == []


def wait_for_status(reports: Path, ok, proc, timeout_s: float = 90) -> dict[str, object]:  # noqa: ANN001
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        for path in reports.glob("*/status.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if ok(data):
                return data
        assert proc.poll() is None, "queue run ended before the status was seen"
        time.sleep(0.1)
    raise AssertionError("status.json never showed the expected progress")


def test_a_queued_sweep_over_several_testbeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`queue add -t all`: the queue runs it as `orch run -t all` does (one run, both testbeds),
    with the live status counting trials from both."""
    sites = [make_site(tmp_path / name) for name in ("a", "b")]
    inventory = tmp_path / "both.yaml"
    inventory.write_text(
        inventory_text(sites[0].ports, "sim-a", "a") + inventory_text(sites[1].ports, "sim-b", "b", header=False)
    )
    reports = tmp_path / "reports"
    (tmp_path / "m.yaml").write_text(matrix_text("wide", replicates=2))
    assert queue_add(monkeypatch, tmp_path, "m.yaml", "-i", str(inventory), "-t", "all", "--reports", str(reports)) == 0
    ran = orch_in_process("queue", "run", "--reports", str(reports), cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with Queue.in_reports(reports) as q:
        (item,) = q.items(("completed", "resumable", "queued", "running", "failed"))
    assert item.state == "completed", item
    run_dir = Path(item.run_dir or "")
    trials = finished_trials(run_dir)
    assert len(trials) == 4 and {t.testbed for t in trials} == {"sim-a", "sim-b"}
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["done"], status["total"]) == ("finished", 4, 4)
    for site in sites:
        assert site.env_files_unchanged() == [] and site.listening() == []
