"""Roles of several hosts (issue 14), on the fakes: one multi-node instance (every node edited and
restarted together, node rank 0's health is the instance's, a dying rank fails the wait) and
several instances of a role (each edited, verified and awaited); backup and restore per host."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fakes import FakeServiceManager, make_matrix, remote_repro
from helpers.multibed import MultiBed, multi_bed

from orchestrator.core.config import read_inventory
from orchestrator.core.plan import make_plan
from orchestrator.errors import ConfigError
from orchestrator.sweep import phases
from orchestrator.sweep.runner import Runner, RunOptions

INVENTORY = textwrap.dedent("""\
    testbeds:
      gpu:
        hosts:
          prefill:
            transport: ssh
            ssh: {user: root, connect_timeout: 5}
            env_file: /etc/sglang/prefill.env
            units: [sglang-prefill]
            health_timeout: 5
            instances:
              - {ssh: {host: 10.9.0.1}}
              - {ssh: {host: 10.9.0.2}}
          decode:
            transport: ssh
            env_file: /etc/sglang/decode.env
            units: [sglang-decode]
            health_timeout: 5
            nodes:
              - {ssh: {host: 10.9.0.3}}
              - {ssh: {host: 10.9.0.4, port: 2222}}
          router:
            transport: ssh
            ssh: {host: 10.9.0.9}
            env_file: /etc/sglang/router.env
            units: [sglang-router]
            health_timeout: 5
            after: [prefill, decode]
    """)
KEYS = ["prefill.0", "prefill.1", "decode.n0", "decode.n1", "router"]
ENVS = {  # each host's own file: a node's rank differs, and must survive every edit and the restore
    "prefill.0": "OVERLAP=1\nHOST_ID=p0\n",
    "prefill.1": "OVERLAP=1\nHOST_ID=p1\n",
    "decode.n0": 'OVERLAP=1\nNODE_RANK=0\nSGLANG_EXTRA_ARGS="--tp 16 --nnodes 2"\n',
    "decode.n1": 'OVERLAP=1\nNODE_RANK=1\nSGLANG_EXTRA_ARGS="--tp 16 --nnodes 2"\n',
    "router": "R=1\n",
}
FACTORS = {
    "overlap": {"env": {"prefill": "OVERLAP", "decode": "OVERLAP"}, "levels": ["1", "0"]},
    "cuda_graph": {
        "kind": "flag",
        "flag": "--disable-cuda-graph",
        "env": {"decode": "SGLANG_EXTRA_ARGS"},
        "levels": {"on": "absent", "off": "present"},
    },
}


def bed(tmp_path: Path) -> MultiBed:
    return multi_bed(tmp_path, INVENTORY, ENVS)


def runner(b: MultiBed, plan, run_dir: Path, **options) -> Runner:  # type: ignore[no-untyped-def]
    opts = {"run_id": "multi", "retry_backoff_s": 0.0, **options}
    return Runner(plan, b.deployment, run_dir, RunOptions(**opts), client=b.client)


def test_the_inventory_gives_each_host_its_key_rank_and_instance(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    tb = read_inventory(path).testbed(None)
    assert list(tb.hosts) == KEYS
    assert tb.roles == {
        "prefill": ("prefill.0", "prefill.1"),
        "decode": ("decode.n0", "decode.n1"),
        "router": ("router",),
    }
    p1, n0, n1 = tb.hosts["prefill.1"], tb.hosts["decode.n0"], tb.hosts["decode.n1"]
    assert (p1.ssh and p1.ssh.host, p1.ssh and p1.ssh.user, p1.ssh and p1.ssh.connect_timeout) == (
        "10.9.0.2",
        "root",
        5,
    )
    assert p1.url == "http://10.9.0.2:30000" and p1.health == "http://10.9.0.2:30000/health" and p1.group == ()
    assert (n0.rank, n1.rank, n0.group, n1.group) == (0, 1, ("decode.n0", "decode.n1"), ("decode.n0", "decode.n1"))
    assert n1.ssh is not None and (n1.ssh.host, n1.ssh.port) == ("10.9.0.4", 2222)
    assert n1.url == n0.url == "http://10.9.0.3:30002"  # rank 0 serves the instance
    assert n1.label == "decode.n1 (10.9.0.4:2222)"
    assert tb.first("decode").key == "decode.n0"


def test_instances_may_be_multi_node_and_local_instances_need_their_own_units(tmp_path: Path) -> None:
    text = INVENTORY.replace(
        "        nodes:\n          - {ssh: {host: 10.9.0.3}}\n          - {ssh: {host: 10.9.0.4, port: 2222}}\n",
        "        instances:\n"
        "          - nodes: [{ssh: {host: 10.9.0.3}}, {ssh: {host: 10.9.0.4}}]\n"
        "          - {ssh: {host: 10.9.0.5}, url: 'http://10.9.0.5:31000'}\n",
    )
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    tb = read_inventory(path).testbed(None)
    assert tb.roles["decode"] == ("decode.0.n0", "decode.0.n1", "decode.1")
    assert tb.hosts["decode.0.n1"].group == ("decode.0.n0", "decode.0.n1")
    assert tb.hosts["decode.1"].url == "http://10.9.0.5:31000"


def test_the_plan_restarts_every_host_of_a_changed_role_and_the_router_waits(tmp_path: Path) -> None:
    b = bed(tmp_path)
    plan = make_plan(make_matrix({"overlap": FACTORS["overlap"]}, repro=remote_repro("router")), b.deployment.testbed)
    step = plan.steps[1]
    assert set(step.changed_roles) == {"prefill.0", "prefill.1", "decode.n0", "decode.n1"}
    assert {k for k, _ in step.restart_units} == {"prefill.0", "prefill.1", "decode.n0", "decode.n1"}
    assert step.wait_roles[-1] == "router"


def spy(b: MultiBed) -> list[dict[str, dict[str, str] | None]]:
    """Every host's live env when each repro ran (on the router)."""
    seen: list[dict[str, dict[str, str] | None]] = []
    t = b.transports["router"]
    original = t.run

    def run(*args, **kwargs):  # type: ignore[no-untyped-def]
        if "fake-repro" in str(args[0]):
            seen.append({k: next(iter([m.environ(u) for u in m.units])) for k, m in b.managers.items()})
        return original(*args, **kwargs)

    t.run = run  # type: ignore[method-assign]
    return seen


