"""Mutation testing of one module against its own fast unit tests: do they fail when a line is wrong?

Why: orch's rule is that a check that cannot fail is a defect; a test suite that passes whatever
the code does is such a check. This script makes one small wrong change at a time (a mutant) in a
module and runs that module's own test files; a mutant the tests do not fail on (a survivor) is a
line whose behaviour nothing pins: an equivalent change, or a missing test.

Mutations (each one at a time, on the module's AST, written back with ast.unparse):
  compare   ==/!=, </>=, <=/>, in/not in, is/is not flipped
  boolop    and <-> or
  binop     + <-> -, * <-> /, // -> *
  const     0 -> 1, 1 -> 0, other ints n -> n + 1, True <-> False, None -> ""
  not       `not x` -> `x`
  return    `return x` -> `return None`
  delete    a statement (expression, assignment, raise, if, for) -> `pass`
Docstrings, annotations and decorators are left alone.

The source tree is never written: its files (git ls-files, tracked and untracked but not ignored:
the tests read matrices/ and inventory/, a new test file is not committed yet) are copied to a
temporary folder per worker, the mutant is written there and the copy's file restored in a
`finally` after each run; the copies are removed at exit. pytest runs in the copy with
PYTHONPATH pointing at it (checked: the copy's module is the one imported), on the unit tier:
  python -m pytest FILES -x -q -n0 -p no:cacheprovider -m "not sim and not testbed and not browser
  and not process" (timeout per mutant: --timeout, a timeout counts as killed); with --tier process
  also the tests that start local processes (-m "not testbed and not browser").
First the unmutated module (as ast.unparse writes it) must pass, else the run stops.

Usage:
  .venv/bin/python bench/mutants.py orchestrator/core/family.py tests/test_holm_family.py \
      [--only FUNC,FUNC] [--sample N --seed S] [--rerun old.json] [--jobs 2] [--timeout 120] [--list]
      [--json out.json]
--only limits the mutants to the named functions (top-level or methods); --sample runs a seeded
random draw of N of them (a large module's mutants at several seconds each); --rerun runs only
the survivors of an earlier --json, given the same --only, --sample and --seed (after tests were
added: killed after = killed before + those killed now; the module's lines must not have moved,
so rerun before editing the module); --list prints the
mutants without running them. Prints each survivor (line, kind, the mutated line) and a summary.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIER = "not sim and not testbed and not browser and not process"
# --tier process: also the tests that start local processes (orch in a subprocess, the simulator,
# systemd-analyze): a module the CLI reaches is often proven there and nowhere in the unit tier
TIERS = {"unit": TIER, "process": "not testbed and not browser"}

COMPARE_FLIP: dict[type, type] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
BINOP_FLIP: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
}
DELETABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.If, ast.For)


@dataclass(frozen=True)
class Mutant:
    index: int  # the node's position in ast.walk order
    kind: str
    detail: str  # which of the node's sub-parts (a compare op's position), or ""
    line: int
    func: str


def _skipped_nodes(tree: ast.Module) -> set[int]:
    """ids of nodes never mutated: docstrings, annotations, decorators."""
    skip: set[int] = set()

    def drop(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                drop(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            drop(node.returns)
            for d in node.decorator_list:
                drop(d)
            for a in [
                *node.args.args,
                *node.args.kwonlyargs,
                *node.args.posonlyargs,
                node.args.vararg,
                node.args.kwarg,
            ]:
                if a is not None:
                    drop(a.annotation)
        if isinstance(node, ast.ClassDef):
            for d in node.decorator_list:
                drop(d)
        if isinstance(node, ast.AnnAssign):
            drop(node.annotation)
    return skip


def _functions(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of every function, innermost last."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.lineno, node.end_lineno or node.lineno, node.name))
    return sorted(out)


def _func_of(funcs: list[tuple[int, int, str]], line: int) -> str:
    name = "<module>"
    for first, last, fname in funcs:
        if first <= line <= last:
            name = fname  # sorted by first line: the innermost enclosing one wins
    return name


def _points(node: ast.AST, parents: dict[int, ast.AST]) -> list[tuple[str, str]]:
    """The mutations this node offers: (kind, detail)."""
    out: list[tuple[str, str]] = []
    if isinstance(node, ast.Compare):
        out += [("compare", str(i)) for i, op in enumerate(node.ops) if type(op) in COMPARE_FLIP]
    elif isinstance(node, ast.BoolOp):
        out.append(("boolop", ""))
    elif isinstance(node, ast.BinOp) and type(node.op) in BINOP_FLIP:
        out.append(("binop", ""))
    elif isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (bool, int))):
        if not isinstance(node.value, complex):
            out.append(("const", ""))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        out.append(("not", ""))
    elif isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            out.append(("return", ""))
    if isinstance(node, DELETABLE) and not isinstance(parents.get(id(node)), ast.Module):
        out.append(("delete", ""))
    return out


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def enumerate_mutants(source: str, only: set[str] | None) -> list[Mutant]:
    tree = ast.parse(source)
    skip, parents, funcs = _skipped_nodes(tree), _parents(tree), _functions(tree)
    out = []
    for index, node in enumerate(ast.walk(tree)):
        if id(node) in skip or not hasattr(node, "lineno"):
            continue
        func = _func_of(funcs, node.lineno)
        if only is not None and func not in only:
            continue
        out += [Mutant(index, kind, detail, node.lineno, func) for kind, detail in _points(node, parents)]
    return out


def _const_mutated(value: object) -> bool | int | str:
    if isinstance(value, bool):
        return not value
    if value is None:
        return ""
    assert isinstance(value, int)
    return {0: 1, 1: 0}.get(value, value + 1)


def apply(source: str, m: Mutant) -> tuple[str, str]:
    """The module's text with mutant `m` applied, and the mutated node as text."""
    tree = ast.parse(source)
    parents = _parents(tree)
    node = list(ast.walk(tree))[m.index]
    if m.kind == "compare":
        assert isinstance(node, ast.Compare)
        i = int(m.detail)
        node.ops[i] = COMPARE_FLIP[type(node.ops[i])]()
    elif m.kind == "boolop":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif m.kind == "binop":
        assert isinstance(node, ast.BinOp)
        node.op = BINOP_FLIP[type(node.op)]()
    elif m.kind == "const":
        assert isinstance(node, ast.Constant)
        node.value = _const_mutated(node.value)
    elif m.kind == "not":
        assert isinstance(node, ast.UnaryOp)
        parent = parents[id(node)]
        _replace(parent, node, node.operand)
        node = parent
    elif m.kind == "return":
        assert isinstance(node, ast.Return)
        node.value = ast.Constant(None)
    elif m.kind == "delete":
        parent = parents[id(node)]
        _replace(parent, node, ast.Pass())
        shown = ast.unparse(node).splitlines()[0]
        return ast.unparse(ast.fix_missing_locations(tree)) + "\n", f"deleted: {shown}"
    shown = ast.unparse(node).splitlines()[0] if not isinstance(node, ast.Module) else ""
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n", shown


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return
    raise AssertionError("node not found under its parent")


