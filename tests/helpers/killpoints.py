"""The kill-point harness: one `orch run` on a private simulated testbed, signalled (SIGKILL,
SIGTERM, or SIGINT twice) at a seeded random moment inside a chosen phase, then the way back a
user has (`orch status`, then `orch restore RUN_DIR` or `orch resume RUN_DIR`), with every
promise checked after every kill:

- the journal stays readable: no trial recorded twice, no trial outside the plan;
- `orch status` and the runs index call a killed run `stale`, and status names both ways back with
  the run's full path; a run that exited on its own is not stale, and any host it says it left
  (`not_restored`) is one whose env file really differs;
- a handled SIGTERM or SIGINT (twice) exits 130 (0 if it had finished) with every host restored,
  unless `not_restored` names it;
- `orch restore RUN_DIR`: every env file byte-identical to before the run, no process of the run
  (its units, by the pid files the simulator wrote, and its repro) alive, no lock or copy left;
- `orch resume RUN_DIR`: exit 0, every planned trial exactly once (journal and summary.json's
  counts), each trial finished before the kill unchanged (same record, same values in the
  report's series), the hosts restored at its end.

The controller runs under helpers.killtrace (phase marks, the signal sent from inside at the
chosen moment); the phase a kill landed in is the last mark before it. bench/bench_kill_points.py
runs N of these and prints the tally per phase; tests/faults/test_kill_points_sim.py runs a few.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from faults.helpers import (
    PYTHON,
    SimBed,
    cleanup_processes,
    journal_tally,
    leftovers,
    make_simbed,
    manifest,
    matrix_yaml,
    orch_env,
    orch_here,
    trial_records,
    wait_for,
)

from orchestrator.core.records import TrialRecord

TESTS = Path(__file__).resolve().parents[1]

# phase -> (how many times it starts in a run of 8 trials, its usual length in s on the sim):
# the delay after the chosen start is drawn in [0, length], so kills spread over the whole phase
PHASES: dict[str, tuple[int, float]] = {
    "spawn": (1, 3.5),  # interpreter, imports, plan, connect: before the backup
    "run-folder": (1, 0.8),  # the run folder made, the testbed locked, the index written: before the backup
    "index": (1, 0.4),  # the runs index written as the run starts (before the backup)
    "backup": (1, 0.15),
    "host-write": (14, 0.0),  # a file written on a host: copies, units' records, env files, originals back
    "restart": (8, 0.12),
    "health": (8, 0.45),
    "repro": (8, 0.5),
    "logs": (8, 0.05),
    "journal": (8, 0.03),
    "restore": (1, 0.12),
    "report": (1, 1.3),
    "status": (12, 0.005),  # status.json written (the run's start, each trial, the restore's end)
}
# the mark a kill lands after -> the phase it landed in
LANDED = {
    "spawn": "start-up",
    "run-dir": "start-up",
    "backed-up": "start-up",
    "env-write": "restart",  # a cell's one file is written by its restart (write_then_run)
    "env-written": "restart",
    "restarted": "health",
    "verify": "verify",
    "checks": "logs/metrics",
    "logs": "logs/metrics",
    "next-trial": "journal",
    "restored": "report",
    "reported": "report",
}
SIGNALS = ("KILL", "KILL", "KILL", "TERM", "INT+INT")


@dataclass(frozen=True)
class KillPoint:
    """Where and how one iteration signals its controller, all drawn from `seed`."""

    seed: int
    target: str
    nth: int
    delay: float
    signals: str
    way_back: str  # "restore" or "resume"

    @classmethod
    def draw(cls, seed: int, target: str | None = None, signals: str | None = None) -> KillPoint:
        """The point of `seed`; `signals` (e.g. "TERM") replaces the drawn signal, nothing else."""
        rng = random.Random(seed)
        target = target or rng.choice(list(PHASES))
        starts, length = PHASES[target]
        signals = (rng.choice(SIGNALS), signals)[signals is not None]
        if signals == "INT+INT":
            signals = f"INT+INT@{rng.uniform(0.05, 0.6):.3f}"
        nth, delay = rng.randint(1, starts), rng.uniform(0, length)
        return cls(seed, target, nth, delay, signals, rng.choice(("restore", "resume")))

    @property
    def at(self) -> str:
        return f"{self.target}:{self.nth}:{self.delay:.5f}:{self.signals}"


@dataclass
class Outcome:
    point: KillPoint
    landed: str = "missed"  # the phase the first signal landed in; "missed" if the run ended first
    exit_code: int | None = None
    violations: list[str] = field(default_factory=list)
    kept: Path | None = None  # the bed folder, kept when a promise broke


def went_on(trace: Path) -> list[str]:
    """The work a handled signal did not stop: a trial's env files written, or its repro started,
    after the first signal (the one running when it landed is cut short, never followed by
    another: a new trial is a SIGTERM swallowed, and the restore it owes comes only after)."""
    names = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    signal_at = next((i for i, n in enumerate(names) if n.startswith("signal ")), None)
    if signal_at is None:
        return []
    return [n for n in names[signal_at + 1 :] if n in ("env-write", "repro")]


def signalled_after(trace: Path, name: str) -> bool:
    """True if the mark `name` came before the first signal."""
    names = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    firsts = [i for i, n in enumerate(names) if n.startswith("signal ")]
    return bool(firsts) and name in names[: firsts[0]]


def landed_in(trace: Path) -> str:
    """The phase of the last mark before the first signal, or "missed". A kill inside a host
    file's write (its temp file made, not yet renamed) is `write:PHASE`, PHASE the one writing;
    one inside a status.json write is `status` (once written, the phase it was written in)."""
    last, phase = "spawn", "spawn"
    for line in trace.read_text().splitlines():
        name = line.split(" ", 1)[1]
        if name.startswith("signal "):
            where = "status" if last == "status" else LANDED.get(phase, phase)
            return f"write:{where}" if last == "host-write" else where
        last = name
        phase = phase if name.startswith(("host-writ", "status")) else name
    return "missed"


def spawn_traced(
    bed: SimBed, point: KillPoint | None, run_id: str, args: list[str] | None = None, name: str = ""
) -> subprocess.Popen[bytes]:
    """`orch ARGS` (default: `orch run` of the bed) under helpers.killtrace, signalled at `point`
    (none: marks only); its marks in `trace{name}`, its output in `run{name}.log`."""
    env = {
        **orch_env(),
        "ORCH_KILLTRACE_FILE": str(bed.root / f"trace{name}"),
        "PYTHONPATH": str(TESTS),
    }
    if point is not None:
        env["ORCH_KILLTRACE_AT"] = point.at
    with open(bed.root / f"run{name}.log", "wb") as out:
        return subprocess.Popen(
            [PYTHON, "-m", "helpers.killtrace", *(args or bed.run_args(run_id))],
            cwd=bed.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_as_in_a_terminal,
        )


def _as_in_a_terminal() -> None:
    """SIGINT handled, as in a foreground command: a harness started in the background (`cmd &`)
    ignores it, and orch keeps a SIGINT ignored (a background sweep), so Ctrl-C would test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_once(root: Path, point: KillPoint, keep: Path | None = None, replicates: int = 2) -> Outcome:
    """One kill point on a fresh bed under `root`; the bed is removed unless a promise broke (then
    it is moved under `keep`, when given)."""
    bed = make_simbed(root / f"bed-{point.seed}", matrix=matrix_yaml(replicates=replicates))
    out = Outcome(point)
    try:
        proc = spawn_traced(bed, point, "k")
        try:
            out.exit_code = proc.wait(180)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            out.violations.append("the signalled controller did not exit within 180 s")
        out.landed = landed_in(bed.root / "trace")
        if point.signals != "KILL" and (more := went_on(bed.root / "trace")):
            out.violations.append(f"{point.signals} swallowed: the sweep went on ({', '.join(more)})")
        (bed.root / "at-kill.txt").write_text(what_is_left(bed))
        out.violations += check_all(bed, point, out)
    except Exception as exc:  # a check that could not even run is a finding too, not a lost iteration
        out.violations.append(f"harness error: {type(exc).__name__}: {exc}")
    return kept(bed, out, keep)


