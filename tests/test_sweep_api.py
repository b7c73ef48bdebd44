"""sweep.api without hosts: requests and what `prepare` makes of them, the outcomes' exit codes,
the manifest's `testbeds` and `adaptive` (also for run.json files written before them), and the
queue's sweep function driven through a stub API (no argparse anywhere)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml

from orchestrator.core.bounds import MAX_TESTBEDS
from orchestrator.core.records import RunManifest
from orchestrator.errors import ConfigError, LockError, OrchError, UsageError
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.store.planrecord import make_manifest
from orchestrator.sweep import api, apitypes
from orchestrator.sweep import prepare as prepare_module
from orchestrator.sweep.progress import QuietProgress, Tee
from orchestrator.team.livestatus import LiveStatus
from orchestrator.team.overnight import QueueSweep, item_outcome
from orchestrator.team.queue import QueueItem

REPO = Path(__file__).resolve().parent.parent
ABLATION = REPO / "matrices/overlap_ablation.yaml"
HUNT = REPO / "matrices/overlap_hunt.yaml"
LOCAL = REPO / "inventory/local.yaml"


def two_testbeds(tmp_path: Path, *, other_roles: bool = False, same_files: bool = False) -> Path:
    """The bundled inventory with a copy of its testbed named "copy" (or a copy missing a role),
    whose hosts have env files of their own (or, same_files, the first testbed's)."""
    shutil.copytree(REPO / "inventory/local", tmp_path / "local")
    data = yaml.safe_load(LOCAL.read_text())
    (first,) = data["testbeds"].values()
    copy = json.loads(json.dumps(first))
    if other_roles:
        del copy["hosts"]["router"]
    for host in copy["hosts"].values() if not same_files else ():
        own = host["env_file"].replace("local/", "local/copy-")
        shutil.copy(tmp_path / host["env_file"], tmp_path / own)
        host["env_file"] = own
    copy["state_dir"] = ".orch/copy"  # its pid files and logs apart from the first one's
    data["testbeds"]["copy"] = copy
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def outcome(**changes: object) -> api.SweepOutcome:
    base = api.SweepOutcome(Path("r"), "r", "completed", completed=2, failed=0, planned=2)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- requests
def test_testbed_specs_as_typed() -> None:
    assert apitypes.testbeds_from_spec(None) is None
    assert apitypes.testbeds_from_spec("all") == "all"
    assert apitypes.testbeds_from_spec("a") == ("a",)
    assert apitypes.testbeds_from_spec(" a, b ,") == ("a", "b")
    with pytest.raises(UsageError, match="testbed listed twice in -t a,a"):
        apitypes.testbeds_from_spec("a,a")
    with pytest.raises(UsageError, match="no testbed named"):
        apitypes.testbeds_from_spec(",")


def test_a_request_refuses_sizes_below_one() -> None:
    with pytest.raises(UsageError, match="replicates: 0 is not >= 1"):
        api.SweepRequest(ABLATION, LOCAL, replicates=0)
    with pytest.raises(UsageError, match="retries: -1 is not >= 0"):
        api.SweepRequest(ABLATION, LOCAL, retries=-1)


def test_prepare_plans_on_the_first_testbed_by_default() -> None:
    prepared = api.prepare(api.SweepRequest(ABLATION, LOCAL, replicates=2, seed=1))
    assert [tb.name for tb in prepared.testbeds] == ["local-sim"]
    assert prepared.plan.testbed.name == "local-sim" and prepared.plan.seed == 1
    assert len(prepared.plan.steps) == 2 * len(prepared.plan.cells) and prepared.warnings == ()


def test_prepare_shows_its_warnings_through_warn_when_given() -> None:
    big = api.SweepRequest(ABLATION, LOCAL, replicates=2_000, seed=1)  # 16,000 trials: over WARN_TRIALS
    shown: list[str] = []
    prepared = api.prepare(big, warn=shown.append)
    assert len(prepared.warnings) == 1 and "16,000 trials" in prepared.warnings[0]
    assert shown == list(prepared.warnings)
    assert api.prepare(big).warnings == prepared.warnings  # without warn: in the result only


def test_prepare_selects_several_testbeds(tmp_path: Path) -> None:
    inventory = two_testbeds(tmp_path)
    every = api.prepare(api.SweepRequest(ABLATION, inventory, testbeds="all"))
    assert [tb.name for tb in every.testbeds] == ["local-sim", "copy"]
    assert every.plan.testbed.name == "local-sim"  # the plan is made for the first one
    one = api.prepare(api.SweepRequest(ABLATION, inventory, testbeds=("copy",)))
    assert [tb.name for tb in one.testbeds] == ["copy"] and one.plan.testbed.name == "copy"
    with pytest.raises(OrchError, match="no testbed named 'nope'"):
        api.prepare(api.SweepRequest(ABLATION, inventory, testbeds=("copy", "nope")))


def test_prepare_refuses_testbeds_with_other_roles(tmp_path: Path) -> None:
    inventory = two_testbeds(tmp_path, other_roles=True)
    with pytest.raises(ConfigError, match="testbeds 'local-sim' and 'copy' have different roles") as err:
        api.prepare(api.SweepRequest(ABLATION, inventory, testbeds="all"))
    lines = inventory.read_text().splitlines()
    assert err.value.line is not None and lines[err.value.line - 1].strip() == "copy:"  # the file's line
    assert str(err.value).startswith(f"{inventory}:{err.value.line}: testbeds.copy: ")


def test_prepare_refuses_parallel_testbeds_that_edit_one_env_file(tmp_path: Path) -> None:
    inventory = two_testbeds(tmp_path, same_files=True)  # a copied testbed whose files were not changed
    shared = r"inventory\.yaml:\d+: local-sim/prefill and copy/prefill name the same env file local:"
    with pytest.raises(ConfigError, match=shared) as err:
        api.prepare(api.SweepRequest(ABLATION, inventory, testbeds="all"))
    lines = inventory.read_text().splitlines()
    assert err.value.line is not None and lines[err.value.line - 1].strip() == "prefill:"  # the copy's host
    assert err.value.line > next(i for i, text in enumerate(lines, 1) if text.strip() == "copy:")
    alone = api.prepare(api.SweepRequest(ABLATION, inventory, testbeds=("copy",)))
    assert [tb.name for tb in alone.testbeds] == ["copy"]  # one at a time, each is fine


def test_prepare_refuses_parallel_testbeds_that_keep_local_units_in_one_state_dir(tmp_path: Path) -> None:
    """A copy of local.yaml's testbed with its own env files (the eighth new-user walk) but its
    `state_dir: .orch/local-sim` kept: both testbeds' sim-prefill had one pid file and one mark, so
    either's restart could stop the other's server. Refused at the copy, before any host is touched."""
    inventory = two_testbeds(tmp_path)
    data = yaml.safe_load(inventory.read_text())
    data["testbeds"]["copy"]["state_dir"] = data["testbeds"]["local-sim"]["state_dir"]
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError) as err:
        api.prepare(api.SweepRequest(ABLATION, inventory, testbeds="all"))
    lines = inventory.read_text().splitlines()
    assert err.value.exit_code == 2 and err.value.line is not None and lines[err.value.line - 1].strip() == "copy:"
    said = str(err.value)
    assert said.startswith(f"{inventory}:{err.value.line}: testbeds.copy.state_dir: testbeds 'local-sim' and 'copy'")
    assert f"keep local unit 'sim-prefill' in state_dir {(tmp_path / '.orch/local-sim').resolve()} " in said
    assert said.endswith("(give each testbed its own state_dir)")
    alone = api.prepare(api.SweepRequest(ABLATION, inventory, testbeds=("copy",)))
    assert [tb.name for tb in alone.testbeds] == ["copy"]  # one at a time, each is fine


