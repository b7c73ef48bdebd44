"""Benchmark: masking secrets in repro output and logs (core/redact.Redactor.text), per MB.

Every trial's repro output and server logs pass through the redactor before they are written
or served, so its cost grows with what a workload prints. The inputs: ordinary log lines, and a
1 MB run of one name-like character followed by a secret-looking word (the shape that made an
earlier pattern backtrack for ~16 s). Each is timed beside one plain linear regex scan of the
same text, in the same run, so the ratio says how far from a single pass masking is.

    python bench/bench_redact.py [--mb 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re

from timing import best_of, load_line

from orchestrator.core.redact import Redactor

LOG_LINE = "INFO request done tokens=1800 latency=0.5s path=/v1/chat\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0, help="size of each input in MB")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    args = parser.parse_args()
    print(load_line())
    size = int(args.mb * 1_000_000)
    inputs = {
        "log lines": LOG_LINE * max(1, size // len(LOG_LINE)),
        "one long name run": "a" * size + "TOKEN",
    }
    scan = re.compile(r"[=:]\S")  # one linear pass, for scale (no repetition: it cannot backtrack)
    redactor = Redactor()
    for name, text in inputs.items():
        masked = redactor.text(text)
        assert masked == text, f"{name}: nothing secret here, yet the text changed"
        t_mask = best_of(args.repeat, lambda text=text: redactor.text(text))
        t_scan = best_of(args.repeat, lambda text=text: scan.findall(text))
        mb = len(text) / 1e6
        print(
            f"{name}: mask {t_mask / mb * 1000:.0f} ms/MB, one regex scan {t_scan / mb * 1000:.0f} ms/MB, "
            f"ratio {t_mask / max(t_scan, 1e-9):.1f}x ({mb:.2f} MB)"
        )


if __name__ == "__main__":
    main()