def kept(bed: SimBed, out: Outcome, keep: Path | None) -> Outcome:
    """Stop what is left of the bed; keep its folder when a promise broke, else remove it."""
    cleanup_processes(bed)
    if out.violations and keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        out.kept = keep / bed.root.name
        shutil.rmtree(out.kept, ignore_errors=True)
        shutil.move(str(bed.root), out.kept)
    else:
        shutil.rmtree(bed.root, ignore_errors=True)
    return out


def what_is_left(bed: SimBed) -> str:
    """Every file of the bed (hosts' files and the run folder) with its size, and the env files'
    bytes, as the signalled controller left them: kept with a broken promise, to find its cause."""
    files = sorted(p for p in bed.root.rglob("*") if p.is_file() and "state" not in p.parts)
    lines = [f"{p.stat().st_size:8d} {p.relative_to(bed.root)}" for p in files]
    return "\n".join(lines + [f"{role}.env: {bed.env_file(role).read_bytes()!r}" for role in bed.originals]) + "\n"


def check_all(bed: SimBed, point: KillPoint, out: Outcome) -> list[str]:
    """Every promise, in the order a user meets them: what the signal left, what status says, then
    the way back."""
    run_dir = bed.run_dir("k")
    if out.landed == "missed":
        return [] if out.exit_code == 0 else [f"no signal sent, yet exit {out.exit_code}"]
    # a SIGTERM or SIGINT before orch's handlers are in (the interpreter starting, the imports)
    # ends the process as a SIGKILL would: the same way back must then work
    died = out.exit_code is not None and out.exit_code < 0
    if died and point.signals != "KILL" and out.landed != "start-up":
        return [f"{point.signals} in {out.landed}: the controller died of it (exit {out.exit_code})"]
    reported = signalled_after(bed.root / "trace", "reported")  # the report was written: 0 is its exit
    broken = [] if died else check_exit(bed, point, out.exit_code, reported)
    if point.signals == "KILL" and out.exit_code != -9:
        broken.append(f"SIGKILL, yet exit {out.exit_code}")
    if not (run_dir / "run.json").exists():  # killed before the run folder: nothing may have changed
        wait_for(lambda: not left_behind(bed), 15)
        return broken + [f"no run folder, yet: {p}" for p in left_behind(bed)]
    before = finished_records(run_dir)
    broken += check_journal(run_dir)
    broken += check_status(bed, run_dir, killed=died)
    if point.way_back == "restore":
        return broken + check_restore(bed, run_dir)
    return broken + check_resume(bed, run_dir, before)


