"""Text and lists cut to a size with the cut shown (pure): what orch sends out or prints of a run
folder is bounded whatever the folder holds (a level name is any text, run.json may hold anything).

Why a visible marker: a cut that is not shown reads as the whole value (a name that looks
complete, a list that looks like every cell); an ellipsis, and a count of the items left out, say
that there was more and where to look for it (the run's report holds everything).
"""

from __future__ import annotations

from collections.abc import Sequence

ELLIPSIS = "…"


def clip(text: str, cap: int) -> str:
    """text, or its first cap - 1 characters and an ellipsis when it is longer than cap."""
    return text if len(text) <= cap else text[: max(cap - 1, 0)] + ELLIPSIS


def clip_list(items: Sequence[str], shown: int, cap: int) -> list[str]:
    """The first `shown` items, each clipped to cap, and `… and N more` for the rest."""
    head = [clip(item, cap) for item in items[:shown]]
    rest = len(items) - len(head)
    return head + [f"{ELLIPSIS} and {rest:,} more"] if rest > 0 else head
