"""Random sweeps with random faults on the fakes, checked against a model written here (no process).

Two promises users were burned by: a variable set by one cell silently stayed set for the next,
and a fault left a host changed with no way back. tests/helpers/modelsweep.py draws a matrix, the
hosts' env files and faults from a seed, runs the sweep through sweep.api and checks every
workload's env files and live envs against its own model, and the end (after `orch resume` or
`orch restore`): files byte-identical, each trial journaled once, restarts exactly where the files
changed. Here: a fast sample of seeds, one of each fault; bench/bench_model_sweep.py runs thousands.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from helpers import modelsweep as ms

from orchestrator.core import envfile
from orchestrator.core.argsvar import ArgsEdit, FlagSetting, resolve
from orchestrator.sweep import phases

# seed: what it draws (see ms.scenario); each one ran in ~0.2-0.9 s here
SAMPLE = {
    6: "no fault; a full-form factor whose levels set different variables; CRLF on shell hosts no factor edits",
    9: "an interrupt after a trial is journaled, then orch resume; CRLF on a shell host no factor edits",
    31: "an interrupt during the workload, then orch restore",
    78: "an interrupt while units restart",
    73: "a connection dropped; CRLF on a shell host no factor edits",
    27: "a unit that fails to start; CRLF on a shell host no factor edits",
    51: "a workload that fails",
    38: "a command that fails; CRLF on a shell host no factor edits",
    95: "2 testbeds in parallel, CRLF, a BOM, exclude/include; Ctrl-C after a trial is journaled, then orch resume",
    47: "3 testbeds in parallel, no fault; a symlinked env file, exclude/include",
    33: "CRLF, a symlinked env file, exclude/include; a failing command, Ctrl-C while a host is restored",
    196: "2 testbeds; a shell host no factor edits in CRLF, no final line end, a CR inside quotes; a failing command",
    46: "the repro's shell host in CRLF with a CR inside quotes, symlinked; 2 failing workloads, Ctrl-C in a restore",
}


@pytest.mark.parametrize("seed", sorted(SAMPLE))
def test_a_random_sweep_keeps_its_promises(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    watch = ms.check(seed, tmp_path, monkeypatch)
    assert watch.seen, "no workload ran: the check compared nothing"
    assert bool(watch.fired) == (seed not in (6, 47)), (
        f"seed {seed}: faults fired {watch.fired}, drawn {watch.sc.faults}"
    )


def test_the_model_is_orchs_editor_on_random_files() -> None:
    """The model (ms.expected_text) against core.envfile.edit with core.argsvar.resolve, on 400
    random files (both dialects) and cells: a cheap check that the sweep's model says what orch
    promises."""
    rng = random.Random(7)
    for n in range(400):
        original = ms.draw_file(rng, "decode")
        original = ms.shell_file(rng, original) if n % 2 else original
        settings: ms.Settings = {}
        for key in rng.sample(ms.KEYS, rng.randint(0, 3)):
            settings[key] = None if rng.random() < 0.25 else rng.choice(ms.VALUES)
        if rng.random() < 0.5:
            flags = rng.sample(ms.FLAGS, rng.randint(1, 2))
            settings[ms.ARGS] = tuple((f, True, rng.choice((None, "16", "a b"))) for f in flags)
        text = original.render()
        edits = {
            k: ArgsEdit(tuple(sorted(FlagSetting(*s) for s in v))) if isinstance(v, tuple) else v
            for k, v in settings.items()
        }
        dialect: envfile.Dialect = "shell" if n % 2 else "systemd"
        values = resolve(edits, envfile.read_values(text, dialect))
        got = envfile.edit(text, values, dialect)
        assert ms.same_file(got, original, settings), f"case {n}: {text!r} {settings} -> {got!r}"
        assert envfile.read_values(got, dialect) == ms.expected_values(original, settings)


def test_the_check_fails_when_a_cells_value_stays_set_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check can fail: an orch that edits the file as the last trial left it (not the original)
    keeps a variable an earlier cell set, and seed 6 (levels that set different variables) says so."""

    def from_current(self: phases.Services, role: str, assignments: object) -> bytes:
        state = self.guard.states[role]
        base = (state.current or state.original).decode()
        values = resolve(dict(assignments or {}), self.original_values(role))  # type: ignore[call-overload]
        return envfile.edit(base, values, "systemd").encode()

    monkeypatch.setattr(phases.Services, "cell_bytes", from_current)
    with pytest.raises(AssertionError, match=r"seed 6: trial \d+ \w+ \w+: file"):
        ms.check(6, tmp_path, monkeypatch)


def test_the_check_fails_when_a_restore_leaves_a_file_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail at the end too: a restore that forgets the router's host (the one seed 6
    edits)."""
    from orchestrator.sweep import hosts

    restore_host = hosts.HostGuard._restore_host

    def forgetful(self: hosts.HostGuard, role: str) -> None:
        if role != "router":
            restore_host(self, role)

    monkeypatch.setattr(hosts.HostGuard, "_restore_host", forgetful)
    with pytest.raises(AssertionError, match=r"end \w+ router: file"):
        ms.check(6, tmp_path, monkeypatch)


def test_the_check_fails_when_a_changed_file_restarts_no_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail on restarts: an orch that writes the files but restarts no unit runs the
    workloads on the old env (seed 6's router), and the live envs the model expects say so."""
    monkeypatch.setattr(phases.Services, "restart_units", lambda self, units, ctx: None)
    monkeypatch.setattr(phases.Services, "verify_before_repro", lambda self, step, ctx: True)  # as verify_env: false
    monkeypatch.setattr(phases.Services, "verify_beside_repro", lambda self, step, ctx: None)
    with pytest.raises(AssertionError, match=r"seed 6: trial \d+ \w+ router: live env"):
        ms.check(6, tmp_path, monkeypatch)


def test_the_check_fails_when_the_plan_drops_an_included_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail on exclude/include: an orch whose plan leaves out the last `include`
    cell runs fewer cells than the model's (seed 47: 3 testbeds, exclude/include)."""
    from orchestrator.core import plan as plan_mod

    expand = plan_mod.expand
    monkeypatch.setattr(plan_mod, "expand", lambda matrix: expand(matrix)[: -1 if matrix.include else None])
    with pytest.raises(AssertionError, match="seed 47: the plan's cells"):
        ms.check(47, tmp_path, monkeypatch)


def test_the_check_fails_when_a_symlinked_env_file_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail on a symlinked env file: a transport that writes a regular file over the
    link (not through it) leaves the host without its link, and seed 47 (router's file a link) says so."""
    from fakes import FakeTransport

    write = FakeTransport.write_bytes_atomic

    def over_the_link(self: FakeTransport, path: str, data: bytes, **kw: Any) -> None:
        self.links.pop(path, None)
        write(self, path, data, **kw)

    monkeypatch.setattr(FakeTransport, "write_bytes_atomic", over_the_link)
    with pytest.raises(AssertionError, match=r"(?s)seed 47: .*the env file links to None, was ../real/decode.env"):
        ms.check(47, tmp_path, monkeypatch)


def test_every_seed_the_benchmark_may_draw_gives_a_scenario() -> None:
    """bench/bench_model_sweep.py runs thousands of seeds: drawing seed 138's scenario looped for
    ever (its fourth factor found every variable taken, so no two levels could differ). Drawing is
    pure and fast; the first 2,000 seeds each give a matrix of 1-4 factors."""
    for seed in range(2_000):
        sc = ms.scenario(seed)
        assert 1 <= len(sc.factors) <= 4, seed
