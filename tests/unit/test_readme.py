"""A newcomer trusts the README word for word: what it names must exist and its examples must run.

- Every module path (`orchestrator/core/x.py`) and dotted module (`orchestrator.core.x.decide`)
  README.md and bench/README.md quote exists, so a module moved to another package takes its
  mentions along (README once sent readers to `orchestrator/sequential.py`, which had moved to
  orchestrator/core/).
- Every YAML example of README.md passes `orch validate` once put into the matrix (or inventory)
  it is a piece of: the first matrix example for matrix pieces, inventory/example-pd.yaml, which
  the README says it shows, for inventory pieces.
- The sample error and the flag edit the tour shows are what `orch validate` and `orch plan`
  print (the flag edit's flags were in another order than orch prints them).
- Every `orch ...` command line it quotes parses with orch's own parser, and every `--option` it
  names is one of orch's or on OTHER_PROGRAMS_FLAGS (SGLang's, pip's, ...).
- Its Layout section names every module of orchestrator/'s packages (21 were missing).
- It names every ORCH_* environment variable orch reads for the user (ORCH_WEBHOOKS and
  ORCH_REPORTS_URL were missing), and none that orch does not read.
"""

from __future__ import annotations

import argparse
import re
import shlex
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli.main import build_parser, main

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "bench/README.md")
FILE = re.compile(r"\b(?:orchestrator|bench|tests|matrices|inventory)/[\w/.-]*\.(?:py|yaml)\b")
DOTTED = re.compile(r"\borchestrator(?:\.\w+)+")


def quoted(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return sorted({(doc, m.group(0)) for doc in DOCS for m in pattern.finditer((REPO / doc).read_text())})


def module_of(dotted: str) -> Path | None:
    """The file of the longest prefix of `dotted` that is a module (`orchestrator.core.sequential.decide`:
    orchestrator/core/sequential.py), provided at most one name (an attribute) follows it. Read
    from the tree, nothing imported."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:end])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path if end >= len(parts) - 1 else None
    return None


@pytest.mark.parametrize(("doc", "path"), quoted(FILE))
def test_every_file_the_readmes_name_exists(doc: str, path: str) -> None:
    if path in ("inventory/my-cluster.yaml", "matrices/x.yaml", "matrices/m.yaml"):  # the user's own files
        return
    assert (REPO / path).is_file(), f"{doc} names {path}, which is not in the checkout"


@pytest.mark.parametrize(("doc", "dotted"), quoted(DOTTED))
def test_every_module_the_readmes_name_exists(doc: str, dotted: str) -> None:
    assert module_of(dotted) is not None, f"{doc} names {dotted}, which is no module (or module.attribute)"


# ------------------------------------------------------------------ the YAML examples
README = (REPO / "README.md").read_text()
# each as written, less the indent of its fence (a block inside a list item)
YAML_BLOCKS = [
    re.sub(rf"(?m)^{m.group(1)}", "", m.group(2)) for m in re.finditer(r"(?ms)^( *)```yaml\n(.*?)^\1```", README)
]
MATRIX_BASE = YAML_BLOCKS[0]  # the tour's matrix: every other matrix example is a piece of one like it


def sections(text: str) -> dict[str, str]:
    """Top-level `key:` sections of a YAML text, each with its lines (comments kept)."""
    out: dict[str, str] = {}
    key = ""
    for line in text.splitlines(keepends=True):
        if m := re.match(r"([A-Za-z_]\w*):", line):
            key = m.group(1)
        if key:
            out[key] = out.get(key, "") + line
    return out


def with_piece(piece: str) -> str:
    """MATRIX_BASE with a README piece put in: factors (indented: `  name:`) replace or join the
    base's, top-level sections are added (repro: its keys join the base's repro), as a reader
    pasting the piece into the tour's matrix would."""
    base = sections(MATRIX_BASE)
    if piece.startswith("  "):  # factors
        names = set(re.findall(r"(?m)^  (\w+):", piece))
        kept = re.split(r"(?m)^(?=  \w+:)", base["factors"])
        base["factors"] = kept[0] + piece + "".join(f for f in kept[1:] if f.split(":")[0].strip() not in names)
        if "kind: client" in piece:  # the piece's comment: `repro: ... --sessions {concurrency}`
            base["repro"] = base["repro"].replace("--sessions 40", "--sessions {concurrency}")
        return "".join(base.values())
    for key, text in sections(piece).items():
        if key == "repro":
            base["repro"] = "repro:\n" + text.split("\n", 1)[1] + base["repro"].split("\n", 1)[1]
        else:
            base[key] = text
    if "hunt" in base:  # a hunt decides its own trials and order
        base.pop("replicates"), base.pop("order")
    if "gates" in base and "throughput" in base["gates"]:  # the gate example's fourth metric
        base["repro"] = base["repro"].replace(
            "  metrics:\n", "  metrics:\n    throughput: {regex: 'tok/s=(?P<value>[0-9.]+)'}\n"
        )
    return "".join(base.values())


