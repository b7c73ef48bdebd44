"""A trial's raw text files (repro output, unit logs) rewritten with secrets masked (STORE).

They are linked from the report and served by `orch serve`, so a repro that prints its
`Authorization: Bearer ...` header or a server log that echoes `--api-key ...` must not publish
it. Rewritten once, when the trial ends (after its metrics were read from the raw text), and only
when masking changes something; all or nothing, like every other run file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.store.atomic import write_bytes_atomic

TEXT_SUFFIXES = (".out", ".err", ".log", ".txt")  # what orch writes as raw text into a trial folder
MAX_BYTES = 64 * 1024 * 1024  # a bigger file is left to `orch serve`, which masks what it serves


def redact_folder(folder: Path, redact: Callable[[str], str]) -> list[Path]:
    """Mask every raw text file under `folder`; the files that changed."""
    changed = []
    for path in sorted(folder.rglob("*")):
        if path.suffix in TEXT_SUFFIXES and path.is_file() and not path.is_symlink() and redact_file(path, redact):
            changed.append(path)
    return changed


def redact_file(path: Path, redact: Callable[[str], str]) -> bool:
    """Rewrite one text file masked; False when nothing needed masking (or it is too big)."""
    try:
        if path.stat().st_size > MAX_BYTES:
            return False
        raw = path.read_bytes()
    except OSError:
        return False
    text = raw.decode("utf-8", errors="surrogateescape")
    masked = redact(text)
    if masked == text:
        return False
    write_bytes_atomic(path, masked.encode("utf-8", errors="surrogateescape"), fsync=False, what="cannot mask file")
    return True
