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
    cmp_.add_argument("run_a", type=Path, metavar="RUN_A", help="a run's folder, e.g. last night's")
    cmp_.add_argument(
        "run_b",
        type=Path,
        metavar="RUN_B",
        help="the run compared with A, e.g. tonight's (checked against its earlier runs)",
    )
    cmp_.add_argument(
        "-o",
        "--output",
        type=output_path,
        help="where to write the page, - for stdout (default: compare-A-vs-B.html in RUN_A's reports folder)",
    )
    cmp_.set_defaults(func=cmd_compare)

    exp = sub.add_parser(
        "export",
        help="export a run as a tidy table (one row per trial and metric)",
        description="Export a run as a tidy table: one row per trial and metric.",
    )
    exp.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="the run's folder (orch run printed it), e.g. reports/<run-id>"
    )
    exp.add_argument(
        "--format",
        choices=["csv", "parquet", "json", "junit", "bencher"],
        default="csv",
        help="csv/parquet/json: the tidy table; junit: JUnit XML, one test case per gate and cell "
        "(a failed gate fails its case); bencher: Bencher Metric Format JSON (estimate with its 95%% interval)",
    )
    exp.add_argument(
        "-o",
        "--output",
        type=output_path,
        help="output file, - for stdout (default: RUN_DIR/<run-id>.<format>; junit: <run-id>.junit.xml, "
        "bencher: <run-id>.bencher.json); a name ending .csv, .parquet, .json or .xml must fit --format",
    )
    exp.set_defaults(func=cmd_export)


def output_path(text: str) -> Path:
    """`-` is stdout; `./-` stays a file named `-` (Path("./-") == Path("-"), so made absolute)."""
    path = Path(text)
    return path if text == "-" or path != Path("-") else Path.cwd() / path


def _written(what: str, path: Path) -> None:
    """Where the output went: on stderr when it went to stdout (the data must stay clean)."""
    from orchestrator.cli.console import err, out
    from orchestrator.store.atomic import STDOUT, is_stdout

    (err if is_stdout(path) else out).print(f"{what}: {'stdout' if path == STDOUT else path}", markup=False)


def cmd_compare(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import warn
    from orchestrator.report.compare import write_comparison_page
    from orchestrator.report.export import check_output

    if args.output is not None:
        check_output(args.output)  # the same checks as export's, before any work
        _check_not_overwritten(args.output, "a comparison page", ".html")
    page = write_comparison_page(args.run_a, args.run_b, args.output)
    for warning in page.warnings:
        warn(warning)
    for change in page.changes:
        warn(f"B changed against its earlier runs: {change}")
    _written("comparison", page.path)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from orchestrator.cli.console import warn
    from orchestrator.report.ciexport import export_ci
    from orchestrator.report.export import export_run

    _check_suffix(args.output, args.format)
    if args.format in ("junit", "bencher"):
        path = export_ci(args.run_dir, args.format, args.output, warn)
    else:
        path = export_run(args.run_dir, args.format, args.output, warn)
    _written("exported", path)
    return 0


# what each known file name ending is read as: another format's bytes under it break its reader
SUFFIX_FORMATS = {".csv": ("csv",), ".parquet": ("parquet",), ".json": ("json", "bencher"), ".xml": ("junit",)}


def _check_suffix(out: Path | None, fmt: str) -> None:
    """`-o table.parquet` without --format wrote CSV text under a parquet name (csv is the default),
    exit 0: refused, naming the --format the name asks for."""
    from orchestrator.errors import UsageError

    if out is None:
        return
    fits = SUFFIX_FORMATS.get(out.suffix.lower())
    if fits and fmt not in fits:
        raise UsageError(
            f"--output {out}: a {out.suffix} name for --format {fmt}",
            hint=f"add --format {fits[0]}, or name the file for {fmt}",
        )
    own = next(suffix for suffix, formats in SUFFIX_FORMATS.items() if fmt in formats)
    _check_not_overwritten(out, f"a {fmt} export", own)


def _check_not_overwritten(out: Path, what: str, own: str) -> None:
    """`-o matrices/m.yaml` replaced the user's matrix with CSV, exit 0, without a word: an existing
    file is replaced only when its name ends as this output's (`own`: ".csv" for a csv export,
    ".html" for compare's page); a new file, stdout, a FIFO or a device are written as before."""
    from orchestrator.errors import UsageError
    from orchestrator.store.atomic import is_stdout

    if is_stdout(out) or out.suffix.lower() == own or not out.is_file():
        return
    raise UsageError(
        f"--output {out}: an existing file not named as {what} (it would be replaced)",
        hint=f"name a new file or one ending {own}, or remove {out} first",
    )
