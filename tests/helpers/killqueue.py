"""Kill points of `orch queue run` (bench_kill_points.py --command queue): the overnight queue
signalled at a seeded moment of one of its phases, then run again.

A bed (helpers.killpoints' simulated testbed) gets a queue of ITEMS small sweeps (2 x 2 cells, one
trial each: 4 trials) in its reports folder's queue.db; an unsignalled reference queue gives each
phase's starts and mean length (helpers.killmore.phase_lengths) and each item's trials. The
signalled `orch queue run` is aimed at QUEUE_TARGETS: a claim, an item's start (prepare), its
trials (env writes, restarts, health, repro, journal), its final restore and report, the moment
between the sweep's end and the queue's record of it, the record, and between items. Then:

- the signal: SIGKILL kills (-9); a handled SIGTERM or SIGINT (twice) exits 130 (0 only once
  every item had ended), no traceback, no item nor trial started after it;
- `orch queue list` and `orch status --json` tell the truth: no item `running` when no runner
  lives (a dead runner's item `stale`), an item `completed` only if its run did, no item with
  finished trials back to `queued` (it would run again from scratch); a killed run stale with both
  ways back, a run that exited not stale and naming every host it left changed;
- `orch queue run` again (and `orch restore` of each run that says hosts were not restored): its
  exit code the reference's, every item completed exactly once (one run folder with trials per
  item, every planned trial journaled once, the same trials and results as the reference's, the
  trials finished before the signal unchanged), `orch queue list` and `orch status` saying so, every
  env file byte-identical, no unit, lock, copy or temp file left.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from faults.helpers import SimBed, cleanup_processes, journal_tally, make_simbed, manifest, matrix_yaml, orch, orch_here

from helpers.killmore import Reference, Trial, _wait, draw_hunt, phase_lengths, trials_of
from helpers.killpoints import (
    KillPoint,
    Outcome,
    check_status,
    check_summary,
    finished_records,
    kept,
    landed_in,
    left_behind,
    not_restored,
    spawn_traced,
    unexplained,
    wait_for,
    went_on,
    what_is_left,
)
from orchestrator.core.records import TrialRecord

ITEMS = ("qa", "qb")  # the queued sweeps' matrix names, in the order they are added (and run)
QUEUE_TARGETS = ("claim", "item", "env-write", "restart", "health", "repro", "journal", "restore", "report")
QUEUE_TARGETS += ("item-ended", "finish", "between", "status")
LANDED = {"claimed": "item start", "item": "item start", "item-ended": "item ended", "between": "between items"}


@dataclass(frozen=True)
class QueueReference:
    """An unsignalled queue run: each item's trials (by matrix name), its exit code, its marks. A CI
    point's stands without one: no trials (not compared), exit 0, no marks (its point is given)."""

    trials: dict[str, tuple[Trial, ...]]
    exit_code: int
    phases: dict[str, tuple[int, float]]

    def draw(self, seed: int, signals: str | None = None) -> KillPoint:
        """The point of `seed`: the target phase taking turns, start and delay within the reference's."""
        return draw_hunt(seed, Reference((), self.phases), signals, QUEUE_TARGETS)


def queue_bed(root: Path) -> SimBed:
    """A bed with ITEMS queued (2 x 2 cells, one trial each) in its reports folder's queue.db."""
    bed = make_simbed(root, matrix=matrix_yaml(name=ITEMS[0], replicates=1))
    for name in ITEMS:
        path = bed.root / f"{name}.yaml"
        path.write_text(matrix_yaml(name=name, replicates=1))
        done = orch_here(bed, ["queue", "add", str(path), "-i", str(bed.inventory), "--reports", str(bed.reports)])
        assert done.code == 0, done.output
    return bed


def run_args(bed: SimBed) -> list[str]:
    return ["queue", "run", "--reports", str(bed.reports)]


def reference_queue(root: Path) -> QueueReference:
    """The queue run once, unsignalled: what every signalled one must end with."""
    bed = queue_bed(root / "reference")
    try:
        code = spawn_traced(bed, None, "q", run_args(bed)).wait(600)
        runs = {name: run for name, run in item_runs(bed).items() if run is not None}
        assert set(runs) == set(ITEMS), (bed.root / "run.log").read_text(errors="replace")[-2000:]
        trials = {name: trials_of(run) for name, run in runs.items()}
        return QueueReference(trials, code, phase_lengths(bed.root / "trace", QUEUE_TARGETS))
    finally:
        cleanup_processes(bed)
        shutil.rmtree(bed.root, ignore_errors=True)


def items(bed: SimBed) -> list[dict[str, object]]:
    """The queue's items as stored (read-only, straight from the database): the truth the views
    are checked against."""
    from orchestrator.team.queue import Queue

    with Queue.in_reports(bed.reports, read_only=True) as q:
        return [
            {"id": i.id, "name": Path(i.matrix).stem, "state": i.state, "shown": i.shown_state, "run_dir": i.run_dir}
            for i in q.items()
        ]