def test_prepare_refuses_more_testbeds_than_one_run_uses_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing bounded the testbeds of a run: `-t all` on an inventory of 9,000 local testbeds ran,
    connecting, locking and backing each up before the first trial, a runner thread each (100
    testbeds: 97 threads, 44 s for 2 trials). Over MAX_TESTBEDS it is refused at the first
    testbed over the bound, in the inventory, before any host is touched (prepare touches none).
    (The bound lowered to 3 here: 257 testbeds read and checked three times take seconds.)"""
    assert 16 <= MAX_TESTBEDS <= 1024  # a large cluster's testbeds fit; thousands of threads do not
    cap = 3
    monkeypatch.setattr(prepare_module, "MAX_TESTBEDS", cap, raising=False)
    data = yaml.safe_load(LOCAL.read_text())
    (first,) = data["testbeds"].values()
    for i in range(1, cap + 1):  # one more than a run may use
        copy = json.loads(json.dumps(first))
        for host in copy["hosts"].values():
            host["env_file"] = host["env_file"].replace("local/", f"local/copy{i}-")
        copy["state_dir"] = f".orch/copy{i}"
        data["testbeds"][f"copy{i}"] = copy
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    lines = inventory.read_text().splitlines()
    names = tuple(data["testbeds"])
    for selection in ("all", names):
        with pytest.raises(ConfigError) as err:
            api.prepare(api.SweepRequest(ABLATION, inventory, testbeds=selection))
        assert err.value.exit_code == 2 and err.value.line is not None
        assert lines[err.value.line - 1].strip() == f"copy{cap}:"  # the first one over
        assert str(err.value).startswith(f"{inventory}:{err.value.line}: testbeds.copy{cap}: ")
        assert f"picks {cap + 1} testbeds, more than the {cap} one run uses at once" in str(err.value)
    at_most = api.prepare(api.SweepRequest(ABLATION, inventory, testbeds=names[:cap]))
    assert len(at_most.testbeds) == cap


def test_prepare_names_a_missing_inventory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="inventory .*nowhere.yaml not found"):
        api.prepare(api.SweepRequest(ABLATION, tmp_path / "nowhere.yaml"))


# ---------------------------------------------------------------------------- outcomes
def test_sweep_exit_codes() -> None:
    assert outcome().exit_code == 0
    assert outcome(status="failed", completed=1, failed=1).exit_code == 1
    assert outcome(not_restored=("decode",)).exit_code == 1  # the trials were fine, the hosts are not
    assert outcome(status="interrupted", interrupted=True, failed=1).exit_code == 130


def test_restore_exit_codes() -> None:
    done = api.TestbedRestore("a", ("prefill",), backed_up=True)
    nothing = api.TestbedRestore("b", ("prefill",), backed_up=False)
    left = api.TestbedRestore("c", ("prefill",), backed_up=True, not_restored=("prefill",))
    assert api.RestoreOutcome(Path("r"), "r", (done, nothing)).exit_code == 0
    assert api.RestoreOutcome(Path("r"), "r", (done, left)).exit_code == 1


# ---------------------------------------------------------------------------- the manifest
def test_the_manifest_states_testbeds_and_adaptive(tmp_path: Path) -> None:
    prepared = api.prepare(api.SweepRequest(ABLATION, two_testbeds(tmp_path), testbeds="all"))
    names = [tb.name for tb in prepared.testbeds]
    parallel = make_manifest(prepared.plan, prepared.inventory, "r1", "2026-01-01T00:00:00.000+00:00", names)
    assert (parallel.testbeds, parallel.testbed, parallel.adaptive) == (["local-sim", "copy"], "local-sim,copy", False)
    hunt = api.prepare(api.SweepRequest(HUNT, LOCAL))
    one = make_manifest(hunt.plan, hunt.inventory, "r2", "2026-01-01T00:00:00.000+00:00")
    assert (one.testbeds, one.testbed, one.adaptive) == (["local-sim"], "local-sim", True)
    (tmp_path / "r1").mkdir()
    save_manifest(tmp_path / "r1", parallel)
    assert load_manifest(tmp_path / "r1", plan=False).testbeds == ["local-sim", "copy"]


@pytest.mark.parametrize(
    ("testbed", "text", "testbeds", "adaptive"),
    [
        ("a,b", "adaptive:\n  metric: corruption\n", ["a", "b"], True),
        ("local-sim", "factors: {}\n", ["local-sim"], False),
    ],
)
def test_a_run_json_from_before_the_fields_still_loads(
    tmp_path: Path, testbed: str, text: str, testbeds: list[str], adaptive: bool
) -> None:
    prepared = api.prepare(api.SweepRequest(ABLATION, LOCAL))
    manifest = make_manifest(prepared.plan, prepared.inventory, "old", "2026-01-01T00:00:00.000+00:00")
    data = json.loads(manifest.model_dump_json())
    del data["testbeds"], data["adaptive"]
    data |= {"testbed": testbed, "matrix_text": text}
    (tmp_path / "run.json").write_text(json.dumps(data))
    loaded = load_manifest(tmp_path)
    assert (loaded.testbeds, loaded.adaptive, loaded.testbed) == (testbeds, adaptive, testbed)
    assert RunManifest.model_validate_json(loaded.model_dump_json()) == loaded  # written back as stated


# ---------------------------------------------------------------------------- the queue's sweep
class StubApi:
    """sweep.api as the queue sees it: prepare is real (no hosts), run and resume are recorded."""

    def __init__(self, result: api.SweepOutcome | Exception) -> None:
        self.result = result
        self.calls: list[tuple[str, object]] = []
        self.sinks: list[object] = []

    def prepare(self, request: api.SweepRequest, *, warn: api.Warn | None = None) -> api.PreparedSweep:
        return api.prepare(request, warn=warn)

    def run(
        self,
        request: api.SweepRequest,
        progress: api.ProgressFor,
        *,
        warn: api.Warn,
        prepared: api.PreparedSweep | None = None,
    ) -> api.SweepOutcome:
        self.calls.append(("run", request))
        return self._result(request.reports_dir / (request.run_id or ""), progress, api.Started("", Path(), (), 2, 2))

    def resume(self, request: api.ResumeRequest, progress: api.ProgressFor, *, warn: api.Warn) -> api.SweepOutcome:
        self.calls.append(("resume", request))  # a resume of a run 1 of whose 2 trials ran
        return self._result(request.run_dir, progress, api.Started("", Path(), (), 2, 1, resumed=True))

    def _result(self, run_dir: Path, progress: api.ProgressFor, started: api.Started) -> api.SweepOutcome:
        self.sinks.append(
            progress(dataclasses.replace(started, run_id=run_dir.name, run_dir=run_dir, testbeds=("local-sim",)))
        )
        if isinstance(self.result, Exception):
            raise self.result
        return dataclasses.replace(self.result, run_dir=run_dir)


def item(tmp_path: Path, run_dir: Path | None = None, testbed: str | None = None) -> QueueItem:
    return QueueItem(
        7, str(ABLATION), str(LOCAL), testbed, 0, (), "running", "t0", "t0", str(run_dir) if run_dir else None, None, ""
    )


def queue_sweep(tmp_path: Path, stub: StubApi, shown: list[object]) -> QueueSweep:
    return QueueSweep(
        tmp_path,
        terminal=lambda started: (shown.append(started), QuietProgress())[1],  # type: ignore[func-returns-value]
        show=shown.append,
        note=shown.append,
        error=lambda i, m: shown.append(("error", i.id, m)),
        warn=shown.append,
        sweeps=stub,
    )


def test_the_queue_starts_a_new_item_through_the_api(tmp_path: Path) -> None:
    stub, shown, recorded = StubApi(outcome()), [], []  # type: ignore[var-annotated]
    result = queue_sweep(tmp_path, stub, shown)(item(tmp_path, testbed="local-sim"), 99.0, recorded.append)
    ((kind, request),) = stub.calls
    assert kind == "run" and isinstance(request, api.SweepRequest)
    assert request.run_id is not None and request.run_id.endswith("-overlap_ablation-q7")
    assert (request.reports_dir, request.deadline, request.testbeds) == (tmp_path, 99.0, ("local-sim",))
    assert recorded == [tmp_path / request.run_id]  # before the sweep started
    assert (result.status, result.exit_code, result.run_dir) == ("completed", 0, tmp_path / request.run_id)
    assert result.message == "2/2 trials, 0 failed"
    (sink,) = stub.sinks
    assert isinstance(sink, Tee) and any(isinstance(s, LiveStatus) for s in sink.sinks)  # status.json too
    finished = [s for s in shown if isinstance(s, api.SweepOutcome)]
    assert finished == [dataclasses.replace(stub.result, run_dir=tmp_path / request.run_id)]  # shown once, at the end
    assert shown[-1] is finished[0]
    assert shown[0] == "queue: item 7 (overlap_ablation.yaml): starting" and shown[-1].run_dir == result.run_dir


def test_the_queue_resumes_an_item_cut_short(tmp_path: Path) -> None:
    run_dir = tmp_path / "earlier"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{}")  # what makes it resumable
    cut = outcome(status="interrupted", interrupted=True, completed=1)
    stub, shown = StubApi(cut), []  # type: ignore[var-annotated]
    result = queue_sweep(tmp_path, stub, shown)(item(tmp_path, run_dir), None, lambda d: None)
    assert stub.calls == [("resume", api.ResumeRequest(run_dir, deadline=None))]
    assert (result.status, result.exit_code, result.message) == (
        "interrupted",
        130,
        "interrupted after 1/2 trials, 0 failed; resumable",
    )
    assert shown[0] == "queue: item 7 (overlap_ablation.yaml): resuming"


def test_the_queue_maps_errors_and_locks(tmp_path: Path) -> None:
    shown: list[object] = []
    locked = queue_sweep(tmp_path, StubApi(LockError("testbed busy")), shown)(item(tmp_path), None, lambda d: None)
    assert (locked.status, locked.exit_code, locked.run_dir) == ("locked", 2, None)
    failed = queue_sweep(tmp_path, StubApi(OrchError("no host")), shown)(item(tmp_path), None, lambda d: None)
    assert (failed.status, failed.exit_code, failed.message) == ("error", 1, "no host")
    assert failed.run_dir is not None and failed.run_dir.parent == tmp_path  # the run dir it had recorded
    assert ("error", 7, "no host") in shown


def test_item_outcomes() -> None:
    assert item_outcome(outcome(status="failed", completed=1, failed=1), None).status == "failed"
    unrestored = item_outcome(outcome(not_restored=("decode",)), None)
    assert (unrestored.status, unrestored.exit_code) == ("failed", 1)
    assert unrestored.message.endswith("trials, 0 failed; NOT restored: decode; finish with: orch restore r")
    cut = item_outcome(outcome(status="interrupted", interrupted=True, not_restored=("prefill", "decode")), None)
    assert cut.message.endswith("; resumable; NOT restored: prefill, decode; finish with: orch restore r")
    broken = item_outcome(outcome(status="failed", failed=1, not_restored=("decode",)), None)
    assert broken.message.endswith("1 failed; NOT restored: decode; finish with: orch restore r")
    odd = item_outcome(outcome(gates_failed=("g @ c: high",)), None)  # completed, all restored, yet not 0
    assert odd.message.endswith("exit code 3: see the log")
    late = item_outcome(outcome(status="interrupted", interrupted=True), 10.0, clock=lambda: 11.0)
    assert late.message == "deadline reached after 2/2 trials, 0 failed; resumable"
