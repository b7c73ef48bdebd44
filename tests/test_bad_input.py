"""Bad input of every class (issue 12, "No input can hang, crash or exhaust orch").

Each case is one hostile or mistaken input: a matrix, an inventory, a command-line flag or a run
folder. Each must end with exit code 2 and one `error:` line naming the file and line (or the
flag), no traceback, within a generous per-case limit (a hang guard, not a speed test), and no
host touched: the inventory is a private copy of inventory/local.yaml on free ports, its env
files stay byte-identical and nothing listens on its ports afterwards. A few cases run `orch`
as a subprocess under a 1 GiB address-space limit, to prove that an alias bomb or an endless
file is refused, not a MemoryError, and that no traceback reaches stderr.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.report_synth import synthetic_run, write_run
from helpers.shipped import private_inventory

from orchestrator.cli.main import main

TRACEBACK = "Traceback"
CASE_LIMIT_S = 10

MATRIX = textwrap.dedent("""\
    name: bad
    factors:
      overlap:
        env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
        levels: [on, off]
      cuda_graph:
        levels:
          on: {decode: {SGLANG_EXTRA_ARGS: ""}}
          off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
    replicates: 1
    seed: 1
    health_timeouts: {decode: 60}
    repro:
      command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 2 --seed {trial_seed}"
      timeout: 60
      metrics:
        corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
    collect:
      anomalies: {role: decode, pattern: ANOMALY}
    """)


@dataclass(frozen=True)
class Bed:
    """A private copy of the bundled inventory (free ports) and a good matrix, in tmp_path."""

    root: Path
    matrix: Path
    inventory: Path
    ports: list[int]
    env_files: dict[str, bytes]

    def args(self, command: str = "validate", *more: str) -> list[str]:
        return [command, str(self.matrix), "-i", str(self.inventory), *more]

    def untouched(self) -> None:
        now = {p.name: p.read_bytes() for p in (self.root / "local").glob("*.env")}
        assert now == self.env_files, "an env file changed"
        assert not any(port_open(p) for p in self.ports), "something listens on the inventory's ports"
        assert not (self.root / "reports").exists(), "a run folder was created"


@pytest.fixture
def inputs(tmp_path: Path) -> Bed:
    """No process is started: named apart from the fault tests' `bed`, which runs simulators."""
    inventory, ports = private_inventory(tmp_path)
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    env_files = {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")}
    return Bed(tmp_path, matrix, inventory, ports, env_files)


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refusing a flag
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def assert_refused(code: int, output: str, where: str, *fragments: str) -> None:
    """Exit 2, no traceback, the place (a regex: file:line, file or flag) and each fragment."""
    assert code == 2, output
    assert TRACEBACK not in output, output
    flat = " ".join(output.split())  # rich wraps long lines
    assert re.search(where, flat), f"{where!r} not in {flat!r}"
    for fragment in fragments:
        assert fragment in flat, f"{fragment!r} not in {flat!r}"


def test_the_good_inputs_validate(inputs: Bed, capsys: pytest.CaptureFixture[str]) -> None:
    """The baseline every case mutates is itself valid (so each case fails for its own reason)."""
    code, output = run_main(inputs.args(), capsys)
    assert code == 0, output
    inputs.untouched()


# ------------------------------------------------------------------ matrix cases
Edit = Callable[[str], str]


def sub(old: str, new: str) -> Edit:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def add(more: str) -> Edit:
    return lambda text: text + more


def whole(new: str) -> Edit:
    return lambda _text: new


def chain(*edits: Edit) -> Edit:
    def edit(text: str) -> str:
        for e in edits:
            text = e(text)
        return text

    return edit


def factors(n: int, levels: int) -> Edit:
    names = ", ".join(f"l{j}" for j in range(levels))
    return sub(
        "factors:\n",
        "factors:\n" + "".join(f"  f{i}: {{env: {{decode: V{i}}}, levels: [{names}]}}\n" for i in range(n)),
    )


def bomb(depth: int = 9, fan: int = 9) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * fan)}]"]
    for i in range(1, depth + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan)}]")
    return "\n".join(lines) + "\n"


M = r"m\.yaml:\d+: "  # file:line of the matrix
# ten keys per mapping, each the mapping before: 10^8 values
MAPPING_BOMB = "b0: &b0 {x: 1, y: 2}\n" + "".join(
    f"b{i}: &b{i} {{{', '.join(f'k{j}: *b{i - 1}' for j in range(10))}}}\n" for i in range(1, 9)
)
# six more keys under a factor, each eight aliases of the one before: 8^6 values
FACTOR_BOMB = "".join(f"\n    x{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 8)}]" for i in range(1, 7))