def item_runs(bed: SimBed) -> dict[str, Path | None]:
    """matrix name -> the run folder its item names (None: none yet)."""
    return {str(i["name"]): Path(str(i["run_dir"])) if i["run_dir"] else None for i in items(bed)}


def run_folders(bed: SimBed, name: str) -> list[Path]:
    """The run folders of the item of matrix `name` (run ids DATE-TIME-NAME-qID) holding a run.json."""
    return sorted(p.parent for p in bed.reports.glob(f"*-{name}-q*/run.json"))


def run_queue_once(root: Path, point: KillPoint, ref: QueueReference, keep: Path | None = None) -> Outcome:
    """The queue run signalled at `point`, every promise checked, then run again and checked."""
    bed = queue_bed(root / f"bed-{point.seed}")
    out = Outcome(point)
    try:
        out.exit_code = _wait(spawn_traced(bed, point, "q", run_args(bed)), out)
        out.landed = _landed(bed.root / "trace")
        (bed.root / "at-kill.txt").write_text(what_is_left(bed))
        out.violations += after_signal(bed, point, out, ref.exit_code)
        before = {run: finished_records(run) for name in ITEMS for run in run_folders(bed, name)}
        out.violations += run_again(bed, ref, before)
    except Exception as exc:  # a check that could not run is a finding too
        out.violations.append(f"harness error: {type(exc).__name__}: {exc}")
    return kept(bed, out, keep)


def _landed(trace: Path) -> str:
    where = landed_in(trace)
    return LANDED.get(where, where)


def after_signal(bed: SimBed, point: KillPoint, out: Outcome, ref_code: int) -> list[str]:
    """What the signal left: the exit, the queue's states and what the views say of them."""
    if out.landed == "missed":
        return [] if out.exit_code == ref_code else [f"no signal sent, yet exit {out.exit_code}"]
    died = out.exit_code is not None and out.exit_code < 0
    broken = [f"SIGKILL, yet exit {out.exit_code}"] * (point.signals == "KILL" and out.exit_code != -9)
    if died and point.signals != "KILL" and out.landed != "start-up":
        broken.append(f"{point.signals} in {out.landed}: died of it (exit {out.exit_code})")
    if not died:
        broken += _handled(bed, point, out)
    broken += queue_truth(bed, killed=died)
    runs = [run for name in ITEMS for run in run_folders(bed, name)]
    if runs:  # the last run started: the one the signal cut, if any (those before it ended)
        broken += check_status(bed, runs[-1], killed=died)
    return broken


def _handled(bed: SimBed, point: KillPoint, out: Outcome) -> list[str]:
    """A handled signal: 130 (0 only if every item had ended), no traceback, nothing new started,
    any host left changed named by its run's status.json."""
    trace = bed.root / "trace"
    ended = all(i["state"] in ("completed", "failed") for i in items(bed))
    ok = out.exit_code == 130 or (out.exit_code == 0 and ended)
    broken = [] if ok else [f"{point.signals}: exit {out.exit_code}"]
    if more := went_on(trace) + _started_after(trace):
        broken.append(f"{point.signals} swallowed: the queue went on ({', '.join(more)})")
    text = (bed.root / "run.log").read_text(errors="replace")
    broken += [f"{point.signals}: a traceback: {text[-1500:]}"] * ("Traceback (most recent call last)" in text)
    named = {h for name in ITEMS for run in run_folders(bed, name) for h in not_restored(bed, run.name)}
    wait_for(lambda: not unexplained(bed, named), 15)
    return broken + [f"{point.signals}, exit {out.exit_code}, not named: {p}" for p in unexplained(bed, named)]


def _started_after(trace: Path) -> list[str]:
    """An item's sweep started after the first signal (the queue claimed on)."""
    names = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    first = next((i for i, n in enumerate(names) if n.startswith("signal ")), len(names))
    return [n for n in names[first + 1 :] if n == "item"]


def queue_truth(bed: SimBed, *, killed: bool = False) -> list[str]:
    """The stored states against what happened, and `orch queue list` / `orch status` against them.
    Only a SIGKILL (`killed`) may leave an item claimed: a runner that exits releases its claims."""
    broken = []
    for i in items(bed):
        # the run the item names, if its folder holds one: an item names its run's folder from just
        # before the testbed is locked, so a kill before the folder is made leaves it naming none
        run = Path(str(i["run_dir"])) if i["run_dir"] else None
        run = run if run is not None and (run / "run.json").is_file() else None
        label = f"item {i['id']} ({i['name']})"
        trials = [t for r in run_folders(bed, str(i["name"])) for t in finished_records(r)]
        if i["shown"] == "running":  # the runner is gone (killed, or exited): nothing runs it
            broken.append(f"{label} shown running, its runner gone")
        if i["state"] == "running" and not killed:
            broken.append(f"{label} left claimed (stored running) by a runner that exited")
        if i["state"] == "queued" and trials:
            broken.append(f"{label} queued again with {len(trials)} trials finished: it would run from scratch")
        if i["state"] == "completed" and (run is None or manifest(run).status != "completed"):
            broken.append(f"{label} completed, its run {run} {manifest(run).status if run else 'none'}")
        if run is not None and manifest(run).status == "completed" and i["state"] in ("queued",):
            broken.append(f"{label} {i['state']}, yet its run completed")
    return broken + views_agree(bed)


