"""A noun in the form its count asks for: "1 cell", "3 cells", "items 3, 4" (pure).

Why its own module: the report, the CLI and the team's messages said "1 cell(s)" and "3 trial
attempt(s) failed" where the count was at hand, and about as many places spelled their own
`'s' if n != 1` each. One rule, used by every message and (as the `counted` filter) every page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

_SIBILANTS = ("s", "x", "z", "ch", "sh")  # process -> processes, not processs


def plural_of(singular: str) -> str:
    """The regular English plural of `singular`'s last word: +es after a sibilant, consonant+y
    -> ies, else +s. An irregular noun is the caller's to spell (the `plural` arguments below)."""
    if singular.endswith(_SIBILANTS):
        return singular + "es"
    if len(singular) > 1 and singular.endswith("y") and singular[-2] not in "aeiou":
        return singular[:-1] + "ies"
    return singular + "s"


def noun(n: int, singular: str, plural: str | None = None) -> str:
    """`singular` for exactly one, else its plural (`plural` when given): "0 cells", "1 cell"."""
    return singular if n == 1 else plural or plural_of(singular)


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """The count and its noun: "1 trial", "3 trials", "1,234 trials" (thousands separated, as
    orch prints every other count)."""
    return f"{n:,} {noun(n, singular, plural)}"


def listed(singular: str, names: Iterable[object], plural: str | None = None) -> str:
    """A named list with its noun: "item 3", "items 3, 4" (the form from the list's length)."""
    shown = [str(name) for name in names]
    return f"{noun(len(shown), singular, plural)} {', '.join(shown)}"


def on_testbeds(names: Sequence[str], shown: Callable[[str], str] = repr) -> str:
    """`on testbed 'A'`, or `across 2 testbeds ('A', 'B')`: where a sweep runs, one wording for
    `orch validate` (names quoted) and `orch plan` (`shown` puts them in bold)."""
    said = [shown(name) for name in names]
    return f"on testbed {said[0]}" if len(said) == 1 else f"across {len(said)} testbeds ({', '.join(said)})"
