"""Benchmark: reading and editing an env file (core/envfile), against its size.

The env files orch reads on every trial are the users' (up to the 64 MiB the transports accept),
so the reader and the editor must stay linear in them. An earlier reader searched back to the
file's start once per entry, and took 16.9 s for 600,000 `A=1` lines with LF endings (5.2 s with
CRLF). Printed per dialect and line ending: seconds for N and 2N entries, and their ratio (about
2 when linear, 4 when quadratic), beside the same entries with CRLF endings.

    python bench/bench_envfile.py [--entries 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial

from timing import best_of, load_line

from orchestrator.core import envfile
from orchestrator.core.envfile import Dialect


def set_one(text: str, dialect: Dialect) -> str:
    return envfile.edit(text, {"A0": "2"}, dialect)


OPERATIONS: tuple[tuple[str, Callable[[str, Dialect], object]], ...] = (
    ("read_values", envfile.read_values),
    ("edit (set one value)", set_one),
)


def text_of(entries: int, eol: str) -> str:
    return "".join(f"A{i}=1{eol}" for i in range(entries))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000, help="N (the file's lines)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    args = parser.parse_args()
    print(load_line())
    n = args.entries
    print(f"{'operation':<30} {'eol':<5} {n:>9,} {2 * n:>9,}  2N/N")
    dialects: tuple[Dialect, ...] = ("systemd", "shell")
    for dialect in dialects:
        for eol, name in (("\n", "LF"), ("\r\n", "CRLF")):
            small, big = text_of(n, eol), text_of(2 * n, eol)
            for op, work in OPERATIONS:
                a = best_of(args.repeat, partial(work, small, dialect))
                b = best_of(args.repeat, partial(work, big, dialect))
                print(f"{dialect + ' ' + op:<30} {name:<5} {a:>8.2f}s {b:>8.2f}s  {b / a:.2f}")


if __name__ == "__main__":
    main()
