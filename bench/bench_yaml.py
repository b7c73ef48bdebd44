"""Benchmark: reading a matrix or an inventory (core/yamlsrc.parse_yaml), libyaml beside PyYAML.

Every orch start (validate, plan, run, resume, queue add) parses its matrix and inventory, and
the bounded-input checks parse documents up to 1 MiB. parse_yaml reads with libyaml when PyYAML
has it and falls back to PyYAML's own parser for what libyaml refuses; this times both parsers
through parse_yaml itself on the shipped files and on a large generated matrix, in one run.

    python bench/bench_yaml.py [--factors 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timing import best_of, load_line

from orchestrator.core import yamlsrc

ROOT = Path(__file__).resolve().parent.parent


def big_matrix(factors: int) -> str:
    lines = ["name: big", "factors:"]
    for i in range(factors):
        lines += [f"  f{i}:", f"    env: {{decode: VAR_{i}}}", "    levels: [on, off]"]
    return "\n".join(lines) + "\n"


def timed(text: str, repeat: int) -> tuple[float, float]:
    """Seconds for one parse_yaml by libyaml and by PyYAML's parser (best of repeat)."""
    fast = yamlsrc.FAST
    if fast is None:
        raise SystemExit("PyYAML here has no libyaml: nothing to compare")
    try:
        t_fast = best_of(repeat, lambda: yamlsrc.parse_yaml(text, "doc.yaml"))
        yamlsrc.FAST = None
        t_pure = best_of(repeat, lambda: yamlsrc.parse_yaml(text, "doc.yaml"))
    finally:
        yamlsrc.FAST = fast
    return t_fast, t_pure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", type=int, default=200, help="factors of the generated matrix")
    parser.add_argument("--repeat", type=int, default=5, help="best of N")
    args = parser.parse_args()
    print(load_line())
    inputs = {name: (ROOT / name).read_text() for name in ("matrices/overlap_ablation.yaml", "inventory/local.yaml")}
    inputs[f"generated, {args.factors} factors"] = big_matrix(args.factors)
    for name, text in inputs.items():
        t_fast, t_pure = timed(text, args.repeat)
        print(
            f"{name}: libyaml {t_fast * 1000:.2f} ms, PyYAML {t_pure * 1000:.2f} ms, "
            f"ratio {t_pure / max(t_fast, 1e-9):.1f}x ({len(text) / 1000:.1f} kB)"
        )


if __name__ == "__main__":
    main()
