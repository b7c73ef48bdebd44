"""Kill points the harness of helpers/killpoints.py never reached: the way back itself, and a hunt.

- The way back (`kind` "resume" or "restore"): `orch run` (4 trials) is SIGKILLed in a seeded trial's
  repro (hosts changed, units up, 0-3 trials finished); then `orch resume RUN_DIR` or `orch restore
  RUN_DIR` is itself signalled at a seeded random moment of one of its phases (WAY_BACK_PHASES);
  while anything is left changed, `orch status` must still name the way back; then a second,
  unsignalled, run of the same command must end as after a single one: resume with every planned
  trial exactly once, the trials finished before either resume unchanged, hosts restored; restore
  with every env file byte-identical and no unit, repro, lock, copy or temp file left.
- A hunt (`kind` "hunt"): `orch hunt MATRIX` (4 suspects, the simulator's truth ALPHA AND BETA,
  no noise: ~10 trials) signalled at a seeded moment of a phase drawn from an unsignalled reference
  hunt's own marks (how often each phase starts, how long it lasts); status says stale meanwhile;
  then `orch resume` of its folder must finish the hunt with the trials the reference ran: the
  same configurations under the same numbers with the same results (a trial's sessions are seeded
  by its number: a finished configuration is never run again differently), hosts restored.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from faults.helpers import (
    SimBed,
    cleanup_processes,
    journal_tally,
    make_simbed,
    manifest,
    matrix_yaml,
    orch_here,
    wait_for,
)

from helpers.killpoints import (
    SIGNALS,
    KillPoint,
    Outcome,
    check_exit,
    check_journal,
    check_restore,
    check_resume,
    check_status,
    finished_records,
    kept,
    landed_in,
    left_behind,
    signalled_after,
    spawn_traced,
    what_is_left,
)
from helpers.smallhunt import DECODE_ENV as HUNT_DECODE_ENV
from helpers.smallhunt import MATRIX as HUNT_MATRIX

# phase -> (how many times it starts in a way back after a kill in one of 4 trials, its length in s)
WAY_BACK_PHASES: dict[str, tuple[int, float]] = {
    "spawn": (1, 3.0),  # interpreter, imports, the run folder read
    "lock": (1, 0.05),  # the testbed lock taken as the run's own
    "orphans": (1, 0.05),  # the killed controller's repro stopped
    "take-up": (1, 0.1),  # resume: the journal's torn tail repaired, the finished trials read
    "adopt": (1, 0.1),  # the originals the killed controller saved read back
    "host-write": (10, 0.0),  # resume: an env file, a copy or a record written on a host
    "host-restore": (3, 0.07),  # one host put back: its env file, its units, its copy removed
    "restart": (3, 0.12),  # resume: a trial's units restarted
    "health": (3, 0.45),
    "repro": (3, 0.5),
    "journal": (3, 0.03),
    "restore": (1, 0.3),  # the hosts put back
    "status": (7, 0.005),  # resume: status.json written
    "report": (1, 1.3),
}
RESTORE_TARGETS = ("spawn", "lock", "orphans", "adopt", "host-restore", "restore", "report")
RESUME_TARGETS = tuple(WAY_BACK_PHASES)
LANDED = {"locked": "lock", "taken-up": "take-up", "adopted": "adopt", "host-restored": "restore"}

# a trial as the promise reads it: its number, configuration, round and result
Trial = tuple[int, str, int, str, str]


def draw_way_back(seed: int, kind: str, signals: str | None = None) -> tuple[KillPoint, KillPoint]:
    """(the run's SIGKILL, the way back's signal) of `seed`: the run is killed in the repro of its
    trial 1-3 (so hosts are changed); the way back's target phase takes turns with the seed."""
    rng = random.Random(seed)
    first = KillPoint(seed, "repro", rng.randint(1, 3), rng.uniform(0.05, 0.4), "KILL", kind)
    targets = RESTORE_TARGETS if kind == "restore" else RESUME_TARGETS
    target = targets[seed % len(targets)]
    starts, length = WAY_BACK_PHASES[target]
    drawn = signals or rng.choice(SIGNALS)
    if drawn == "INT+INT":
        drawn = f"INT+INT@{rng.uniform(0.05, 0.6):.3f}"
    return first, KillPoint(seed, target, rng.randint(1, starts), rng.uniform(0, length), drawn, kind)