def is_inventory(block: str) -> bool:
    return block.startswith("testbeds:") or bool(re.match(r"\s+\w+:.*\n\s+transport:", block))


MATRIX_PIECES = [b for b in YAML_BLOCKS[1:] if not is_inventory(b)]
INVENTORY_PIECES = [b for b in YAML_BLOCKS if is_inventory(b)]


def merged(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **{k: merged(a[k], v) if k in a else v for k, v in b.items()}}
    return b


def inventory_with(piece: str) -> dict[str, Any]:
    """inventory/example-pd.yaml with a README piece: a role written out whole replaces the
    example's; a role with `...` is the example's with the piece's keys (a role of several hosts
    takes its hosts' addresses from them)."""
    example = yaml.safe_load((REPO / "inventory" / "example-pd.yaml").read_text())
    hosts = example["testbeds"]["dsv4-pd"]["hosts"]
    text = textwrap.dedent("\n".join(line for line in piece.splitlines() if line.strip() != "..."))
    given = yaml.safe_load(text)
    given = given["testbeds"]["dsv4-pd"]["hosts"] if "testbeds" in given else given
    for role, host in given.items():
        if not re.search(rf"(?m)^\s*{role}:.*\n\s*\.\.\.", piece):
            hosts[role] = host
            continue
        base = dict(hosts[role])
        if "nodes" in host or "instances" in host:
            base = {k: v for k, v in base.items() if k not in ("url", "health")}
            base["ssh"] = {k: v for k, v in base["ssh"].items() if k != "host"}
        hosts[role] = merged(base, host)
    return example


def test_the_readme_has_the_examples_this_test_reads() -> None:
    assert MATRIX_BASE.startswith("name: overlap_ablation")
    assert len(MATRIX_PIECES) >= 6 and len(INVENTORY_PIECES) >= 2


@pytest.mark.parametrize("piece", [MATRIX_BASE, *MATRIX_PIECES], ids=lambda b: b.split(":", 1)[0].strip())
def test_every_matrix_example_validates(piece: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX_BASE if piece is MATRIX_BASE else with_piece(piece))
    code = main(["validate", str(path), "-i", str(REPO / "inventory" / "local.yaml")])
    assert code == 0, capsys.readouterr().err + path.read_text()


def test_the_error_the_readme_shows_is_the_one_orch_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tour's sample error, from a matrix whose line 5 is the mistake it names."""
    shown = re.search(r"(?m)^error: matrices/x\.yaml:5: .*$", README)
    assert shown, "README shows no sample error"
    factor = "name: x\nfactors:\n  overlap:\n    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}\n    levels: on\n"
    (tmp_path / "matrices").mkdir()
    (tmp_path / "matrices" / "x.yaml").write_text(factor + sections(MATRIX_BASE)["repro"])
    monkeypatch.chdir(tmp_path)
    code = main(["validate", "matrices/x.yaml", "-i", str(REPO / "inventory" / "local.yaml")])
    assert code == 2
    assert " ".join(capsys.readouterr().err.split()) == shown[0], (tmp_path / "matrices" / "x.yaml").read_text()


