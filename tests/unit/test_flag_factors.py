"""SGLang flags as factors (issue 14), on the fakes: `kind: flag` factors each own one --flag of
an args variable, compose in it without clobbering each other or the flags already there, restart
only when the composed variable changes, and the live process is verified against the composed
value. Client factors only fill repro placeholders and restart nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes import (
    FakeBed,
    FakeServiceManager,
    FakeUnit,
    Role,
    make_bed,
    make_matrix,
    make_plan,
    remote_repro,
    runner_for,
)

from orchestrator.core.argsvar import ArgsEdit
from orchestrator.core.envfile import read_values
from orchestrator.errors import ConfigError

DECODE_ENV = 'PORT=8000\nSGLANG_EXTRA_ARGS="--tp 8 --cuda-graph-max-bs 16"\n'
CUDA_GRAPH = {
    "kind": "flag",
    "flag": "--disable-cuda-graph",
    "env": {"decode": "SGLANG_EXTRA_ARGS"},
    "levels": {"on": "absent", "off": "present"},
}
MAX_BS = {
    "kind": "flag",
    "flag": "--cuda-graph-max-bs",
    "env": {"decode": "SGLANG_EXTRA_ARGS"},
    "levels": {"default": None, "64": "64"},
}
EXPECTED = {  # (cuda_graph, max_bs) -> the composed variable the live process must hold
    ("on", "default"): "--tp 8",
    ("on", "64"): "--tp 8 --cuda-graph-max-bs 64",
    ("off", "default"): "--tp 8 --disable-cuda-graph",
    ("off", "64"): "--tp 8 --cuda-graph-max-bs 64 --disable-cuda-graph",
}


def bed() -> FakeBed:
    """Decode and a router, both already running (as a deployment orch finds)."""
    decode, router = FakeUnit("decode-server", active=True), FakeUnit("router-server", active=True)
    return make_bed({"decode": Role(DECODE_ENV, [decode]), "router": Role("R=1\n", [router], after=["decode"])})


def spy_repro(b: FakeBed) -> list[tuple[str, dict[str, str] | None]]:
    """What decode's live process held when each repro ran (the repro runs on the router host)."""
    seen: list[tuple[str, dict[str, str] | None]] = []
    transport = b.transports["router"]
    original = transport.run

    def run(*args: Any, **kwargs: Any) -> Any:
        if "fake-repro" in str(args[0]):
            seen.append((str(args[0]), b.managers["decode"].environ("decode-server")))
        return original(*args, **kwargs)

    transport.run = run  # type: ignore[method-assign]
    return seen


