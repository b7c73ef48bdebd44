"""One random sweep on the REAL testbed (systemd 252 + OpenSSH), checked against modelsweep's model.

modelsweep checks random sweeps on the fakes, whose units get their env from orch's own env-file
reader: what systemd's EnvironmentFile= (or bash's `set -a; . FILE`) really hands the process is
not compared with the model there. `draw(seed)` draws (a stream of its own, with modelsweep's
value and file draws) a small sweep: 1-2 factors over decode and/or prefill, replicates 1, on
`dsv4-pd` (systemd dialect) or `dsv4-pd-shell` (decode in the shell dialect), and each host's
original env file (CRLF, a BOM, duplicates, comments, `export`, no final newline; values with
blanks, quotes, #, =, $HOME, \\, tabs). `check(tb, real, tmp)` writes the originals over SSH and
restarts their units on them, runs `orch run` through the CLI with collectors that save each
trial's /proc/PID/environ on the host, and records in `real.problems`: a unit whose live env is not
the model's (before the run: the original as the model reads it; each trial: exactly the cell's
settings, a removed key absent, every other original key as the original gives it), an env file
not byte-identical after the run, anything of orch's left beside it, a trial not completed.
"""

from __future__ import annotations

import base64
import contextlib
import io
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from testbed.fixture import Testbed, env_file_text, layout
from testbed.helpers import wait_healthy as url_answers

from helpers import modelsweep as ms
from helpers.ssh_sweep import no_leftovers, trials_of
from orchestrator.cli.main import main as orch

ROLES = ("prefill", "decode")
WARMUP = ms.Line("SIM_WARMUP_S=0.2", "SIM_WARMUP_S", "0.2")  # the simulator's start-up, kept short
UNIVERSE = {*ms.KEYS, ms.ARGS, WARMUP.key}  # the keys a drawn file or matrix names (the rest is systemd's own)
SAVED = "/var/tmp/realsweep.env"  # on each host: a line per trial, "TRIAL_DIR BASE64(environ)"


@dataclass(frozen=True)
class Where:
    """One role's host, unit and env file on the testbed the seed drew."""

    host: str
    unit: str
    env_file: str


def places(testbed: str) -> dict[str, Where]:
    decode = "sglang-dsv4-decode-shell" if testbed == "dsv4-pd-shell" else "sglang-dsv4-decode"
    return {
        "prefill": Where("prefill", "sglang-dsv4-prefill", "/etc/sglang/prefill.env"),
        "decode": Where("decode", decode, f"/etc/sglang/{decode.removeprefix('sglang-dsv4-')}.env"),
    }


@dataclass
class Real:
    seed: int
    testbed: str
    sc: ms.Scenario
    problems: list[str] = field(default_factory=list)
    trials: int = 0


def draw(seed: int) -> Real:
    """A small sweep: the model's file and factor draws, on a stream of this bench's own."""
    rng = random.Random(f"real {seed}")
    testbed = rng.choice(("dsv4-pd", "dsv4-pd-shell"))
    shell = {("decode", "dsv4-pd-shell")}
    originals = {r: _draw_file(rng, r, "shell" if (r, testbed) in shell else "systemd") for r in ROLES}
    roles = rng.sample(ROLES, rng.randint(1, 2))
    used: dict[str, set[str]] = {r: set() for r in ms.ROLES}
    shells = {r for r in ROLES if (r, testbed) in shell}
    factors = [_draw_factor(rng, i, used, roles, shells) for i in range(rng.randint(1, 2))]
    return Real(seed, testbed, ms.Scenario(seed, originals, factors, 1, order=rng.choice(("randomized", "sequential"))))


def _draw_file(rng: random.Random, role: str, dialect: str) -> ms.EnvFile:
    f = ms.draw_file(rng, role)
    f = ms.EnvFile((WARMUP, *f.lines), f.final_newline)
    if dialect == "shell":
        return ms.shell_file(rng, f)
    if rng.random() < 0.25:
        f = ms.EnvFile(f.lines, f.final_newline, f.dialect, "\r\n")
    if rng.random() < 0.1:  # a BOM glued to the first line: systemd takes no name from it
        first = f.lines[0]
        f = ms.EnvFile((ms.Line(ms.BOM + first.text), *f.lines[1:]), f.final_newline, f.dialect, f.eol)
    return f


