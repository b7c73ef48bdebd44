"""No handler in orchestrator/ swallows the signal's exception (a guard, by reading the code).

SIGTERM's handler raises Interrupted at any instruction of the main thread; it is a
BaseException (as KeyboardInterrupt is) so the ~45 `except OrchError` / `except Exception` of
best-effort reads and writes let it through (tests/unit/test_interrupt_not_swallowed.py). Two
ways a new handler could still lose it, each scanned here, each exception listed with its reason:

- SWALLOWS: a handler that can catch Interrupted (a bare `except`, BaseException, Interrupted, or
  contextlib.suppress of them) and never re-raises (`raise` or `raise NAME` of what it caught);
- CLEANUP_SKIPPED: a handler of OrchError or Exception that does work and re-raises, with no
  handler of Interrupted (or BaseException) beside it: its clean-up (a repro's leftovers stopped,
  a temp file removed) ran for a SIGTERM while Interrupted was an OrchError, and would not now.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from orchestrator.errors import CommandInterrupted, Interrupted

ROOT = Path(__file__).resolve().parents[1] / "orchestrator"
SIGNAL = {"BaseException", "Interrupted", "<bare>"}  # what catches the signal's exception
FAILURES = {"OrchError", "Exception"}

# (file, function) -> why the handler may keep the signal's exception
SWALLOWS: dict[tuple[str, str], str] = {
    ("cli/main.py", "_main"): "the top level: prints 'interrupted (received SIGTERM)' and returns 130",
    ("sweep/runner.py", "_sweep"): "sets result.interrupted; the restore in its `finally` runs, the run exits 130",
    ("sweep/runner.py", "_join_all"): "counts presses and tells every runner to stop; returns interrupted=True",
    ("sweep/runner.py", "_open_gate"): "before the start gate opens: tells every runner to stop; _join_all counts it",
    ("sweep/runner.py", "work"): "a runner thread's error, kept and re-raised in the main thread",
    ("sweep/pool.py", "settle"): "a second interrupt stops the waiting; the first one is re-raised",
    ("sweep/hosts.py", "restore"): "an interrupt skips the host being restored; the restore goes on and says so",
    (
        "sweep/runner.py",
        "_restore_at_end",
    ): "an interrupt before the restore's own handling: marks the run interrupted (130), restores",
    ("edges/health.py", "one"): "a health poller thread's error, kept; stop_all(); re-raised in the caller's thread",
    ("edges/transport/ssh.py", "_read_or_stop"): "returned to its caller, which kills the command and raises it",
    ("sweep/hosts.py", "run"): "a host's restore thread's error, kept; raised by wait() in the runner's thread",
}
CLEANUP_SKIPPED: dict[tuple[str, str], str] = {
    ("sweep/api.py", "on_its_own"): "one testbed's failure is its outcome; a SIGTERM ends the restore",
    ("sweep/phases.py", "restart_units"): "an env file edited meanwhile is named; nothing to undo on a SIGTERM",
    ("sweep/phases.py", "_verify_before_repro"): "asks who serves the ports to explain a failure; a SIGTERM just stops",
}


def _names(node: ast.expr | None) -> set[str]:
    if node is None:
        return {"<bare>"}
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return {node.id} if isinstance(node, ast.Name) else {"?"}


def _reraises(handler: ast.ExceptHandler) -> bool:
    for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
        if isinstance(node, ast.Raise) and (
            node.exc is None or (isinstance(node.exc, ast.Name) and node.exc.id == handler.name)
        ):
            return True
    return False


def _suppresses(node: ast.With) -> bool:
    for item in node.items:
        call = item.context_expr
        if isinstance(call, ast.Call) and getattr(call.func, "attr", getattr(call.func, "id", "")) == "suppress":
            if set().union(*(_names(a) for a in call.args)) & SIGNAL:
                return True
    return False


def _functions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """Every function with its name (its innermost one wins: walked outermost first)."""
    return [(n.name, n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


@cache  # the package parsed once per test process (~0.9 CPU-s): the two guards below read the result
def scan(root: Path = ROOT) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """(file, function) -> line of its first handler, for each of the two ways above."""
    swallows: dict[tuple[str, str], int] = {}
    skipped: dict[tuple[str, str], int] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        owner = {id(inner): name for name, fn in _functions(tree) for inner in ast.walk(fn)}
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            key = (rel, owner.get(id(node), "<module>"))
            if isinstance(node, ast.With) and _suppresses(node):
                swallows.setdefault(key, node.lineno)
            if not isinstance(node, ast.Try):
                continue
            caught = [_names(h.type) for h in node.handlers]
            for handler, names in zip(node.handlers, caught, strict=True):
                if names & SIGNAL and not _reraises(handler):
                    swallows.setdefault(key, handler.lineno)
                elif names & FAILURES and _reraises(handler) and len(handler.body) > 1:
                    if not any(c & SIGNAL for c in caught):
                        skipped.setdefault(key, handler.lineno)
    return swallows, skipped


def test_no_handler_swallows_the_signals_exception_but_those_listed() -> None:
    swallows, _ = scan()
    new = {f"{f}:{line} in {fn}()" for (f, fn), line in swallows.items() if (f, fn) not in SWALLOWS}
    assert not new, "these handlers catch Interrupted (SIGTERM) and do not re-raise it:\n" + "\n".join(sorted(new))
    gone = set(SWALLOWS) - set(swallows)
    assert not gone, f"listed, no longer found (remove them from SWALLOWS): {sorted(gone)}"


def test_no_clean_up_on_failure_skips_a_sigterm_but_those_listed() -> None:
    _, skipped = scan()
    new = {f"{f}:{line} in {fn}()" for (f, fn), line in skipped.items() if (f, fn) not in CLEANUP_SKIPPED}
    assert not new, (
        "these handlers clean up on OrchError/Exception and re-raise, but not on Interrupted (SIGTERM): "
        "add it to the handled types, or list it with a reason:\n" + "\n".join(sorted(new))
    )
    gone = set(CLEANUP_SKIPPED) - set(skipped)
    assert not gone, f"listed, no longer found (remove them from CLEANUP_SKIPPED): {sorted(gone)}"


def test_the_scan_finds_a_swallowing_handler_and_a_skipped_clean_up(tmp_path: Path) -> None:
    """The scan itself, on code written to break each rule (a guard that finds nothing proves
    nothing), and its premise: only these handlers can catch the signal's exception."""
    (tmp_path / "m.py").write_text(
        "import contextlib\n"
        "def f():\n    try:\n        g()\n    except (OSError, BaseException):\n        pass\n"
        "def h():\n    try:\n        g()\n    except OrchError:\n        undo()\n        raise\n"
        "def k():\n    with contextlib.suppress(Interrupted):\n        g()\n"
        "def fine():\n    try:\n        g()\n    except Interrupted:\n        undo()\n        raise\n"
        "    except Exception as exc:\n        undo()\n        raise exc\n"
    )
    assert scan(tmp_path) == ({("m.py", "f"): 5, ("m.py", "k"): 14}, {("m.py", "h"): 10})
    assert not issubclass(Interrupted, Exception) and issubclass(CommandInterrupted, Interrupted)