def make_copy(base: Path) -> Path:
    """A copy of the tree the tests need (the source tree itself is never written)."""
    dest = Path(tempfile.mkdtemp(prefix="orch-mutants-", dir=base))
    dest.chmod(0o755)  # a test's server may run as an unprivileged user (_tmp_in)
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(listing, cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def run_tests(tree: Path, tests: list[str], timeout: float, said: list[str] | None = None, tier: str = TIER) -> str:
    """'killed', 'survived' or 'timeout' (counted killed; so is pytest ended by a signal, e.g. a
    signal handler mutated away: the test's own SIGTERM ends pytest): pytest in the copy, unit tier. `said`
    gets the tail of pytest's output (why the unmutated module failed, when it does)."""
    cmd = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-n0", "-p", "no:cacheprovider", "-m", tier]
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(_tmp_in(tree))}
    try:  # stdin closed: no test may wait on it
        r = subprocess.run(
            cmd, cwd=tree, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    if said is not None:
        said.append((r.stdout + r.stderr).decode(errors="replace")[-4000:])
    if r.returncode == 0:
        return "survived"
    if r.returncode in (1, 2, 3):  # failed, interrupted (an import error in a mutant), internal error
        return "killed"
    if r.returncode < 0:  # pytest itself ended by a signal: a test sent one the mutant left unhandled
        return "killed"
    raise RuntimeError(f"pytest exited {r.returncode}: {r.stdout.decode()[-2000:]}")


def _tmp_in(tree: Path) -> Path:
    """The run's temporary folder, inside the copy. Why: a server a test starts daemonized (the
    queue's throwaway PostgreSQL, via pg_ctl) outlives pytest killed at the timeout; with its data
    folder under the copy its command line names the copy, so stop_strays finds it. A mutant that
    held pytest at exit (the queue's heartbeat made a non-daemon thread) left one running for an
    hour. The copies are readable by all (make_copy): the server runs as an unprivileged user."""
    folder = tree / ".mutant-tmp"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o755)
    return folder