MATRIX_CASES: list[tuple[str, Edit, str, tuple[str, ...]]] = [
    # ---- YAML structure
    ("alias bomb", whole(bomb()), M, ("once aliases are expanded",)),
    ("alias bomb of mappings", whole(MAPPING_BOMB), M, ("once aliases are expanded",)),
    ("alias bomb inside a factor", sub("levels: [on, off]", "levels: &l0 [on, off]" + FACTOR_BOMB), M, ("aliases",)),
    ("10,000 nested flow lists", whole("a: " + "[" * 10_000 + "]" * 10_000 + "\n"), M, ("nesting deeper than",)),
    ("10,000 nested flow mappings", whole("a: " + "{b: " * 10_000 + "1" + "}" * 10_000 + "\n"), M, ("nesting",)),
    (
        "100 nested block mappings",
        whole("".join(f"{'  ' * i}k{i}:\n" for i in range(100)) + "  " * 100 + "x: 1\n"),
        M,
        ("nesting deeper than",),
    ),
    ("unclosed 10,000 nesting", whole("a: " + "[" * 10_000 + "\n"), M, ()),
    ("self-referencing alias (list)", whole("a: &x [*x]\n"), M, ("refers to its own anchor",)),
    ("self-referencing alias (mapping)", whole("a: &x {b: *x}\n"), M, ("refers to its own anchor",)),
    ("self-reference deep inside", whole("a: &x [1, [2, {c: *x}]]\n"), M, ("refers to its own anchor",)),
    ("undefined alias", whole("a: *nowhere\n"), M, ("invalid YAML",)),
    ("two documents", whole("name: a\n---\nname: b\n"), M, ("2 documents",)),
    ("empty file", whole(""), M, ("no document",)),
    ("a list at the top", whole("- a\n- b\n"), M, ("expected a mapping",)),
    ("a scalar at the top", whole("just text\n"), M, ("expected a mapping",)),
    ("merge key", add("extra: &e {a: 1}\nother:\n  <<: *e\n"), M, ("merge keys",)),
    ("duplicate key", add("replicates: 2\n"), M, ("duplicate key",)),
    ("python object tag", add("x: !!python/object/apply:os.system ['touch PWNED']\n"), M, ("unsupported YAML type",)),
    ("binary tag", add("x: !!binary aGVsbG8=\n"), M, ("unsupported YAML type",)),
    ("timestamp tag", add("x: 2026-01-01\n"), M, ("unsupported YAML type",)),
    ("tab indentation", sub("  overlap:", "\toverlap:"), M, ("invalid YAML",)),
    ("unterminated quote", sub('SGLANG_EXTRA_ARGS: ""}}', 'SGLANG_EXTRA_ARGS: "}}'), M, ("invalid YAML",)),
    ("NUL byte in the file", sub("name: bad", "name: b\x00ad"), M, ("invalid YAML",)),
    ("mapping as a key", add("? {a: 1}\n: x\n"), M, ("plain names",)),
    ("list as a key", add("? [a]\n: x\n"), M, ("plain names",)),
    # ---- sizes
    ("replicates 10^9", sub("replicates: 1", "replicates: 1000000000"), M, ("replicates", "<= 100000")),
    # ---- a boolean is not a number (pydantic read true as 1; YAML 1.1 reads on/yes as true)
    ("replicates true", sub("replicates: 1", "replicates: true"), M, ("replicates", "'true'", "not a number")),
    ("timeout on", sub("timeout: 60", "timeout: on"), M, ("repro.timeout", "YAML reads on as true/false")),
    ("health timeout yes", sub("{decode: 60}", "{decode: yes}"), M, ("health_timeouts.decode", "YAML reads yes")),
    ("seed false", sub("seed: 1", "seed: false"), M, ("seed", "YAML reads false")),
    (
        "a valid rule's max true",
        sub("  metrics:\n", "  valid: [{regex: 'e=(?P<value>\\d+)', max: True}]\n  metrics:\n"),
        M,
        ("repro.valid[0].max", "YAML reads True"),
    ),
    ("replicates 0", sub("replicates: 1", "replicates: 0"), M, ("replicates", ">= 1")),
    ("replicates negative", sub("replicates: 1", "replicates: -3"), M, ("replicates",)),
    ("replicates as a float", sub("replicates: 1", "replicates: 1e9"), M, ("replicates", "integer")),
    ("replicates with 5,000 digits", sub("replicates: 1", "replicates: " + "9" * 5000), M, ("replicates",)),
    ("replicates as text", sub("replicates: 1", "replicates: many"), M, ("replicates",)),
    ("10^7 cells", factors(7, 10), M, ("factors", "40,000,000 trials")),
    ("40 factors of 50 levels", factors(40, 50), M, ("factors", "more than 10^18")),
    (
        "cells x replicates",
        chain(factors(3, 10), sub("replicates: 1", "replicates: 1000")),
        M,
        ("trials (over 1,000,000)",),
    ),
    ("timeout infinite", sub("timeout: 60", "timeout: 1e400"), M, ("repro.timeout",)),
    ("timeout .inf", sub("timeout: 60", "timeout: .inf"), M, ("repro.timeout",)),
    ("timeout nan", sub("timeout: 60", "timeout: nan"), M, ("repro.timeout",)),
    ("timeout a year", sub("timeout: 60", "timeout: 31536000"), M, ("repro.timeout", "<= 604800")),
    ("timeout 0", sub("timeout: 60", "timeout: 0"), M, ("repro.timeout", "> 0")),
    ("timeout negative", sub("timeout: 60", "timeout: -5"), M, ("repro.timeout",)),
    (
        "expected_duration infinite",
        sub("timeout: 60", "timeout: 60\n  expected_duration: 1e999"),
        M,
        ("expected_duration",),
    ),
    ("health timeout 10^12", sub("{decode: 60}", "{decode: 1000000000000}"), M, ("health_timeouts.decode",)),
    ("health timeout negative", sub("{decode: 60}", "{decode: -1}"), M, ("health_timeouts.decode",)),
    ("health timeout nan", sub("{decode: 60}", "{decode: nan}"), M, ("health_timeouts.decode",)),
    ("seed negative", sub("seed: 1", "seed: -1"), M, ("seed",)),
    ("seed 2^70", sub("seed: 1", "seed: 1180591620717411303424"), M, ("seed",)),
    (
        "adaptive min_rounds 10^9",
        add("adaptive: {metric: corruption, min_rounds: 1000000000}\n"),
        M,
        ("adaptive.min_rounds",),
    ),
    ("adaptive effect 1", add("adaptive: {metric: corruption, effect: 1}\n"), M, ("adaptive.effect",)),
    # ---- placeholders
    ("format spec width", sub("{router_url}", "{router_url:>999999999}"), M, ("repro.command", "format spec")),
    ("conversion !x", sub("{router_url}", "{router_url!x}"), M, ("repro.command",)),
    ("conversion !r", sub("{router_url}", "{router_url!r}"), M, ("repro.command", "conversion")),
    ("positional {0}", sub("{router_url}", "{0}"), M, ("repro.command", "invalid placeholder {0}")),
    ("empty {}", sub("{router_url}", "{}"), M, ("repro.command", "invalid placeholder")),
    ("attribute {a.b}", sub("{router_url}", "{router_url.__class__}"), M, ("repro.command", "invalid placeholder")),
    ("index {a[0]}", sub("{router_url}", "{router_url[0]}"), M, ("repro.command", "invalid placeholder")),
    ("nested spec", sub("{router_url}", "{router_url:{trial}}"), M, ("repro.command",)),
    ("unknown placeholder", sub("{router_url}", "{gpu_url}"), M, ("repro.command", "undefined placeholder")),
    ("lone {", sub("{router_url}", "{router_url"), M, ("repro.command", "placeholder syntax")),
    ("lone }", sub("{router_url}", "router_url}"), M, ("repro.command", "placeholder syntax")),
    (
        "collector command spec",
        sub("pattern: ANOMALY", "command: 'echo {trial:>99999999}'"),
        M,
        ("collect.anomalies.command",),
    ),
    ("collector command {0}", sub("pattern: ANOMALY", "command: 'echo {0}'"), M, ("collect.anomalies.command",)),
    # Linux execs a command (`sh -c CMD`) or an environment entry of at most 128 KiB: a longer one
    # fails every trial after the hosts were edited and restarted (E2BIG), so it is refused here.
    (
        "repro command of 200 KB",
        sub("--seed {trial_seed}", "--seed {trial_seed} # " + "x" * 200_000),
        M,
        ("repro.command", "longer than"),
    ),
    (
        "collector command of 200 KB",
        sub("pattern: ANOMALY", "command: 'echo " + "x" * 200_000 + "'"),
        M,
        ("collect.anomalies.command", "longer than"),
    ),
    (
        "env var name of 300 characters",
        sub("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}", "V" * 300 + "}"),
        M,
        ("invalid environment variable name", "at most 255"),
    ),
    (
        "flag value of 200 KB",
        sub(
            "    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}\n    levels: [on, off]",
            "    kind: flag\n    flag: --overlap\n    env: {decode: SGLANG_ARGS}\n"
            '    levels: {"off": absent, "on": "' + "x" * 200_000 + '"}',
        ),
        M,
        ("factors.overlap.levels.on", "128 KiB"),
    ),
    (
        "env value of 200 KB",
        sub('SGLANG_EXTRA_ARGS: "--disable-cuda-graph"', 'SGLANG_EXTRA_ARGS: "' + "x" * 200_000 + '"'),
        M,
        ("factors.cuda_graph.levels.off.decode.SGLANG_EXTRA_ARGS", "128 KiB"),
    ),
    # ---- regexes
    ("regex unbalanced", sub("(?P<n>\\d+)'", "(?P<n>\\d+'"), M, ("repro.metrics.corruption.regex", "regular exp")),
    (
        "regex 2,000 characters",
        sub("'CORRUPTION", "'" + "a" * 2000 + "CORRUPTION"),
        M,
        ("repro.metrics.corruption.regex", "longer than"),
    ),
    ("regex huge repeat", sub("(?P<k>\\d+)", "(?P<k>\\d{99999999999})"), M, ("repro.metrics.corruption.regex",)),
    ("proportion without groups", sub("(?P<k>\\d+)/(?P<n>\\d+)", "(\\d+)/(\\d+)"), M, ("named groups",)),
    (
        "number metric with two groups",
        sub("\ncollect:", "\n    wall: {regex: '(a)(b)'}\ncollect:"),
        M,
        ("repro.metrics.wall.regex",),
    ),
    ("collector pattern invalid", sub("pattern: ANOMALY", "pattern: '[unclosed'"), M, ("collect.anomalies.pattern",)),
    # every regex may take a second a trial: 20,000 metrics validated and would take hours a trial
    (
        "33 metrics",
        sub("\ncollect:", "".join(f"\n    m{i}: {{regex: 'm{i}=([0-9]+)'}}" for i in range(32)) + "\ncollect:"),
        M,
        ("repro.metrics: has 33 entries; at most 32 are allowed",),
    ),
    (
        "33 collectors",
        add("".join(f"  c{i}: {{role: decode, pattern: C{i}}}\n" for i in range(32))),
        M,
        ("collect: has 33 entries; at most 32 are allowed",),
    ),
    ("collector pattern and command", sub("pattern: ANOMALY", "pattern: A, command: 'echo 1'"), M, ("exactly one",)),
    # ---- names and values
    ("factor name ending in newline", sub("  overlap:", '  "overlap\\n":'), M, ("invalid factor name",)),
    ("factor name with NUL", sub("  overlap:", '  "over\\0lap":'), M, ("invalid factor name",)),
    ("factor name with slash", sub("  overlap:", '  "../x":'), M, ("invalid factor name",)),
    ("level name with NUL", sub("      on: {decode", '      "o\\0n": {decode'), M, ("invalid level name",)),
    ("level name with newline", sub("      on: {decode", '      "on\\n": {decode'), M, ("invalid level name",)),
    (
        "level name ending in newline (list)",
        sub("levels: [on, off]", 'levels: ["on\\n", off]'),
        M,
        ("levels[0]",),
    ),
    ("level name with comma", sub("      on: {decode", '      "a,b": {decode'), M, ("invalid level name",)),
    ("level name with =", sub("      on: {decode", '      "a=b": {decode'), M, ("invalid level name",)),
    (
        "level name 1,000 chars",
        sub("      on: {decode", "      " + "x" * 1000 + ": {decode"),
        M,
        ("invalid level name 'xxxxxxxx", "... (1,000 characters)", "at most 128 characters"),
    ),
    (
        "env var ending in newline",
        sub('{SGLANG_EXTRA_ARGS: ""}', '{"SGLANG_EXTRA_ARGS\\n": ""}'),
        M,
        ("invalid environment variable name",),
    ),
    (
        "short-form env var ending in newline",
        sub("decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}", 'decode: "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP\\n"}'),
        M,
        ("invalid environment variable name",),
    ),
    (
        "env var starting with a digit",
        sub('{SGLANG_EXTRA_ARGS: ""}', '{1VAR: ""}'),
        M,
        ("invalid environment variable name",),
    ),
    ("env var with a space", sub('{SGLANG_EXTRA_ARGS: ""}', '{"A B": ""}'), M, ("invalid environment variable",)),
    ("env var with =", sub('{SGLANG_EXTRA_ARGS: ""}', '{"A=B": ""}'), M, ("invalid environment variable",)),
    ("value with newline", sub('SGLANG_EXTRA_ARGS: ""}', 'SGLANG_EXTRA_ARGS: "a\\nb"}'), M, ("line break",)),
    ("value with NUL", sub('SGLANG_EXTRA_ARGS: ""}', 'SGLANG_EXTRA_ARGS: "a\\0b"}'), M, ("NUL",)),
    ("value with ESC", sub('SGLANG_EXTRA_ARGS: ""}', 'SGLANG_EXTRA_ARGS: "a\\eb"}'), M, ("control character",)),
    ("value with CR", sub('SGLANG_EXTRA_ARGS: ""}', 'SGLANG_EXTRA_ARGS: "a\\rb"}'), M, ("line break",)),
    ("boolean word with newline", add('booleans: ["1\\n", "0"]\n'), M, ("booleans[0]", "control character")),
    ("boolean word with NUL", add('booleans: ["1", "\\0"]\n'), M, ("booleans[1]",)),
    ("three boolean words", add("booleans: ['1', '0', '2']\n"), M, ("booleans",)),
    ("secret name with a space", add("secrets: ['MY TOKEN']\n"), M, ("secrets[0]",)),
    # each declared name is one more alternative of the regex that masks every trial's output and logs
    # (50,000 names: ~19 s a MiB of output, every trial, while the hosts are edited)
    ("300 secret names", add("secrets: [" + ", ".join(f"S{i}" for i in range(300)) + "]\n"), M, ("secrets", "256")),
    ("secret name ending in newline", add('secrets: ["TOKEN\\n"]\n'), M, ("secrets[0]",)),
    (
        "metric name ending in newline",
        sub("    corruption: {kind", '    "corruption\\n": {kind'),
        M,
        ("invalid metric name",),
    ),
    ("collector name with a space", sub("  anomalies:", '  "an omalies":'), M, ("invalid collector name",)),
    ("repro on an option", sub("  timeout: 60", "  timeout: 60\n  on: -oProxyCommand=x"), M, ("repro.on",)),
    ("matrix name with newline", sub("name: bad", 'name: "bad\\nname"'), M, ("name", "control character")),
    (
        "matrix name of 900,000 characters",
        sub("name: bad", "name: " + "N" * 900_000),
        M,
        ("name: a matrix name of at most 200 characters", "(900,000 characters)", "description:"),
    ),
    ("unknown role", sub('{decode: {SGLANG_EXTRA_ARGS: ""}}', '{gpu: {SGLANG_EXTRA_ARGS: ""}}'), M, ("role 'gpu'",)),
    ("duplicate level", sub("levels: [on, off]", "levels: [on, 'on']"), M, ("duplicate level",)),
    ("unknown key", add("replicate: 3\n"), M, ("unknown key 'replicate'",)),
    ("exclude of an unknown factor", add("exclude: [{nope: on}]\n"), M, ("exclude[0].nope",)),
    ("baseline of an unknown level", add("baseline: {overlap: maybe}\n"), M, ("baseline.overlap",)),
    ("an empty exclude", add("exclude: [{}]\n"), M, ("exclude[0]",)),
    ("a one-level factor", sub("levels: [on, off]", "levels: [on]"), M, ("at least 2 levels",)),
    ("metrics empty", sub("  metrics:\n", "  metrics: {}\n  x:\n"), M, ()),
]


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize(
    ("edit", "where", "fragments"), [c[1:] for c in MATRIX_CASES], ids=[c[0] for c in MATRIX_CASES]
)
def test_bad_matrix(
    inputs: Bed, edit: Edit, where: str, fragments: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    inputs.matrix.write_text(edit(MATRIX))
    code, output = run_main(inputs.args(), capsys)
    assert_refused(code, output, where, *fragments)
    inputs.untouched()


EXPANDING = [
    ("repro.command", sub("--seed {trial_seed}", "--seed {trial_seed} # " + "{run_dir}" * 1500)),
    ("repro.warmup", sub("  timeout: 60\n", "  timeout: 60\n  warmup: 'echo " + "{run_dir}" * 1500 + "'\n")),
    ("collect.anomalies.command", sub("pattern: ANOMALY", "command: 'echo " + "{trial_dir}" * 1200 + "'")),
]


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize(("where", "edit"), EXPANDING, ids=[c[0] for c in EXPANDING])
def test_a_command_its_placeholders_make_too_long_to_run_is_refused_before_any_host_is_touched(
    inputs: Bed, where: str, edit: Edit, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command is under the matrix's 16 KiB as written, and over 64 KiB once filled in (over
    128 KiB, Linux cannot run it: before, every trial failed with E2BIG after the hosts were edited)."""
    inputs.matrix.write_text(edit(MATRIX))
    assert len(inputs.matrix.read_text()) < 20_000
    code, output = run_main(inputs.args("run", "--out", str(inputs.root / "reports")), capsys)
    assert_refused(code, output, M, where, "once its placeholders are filled in")
    inputs.untouched()


# ------------------------------------------------------------------ inventory cases
INV = r"local\.yaml:\d+: "  # file:line of the inventory
PREFILL = "      prefill:\n        transport: local\n"


def prefill(line: str) -> Edit:
    """Add `line` (YAML, 8 spaces in) to the prefill host."""
    return sub(PREFILL, PREFILL + f"        {line}\n")


def ssh_host(**ssh: str) -> Edit:
    body = ", ".join(f"{k}: {v}" for k, v in ssh.items())
    return sub(PREFILL, f"      prefill:\n        transport: ssh\n        ssh: {{{body}}}\n")


INVENTORY_CASES: list[tuple[str, Edit, str, tuple[str, ...]]] = [
    ("testbed ../../x", sub("  local-sim:", '  "../../x":'), INV, ("invalid testbed name",)),
    ("testbed .hidden", sub("  local-sim:", "  .hidden:"), INV, ("invalid testbed name",)),
    ("testbed a/b", sub("  local-sim:", "  a/b:"), INV, ("invalid testbed name",)),
    ("testbed -rf", sub("  local-sim:", "  -rf:"), INV, ("invalid testbed name",)),
    ("testbed ending in newline", sub("  local-sim:", '  "sim\\n":'), INV, ("invalid testbed name",)),
    ("testbed with NUL", sub("  local-sim:", '  "s\\0im":'), INV, ("invalid testbed name",)),
    ("role upper case", sub("      prefill:", "      Prefill:"), INV, ("invalid role name",)),
    ("role ending in newline", sub("      prefill:", '      "prefill\\n":'), INV, ("invalid role name",)),
    (
        "url with newline",
        lambda t: re.sub(r"url: (http://127\.0\.0\.1:\d+)", r'url: "\1\\n"', t, count=1),
        INV,
        ("url", "whitespace"),
    ),
    (
        "url with an unclosed IPv6 bracket",
        lambda t: re.sub(r"url: (http://127\.0\.0\.1:\d+)", 'url: "http://[::1"', t, count=1),
        INV,
        ("url", "not an http(s) URL"),
    ),
    (
        "health url with a bracketed non-address",
        lambda t: re.sub(r"health: (http://127\.0\.0\.1:\d+)/health", 'health: "http://[zz]/health"', t, count=1),
        INV,
        ("health", "not an http(s) URL"),
    ),
    (
        "health url with newline",
        lambda t: re.sub(r"health: (http://127\.0\.0\.1:\d+)/health", r'health: "\1/health\\nX"', t, count=1),
        INV,
        ("health", "whitespace"),
    ),
    (
        "health url with a space",
        lambda t: re.sub(r"health: (http://127\.0\.0\.1:\d+)/health", r'health: "\1/he alth"', t, count=1),
        INV,
        ("health", "whitespace"),
    ),
    (
        "health url with a tab",
        lambda t: re.sub(r"health: (http://127\.0\.0\.1:\d+)/health", r'health: "\1/\\thealth"', t, count=1),
        INV,
        ("health",),
    ),
    (
        "url port 0",
        lambda t: re.sub(r"url: http://127\.0\.0\.1:\d+", "url: http://127.0.0.1:0", t, count=1),
        INV,
        ("url", "invalid port"),
    ),
    (
        "url port 70000",
        lambda t: re.sub(r"url: http://127\.0\.0\.1:\d+", "url: http://127.0.0.1:70000", t, count=1),
        INV,
        ("url", "invalid port"),
    ),
    (
        "url port text",
        lambda t: re.sub(r"url: http://127\.0\.0\.1:\d+", "url: http://127.0.0.1:http", t, count=1),
        INV,
        ("url", "invalid port"),
    ),
    (
        "url port empty",
        lambda t: re.sub(r"url: http://127\.0\.0\.1:\d+", "url: http://127.0.0.1:", t, count=1),
        INV,
        ("url",),
    ),
    ("url scheme ftp", lambda t: re.sub(r"url: http://", "url: ftp://", t, count=1), INV, ("not an http(s) URL",)),
    (
        "url without host",
        lambda t: re.sub(r"url: http://127\.0\.0\.1:\d+", "url: http://:30", t, count=1),
        INV,
        ("url",),
    ),
    (
        "health port 99999",
        lambda t: re.sub(r"health: http://127\.0\.0\.1:\d+", "health: http://127.0.0.1:99999", t, count=1),
        INV,
        ("health", "invalid port"),
    ),
    ("unit name -x", sub("name: sim-prefill", "name: -x"), INV, ("invalid unit name",)),
    ("unit name --help", sub("name: sim-prefill", "name: --help"), INV, ("invalid unit name",)),
    ("unit name ending in newline", sub("name: sim-prefill", 'name: "sim-prefill\\n"'), INV, ("invalid unit name",)),
    ("unit name with ;", sub("name: sim-prefill", "name: 'a;reboot'"), INV, ("invalid unit name",)),
    ("unit name with a space", sub("name: sim-prefill", "name: 'a b'"), INV, ("invalid unit name",)),
    ("unit command with NUL", sub("--role, prefill", '--role, "pre\\0fill"'), INV, ("NUL",)),
    ("ssh host -oProxyCommand", ssh_host(host="'-oProxyCommand=touch /tmp/PWNED'"), INV, ("ssh.host",)),
    ("ssh host with ;", ssh_host(host="'a;touch PWNED'"), INV, ("ssh.host",)),
    ("ssh host with $()", ssh_host(host="'$(touch PWNED)'"), INV, ("ssh.host",)),
    ("ssh host with a space", ssh_host(host="'a b'"), INV, ("ssh.host",)),
    ("ssh host ending in newline", ssh_host(host='"gpu1\\n"'), INV, ("ssh.host",)),
    ("ssh host with backtick", ssh_host(host="'`id`'"), INV, ("ssh.host",)),
    ("ssh user with a space", ssh_host(host="gpu1", user="'root x'"), INV, ("ssh.user",)),
    ("ssh user -l", ssh_host(host="gpu1", user="-l"), INV, ("ssh.user",)),
    ("ssh user ending in newline", ssh_host(host="gpu1", user='"root\\n"'), INV, ("ssh.user",)),
    ("ssh port 0", ssh_host(host="gpu1", port="0"), INV, ("ssh.port",)),
    ("ssh port 65536", ssh_host(host="gpu1", port="65536"), INV, ("ssh.port",)),
    ("ssh port text", ssh_host(host="gpu1", port="ssh"), INV, ("ssh.port",)),
    ("ssh key with newline", ssh_host(host="gpu1", key='"/k/id\\n-oX"'), INV, ("ssh.key",)),
    ("ssh connect_timeout 10^9", ssh_host(host="gpu1", connect_timeout="1000000000"), INV, ("connect_timeout",)),
    (
        "ssh connect_timeout true",
        ssh_host(host="gpu1", connect_timeout="true"),
        INV,
        ("connect_timeout", "not a number"),
    ),
    ("health_timeout on", sub("health_timeout: 60", "health_timeout: on"), INV, ("health_timeout", "YAML reads on")),
    ("env_file with NUL", sub("env_file: local/prefill.env", 'env_file: "local/pre\\0fill.env"'), INV, ("env_file",)),
    (
        "env_file with newline",
        sub("env_file: local/prefill.env", 'env_file: "local/prefill.env\\nx"'),
        INV,
        ("env_file",),
    ),
    ("health_timeout infinite", sub("health_timeout: 60", "health_timeout: .inf"), INV, ("health_timeout",)),
    ("health_timeout 10^9", sub("health_timeout: 60", "health_timeout: 1000000000"), INV, ("health_timeout",)),
    ("startup_estimate nan", sub("startup_estimate: 1.2", "startup_estimate: .nan"), INV, ("startup_estimate",)),
    ("state_dir with newline", sub("state_dir: .orch/local-sim", 'state_dir: ".orch/x\\ny"'), INV, ("state_dir",)),
    ("inventory alias bomb", whole(bomb()), INV, ("once aliases are expanded",)),
    ("inventory 10,000 nesting", whole("testbeds: " + "[" * 10_000 + "]" * 10_000 + "\n"), INV, ("nesting",)),
    ("inventory self alias", whole("testbeds: &t {a: *t}\n"), INV, ("refers to its own anchor",)),
    ("after a cycle", prefill("after: [router]"), INV, ("cycle",)),
    ("unknown host key", prefill("gpus: 8"), INV, ("unknown key 'gpus'",)),
]


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize(
    ("edit", "where", "fragments"), [c[1:] for c in INVENTORY_CASES], ids=[c[0] for c in INVENTORY_CASES]
)
def test_bad_inventory(
    inputs: Bed, edit: Edit, where: str, fragments: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    inputs.inventory.write_text(edit(inputs.inventory.read_text()))
    code, output = run_main(inputs.args(), capsys)
    assert_refused(code, output, where, *fragments)
    inputs.untouched()


# ------------------------------------------------------------------ files that are not files
def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _big(path: Path) -> Path:
    path.write_text("name: big\n" + ("# padding " * 12_000 + "\n") * 10)  # > 1 MiB of comments
    return path


def _binary(path: Path) -> Path:
    path.write_bytes(b"name: \xff\xfe\x00bad\n")
    return path


def _sparse(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(8 << 30)  # 8 GiB of NULs, no disk used
    return path


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def _zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _loop(path: Path) -> Path:
    path.symlink_to(path)
    return path


SPECIAL_FILES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("/dev/zero", lambda _p: Path("/dev/zero"), "not a regular file"),
    ("/dev/urandom", lambda _p: Path("/dev/urandom"), "not a regular file"),
    ("/dev/null", lambda _p: Path("/dev/null"), "not a regular file"),
    ("a FIFO", _fifo, "a FIFO"),
    ("a directory", _directory, "a directory"),
    ("a symlink to /dev/zero", _zero_link, "not a regular file"),
    ("a symlink loop", _loop, ""),
    ("an 8 GiB sparse file", _sparse, "larger than 1 MiB"),
    ("over 1 MiB", _big, "larger than 1 MiB"),
    ("not UTF-8", _binary, "not UTF-8"),
    ("missing", lambda p: p, "not found"),
]


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize("role", ["matrix", "inventory"])
@pytest.mark.parametrize(("make", "fragment"), [c[1:] for c in SPECIAL_FILES], ids=[c[0] for c in SPECIAL_FILES])
def test_a_file_that_is_not_a_small_regular_file(
    inputs: Bed, role: str, make: Callable[[Path], Path], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make(inputs.root / "special.yaml")
    args = ["validate", str(path), "-i", str(inputs.inventory)]
    if role == "inventory":
        args = ["validate", str(inputs.matrix), "-i", str(path)]
    code, output = run_main(args, capsys)
    assert_refused(code, output, re.escape(path.name), *([fragment] if fragment else []))
    inputs.untouched()


# ------------------------------------------------------------------ flags
def _bigger_matrix(inputs: Bed) -> None:
    extra = "".join(f"  f{i}: {{env: {{decode: V{i}}}, levels: [a, b]}}\n" for i in range(4))
    inputs.matrix.write_text(MATRIX.replace("factors:\n", "factors:\n" + extra))  # 64 cells


FLAG_CASES: list[tuple[str, list[str], str, tuple[str, ...]]] = [
    ("--replicates 10^9 (plan)", ["plan", "{m}", "-i", "{i}", "--replicates", "1000000000"], r"--replicates", ()),
    (
        "--replicates 10^9 (run)",
        ["run", "{m}", "-i", "{i}", "--replicates", "1000000000", "--out", "{r}"],
        r"--replicates",
        (),
    ),
    (
        "--replicates 10^9 (dry run)",
        ["run", "{m}", "-i", "{i}", "--dry-run", "--replicates", "1000000000"],
        r"--replicates",
        (),
    ),
    (
        "--replicates 100,000 x 64 cells",
        ["plan", "{m}", "-i", "{i}", "--replicates", "100000"],
        r"--replicates",
        ("1,000,000 trials",),
    ),
    ("--replicates 0", ["plan", "{m}", "-i", "{i}", "--replicates", "0"], r"--replicates", ()),
    ("--replicates -5", ["plan", "{m}", "-i", "{i}", "--replicates", "-5"], r"--replicates", ()),
    ("--replicates text", ["plan", "{m}", "-i", "{i}", "--replicates", "lots"], r"--replicates", ()),
    ("--replicates 5,000 digits", ["plan", "{m}", "-i", "{i}", "--replicates", "9" * 5000], r"--replicates", ()),
    ("--retries 10^9", ["run", "{m}", "-i", "{i}", "--retries", "1000000000", "--out", "{r}"], r"--retries", ()),
    ("--retries text", ["run", "{m}", "-i", "{i}", "--retries", "x", "--out", "{r}"], r"--retries", ()),
    ("--seed text", ["plan", "{m}", "-i", "{i}", "--seed", "abc"], r"--seed", ()),
    ("--seed negative", ["plan", "{m}", "-i", "{i}", "--seed=-1"], r"--seed", ()),
    ("--seed 2^70", ["run", "{m}", "-i", "{i}", "--seed", str(2**70), "--out", "{r}"], r"--seed", ()),
    ("serve --port 70000", ["serve", "--reports", "{root}", "--port", "70000"], r"--port", ()),
    ("serve --port -1", ["serve", "--reports", "{root}", "--port=-1"], r"--port", ()),
    ("queue remove 10^23", ["queue", "remove", "--reports", "{root}", "9" * 23], r"ID", ()),
    (
        "queue add --priority 10^23",
        ["queue", "add", "{m}", "-i", "{i}", "--reports", "{root}", "--priority", "9" * 23],
        r"--priority",
        (),
    ),
    (
        "schedule --on-active inf",
        ["schedule", "install", "x", "--on-active", "inf", "--unit-dir", "{root}/units"],
        r"--on-active",
        (),
    ),
    (
        "schedule --on-active nan",
        ["schedule", "install", "x", "--on-active", "nan", "--unit-dir", "{root}/units"],
        r"--on-active",
        (),
    ),
    (
        "schedule --on-active 10^12",
        ["schedule", "install", "x", "--on-active", "1e12", "--unit-dir", "{root}/units"],
        r"--on-active",
        (),
    ),
    ("-t ,,", ["validate", "{m}", "-i", "{i}", "-t", ",,"], r"-t ',,'", ()),
    ("-t a,a", ["validate", "{m}", "-i", "{i}", "-t", "local-sim,local-sim"], r"-t", ("twice",)),
    ("-t unknown", ["validate", "{m}", "-i", "{i}", "-t", "nope"], r"local\.yaml", ("no testbed named 'nope'",)),
    ("-t empty", ["validate", "{m}", "-i", "{i}", "-t", ""], r"-t", ()),
    ("-i missing", ["validate", "{m}", "-i", "{root}/nope.yaml"], r"nope\.yaml", ("not found",)),
    ("--run-id ../x", ["run", "{m}", "-i", "{i}", "--run-id", "../x", "--out", "{r}"], r"run id", ()),
    ("--run-id with newline", ["run", "{m}", "-i", "{i}", "--run-id", "a\nb", "--out", "{r}"], r"run id", ()),
    ("unknown command", ["frobnicate"], r"invalid choice", ()),
    ("--format xls", ["export", "{root}", "--format", "xls"], r"--format", ()),
]


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize(("argv", "where", "fragments"), [c[1:] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES])
def test_bad_flag(
    inputs: Bed, argv: list[str], where: str, fragments: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    _bigger_matrix(inputs)
    values = {
        "m": str(inputs.matrix),
        "i": str(inputs.inventory),
        "r": str(inputs.root / "reports"),
        "root": str(inputs.root),
    }
    code, output = run_main([a.format(**values) if "{" in a else a for a in argv], capsys)
    assert_refused(code, output, where, *fragments)
    inputs.untouched()


# ------------------------------------------------------------------ export and run folders
@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    manifest, records = synthetic_run(replicates=1)
    return write_run(tmp_path / "reports" / manifest.run_id, manifest, records)


@pytest.fixture
def other_run(tmp_path: Path) -> Path:
    """A second, sound run of the same matrix: what `orch compare` sets a damaged run against."""
    manifest, records = synthetic_run(replicates=1, seed=2, run_id="20260510-070000-overlap_ablation")
    return write_run(tmp_path / "reports" / manifest.run_id, manifest, records)


def _compared_both_ways(
    run_dir: Path, other: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> list[tuple[int, str]]:
    """`orch compare` with the damaged run as A, then as B: each side's reading must refuse it."""
    return [run_main(["compare", str(a), str(b), *extra], capsys) for a, b in ((run_dir, other), (other, run_dir))]


def _out_missing_folder(tmp: Path) -> Path:
    return tmp / "no" / "such" / "x.csv"


def _out_folder(tmp: Path) -> Path:
    return tmp


def _out_under_a_file(tmp: Path) -> Path:
    (tmp / "file").write_text("x")
    return tmp / "file" / "x.csv"


def _out_read_only_folder(tmp: Path) -> Path:
    folder = tmp / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    return folder / "x.csv"


def _out_proc(_tmp: Path) -> Path:
    return Path("/proc/orch-export.csv")


EXPORT_CASES = [
    ("missing folder", _out_missing_folder, "does not exist"),
    ("a folder", _out_folder, "is a folder"),
    ("under a file", _out_under_a_file, "is not a folder"),
    ("/proc", _out_proc, "--output"),
]


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize(("where", "fragment"), [c[1:] for c in EXPORT_CASES], ids=[c[0] for c in EXPORT_CASES])
def test_export_to_a_bad_path(
    tmp_path: Path, run_dir: Path, where: Callable[[Path], Path], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = where(tmp_path)
    code, output = run_main(["export", str(run_dir), "-o", str(out)], capsys)
    assert_refused(code, output, r"--output", fragment)
    assert not out.is_file()


@pytest.mark.timeout(CASE_LIMIT_S)
def test_export_to_a_read_only_folder(tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _out_read_only_folder(tmp_path)
    if os.geteuid() == 0:  # root writes anywhere: a folder on a read-only mount is the same refusal
        out = Path("/proc/self/orch.csv")
    code, output = run_main(["export", str(run_dir), "-o", str(out)], capsys)
    assert_refused(code, output, r"--output")


def _fifo_run_json(run_dir: Path) -> None:
    (run_dir / "run.json").unlink()
    os.mkfifo(run_dir / "run.json")


def _zero_run_json(run_dir: Path) -> None:
    (run_dir / "run.json").unlink()
    (run_dir / "run.json").symlink_to("/dev/zero")


def _sparse_plan_json(run_dir: Path) -> None:
    import json

    manifest = json.loads((run_dir / "run.json").read_text())
    manifest.update(plan=[], plan_trials=3, plan_sha256="0" * 64)
    (run_dir / "run.json").write_text(json.dumps(manifest))
    with open(run_dir / "plan.json", "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse


def _fifo_journal(run_dir: Path) -> None:
    (run_dir / "journal.jsonl").unlink()
    os.mkfifo(run_dir / "journal.jsonl")


def _zero_journal(run_dir: Path) -> None:
    (run_dir / "journal.jsonl").unlink()
    (run_dir / "journal.jsonl").symlink_to("/dev/zero")


def _long_line_journal(run_dir: Path) -> None:
    with open(run_dir / "journal.jsonl", "ab") as f:
        f.write(b'{"x": "' + b"a" * (17 << 20) + b'"}\n')


def _long_last_line_journal(run_dir: Path) -> None:
    with open(run_dir / "journal.jsonl", "ab") as f:
        f.write(b" " * (40 << 20) + b"\n")


def _directory_journal(run_dir: Path) -> None:
    (run_dir / "journal.jsonl").unlink()
    (run_dir / "journal.jsonl").mkdir()


def _escaping_run_id(run_dir: Path) -> None:
    """run.json names its run "../victim/run": `orch export` wrote <run>/../victim/run.json over
    another run's manifest, and `orch compare` builds its page's name from the same field."""
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["run_id"] = "../victim/run"
    (run_dir / "run.json").write_text(json.dumps(manifest))


RUN_FOLDER_CASES: list[tuple[str, Callable[[Path], None], str, str]] = [
    ("run.json a FIFO", _fifo_run_json, r"not a run directory", ""),
    ("run.json /dev/zero", _zero_run_json, r"not a run directory", ""),
    ("plan.json 1 TiB", _sparse_plan_json, r"plan\.json", "larger than"),
    ("journal a FIFO", _fifo_journal, r"journal\.jsonl", "not a regular file"),
    ("journal /dev/zero", _zero_journal, r"journal\.jsonl", "not a regular file"),
    ("journal a directory", _directory_journal, r"journal\.jsonl", "not a regular file"),
    ("journal line of 17 MiB", _long_line_journal, r"journal\.jsonl:\d+", "longer than"),
    ("journal 40 MiB blank tail", _long_last_line_journal, r"journal\.jsonl", "longer than"),
    ("run id leaving the folder", _escaping_run_id, r"run\.json", "invalid run id '../victim/run'"),
]


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize("command", ["report", "export", "compare"])
@pytest.mark.parametrize(
    ("damage", "where", "fragment"), [c[1:] for c in RUN_FOLDER_CASES], ids=[c[0] for c in RUN_FOLDER_CASES]
)
def test_a_damaged_run_folder(
    run_dir: Path,
    other_run: Path,
    command: str,
    damage: Callable[[Path], None],
    where: str,
    fragment: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    damage(run_dir)
    if command == "compare":
        results = _compared_both_ways(run_dir, other_run, capsys)
    else:
        results = [run_main([command, str(run_dir)], capsys)]
    for code, output in results:
        assert_refused(code, output, where, *([fragment] if fragment else []))


def _edit_metric(name: str, **fields: object) -> Callable[[Path], None]:
    """Set fields of one metric on the journal's first trial line (line 2), as a hand edit would."""

    def edit(run_dir: Path) -> None:
        import json

        path = run_dir / "journal.jsonl"
        lines = path.read_bytes().split(b"\n")
        record = json.loads(lines[1])
        record["metrics"][name].update(fields)
        lines[1] = json.dumps(record).encode()
        path.write_bytes(b"\n".join(lines))

    return edit


def _deep_line(run_dir: Path) -> None:
    path = run_dir / "journal.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines.insert(1, b'{"type":"event","schema_version":1,"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    path.write_bytes(b"\n".join(lines))


JOURNAL_LINE_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("k above n", _edit_metric("corruption", k=10, n=8), "k=10 is more than n=8"),
    ("k negative", _edit_metric("corruption", k=-1), "corruption.k"),
    ("n 10**30", _edit_metric("corruption", k=1, n=10**30), "corruption.n"),
    ("number infinite", _edit_metric("wall", value=float("inf")), "wall.value"),
    ("nested 200,000 deep", _deep_line, "nested too deeply"),
]


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize("command", ["report", "export", "compare"])
@pytest.mark.parametrize(
    ("damage", "fragment"), [c[1:] for c in JOURNAL_LINE_CASES], ids=[c[0] for c in JOURNAL_LINE_CASES]
)
def test_a_damaged_journal_line(
    tmp_path: Path,
    run_dir: Path,
    other_run: Path,
    command: str,
    damage: Callable[[Path], None],
    fragment: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every reader refuses the line at file:line, exit 2: no traceback, no export of bogus counts."""
    damage(run_dir)
    if command == "compare":
        results = _compared_both_ways(run_dir, other_run, capsys, "-o", str(tmp_path / "c.html"))
    else:
        out = ["-o", str(tmp_path / "x.csv")] if command == "export" else []
        results = [run_main([command, str(run_dir), *out], capsys)]
    for code, output in results:
        assert_refused(code, output, r"journal\.jsonl:2:", fragment)
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "c.html").exists()


@pytest.mark.timeout(CASE_LIMIT_S)
def test_compare_refuses_a_run_id_that_leaves_the_reports_folder(
    tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    _escaping_run_id(other)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, output = run_main(["compare", str(run_dir), str(other)], capsys)
    assert_refused(code, output, r"run\.json", "invalid run id")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no page written anywhere


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize("command", ["resume", "restore"])
@pytest.mark.parametrize("damage", [_fifo_run_json, _zero_run_json], ids=["FIFO", "/dev/zero"])
def test_resume_and_restore_refuse_a_run_json_that_is_not_a_file(
    run_dir: Path, command: str, damage: Callable[[Path], None], capsys: pytest.CaptureFixture[str]
) -> None:
    damage(run_dir)
    code, output = run_main([command, str(run_dir)], capsys)
    assert_refused(code, output, "not a run directory")


# ------------------------------------------------------------------ as a subprocess, memory-bounded
def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


SUBPROCESS_CASES: list[tuple[str, Callable[[Bed], list[str]], str]] = [
    ("alias bomb", lambda b: (b.matrix.write_text(bomb(10, 10)), b.args())[1], "once aliases are expanded"),
    ("inventory alias bomb", lambda b: (b.inventory.write_text(bomb(10, 10)), b.args())[1], "once aliases"),
    ("10,000 nesting", lambda b: (b.matrix.write_text("a: " + "[" * 10_000 + "]" * 10_000), b.args())[1], "nesting"),
    ("self alias", lambda b: (b.matrix.write_text("a: &x [*x]\n"), b.args())[1], "refers to its own anchor"),
    ("/dev/zero", lambda b: ["validate", "/dev/zero", "-i", str(b.inventory)], "not a regular file"),
    (
        "an 8 GiB sparse matrix",
        lambda b: ["validate", str(_sparse(b.root / "s.yaml")), "-i", str(b.inventory)],
        "larger than 1 MiB",
    ),
    ("--replicates 10^9", lambda b: b.args("plan", "--replicates", "1000000000"), "--replicates"),
    (
        "a format spec of 10^9",
        lambda b: (
            b.matrix.write_text(MATRIX.replace("{router_url}", "{router_url:>999999999}")),
            b.args("run", "--dry-run"),
        )[1],
        "format spec",
    ),
]


@pytest.mark.process
@pytest.mark.timeout(30)
@pytest.mark.parametrize(("setup", "fragment"), [c[1:] for c in SUBPROCESS_CASES], ids=[c[0] for c in SUBPROCESS_CASES])
def test_in_a_subprocess_with_1_gib_of_memory(inputs: Bed, setup: Callable[[Bed], list[str]], fragment: str) -> None:
    argv = setup(inputs)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=25,
        preexec_fn=_limit_memory,
        env=env,
        cwd=inputs.root,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "MemoryError" not in output and TRACEBACK not in done.stderr, output
    assert fragment in " ".join(output.split())
    inputs.untouched()


def _wide(bed: Bed, flags: int, exclude: str = "") -> Path:
    """The good matrix with `flags` more binary factors (and an `exclude:` section)."""
    more = "".join(f"  f{i}:\n    env: {{decode: F{i}}}\n    levels: [a, b]\n" for i in range(flags))
    bed.matrix.write_text(MATRIX.replace("factors:\n", "factors:\n" + more) + exclude)
    return bed.matrix


def _many_excludes(count: int) -> str:
    """`count` three-factor selectors (duplicates included) and four that halve the product 4 times."""
    rows = [f"  - {{f{i % 14}: b, f{(i + 1) % 14}: a, f{(i + 5) % 14}: b}}\n" for i in range(count)]
    return "exclude:\n" + "".join(rows) + "".join(f"  - {{f{i}: b}}\n" for i in range(4))


AT_THE_LIMITS: list[tuple[str, Callable[[Bed], list[str]], str]] = [
    (
        "4,096 cells (plan)",
        lambda b: (_wide(b, 10), b.args("plan", "--replicates", "4"))[1],
        "4,096 cells x 4 replicates = 16,384 trials",
    ),
    ("400,000 trials (plan --trials)", lambda b: b.args("plan", "--replicates", "100000", "--trials"), "400,000 rows"),
    (
        "a 65,536-cell product and 5,000 exclude selectors (validate)",
        lambda b: (_wide(b, 14, _many_excludes(5000)), b.args())[1],
        "cells",
    ),
]


@pytest.mark.process
@pytest.mark.timeout(150)
@pytest.mark.parametrize(("setup", "fragment"), [c[1:] for c in AT_THE_LIMITS], ids=[c[0] for c in AT_THE_LIMITS])
def test_inputs_at_the_limits_finish_in_1_gib_of_memory(
    inputs: Bed, setup: Callable[[Bed], list[str]], fragment: str
) -> None:
    """The largest matrices orch accepts are planned, not hung on: `orch plan` of 4,096 cells
    took 180 s and 2.7 GB, of 800,000 trials over 300 s and 13 GB (the power simulation held every
    cell of every sweep), and exclude tested each cell against each selector. The timeout is a
    hang guard, not a speed test (bench/ measures speed)."""
    argv = setup(inputs)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=140,
        preexec_fn=_limit_memory,
        env=env,
        cwd=inputs.root,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert fragment in output, output[-3000:]
    inputs.untouched()


# ------------------------------------------------------------------ bounded at the edges
# the engine's deadline is CPU time (MATCH_TIMEOUT_S a metric): the wall-clock guard allows a loaded machine
REGEX_LIMIT_S = 60
CATASTROPHIC = ["(a+)+$", "(a|aa)+$", "^(\\w+\\s?)*$", "(x+x+)+y"]
# the match bound under test, scaled down from MATCH_TIMEOUT_S's 1 s: these patterns never finish
# (a sim test runs one at the shipped value), so any bound ends them the same way
MATCH_BOUND_S = 0.2


@pytest.fixture
def match_bound(monkeypatch: pytest.MonkeyPatch) -> float:
    from orchestrator.edges import workload

    monkeypatch.setattr(workload, "MATCH_TIMEOUT_S", MATCH_BOUND_S)
    return MATCH_BOUND_S


@pytest.mark.timeout(REGEX_LIMIT_S)
@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_metric_regex_is_a_workload_failure_naming_the_metric(pattern: str, match_bound: float) -> None:
    from orchestrator.core.model import MetricSpec
    from orchestrator.edges.workload import extract_metrics
    from orchestrator.errors import WorkloadError

    text = "progress\n" + ("a" if "x" not in pattern else "x") * 50_000 + "!\n"
    with pytest.raises(WorkloadError, match=rf"slow_metric \(/.*/ took longer than {match_bound:g} s"):
        extract_metrics(text, [MetricSpec("slow_metric", "number", pattern)])


@pytest.mark.timeout(REGEX_LIMIT_S)
def test_a_catastrophic_collector_pattern_is_a_workload_failure_naming_the_collector(match_bound: float) -> None:
    from orchestrator.edges.workload import count_matching_lines
    from orchestrator.errors import WorkloadError

    with pytest.raises(WorkloadError, match=rf"collector 'anomalies': .* took longer than {match_bound:g} s"):
        count_matching_lines("anomalies", "(a+)+$", "ok\n" + "a" * 50_000 + "!\n")
    assert count_matching_lines("anomalies", "ANOMALY", "x ANOMALY\ny\nANOMALY z\n") == 2


def test_metric_extraction_scans_a_bounded_tail() -> None:
    from orchestrator.core.model import MetricSpec
    from orchestrator.edges.workload import MAX_SCAN_CHARS, extract_metrics

    head = "wall=1.0s\n"  # beyond the scanned tail: a 4 MiB+ chatty repro is not held whole
    text = head + "x" * MAX_SCAN_CHARS + "\nwall=2.5s\n"
    assert extract_metrics(text, [MetricSpec("wall", "number", r"wall=(?P<value>[0-9.]+)s")])["wall"].value == 2.5


@pytest.mark.parametrize(
    ("host", "user"), [("-oProxyCommand=x", "root"), ("a b", "root"), ("h;id", "root"), ("h", "-l"), ("h", "a b")]
)
def test_ssh_transport_refuses_an_option_or_shell_syntax_as_host_or_user(host: str, user: str) -> None:
    from orchestrator.edges.transport.ssh import SshTransport
    from orchestrator.errors import ConfigError

    with pytest.raises(ConfigError, match="ssh.(host|user)"):
        SshTransport("decode", host, user=user)


def test_unit_names_reach_systemctl_and_journalctl_as_operands_never_options() -> None:
    """Defence in depth: config refuses a unit named -x; the edge still puts it after `--`."""
    import re as re_

    from fakes import FakeTransport

    from orchestrator.edges.services.systemd import SystemdManager

    t = FakeTransport("decode")
    t.script(re_.compile(r"."), stdout="")
    m = SystemdManager(t, "decode")
    m.stop("-x")
    m.reset_failed("--help")
    m.logs_since("-x", 0.0)
    stop, reset, logs = t.commands()
    assert stop.endswith("stop -- -x") and reset.endswith("reset-failed -- --help"), (stop, reset)
    assert "journalctl -q --unit=-x " in logs, logs


def _env_fifo(root: Path) -> str:
    os.mkfifo(root / "fifo.env")
    return str(root / "fifo.env")


def _env_big(root: Path) -> str:
    with open(root / "big.env", "wb") as f:
        f.truncate(1 << 30)  # sparse
    return str(root / "big.env")


@pytest.mark.process
@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize(
    "env_file",
    [lambda _r: "/dev/zero", lambda _r: "/dev/urandom", _env_fifo, _env_big, lambda r: str(r)],
    ids=["/dev/zero", "/dev/urandom", "a FIFO", "1 GiB", "a directory"],
)
def test_an_env_file_that_is_not_a_small_file_is_refused_before_any_edit(
    inputs: Bed, env_file: Callable[[Path], str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = env_file(inputs.root)
    inputs.inventory.write_text(
        inputs.inventory.read_text().replace("env_file: local/prefill.env", f"env_file: {path}", 1)
    )
    out = inputs.root / "reports"
    code, output = run_main(inputs.args("run", "--out", str(out)), capsys)
    assert_refused(code, output, re.escape(path.rstrip("/")), "nothing was changed")
    assert not out.exists() or not any(out.iterdir())
    now = {p.name: p.read_bytes() for p in (inputs.root / "local").glob("*.env")}
    assert now == inputs.env_files and not any(port_open(p) for p in inputs.ports)


@pytest.mark.sim
@pytest.mark.timeout(300)
def test_a_catastrophic_regex_fails_its_trials_and_the_sweep_ends_with_hosts_restored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hang the issue found: `(a+)+$` over a long line while every host is changed. Now each
    trial fails naming the metric within the deadline, and the sweep ends and restores."""
    from helpers.sim_sweep import ENV_FILES, make_inventory

    from orchestrator.store.journal import read_journal

    inventory, ports = make_inventory(tmp_path)
    matrix = tmp_path / "slow.yaml"
    matrix.write_text(
        textwrap.dedent("""\
        name: slow_regex
        factors:
          overlap:
            env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
            levels: [on, off]
        replicates: 1
        seed: 1
        repro:
          command: "{python} -c \\"print('a' * 50000 + '!')\\""
          timeout: 30
          metrics:
            slow_metric: {regex: '(a+)+$'}
        """)
    )
    out = tmp_path / "reports"
    code, output = run_main(["run", str(matrix), "-i", str(inventory), "--out", str(out), "--run-id", "r"], capsys)
    assert code == 1, output
    assert TRACEBACK not in output
    trials = [r for r in read_journal(out / "r" / "journal.jsonl").records if getattr(r, "status", None) == "failed"]
    assert len(trials) == 2, output
    assert all("slow_metric" in (t.failure.message if t.failure else "") for t in trials)
    assert all("took longer than" in (t.failure.message if t.failure else "") for t in trials)
    for name, text in ENV_FILES.items():
        assert (tmp_path / name).read_bytes() == text.encode(), f"{name} was not restored"
    assert not any(port_open(p) for p in ports)


@pytest.mark.testbed
@pytest.mark.timeout(120)
def test_a_remote_env_file_that_is_not_a_regular_file_is_refused_over_ssh(testbed) -> None:  # type: ignore[no-untyped-def]
    """Over SSH too: /dev/zero and a FIFO named as an env file end in a clear refusal, not a
    `cat` that never ends or blocks until the file-operation timeout; a plain file still reads."""
    from testbed.helpers import transport

    from orchestrator.errors import ConfigError

    t = transport(testbed, "decode")
    fifo = f"/var/tmp/orch-bad-input-{os.getpid()}.fifo"
    try:
        testbed.ssh("decode", f"rm -f {fifo} && mkfifo {fifo} && printf 'K=1\\n' > {fifo}.env")
        for path in ("/dev/zero", fifo, "/var/tmp"):
            with pytest.raises(ConfigError, match="not a regular file"):
                t.read_bytes(path)
        assert t.read_bytes(f"{fifo}.env") == b"K=1\n"
    finally:
        testbed.ssh("decode", f"rm -f {fifo} {fifo}.env")
        t.close()