def test_the_flag_edit_the_readme_shows_is_the_one_orch_plan_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README showed `args(+--disable-cuda-graph -(--cuda-graph-max-bs))`; orch prints a cell's
    flags in name order, so that edit reads `args(-(--cuda-graph-max-bs) +--disable-cuda-graph)`."""
    shown = [" ".join(m.split()) for m in re.findall(r"`(args\(.*?\))`", README, re.S)]
    assert shown, "README shows no flag edit"
    path = tmp_path / "m.yaml"
    path.write_text(with_piece(next(p for p in MATRIX_PIECES if "kind: flag" in p)))
    code = main(["plan", str(path), "-i", str(REPO / "inventory" / "local.yaml"), "--replicates", "2"])
    printed = capsys.readouterr().out
    assert code == 0 and all(s in printed for s in shown), (shown, printed)


@pytest.mark.parametrize("piece", INVENTORY_PIECES, ids=lambda b: re.sub(r"\W+", "-", b[:24]))
def test_every_inventory_example_validates(piece: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory_with(piece)))
    code = main(["validate", str(REPO / "matrices" / "overlap_ablation.yaml"), "-i", str(path)])
    assert code == 0, capsys.readouterr().err + path.read_text()


# ------------------------------------------------------------------ commands and options
# `--x` the README names that belong to other programs (SGLang and its router, pip and uv, podman,
# the repro), not to orch: a new one must be added here, or be orch's.
OTHER_PROGRAMS_FLAGS = {
    "--disable-cuda-graph", "--cuda-graph-max-bs", "--tp", "--max-tokens", "--api-key", "--dp-aware",
    "--decode", "--prometheus-port", "--sessions", "--rounds", "--router", "--compile-bytecode", "--python",
    "--cgroups", "--flag", "--check",
}  # fmt: skip


def orch_options() -> set[str]:
    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
            found.update(action.option_strings)

    walk(build_parser())
    return found


def quoted_commands() -> list[str]:
    """Every `orch ...` the README quotes (inline, or a line of a shell block), as written."""
    inline = re.findall(r"`(orch [^`]+)`", README)
    blocks = "\n".join(re.findall(r"(?ms)^```sh\n(.*?)^```", README))
    lines = [re.sub(r"^.*?(?:\.venv/bin/)?(?=orch )", "", line) for line in blocks.splitlines() if "orch " in line]
    return sorted(set(inline + [line for line in lines if line.startswith("orch ")]))


def as_argv(command: str) -> list[str]:
    """A quoted command as argv: comments, pipes and `&` cut, `[--opt X]` as given, `a|b|c` its first."""
    command = command.split(" | ")[0].replace("[", "").replace("]", "")
    command = re.sub(r"(\S+)\|\S+", lambda m: m.group(1).split("|")[0], command)
    return [w for w in shlex.split(command, comments=True)[1:] if w != "&"]


def test_the_readme_quotes_commands_this_test_reads() -> None:
    assert len(quoted_commands()) >= 20


@pytest.mark.parametrize("command", quoted_commands())
def test_every_orch_command_the_readme_quotes_parses(command: str) -> None:
    argv = as_argv(command)
    parser = build_parser()
    words: list[str] = []
    for word in argv:  # `orch compare` alone names a command: its words must be commands
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if word not in sub.choices:
            break
        words.append(word)
        parser = sub.choices[word]
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            break
    assert words, f"README quotes `{command}`: {argv[0]!r} is no orch command"
    if words == argv:
        return
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"README quotes `{command}`, which orch refuses") from exc


def test_every_option_the_readme_names_exists() -> None:
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", README))
    unknown = named - orch_options() - OTHER_PROGRAMS_FLAGS
    assert not unknown, (
        f"README names {sorted(unknown)}: no orch command has them (or add them to OTHER_PROGRAMS_FLAGS)"
    )


# ------------------------------------------------------------------ Layout
def test_the_layout_names_every_module() -> None:
    layout = README.split("## Layout", 1)[1].split("```", 2)[1]
    missing: dict[str, list[str]] = {}
    for package in sorted(p for p in (REPO / "orchestrator").iterdir() if (p / "__init__.py").is_file()):
        paragraph = re.search(rf"(?ms)^  {package.name}/\s(.*?)(?=^  \w+/|^\S)", layout)
        text = paragraph[1] if paragraph else ""
        modules = {p.stem for p in package.rglob("*.py") if p.stem != "__init__"}
        if unnamed := sorted(m for m in modules if not re.search(rf"(?<![\w.]){m}(?!\w)", text)):
            missing[f"orchestrator/{package.name}/"] = unnamed
    assert not missing, f"README's Layout does not name these modules: {missing}"


# ------------------------------------------------------------------ environment variables
# ORCH_* names orch sets for itself (a unit's or a repro's mark) or tests set: not the user's to give
INTERNAL_VARIABLES = {"ORCH_LOCAL_UNIT", "ORCH_TEST_"}


def test_the_readme_names_the_environment_variables_orch_reads_and_no_other() -> None:
    code = "\n".join(p.read_text() for p in (REPO / "orchestrator").rglob("*.py"))
    read = set(re.findall(r"\bORCH_[A-Z_]*[A-Z]_?", code)) - INTERNAL_VARIABLES
    named = set(re.findall(r"\bORCH_[A-Z_]*[A-Z]", README))
    assert named <= read, f"README names {sorted(named - read)}, which orch never reads"
    assert read <= named, f"orch reads {sorted(read - named)}, which README never names"
