"""A progress sink that keeps the notes a sweep says (what the terminal shows beside its bar), for
the tests that read them. One class where four test files each wrote their own."""

from __future__ import annotations

from orchestrator.sweep.progress import QuietProgress


class Notes(QuietProgress):
    """Every note, in order, in `lines`; the rest of the progress is dropped."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, message: str) -> None:
        self.lines.append(message)

    def text(self) -> str:
        """The notes as the terminal shows them, one a line."""
        return "\n".join(self.lines)
