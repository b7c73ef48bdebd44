"""run.json kept current while a session runs, not only written at its end.

A controller killed with -9 (or a power cut) never reaches the end, and what run.json says then is
all `orch status`, `orch restore`, `orch resume` and `orch compare` have: that the run (or its
resume) is running, who resumed it, and what its hosts run. So each is written as soon as it is
known. The end (sweep.api._finish) still writes the whole manifest, from the one the session began
with: what is written here never changes what a finished run records."""

from __future__ import annotations

import threading
from pathlib import Path

from orchestrator.core.hostfacts import Facts, recorded_hosts
from orchestrator.core.records import RunManifest
from orchestrator.core.redact import Redactor
from orchestrator.edges.provenance import describe_controller
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.sweep.progress import QuietProgress


class HostsOnDisk:
    """Records in run.json what a session's hosts run (exec_start, server info, GPUs, the env
    files' digests: core.hostfacts) as each testbed's are first described, not only at the run's
    end. Why: a run killed with -9 had none recorded, so `orch compare` said every fact "differed:
    not recorded" and its resume compared its hosts with nothing (a server upgraded between the
    kill and the resume went unsaid). Only facts not recorded yet are added: a change from an
    earlier session is recorded at the end, with the trials it ran (core.hostfacts.recorded_hosts,
    from the manifest as the session began: the same as without this). Parallel testbeds' runner
    threads call it one at a time (sweep.runner.Runner._hosts_found says a run.json it cannot write)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.found: dict[str, Facts] = {}
        self.lock = threading.Lock()

    def __call__(self, testbed: str, facts: Facts) -> None:
        with self.lock:
            self.found[testbed] = facts
            manifest = load_manifest(self.run_dir, plan=False)
            update = recorded_hosts(manifest, self.found, len(manifest.resumed_by))
            update["hosts_changed"] = manifest.hosts_changed  # recorded at the end, with its trials
            save_manifest(self.run_dir, manifest.model_copy(update=update))


class ResumeRecord:
    """run.json as a resume writes it: the run's manifest with this resume's controller added to
    resumed_by (described once, when first needed), marked running as the runner starts."""

    def __init__(self, run_dir: Path, before: RunManifest, redactor: Redactor) -> None:
        self.run_dir, self.before, self.redactor = run_dir, before, redactor
        self._mine: RunManifest | None = None

    def manifest(self) -> RunManifest:
        if self._mine is None:
            me = describe_controller(self.redactor)  # who resumed it, with what
            self._mine = self.before.model_copy(update={"resumed_by": [*self.before.resumed_by, me]})
        return self._mine

    def mark_running(self) -> None:
        save_manifest(self.run_dir, self.manifest().model_copy(update={"status": "running", "ended": None}))


class RunningMark(QuietProgress):
    """The progress sink (beside the resume's own, sweep.progress.Tee) that marks the run running
    in run.json (no end yet, this resume in resumed_by) as the runner starts it: after its checks,
    before it touches a host, when status.json first names this controller. Why: run.json said
    `interrupted` from the stop before, so a resume killed with kill -9 (hosts on a cell's flags,
    testbeds locked) was listed `interrupted`, not `stale` with the way back (store.liveness judges
    a dead controller only for a running run), its `orch restore` kept the earlier end time, and
    resumed_by never named it."""

    def __init__(self, record: ResumeRecord) -> None:
        self.record = record

    def start(self, total: int, done: int) -> None:
        self.record.mark_running()