def views_agree(bed: SimBed) -> list[str]:
    """`orch queue list` and `orch status --json` show each item in its state as stored (a dead
    runner's `running` item as `stale`, never `running`)."""
    stored = {int(str(i["id"])): str(i["shown"]) for i in items(bed)}
    listed = orch(bed, ["queue", "list", "--reports", str(bed.reports)], timeout=60)
    broken = [] if listed.code == 0 else [f"orch queue list: exit {listed.code}: {listed.output[-300:]}"]
    rows = {int(c[0]): c[1] for c in (_cells(line) for line in listed.output.splitlines()) if c and c[0].isdigit()}
    broken += [
        f"orch queue list: item {k} {rows.get(k)!r}, stored {v!r}" for k, v in stored.items() if rows.get(k) != v
    ]
    status = orch_here(bed, ["status", "--reports", str(bed.reports), "--json"])
    if status.code != 0:
        return broken + [f"orch status: exit {status.code}: {status.output[-300:]}"]
    shown = {int(q["id"]): q["state"] for q in json.loads(status.output)["queue"]}
    pending = {k: v for k, v in stored.items() if v not in ("completed", "failed")}
    return broken + [f"orch status: queue {shown}, stored {pending}"] * (shown != pending)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│┃|").split("│")] if "│" in line else []


def run_again(bed: SimBed, ref: QueueReference, before: dict[Path, dict[int, TrialRecord]]) -> list[str]:
    """`orch queue run` again, unsignalled (then `orch restore` of a run it says it left): every
    item completed exactly once, with the reference's trials, hosts as before."""
    done = orch_here(bed, run_args(bed))
    broken = [] if done.code == ref.exit_code else [f"queue run again: exit {done.code}: {done.output[-800:]}"]
    for run in (r for name in ITEMS for r in run_folders(bed, name)):
        status = run / "status.json"
        if status.exists() and json.loads(status.read_text()).get("not_restored"):
            again = orch_here(bed, ["restore", str(run)])
            broken += [f"orch restore {run.name}: exit {again.code}"] * (again.code != 0)
    for i in items(bed):
        broken += _item_once(bed, i, ref, before)
    broken += queue_truth(bed) + runs_settled(bed)
    wait_for(lambda: not left_behind(bed), 15)
    return broken + [f"at the end: {p}" for p in left_behind(bed)]


def runs_settled(bed: SimBed) -> list[str]:
    """Once every item is done, `orch status` shows no run stale or with hosts left: a run folder
    the signal left behind that the queue did not take up again (it started the item anew) must not
    ask the user to resume it (its trials would run twice)."""
    done = orch_here(bed, ["status", "--reports", str(bed.reports), "--json"])
    if done.code != 0:
        return [f"orch status at the end: exit {done.code}: {done.output[-300:]}"]
    runs = json.loads(done.output)["runs"]
    return [
        f"orch status at the end: {r['run_id']} {r['state']!r}, {r.get('way_back') or r.get('not_restored')!r}"
        for r in runs
        if r["state"] == "stale" or r.get("not_restored")
    ]


def _item_once(
    bed: SimBed, i: dict[str, object], ref: QueueReference, before: dict[Path, dict[int, TrialRecord]]
) -> list[str]:
    """One item ended completed, with one run folder holding trials: every planned trial once, the
    reference's trials, those finished before the signal unchanged."""
    name, label = str(i["name"]), f"item {i['id']} ({i['name']})"
    if i["state"] != "completed":
        return [f"{label} ends {i['state']!r}"]
    ran = [r for r in run_folders(bed, name) if finished_records(r)]
    if len(ran) != 1 or str(ran[0]) != str(i["run_dir"]):
        return [f"{label}: runs with trials {[r.name for r in ran]}, the item names {i['run_dir']}"]
    run = ran[0]
    planned, lost, twice = journal_tally(run)
    broken = [f"{label}: lost {lost}"] * bool(lost) + [f"{label}: twice {twice}"] * bool(twice)
    after = finished_records(run)
    broken += [f"{label}: trial {t} changed" for t, r in before.get(run, {}).items() if after.get(t) != r]
    broken += check_summary(run, planned, after)
    if name in ref.trials and (got := trials_of(run)) != ref.trials[name]:  # none: a CI point's own
        broken.append(f"{label}: trials {got} != the reference's {ref.trials[name]}")
    return broken