def test_two_flag_factors_compose_in_one_variable_and_each_cell_is_verified_live(tmp_path: Path) -> None:
    b = bed()
    plan = make_plan(b, {"cuda_graph": CUDA_GRAPH, "max_bs": MAX_BS}, repro=remote_repro("router"))
    assert len(plan.cells) == 4
    seen = spy_repro(b)
    result = runner_for(b, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (4, 0), [r.failure for r in result.records]
    assert len(seen) == 4
    for (_, live), step in zip(seen, plan.steps, strict=True):
        levels = step.trial.cell.as_dict()
        assert live is not None
        assert live["SGLANG_EXTRA_ARGS"] == EXPECTED[(levels["cuda_graph"], levels["max_bs"])]
        assert live["PORT"] == "8000"
    record = next(r for r in result.records if r.levels == {"cuda_graph": "off", "max_bs": "64"})
    assert record.env == {"decode": {"SGLANG_EXTRA_ARGS": "args(+--cuda-graph-max-bs 64 +--disable-cuda-graph)"}}
    assert b.file("decode") == DECODE_ENV.encode()  # restored byte for byte


def test_a_cell_whose_composed_variable_is_the_files_restarts_nothing(tmp_path: Path) -> None:
    """The first cell removes a flag the file does not have and sets none: the composed variable
    is the original, the file is not written and the running unit is not restarted; every
    later cell changes the variable and restarts decode once."""
    b = make_bed({"decode": Role('SGLANG_EXTRA_ARGS="--tp 8"\n', [FakeUnit("decode-server", active=True)])})
    plan = make_plan(b, {"cuda_graph": CUDA_GRAPH, "max_bs": MAX_BS}, repro=remote_repro("decode"))
    assert plan.steps[0].trial.cell.id == "cuda_graph=on,max_bs=default"
    assert [s.restart_units for s in plan.steps][1:] == [(("decode", "decode-server"),)] * 3
    result = runner_for(b, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (4, 0)
    assert result.records[0].restarted == []
    assert [r.restarted for r in result.records[1:]] == [["decode:decode-server"]] * 3


class StaleArgsManager(FakeServiceManager):
    """A unit whose drop-in pins SGLANG_EXTRA_ARGS (the file's value never reaches the process)."""

    def environ(self, unit: str) -> dict[str, str] | None:
        env = super().environ(unit)
        return None if env is None else {**env, "SGLANG_EXTRA_ARGS": "--tp 8 --cuda-graph-max-bs 16"}


def test_a_live_process_without_the_composed_flags_voids_the_trial(tmp_path: Path) -> None:
    b = make_bed({"decode": Role(DECODE_ENV, ["decode-server"])})
    handle = b.deployment.hosts["decode"]
    handle.services = b.managers["decode"] = StaleArgsManager(
        b.transports["decode"], handle.host.env_file, "systemd", [FakeUnit("decode-server")], handle.host.label
    )
    plan = make_plan(b, {"cuda_graph": CUDA_GRAPH}, baseline={"cuda_graph": "off"})
    result = runner_for(b, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    failures = [r.failure for r in result.records if r.failure is not None]
    assert failures, "a process without the flag must not count"
    assert all(f.error == "VerificationError" for f in failures)
    assert any("SGLANG_EXTRA_ARGS" in f.message and "--disable-cuda-graph" in f.message for f in failures)
    assert b.file("decode") == DECODE_ENV.encode()


def test_the_written_file_keeps_the_other_flags_and_is_read_back_by_both_dialects() -> None:
    b = make_bed({"decode": Role(DECODE_ENV, ["decode-server"])})
    plan = make_plan(b, {"cuda_graph": CUDA_GRAPH, "max_bs": MAX_BS})
    env = next(s.env for s in plan.steps if s.trial.cell.as_dict() == {"cuda_graph": "off", "max_bs": "64"})
    edit = env["decode"]["SGLANG_EXTRA_ARGS"]
    assert isinstance(edit, ArgsEdit)
    from orchestrator.core.argsvar import resolve
    from orchestrator.core.envfile import edit as edit_file

    text = edit_file(DECODE_ENV, resolve(env["decode"], read_values(DECODE_ENV, "systemd")), "systemd")
    for dialect in ("systemd", "shell"):
        assert read_values(text, dialect)["SGLANG_EXTRA_ARGS"] == EXPECTED[("off", "64")]  # type: ignore[arg-type]
    assert text.startswith("PORT=8000\n")


# ------------------------------------------------------------------ client factors
CONCURRENCY = {"kind": "client", "levels": ["8", "32"]}


def test_client_factors_fill_the_repro_and_restart_nothing(tmp_path: Path) -> None:
    b = bed()
    repro = remote_repro("router", "fake-repro --trial {trial} --concurrency {concurrency} --rate {rate}")
    factors = {
        "concurrency": CONCURRENCY,
        "rate": {"kind": "client", "placeholder": "rate", "levels": {"slow": "0.5", "fast": "4"}},
    }
    plan = make_plan(b, factors, repro=repro, replicates=2)
    assert plan.restart_count == 0
    assert all(s.restart_units == () and s.changed_roles == () for s in plan.steps)
    seen = spy_repro(b)
    before = b.states()
    result = runner_for(b, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (8, 0)
    assert b.restarts() == []  # nothing on any host restarted: the units were already up
    assert b.states() == before
    commands = sorted(cmd for cmd, _ in seen)
    for c, r in (("8", "0.5"), ("8", "4"), ("32", "0.5"), ("32", "4")):
        assert sum(f"--concurrency {c} --rate {r}" in cmd for cmd in commands) == 2, commands
    for role, t in b.transports.items():  # no env file was ever written (only the backup copies beside them)
        assert [c for c in t.calls if c.op == "write" and c.target == b.env_file(role)] == []


def test_a_client_factor_beside_an_env_factor_restarts_only_for_the_env_factor() -> None:
    b = bed()
    repro = remote_repro("router", "fake-repro --trial {trial} --concurrency {concurrency}")
    factors = {"concurrency": CONCURRENCY, "overlap": {"env": {"decode": "OVERLAP"}, "levels": ["1", "0"]}}
    plan = make_plan(b, factors, repro=repro, order="sequential")
    ids = [(s.trial.cell.id, bool(s.restart_units)) for s in plan.steps]
    # sequential: concurrency changes every other step without a restart, overlap forces one
    assert ids == [
        ("concurrency=8,overlap=1", True),
        ("concurrency=8,overlap=0", True),
        ("concurrency=32,overlap=1", True),
        ("concurrency=32,overlap=0", True),
    ]
    min_restarts = make_plan(b, factors, repro=repro, order="min-restarts")
    assert min_restarts.restart_count < plan.restart_count


def test_plan_output_shows_no_restart_for_client_factors(capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    from orchestrator.cli.planview import print_plan

    b = bed()
    repro = remote_repro("router", "fake-repro --concurrency {concurrency}")
    plan = make_plan(b, {"concurrency": CONCURRENCY}, repro=repro, replicates=3)
    print_plan(plan, Console(width=200), list_trials=True)
    out = capsys.readouterr().out
    assert "restarts: 0 unit restarts" in out
    assert "decode:" not in out and "router:" not in out  # no trial lists a restarted unit


def test_an_unknown_placeholder_is_still_refused_and_a_client_placeholder_is_known() -> None:
    b = bed()
    with pytest.raises(ConfigError, match=r"undefined placeholder \{concurency\}"):
        make_plan(b, {"concurrency": CONCURRENCY}, repro=remote_repro("router", "fake-repro {concurency}"))
    assert make_matrix({"concurrency": CONCURRENCY}, repro=remote_repro("router", "x {concurrency}")).roles == set()