def run_way_back_once(root: Path, first: KillPoint, point: KillPoint, keep: Path | None = None) -> Outcome:
    """The run killed at `first`, its way back (`point.way_back`) signalled at `point`, then the
    same way back again, unsignalled; every promise checked."""
    bed = make_simbed(root / f"bed-{point.seed}", matrix=matrix_yaml(replicates=1))
    out = Outcome(point)
    try:
        code = _wait(spawn_traced(bed, first, "k"), out)
        run_dir = bed.run_dir("k")
        if code != -9 or not (run_dir / "run.json").exists():
            out.landed = "run ended first"
            return kept(bed, out, keep)
        before = finished_records(run_dir)
        args = [point.way_back, str(run_dir)]
        out.exit_code = _wait(spawn_traced(bed, point, "k", args, name="-way-back"), out)
        out.landed = _landed(bed.root / "trace-way-back")
        (bed.root / "at-kill.txt").write_text(what_is_left(bed))
        out.violations += _after_way_back(bed, point, out)
        out.violations += check_journal(run_dir)
        out.violations += way_back_named(bed, run_dir)
        if point.way_back == "restore":
            out.violations += check_restore(bed, run_dir)
        else:
            between = finished_records(run_dir)
            out.violations += [
                f"trial {t} changed by the signalled resume" for t, r in before.items() if between.get(t) != r
            ]
            out.violations += check_resume(bed, run_dir, between)
    except Exception as exc:  # a check that could not run is a finding too
        out.violations.append(f"harness error: {type(exc).__name__}: {exc}")
    return kept(bed, out, keep)


def _wait(proc: subprocess.Popen[bytes], out: Outcome) -> int | None:
    try:
        return proc.wait(180)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        out.violations.append("a signalled controller did not exit within 180 s")
        return None


def _landed(trace: Path) -> str:
    where = landed_in(trace)
    return LANDED.get(where, where)


def _after_way_back(bed: SimBed, point: KillPoint, out: Outcome) -> list[str]:
    """What the signal did to the way back: a SIGKILL kills it; a handled one ends it with 130
    (0 once it was done), no traceback."""
    trace = bed.root / "trace-way-back"
    died = out.exit_code is not None and out.exit_code < 0
    if out.landed == "missed":
        return [] if out.exit_code == 0 else [f"no signal sent, yet exit {out.exit_code}"]
    if point.signals == "KILL":
        return [] if out.exit_code == -9 else [f"SIGKILL, yet exit {out.exit_code}"]
    if died:
        return [] if out.landed == "start-up" else [f"{point.signals} in {out.landed}: died of it ({out.exit_code})"]
    # what it left changed is the killed run's as much as its own: way_back_named checks it is named
    text = (bed.root / "run-way-back.log").read_text(errors="replace")
    done = point.way_back == "restore" or signalled_after(trace, "reported")  # nothing left to stop: 0
    broken = [] if out.exit_code == 130 or (out.exit_code == 0 and done) else [f"{point.signals}: exit {out.exit_code}"]
    return broken + [f"{point.signals}: a traceback: {text[-1500:]}"] * ("Traceback (most recent" in text)


def way_back_named(bed: SimBed, run_dir: Path) -> list[str]:
    """While a host is changed or anything of the run is left (a unit, a repro, a lock, a copy),
    `orch status` names the way back with the run's full path."""
    import json

    left = left_behind(bed)
    if not left:
        return []
    done = orch_here(bed, ["status", "--reports", str(bed.reports), "--json"])
    if done.code != 0:
        return [f"orch status: exit {done.code}: {done.output[-500:]}"]
    entry = {r["run_id"]: r for r in json.loads(done.output)["runs"]}.get("k")
    if entry is None:
        return [f"orch status does not list the run, yet {left[0]}"]
    if f"orch restore {run_dir}" in entry.get("way_back", ""):  # stale: both ways back
        return []
    if entry.get("not_restored") and str(run_dir) in entry.get("restore_with", ""):  # it exited saying so
        return []
    said = f"way back {entry.get('way_back', '')!r}, not restored {entry.get('not_restored')}"
    return [f"orch status {entry['state']!r}, {said}, yet {left[0]}"]


# ------------------------------------------------------------------ a hunt


def hunt_bed(root: Path) -> SimBed:
    return make_simbed(root, matrix=HUNT_MATRIX, env_files={"decode": HUNT_DECODE_ENV})


def hunt_args(bed: SimBed) -> list[str]:
    return [
        "hunt", str(bed.matrix), "-i", str(bed.inventory), "--out", str(bed.reports), "--run-id", "k", "--seed", "2"
    ]  # fmt: skip


@dataclass(frozen=True)
class Reference:
    """An unsignalled hunt: its trials, and per phase (starts, mean length in s) from its marks."""

    trials: tuple[Trial, ...]
    phases: dict[str, tuple[int, float]]


def trials_of(run_dir: Path) -> tuple[Trial, ...]:
    """The finished trials, by number: configuration, round, and the result (k/n, or the failure)."""
    rows = []
    for t, r in sorted(finished_records(run_dir).items()):
        m = r.metrics.get("corruption")
        rows.append((t, r.cell, r.round, r.status, f"{m.k}/{m.n}" if m is not None else ""))
    return tuple(rows)


def reference_hunt(root: Path) -> Reference:
    """The hunt run once, unsignalled, with its marks: what every signalled one must end with."""
    bed = hunt_bed(root / "reference")
    try:
        code = spawn_traced(bed, None, "k", hunt_args(bed)).wait(600)
        assert code == 0, (bed.root / "run.log").read_text(errors="replace")[-2000:]
        return Reference(trials_of(bed.run_dir("k")), phase_lengths(bed.root / "trace"))
    finally:
        cleanup_processes(bed)
        shutil.rmtree(bed.root, ignore_errors=True)


