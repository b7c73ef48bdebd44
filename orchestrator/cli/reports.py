"""`orch compare` and `orch export`: commands over finished runs (no host is touched)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    cmp_ = sub.add_parser(
        "compare",
        help="compare two runs cell by cell (an HTML page)",
        description="Compare two runs cell by cell: rates, differences with intervals, p-values.",
    )
    cmp_.add_argument("run_a", type=Path, metavar="RUN_A")
    cmp_.add_argument("run_b", type=Path, metavar="RUN_B")
    cmp_.add_argument(
        "-o", "--output", type=Path, help="where to write the page (default: reports/compare-A-vs-B.html)"
    )
    cmp_.set_defaults(func=cmd_compare)

    exp = sub.add_parser(
        "export",
        help="export a run as a tidy table (one row per trial and metric)",
        description="Export a run as a tidy table: one row per trial and metric.",
    )
    exp.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    exp.add_argument(
        "--format",
        choices=["csv", "parquet", "json", "junit", "bencher"],
        default="csv",
        help="csv/parquet/json: the tidy table; junit: JUnit XML, one test case per gate and cell "
        "(a failed gate fails its case); bencher: Bencher Metric Format JSON (estimate with its 95%% interval)",
    )
    exp.add_argument("-o", "--output", type=Path, help="output file (default: RUN_DIR/<run-id>.<format>)")
    exp.set_defaults(func=cmd_export)


def cmd_compare(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import out, warn
    from orchestrator.report.compare import write_comparison_page

    page = write_comparison_page(args.run_a, args.run_b, args.output)
    for warning in page.warnings:
        warn(warning)
    for change in page.changes:
        warn(f"B changed against its earlier runs: {change}")
    out.print(f"comparison: {page.path}", markup=False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import out
    from orchestrator.report.ciexport import export_ci
    from orchestrator.report.export import export_run

    if args.format in ("junit", "bencher"):
        path = export_ci(args.run_dir, args.format, args.output)
    else:
        path = export_run(args.run_dir, args.format, args.output)
    out.print(f"exported: {path}", markup=False)
    return 0