def check_exit(
    bed: SimBed, point: KillPoint, code: int | None, reported: bool, name: str = "", run_id: str = "k"
) -> list[str]:
    """SIGTERM or SIGINT handled: exit 130 (0 only once the report was written: nothing was left
    to stop) with hosts restored but those status.json (of the run `run_id`) names as not restored."""
    text = (bed.root / f"run{name}.log").read_text(errors="replace")
    broken = [] if code in (130, None) or (code == 0 and reported) else [f"{point.signals}: exit {code}"]
    if "Traceback (most recent call last)" in text:
        broken.append(f"{point.signals}: a traceback: {text[-1500:]}")
    left = set(not_restored(bed, run_id))
    wait_for(lambda: not unexplained(bed, left), 15)
    broken += [f"{point.signals}, exit {code}, not named: {p}" for p in unexplained(bed, left)]
    return broken


def left_behind(bed: SimBed) -> list[str]:
    """faults.helpers.leftovers, and the hidden temp files of a host write (`.NAME.orch-XXXX`) a
    kill cut off between its creation and its rename."""
    return leftovers(bed) + [f"temp file left: {p.name}" for p in bed.root.glob(".*.orch-*")]


def unexplained(bed: SimBed, left: set[str]) -> list[str]:
    """What a run that exited on its own left that it did not own up to: anything at all, when it
    says every host was restored."""
    return [] if left else left_behind(bed)


def not_restored(bed: SimBed, run_id: str = "k") -> list[str]:
    path = bed.run_dir(run_id) / "status.json"
    return list(json.loads(path.read_text()).get("not_restored", [])) if path.exists() else []


def finished_records(run_dir: Path) -> dict[int, TrialRecord]:
    """The record standing for each trial finished so far (its last completed or failed one that
    was not retried)."""
    if not (run_dir / "journal.jsonl").exists():
        return {}
    return {r.trial: r for r in trial_records(run_dir) if r.status in ("completed", "failed") and not r.retried}


def check_journal(run_dir: Path) -> list[str]:
    if not (run_dir / "journal.jsonl").exists():
        return []
    planned, _, twice = journal_tally(run_dir)
    extra = [t for t in finished_records(run_dir) if t >= planned]
    return [f"journal: trial recorded twice: {twice}"] * bool(twice) + [f"journal: unplanned {extra}"] * bool(extra)