def test_every_host_of_a_role_gets_the_cell_is_verified_and_restored(tmp_path: Path) -> None:
    b = bed(tmp_path)
    plan = make_plan(make_matrix(FACTORS, repro=remote_repro("router")), b.deployment.testbed, seed=1)
    seen = spy(b)
    result = runner(b, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (4, 0), [r.failure for r in result.records]
    for live, step in zip(seen, plan.steps, strict=True):
        levels = step.trial.cell.as_dict()
        for key in ("prefill.0", "prefill.1", "decode.n0", "decode.n1"):
            env = live[key]
            assert env is not None and env["OVERLAP"] == levels["overlap"], key
        for rank in (0, 1):
            env = live[f"decode.n{rank}"]
            assert env is not None and env["NODE_RANK"] == str(rank)  # each node's own file, edited
            flags = "--tp 16 --nnodes 2" + (" --disable-cuda-graph" if levels["cuda_graph"] == "off" else "")
            assert env["SGLANG_EXTRA_ARGS"] == flags
        assert live["prefill.1"] is not None and live["prefill.1"]["HOST_ID"] == "p1"
    # both nodes of the instance restart in the same trial, every time the instance restarts
    for record in result.records:
        nodes = {r for r in record.restarted if r.startswith("decode.")}
        assert nodes in (set(), {"decode.n0:sglang-decode", "decode.n1:sglang-decode"})
    # backup and restore per host: each file back byte for byte, its own backup in the run folder
    for key in KEYS:
        assert b.file(key) == ENVS[key].encode(), key
        assert (tmp_path / "run" / "backup" / f"{key}.env").read_bytes() == ENVS[key].encode()
    # health: rank 0 answered for the instance, rank 1 serves no health URL of its own
    assert b.health_hits.get("decode.n0", 0) > 0 and "decode.n1" not in b.health_hits
    assert b.health_hits.get("prefill.0", 0) > 0 and b.health_hits.get("prefill.1", 0) > 0


class PinnedManager(FakeServiceManager):
    """One host whose unit never gets the file's OVERLAP (a drop-in pins it)."""

    def environ(self, unit: str) -> dict[str, str] | None:
        env = super().environ(unit)
        return None if env is None else {**env, "OVERLAP": "1"}


def test_each_instance_is_verified_on_its_own(tmp_path: Path) -> None:
    b = bed(tmp_path)
    h = b.deployment.hosts["prefill.1"]
    h.services = b.managers["prefill.1"] = PinnedManager(
        b.transports["prefill.1"],
        h.host.env_file,
        "systemd",
        list(b.managers["prefill.1"].units.values()),
        h.host.label,
    )
    matrix = make_matrix({"overlap": FACTORS["overlap"]}, repro=remote_repro("router"), baseline={"overlap": "0"})
    plan = make_plan(matrix, b.deployment.testbed, seed=1)
    result = runner(b, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    failed = [r for r in result.records if r.failure is not None]
    assert [r.levels for r in failed] == [{"overlap": "0"}]
    assert failed[0].failure is not None and failed[0].failure.error == "VerificationError"
    assert "prefill.1 (10.9.0.2:22)" in failed[0].failure.message and "OVERLAP" in failed[0].failure.message
    assert all(b.file(k) == ENVS[k].encode() for k in KEYS)


def test_a_stale_node_restarts_its_whole_instance(tmp_path: Path) -> None:
    """First trial: the cell's LATE=1 is already in both nodes' files, so no file changes; node 0
    runs on it, node 1 started before its file got it (stale). The check restarts both nodes of
    the instance (tensor-parallel ranks start together), not node 1 alone; prefill and router,
    whose envs are right, are not restarted."""
    envs = {**ENVS, "decode.n0": ENVS["decode.n0"] + "LATE=1\n"}
    b = multi_bed(tmp_path, INVENTORY, envs)
    late = (ENVS["decode.n1"] + "LATE=1\n").encode()
    b.transports["decode.n1"].files["/etc/sglang/decode.env"] = late  # edited after node 1 started
    matrix = make_matrix({"late": {"env": {"decode": "LATE"}, "levels": ["1", "2"]}}, repro=remote_repro("router"))
    plan = make_plan(matrix, b.deployment.testbed, seed=1, order="sequential")
    assert plan.steps[0].trial.cell.id == "late=1"
    result = runner(b, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (2, 0), [r.failure for r in result.records]
    assert sorted(result.records[0].restarted) == ["decode.n0:sglang-decode", "decode.n1:sglang-decode"]
    assert b.file("decode.n1") == late and b.file("decode.n0") == envs["decode.n0"].encode()


def test_a_rank_that_dies_fails_the_instances_wait_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(phases, "ALIVE_EVERY_S", 0.1)  # "at once": at the next alive check (shipped: every 0.3 s)
    b = bed(tmp_path)
    b.managers["decode.n1"].units["sglang-decode"].dies_after_s = 0.05  # every start of rank 1 dies at once
    b.managers["decode.n0"].units["sglang-decode"].ready_after_s = 30  # rank 0 alone would wait long
    plan = make_plan(make_matrix({"overlap": FACTORS["overlap"]}, repro=remote_repro("router")), b.deployment.testbed)
    result = runner(b, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    failures = [r.failure for r in result.records if r.failure is not None]
    assert failures and all(f.error == "ServiceError" for f in failures), failures
    assert any("decode.n1" in f.message for f in failures)
    assert all(r.duration_s < 10 for r in result.records)  # not the 30 s rank 0 would have taken


def test_a_slow_instance_is_awaited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repro starts only once the slow instance answers ready, each trial. Said in order of
    events, not seconds: its wait, timed from the wait's start, read 0.0008 s under CI's load once
    (the restart was more than the slow 0.3 s before the first poll), against >= 0.2 asserted."""
    slow_s = 0.3  # the other instances are ready within milliseconds
    b = bed(tmp_path)
    b.managers["prefill.1"].units["sglang-prefill"].ready_after_s = slow_s
    events: list[str] = []
    manager, router = b.managers["prefill.1"], b.transports["router"]
    ready, run = manager.ready, router.run

    def ready_logged(unit: str) -> bool:
        answer = ready(unit)
        if unit == "sglang-prefill":
            events.append("ready" if answer else "loading")
        return answer

    def run_logged(command, **kwargs):  # type: ignore[no-untyped-def]
        if "fake-repro" in str(command):
            events.append("repro")
        return run(command, **kwargs)

    monkeypatch.setattr(manager, "ready", ready_logged)
    monkeypatch.setattr(router, "run", run_logged)
    plan = make_plan(make_matrix({"overlap": FACTORS["overlap"]}, repro=remote_repro("router")), b.deployment.testbed)
    result = runner(b, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (2, 0)
    assert events.count("repro") == 2, events
    letters = "".join({"loading": "l", "ready": "y", "repro": "|"}[e] for e in events)
    for polls in letters.split("|")[:2]:  # each trial's answers up to its repro
        assert polls.endswith("y"), events  # the last one before the repro was "ready"


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (("      decode:\n", "      decode:\n        url: http://x:1\n"), "per instance"),
        (("        nodes:\n          - {ssh: {host: 10.9.0.3}}\n", "        nodes:\n"), "at least 2"),
        (
            (
                "          - {ssh: {host: 10.9.0.4, port: 2222}}\n",
                "          - {ssh: {host: 10.9.0.4}, url: 'http://a:1'}\n",
            ),
            "rank 0",
        ),
    ],
)
def test_bad_shapes_are_config_errors_with_a_line(tmp_path: Path, edit: tuple[str, str], fragment: str) -> None:
    path = tmp_path / "inv.yaml"
    assert edit[0] in INVENTORY
    path.write_text(INVENTORY.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError, match=fragment) as info:
        read_inventory(path)
    assert info.value.line is not None and info.value.file == str(path)
