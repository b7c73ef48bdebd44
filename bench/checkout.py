"""The old tree a benchmark measures against, beside this checkout (bench_memory, bench_reaper,
bench_status): one way to get it, so every "before" figure comes from the same kind of copy."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def before_tree(spec: str, scratch: Path) -> Path:
    """A checkout to import the old orchestrator from: a folder as given, or REV's `orchestrator/`
    exported (`git archive`) into `scratch`."""
    if Path(spec).is_dir():
        return Path(spec).resolve()
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", spec, "orchestrator"], check=True, capture_output=True
    ).stdout
    tree = scratch / f"before-{spec}"
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(tree, filter="data")
    return tree