def _draw_factor(
    rng: random.Random, index: int, used: dict[str, set[str]], roles: list[str], shells: set[str]
) -> ms.Factor:
    """modelsweep's factor, its roles cut to `roles` (drawn again until it sets one of them)."""
    for _ in range(50):
        f = ms.draw_factor(rng, index, used, shells)
        settings = {lv: {r: s for r, s in by.items() if r in roles} for lv, by in f.settings.items()}
        if any(settings.values()):
            return ms.Factor(f.name, _cut_shape(f.shape, roles), settings)
    raise RuntimeError("no factor over the drawn roles in 50 draws")


def _cut_shape(shape: dict[str, Any], roles: list[str]) -> dict[str, Any]:
    out = dict(shape)
    if "env" in out:
        out["env"] = {r: k for r, k in out["env"].items() if r in roles}
    if isinstance(out.get("levels"), dict) and "kind" not in out:
        out["levels"] = {lv: {r: a for r, a in s.items() if r in roles} for lv, s in out["levels"].items()}
    return out


def _main_pid(unit: str) -> str:
    return f"$(systemctl show -p MainPID --value {unit})"


def matrix_text(real: Real) -> str:
    sc, where = real.sc, places(real.testbed)
    collect = {
        f"live_{r}": {
            "role": r,
            "command": f'echo {{trial_dir}} "$(base64 -w0 /proc/{_main_pid(w.unit)}/environ)" >> {SAVED}; echo 1',
        }
        for r, w in where.items()
    }
    data = {
        "name": f"real{real.seed}",
        "factors": {f.name: f.shape for f in sc.factors},
        "replicates": 1,
        "order": sc.order,
        "health_timeouts": {"prefill": 30, "decode": 30, "router": 30},
        "repro": {
            "command": "{python} -m orchestrator.sim.repro --router {router_url} --sessions 2 --rounds 1"
            " --seed {trial_seed}",
            "timeout": 60,
            "metrics": {"corruption": {"kind": "proportion", "regex": r"CORRUPTION sessions: (?P<k>\d+)/(?P<n>\d+)"}},
        },
        "collect": collect,
    }
    return yaml.safe_dump(data, sort_keys=False)


# ---------------------------------------------------------------- on the hosts
def put_originals(tb: Testbed, real: Real) -> None:
    """Each role's env file as drawn, its unit restarted on it and healthy, no saved envs."""
    for role, w in places(real.testbed).items():
        data = base64.b64encode(real.sc.originals[role].render().encode()).decode()
        tb.ssh(w.host, f"echo {data} | base64 -d > {w.env_file} && rm -f {SAVED} && systemctl restart {w.unit}")
    for w in places(real.testbed).values():
        wait_healthy(tb, w)


def wait_healthy(tb: Testbed, w: Where, timeout: float = 30) -> None:
    """testbed.helpers' wait, with the unit's last log lines when it never answers."""
    try:
        url_answers(tb.url(w.host, w.unit) + "/health", timeout)
    except AssertionError as exc:
        logs = tb.ssh(w.host, f"journalctl -u {w.unit} -n 5 --no-pager", check=False).stdout
        raise RuntimeError(f"{w.unit} not healthy after {timeout} s: {logs}") from exc


def environ(raw: str) -> dict[str, str]:
    pairs = base64.b64decode(raw).decode("utf-8", "surrogateescape").split("\0")
    return {k: v for k, v in (p.split("=", 1) for p in pairs if "=" in p) if k in UNIVERSE}


def live_now(tb: Testbed, w: Where) -> dict[str, str]:
    pid = tb.ssh(w.host, f"systemctl show -p MainPID --value {w.unit}").stdout.strip()
    return environ(tb.ssh(w.host, f"base64 -w0 /proc/{pid}/environ").stdout)


