"""Bad input for the issue 14 shapes: flag factors, client factors, roles of several hosts.

Each case runs `orch validate` on a private copy of the bundled inventory (free ports) and a good
matrix with one mistake, and must end with exit code 2, one error naming the file and line, no
traceback, and no env file changed."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.shipped import private_inventory

from orchestrator.cli.main import main

MATRIX = textwrap.dedent("""\
    name: shapes
    factors:
      cuda_graph:
        kind: flag
        flag: --disable-cuda-graph
        env: {decode: SGLANG_EXTRA_ARGS}
        levels: {on: absent, off: present}
      max_bs:
        kind: flag
        flag: --cuda-graph-max-bs
        env: {decode: SGLANG_EXTRA_ARGS}
        levels: {default: null, "64": "64"}
      concurrency:
        kind: client
        levels: ["8", "32"]
    repro:
      command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions {concurrency}"
      metrics:
        corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
    """)
M = r"m\.yaml:\d+: "
INV = r"local\.yaml:\d+: "
Edit = Callable[[str], str]


def sub(old: str, new: str) -> Edit:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], matrix: str, inventory_edit: Edit | None = None):  # type: ignore[no-untyped-def]
    inventory, _ = private_inventory(tmp_path)
    if inventory_edit is not None:
        inventory.write_text(inventory_edit(inventory.read_text()))
    (tmp_path / "m.yaml").write_text(matrix)
    before = {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")}
    try:
        code = main(["validate", str(tmp_path / "m.yaml"), "-i", str(inventory)])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")} == before
    return code, captured.out + captured.err


def test_the_good_shapes_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(tmp_path, capsys, MATRIX)
    assert code == 0, out


MATRIX_CASES: list[tuple[str, Edit, tuple[str, ...]]] = [
    (
        "flag without env",
        sub("    env: {decode: SGLANG_EXTRA_ARGS}\n    levels: {on", "    levels: {on"),
        ("needs `flag:` and `env:`",),
    ),
    ("flag without flag:", sub("    flag: --disable-cuda-graph\n", ""), ("needs `flag:` and `env:`",)),
    ("flag name not an option", sub("flag: --disable-cuda-graph", "flag: 'rm -rf'"), ("invalid flag",)),
    (
        "flag: on an env factor",
        sub("  cuda_graph:\n    kind: flag\n", "  cuda_graph:\n"),
        ("`flag:` needs `kind: flag`",),
    ),
    (
        "present mixed with values",
        sub('levels: {default: null, "64": "64"}', 'levels: {on: present, "64": "64"}'),
        ("mixes a boolean flag",),
    ),
    ("flag value with newline", sub('"64": "64"}', '"64": "6\\n4"}'), ("invalid flag value",)),
    ("flag value mapping", sub('"64": "64"}', '"64": {decode: {X: "1"}}}'), ("plain value",)),
    (
        "same flag in two factors",
        sub("flag: --cuda-graph-max-bs", "flag: --disable-cuda-graph"),
        ("also set by factor 'cuda_graph'",),
    ),
    (
        "env factor on the args variable",
        sub(
            "  concurrency:\n",
            "  whole:\n    env: {decode: SGLANG_EXTRA_ARGS}\n    levels: [a, b]\n  concurrency:\n",
        ),
        ("is also set by factor",),
    ),
    (
        "flag env var name",
        sub("env: {decode: SGLANG_EXTRA_ARGS}\n    levels: {on", "env: {decode: 'BAD-NAME'}\n    levels: {on"),
        ("invalid environment variable name",),
    ),
    (
        "flag on an unknown role",
        sub(
            "env: {decode: SGLANG_EXTRA_ARGS}\n    levels: {on",
            "env: {gpu: SGLANG_EXTRA_ARGS}\n    levels: {on",
        ),
        ("role 'gpu'",),
    ),
    (
        "client with env",
        sub("    kind: client\n", "    kind: client\n    env: {decode: X}\n"),
        ("has no `env:`",),
    ),
    (
        "client placeholder reserved",
        sub("    kind: client\n", "    kind: client\n    placeholder: trial\n"),
        ("cannot be a repro placeholder",),
    ),
    (
        "placeholder without client",
        sub(
            "    kind: flag\n    flag: --cuda",
            "    kind: flag\n    placeholder: x\n    flag: --cuda",
        ),
        ("`placeholder:` needs `kind: client`",),
    ),
    ("client level null", sub('levels: ["8", "32"]', 'levels: ["8", null]'), ("needs a value",)),
    (
        "client placeholder misspelled",
        sub("--sessions {concurrency}", "--sessions {concurency}"),
        ("undefined placeholder {concurency}",),
    ),
    (
        "scalar levels on an env factor",
        sub("    kind: flag\n    flag: --disable-cuda-graph\n", ""),
        ("need `kind: flag` or `kind: client`",),
    ),
    ("unknown kind", sub("kind: client", "kind: repro"), ("kind",)),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("edit", "fragments"), [c[1:] for c in MATRIX_CASES], ids=[c[0] for c in MATRIX_CASES])
def test_bad_matrix_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Edit, fragments: tuple[str, ...]
) -> None:
    code, out = run(tmp_path, capsys, edit(MATRIX))
    assert_refused(code, out, M, *fragments)


DECODE = "      decode:\n        transport: local\n"


def decode_with(lines: str) -> Edit:
    """Add YAML lines (8 spaces in) to the decode role."""
    return sub(DECODE, DECODE + textwrap.indent(lines, "        "))


INVENTORY_CASES: list[tuple[str, Edit, tuple[str, ...]]] = [
    ("nodes and instances", decode_with("nodes: [{}, {}]\ninstances: [{}]\n"), ("not both",)),
    ("one node", decode_with("nodes: [{}]\n"), ("at least 2 nodes",)),
    ("role url with instances", decode_with("instances: [{}, {}]\n"), ("per instance",)),
    ("too many instances", decode_with("instances: [" + ", ".join(["{}"] * 300) + "]\n"), ("instances",)),
    ("member unknown key", decode_with("instances: [{gpus: 8}]\n"), ("unknown key 'gpus'",)),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("edit", "fragments"), [c[1:] for c in INVENTORY_CASES], ids=[c[0] for c in INVENTORY_CASES])
def test_bad_inventory_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Edit, fragments: tuple[str, ...]
) -> None:
    code, out = run(tmp_path, capsys, MATRIX, edit)
    assert_refused(code, out, INV, *fragments)


def test_two_local_instances_sharing_a_unit_name_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(text: str) -> str:
        text = re.sub(
            r"(      decode:\n(?:        .*\n)*?)        url: [^\n]*\n        health: [^\n]*\n", r"\1", text, count=1
        )
        return sub(DECODE, DECODE + "        instances: [{url: 'http://127.0.0.1:1'}, {url: 'http://127.0.0.1:2'}]\n")(
            text
        )

    code, out = run(tmp_path, capsys, MATRIX, edit)
    assert_refused(code, out, INV, "local unit 'sim-decode' is used by decode.0 and decode.1")


def test_two_hosts_of_a_testbed_naming_one_env_file_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit = sub("env_file: local/decode.env", "env_file: local/prefill.env")
    code, out = run(tmp_path, capsys, MATRIX, edit)
    assert_refused(code, out, INV, "prefill and decode name the same env file local:", "its own env_file")


def test_a_symlink_loop_as_env_file_is_refused_at_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(text: str) -> str:
        (tmp_path / "loops").mkdir()
        (tmp_path / "loops" / "loop.env").symlink_to("loop.env")  # resolve() raised RuntimeError
        return text.replace("env_file: local/decode.env", "env_file: loops/loop.env", 1)

    code, out = run(tmp_path, capsys, MATRIX, edit)
    assert_refused(code, out, INV, "cannot resolve 'loops/loop.env'")


def test_a_symlink_loop_is_refused_as_on_python_3_13(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.13's Path.resolve() no longer raises on a loop: it returns the path where it found
    one (a symlink still), and `orch validate` on 3.13 said "ok" of this inventory."""
    real = Path.resolve

    def resolve_as_313(self: Path, strict: bool = False) -> Path:
        try:
            return real(self, strict)
        except RuntimeError:  # 3.11/3.12's loop
            return Path(os.path.abspath(self))

    monkeypatch.setattr(Path, "resolve", resolve_as_313)

    def edit(text: str) -> str:
        (tmp_path / "loops").mkdir()
        (tmp_path / "loops" / "a.env").symlink_to("b.env")
        (tmp_path / "loops" / "b.env").symlink_to("a.env")
        return text.replace("env_file: local/decode.env", "env_file: loops/a.env", 1)

    code, out = run(tmp_path, capsys, MATRIX, edit)
    assert_refused(code, out, INV, "cannot resolve 'loops/a.env'", "symbolic links")


def test_a_node_above_rank_0_with_a_url_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(text: str) -> str:
        text = re.sub(
            r"(      decode:\n(?:        .*\n)*?)        url: [^\n]*\n        health: [^\n]*\n", r"\1", text, count=1
        )
        return sub(DECODE, DECODE + "        nodes: [{url: 'http://127.0.0.1:1'}, {url: 'http://127.0.0.1:2'}]\n")(text)

    code, out = run(tmp_path, capsys, MATRIX, edit)
    assert_refused(code, out, INV, "only node rank 0")


def assert_refused(code: int, output: str, where: str, *fragments: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output, output
    flat = " ".join(output.split())
    assert re.search(where, flat), f"{where!r} not in {flat!r}"
    for fragment in fragments:
        assert fragment in flat, f"{fragment!r} not in {flat!r}"