def check_copy(tree: Path, module: str) -> None:
    """The copy's module is the one the tests import (not the editable install's)."""
    dotted = module.removesuffix(".py").replace("/", ".")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", f"import {dotted} as m; print(m.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not out.startswith(str(tree)):
        raise SystemExit(f"the tests would import {out}, not the copy's {module}")


def run_one(
    tree: Path, module: str, source: str, m: Mutant, tests: list[str], timeout: float, tier: str = TIER
) -> tuple[Mutant, str, str]:
    target = tree / module
    text, shown = apply(source, m)
    try:
        target.write_text(text)
        outcome = run_tests(tree, tests, timeout, tier=tier)
    finally:
        target.write_text(source)
        stop_strays(tree)
    return m, outcome, shown


def strays(tree: Path, procs: Iterable[tuple[int, str, str]], me: int) -> list[int]:
    """The processes (pid, cwd, command line) a run in `tree` left: working in it or naming it.
    Why: a mutant can keep a process the tests started alive past pytest's end, in a session of its
    own that the timeout's kill never reaches (a mutated repro reaper spun at 96% CPU for an hour
    after its run, under every later measurement)."""
    inside = str(tree)
    return [
        pid
        for pid, cwd, cmdline in procs
        if pid != me and (cwd == inside or cwd.startswith(inside + "/") or inside in cmdline)
    ]


def _procs() -> Iterator[tuple[int, str, str]]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or not ours to read
            continue
        yield int(entry.name), cwd, cmdline


def stop_strays(tree: Path) -> int:
    """SIGKILL what a mutant's run left (see strays); how many."""
    pids = strays(tree, _procs(), os.getpid())
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if pids:
        print(f"stopped {len(pids)} process(es) a mutant's run left: {pids}", file=sys.stderr)
    return len(pids)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("module")
    p.add_argument("tests", nargs="+")
    p.add_argument("--only", default=None, help="comma-separated function names")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--sample", type=int, default=0, help="run only N mutants, drawn with --seed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rerun", default=None, help="a --json of an earlier run: only its survivors again")
    p.add_argument("--tier", choices=sorted(TIERS), default="unit", help="unit (default) or process: see TIERS")
    p.add_argument("--list", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    source = (ROOT / args.module).read_text()
    only = set(args.only.split(",")) if args.only else None
    mutants = enumerate_mutants(source, only)
    if 0 < args.sample < len(mutants):
        print(f"{len(mutants)} mutants, {args.sample} drawn (seed {args.seed})")
        mutants = sorted(random.Random(args.seed).sample(mutants, args.sample), key=lambda m: (m.line, m.index))
    if args.rerun:  # the same draw (same --sample and --seed), in the same order as the rows
        rows = json.loads(Path(args.rerun).read_text())
        if [(r["line"], r["kind"]) for r in rows] != [(m.line, m.kind) for m in mutants]:
            raise SystemExit(f"{args.rerun} is not this draw of this module (other --sample/--seed, or lines moved)")
        mutants = [m for m, r in zip(mutants, rows, strict=True) if r["outcome"] == "survived"]
        print(f"{len(rows)} mutants in {args.rerun}, {len(mutants)} survived then: running those")
    if args.list:
        for m in mutants:
            print(m.line, m.func, m.kind, apply(source, m)[1])
        print(f"{len(mutants)} mutants")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the copies
    base = Path(tempfile.mkdtemp(prefix="orch-mutants-"))
    base.chmod(0o755)  # see _tmp_in
    try:
        return _run(args, source, mutants, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(args: argparse.Namespace, source: str, mutants: list[Mutant], base: Path) -> int:
    trees = [make_copy(base) for _ in range(max(1, args.jobs))]
    check_copy(trees[0], args.module)
    plain = ast.unparse(ast.parse(source)) + "\n"
    (trees[0] / args.module).write_text(plain)
    try:
        said: list[str] = []
        outcome = run_tests(trees[0], args.tests, args.timeout * 3, said, tier=TIERS[args.tier])
        if outcome != "survived":
            tail = said[0] if said else f"({outcome} after {args.timeout * 3:.0f} s)"
            raise SystemExit(
                f"the unmutated module (as ast.unparse writes it) fails its tests: nothing to measure\n{tail}"
            )
    finally:
        (trees[0] / args.module).write_text(source)
    start, results = time.monotonic(), []
    free: queue.Queue[Path] = queue.Queue()
    for tree in trees:
        free.put(tree)

    def one(m: Mutant) -> tuple[Mutant, str, str]:
        tree = free.get()  # a copy no other worker is using
        try:
            return run_one(tree, args.module, source, m, args.tests, args.timeout, TIERS[args.tier])
        finally:
            free.put(tree)

    with ThreadPoolExecutor(len(trees)) as pool:
        for m, outcome, shown in pool.map(one, mutants):
            results.append((m, outcome, shown))
            if outcome == "survived":
                print(f"SURVIVED {args.module}:{m.line} {m.func} [{m.kind}] {shown}", flush=True)
    killed = sum(1 for _, o, _ in results if o != "survived")
    took = time.monotonic() - start
    print(f"{args.module}: {len(results)} mutants, {killed} killed, {len(results) - killed} survived ({took:.0f} s)")
    if args.json:
        rows = [{"line": m.line, "func": m.func, "kind": m.kind, "shown": s, "outcome": o} for m, o, s in results]
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