def restore_testbed(tb: Testbed) -> None:
    """The fixture's own env files back, their units restarted on them and healthy, the saved
    envs gone: the hosts as booted, for whatever runs next."""
    hosts = {h.name: h for h in layout(tb.net)}
    wheres = {w for testbed in ("dsv4-pd", "dsv4-pd-shell") for w in places(testbed).values()}
    for w in wheres:
        data = base64.b64encode(env_file_text(hosts[w.host].unit(w.unit)).encode()).decode()
        tb.ssh(w.host, f"echo {data} | base64 -d > {w.env_file} && rm -f {SAVED} && systemctl restart {w.unit}")
    for w in wheres:
        wait_healthy(tb, w)


# ---------------------------------------------------------------- one seed
def check(tb: Testbed, real: Real, tmp: Path) -> None:
    sc, where, out = real.sc, places(real.testbed), real.problems
    put_originals(tb, real)
    for role, w in where.items():  # the reader, before orch: systemd (or bash) against the model
        got, want = live_now(tb, w), sc.originals[role].values()
        if got != want:
            out.append(f"original {role}: live env {got}, model {want}, file {sc.originals[role].render()!r}")
    before = {r: tb.ssh(w.host, f"base64 -w0 {w.env_file}").stdout for r, w in where.items()}
    (tmp / "m.yaml").write_text(matrix_text(real))
    args = ["run", str(tmp / "m.yaml"), "-i", str(tb.inventory), "-t", real.testbed, "--out", str(tmp / "reports")]
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        code = orch([*args, "--run-id", "r", "--retries", "0", "--seed", str(real.seed)])
    if code != 0:
        out.append(f"orch run exited {code}: {said.getvalue()[-1500:]}")
    saved = {r: _saved(tb, w) for r, w in where.items()}
    for t in trials_of(tmp / "reports" / "r") if (tmp / "reports" / "r" / "journal.jsonl").exists() else []:
        real.trials += 1
        if t.status != "completed":
            out.append(f"trial {t.trial} {t.cell}: {t.status} {t.failure}")
        for role in where:
            want = ms.expected_values(sc.originals[role], sc.settings(t.levels, role))
            got = saved[role].get(str(tmp / "reports" / "r" / "trials" / f"{t.trial:04d}"))
            if got != want:
                out.append(f"trial {t.trial} {t.cell} {role}: live env {got}, model {want}")
    after = {r: tb.ssh(w.host, f"base64 -w0 {w.env_file}").stdout for r, w in where.items()}
    for r in where:
        if after[r] != before[r]:
            out.append(f"end {r}: file {base64.b64decode(after[r])!r}, was {base64.b64decode(before[r])!r}")
    try:
        no_leftovers(tb)
    except AssertionError as exc:
        out.append(f"leftovers: {exc}")


def _saved(tb: Testbed, w: Where) -> dict[str, dict[str, str]]:
    text = tb.ssh(w.host, f"cat {SAVED} 2>/dev/null || true").stdout
    return {trial: environ(raw) for trial, raw in (line.split(" ", 1) for line in text.splitlines() if " " in line)}


def features(real: Real) -> list[str]:
    """What the seed drew (the bench counts them)."""
    sc, files = real.sc, real.sc.originals.values()
    levels = [s for f in sc.factors for lv in f.settings.values() for s in lv.values()]
    out = [real.testbed]
    out += ["crlf"] * any(f.eol == "\r\n" for f in files)
    out += ["bom"] * any(f.lines and f.lines[0].text.startswith(ms.BOM) for f in files)
    out += ["no final newline"] * any(not f.final_newline for f in files)
    out += ["export lines"] * any(line.prefix for f in files for line in f.lines)
    out += ["a removed key"] * any(v is None for s in levels for v in s.values())
    out += ["a flag factor"] * any(f.shape.get("kind") == "flag" for f in sc.factors)
    return out