def check_status(bed: SimBed, run_dir: Path, *, killed: bool) -> list[str]:
    """`orch status --json`: a killed run is stale and names both ways back; a run that exited on
    its own is not stale, and names as not restored only hosts whose env file really changed."""
    done = orch_here(bed, ["status", "--reports", str(bed.reports), "--json"])
    if done.code != 0:
        return [f"orch status: exit {done.code}: {done.output[-500:]}"]
    runs = {r["run_id"]: r for r in json.loads(done.output)["runs"]}
    entry = runs.get(run_dir.name)
    if manifest(run_dir).status != "running":  # it ended and said so (or was killed after that)
        entry = entry or {"state": "ended"}
    elif entry is None:
        return ["orch status: a run not finished is not listed"]
    if killed and manifest(run_dir).status == "running":
        way = entry.get("way_back", "")
        ok = entry["state"] == "stale" and f"orch resume {run_dir}" in way and f"orch restore {run_dir}" in way
        broken = [] if ok else [f"orch status after SIGKILL: {entry['state']!r}, {way!r}"]
        index = index_state(bed, run_dir.name)
        return broken + [f"the runs index says {index!r} of a killed run"] * (index != "stale")
    broken = [f"orch status: a run that exited is {entry['state']!r}"] * (entry["state"] == "stale")
    changed = {role for role, data in bed.originals.items() if bed.env_file(role).read_bytes() != data}
    named = set(not_restored(bed, run_dir.name))
    return broken + [f"not_restored {sorted(named)} but changed env files {sorted(changed)}"] * (not changed <= named)


def index_state(bed: SimBed, run_id: str = "k") -> str:
    """The run's state on the runs index (reports/index.html and `orch serve`'s /)."""
    from orchestrator.report.render import fresh_summary
    from orchestrator.report.site import run_entries

    return next((e.status for e in run_entries(bed.reports, fresh_summary) if e.run_id == run_id), "not listed")


def check_restore(bed: SimBed, run_dir: Path) -> list[str]:
    done = orch_here(bed, ["restore", str(run_dir)])
    broken = [] if done.code == 0 else [f"orch restore: exit {done.code}: {done.output[-800:]}"]
    wait_for(lambda: not left_behind(bed), 15)
    broken += [f"after orch restore: {p}" for p in left_behind(bed)]
    named = not_restored(bed, run_dir.name)
    return broken + [f"after orch restore, status.json not_restored {named}"] * bool(named)


def check_resume(bed: SimBed, run_dir: Path, before: dict[int, TrialRecord]) -> list[str]:
    done = orch_here(bed, ["resume", str(run_dir)])
    if done.code != 0:
        return [f"orch resume: exit {done.code}: {done.output[-800:]}"]
    planned, lost, twice = journal_tally(run_dir)
    broken = [f"after resume: lost {lost}"] * bool(lost) + [f"after resume: twice {twice}"] * bool(twice)
    after = finished_records(run_dir)
    broken += [f"trial {t} changed by the resume" for t, r in before.items() if after.get(t) != r]
    broken += check_summary(run_dir, planned, after)
    wait_for(lambda: not left_behind(bed), 15)
    return broken + [f"after orch resume: {p}" for p in left_behind(bed)]


def check_summary(run_dir: Path, planned: int, records: dict[int, TrialRecord]) -> list[str]:
    """summary.json counts every planned trial once, and its series hold exactly the journaled
    values of the completed trials, cell by cell."""
    summary = json.loads((run_dir / "summary.json").read_text())
    broken = []
    if (summary["planned"], summary["completed"] + summary["failed"]) != (planned, planned):
        broken.append(f"summary counts {summary['planned']}/{summary['completed']}+{summary['failed']} != {planned}")
    for s in summary["series"]:
        done = [r.metrics[s["metric"]] for r in records.values() if r.cell == s["cell"] and r.status == "completed"]
        want = sorted([m.k, m.n] for m in done) if s["kind"] == "proportion" else sorted(m.value for m in done)
        got = sorted(s["trials"]) if s["kind"] == "proportion" else sorted(s["values"])
        if got != want:
            broken.append(f"summary {s['cell']} {s['metric']}: {got} != journal {want}")
    return broken