def phase_lengths(trace: Path, targets: tuple[str, ...] | None = None) -> dict[str, tuple[int, float]]:
    """phase -> (its starts, its mean length: to the next mark) over one trace, for `targets`
    (default: a hunt's)."""
    marks = [(float(t), n) for t, n in (line.split(" ", 1) for line in trace.read_text().splitlines())]
    starts, spent = Counter[str](), Counter[str]()
    for (t, name), (t_next, _) in zip(marks, marks[1:], strict=False):
        starts[name] += 1
        spent[name] += t_next - t
    return {name: (n, spent[name] / n) for name, n in starts.items() if name in (targets or HUNT_TARGETS)}


HUNT_TARGETS = ("spawn", "run-folder", "backup", "host-write", "restart", "health", "repro", "logs")
HUNT_TARGETS += ("journal", "status", "restore", "report")


def draw_hunt(
    seed: int, ref: Reference, signals: str | None = None, targets: tuple[str, ...] = HUNT_TARGETS
) -> KillPoint:
    """The point of `seed`: its target phase (of `targets`, a hunt's by default) taking turns, its
    start and delay drawn within the reference's (a hunt's, or a queue run's)."""
    rng = random.Random(seed)
    aimed = [t for t in targets if t in ref.phases]
    target = aimed[seed % len(aimed)]
    starts, length = ref.phases[target]
    drawn = signals or rng.choice(SIGNALS)
    if drawn == "INT+INT":
        drawn = f"INT+INT@{rng.uniform(0.05, 0.6):.3f}"
    return KillPoint(seed, target, rng.randint(1, starts), rng.uniform(0, length), drawn, "resume")


def run_hunt_once(root: Path, point: KillPoint, ref: Reference, keep: Path | None = None) -> Outcome:
    """The hunt signalled at `point`; status stale meanwhile (SIGKILL); `orch resume` of its folder
    finishes it with the reference's trials, hosts restored."""
    bed = hunt_bed(root / f"bed-{point.seed}")
    out = Outcome(point)
    try:
        out.exit_code = _wait(spawn_traced(bed, point, "k", hunt_args(bed)), out)
        out.landed = landed_in(bed.root / "trace")
        (bed.root / "at-kill.txt").write_text(what_is_left(bed))
        out.violations += _hunt_checks(bed, point, out, ref)
    except Exception as exc:  # a check that could not run is a finding too
        out.violations.append(f"harness error: {type(exc).__name__}: {exc}")
    return kept(bed, out, keep)


def hunt_checks(bed: SimBed, point: KillPoint, out: Outcome, ref: Reference | None) -> list[str]:
    """Every promise after a signalled hunt; without `ref`, all but ending with its trials."""
    return _hunt_checks(bed, point, out, ref)


def _hunt_checks(bed: SimBed, point: KillPoint, out: Outcome, ref: Reference | None) -> list[str]:
    run_dir = bed.run_dir("k")
    if out.landed == "missed":
        return [] if out.exit_code == 0 else [f"no signal sent, yet exit {out.exit_code}"]
    died = out.exit_code is not None and out.exit_code < 0
    broken = [] if died else check_exit(bed, point, out.exit_code, signalled_after(bed.root / "trace", "reported"))
    if not (run_dir / "run.json").exists():
        wait_for(lambda: not left_behind(bed), 15)
        return broken + [f"no run folder, yet: {p}" for p in left_behind(bed)]
    broken += _twice(run_dir) + check_status(bed, run_dir, killed=died)
    if manifest(run_dir).status == "completed":
        return broken + _same_trials(trials_of(run_dir), ref, "the signalled hunt")
    before = finished_records(run_dir)
    done = orch_here(bed, ["resume", str(run_dir)])
    if done.code != 0:
        return broken + [f"orch resume: exit {done.code}: {done.output[-800:]}"]
    after = finished_records(run_dir)
    broken += [f"trial {t} changed by the resume" for t, r in before.items() if after.get(t) != r]
    broken += _twice(run_dir) + _same_trials(trials_of(run_dir), ref, "the resumed hunt")
    wait_for(lambda: not left_behind(bed), 15)
    return broken + [f"after orch resume: {p}" for p in left_behind(bed)]


def _twice(run_dir: Path) -> list[str]:
    """No trial finished twice (a hunt's trials past its first wave are not in plan.json: no
    check_journal, whose "unplanned" would name each of them)."""
    _, _, twice = journal_tally(run_dir) if (run_dir / "journal.jsonl").exists() else (0, [], [])
    return [f"journal: trial recorded twice: {twice}"] * bool(twice)


def _same_trials(got: tuple[Trial, ...], ref: Reference | None, who: str) -> list[str]:
    if ref is None or got == ref.trials:
        return []
    differ = [f"{g} != {w}" for g, w in zip(got, ref.trials, strict=False) if g != w][:3]
    return [f"{who} ran {len(got)} trials, the reference {len(ref.trials)}: {'; '.join(differ)}"]
