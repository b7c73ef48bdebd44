"""How large a regular expression grows when compiled, estimated before compiling it (pure).

Why: the `regex` engine unrolls a repeat's mandatory count, ~300-1,100 bytes an item: a 30-character
metric pattern `(?P<value>\\d+)x{99999999}` took orch past 1 GB in 0.7 s before anything said
a word (bench_fuzz_inputs, seed 745), and nested counts multiply (`(?:x{1000}){1000}`: 430 MB).
A pattern's length is capped (config.MAX_PATTERN) but its counts were not. Here a pattern's items
are counted as the engine would unroll them: every literal, class or escape one item, a group the
sum of its items, `{m}`, `{m,}` and `{m,n}` multiplying what they repeat by m (`*`, `+`, `?`:
once). Alternatives are summed, not maxed: an over-estimate, never an under-estimate.
"""

from __future__ import annotations

import re

MAX_UNROLLED = 10_000  # items: ~10 MB compiled; real metric patterns unroll to a few dozen
_COUNT = re.compile(r"\{(\d+)(?:,\d*)?\}")  # a bounded repeat; `{,n}` asks for none


def unrolled_size(pattern: str) -> int:
    """The items `pattern` unrolls to when compiled (an upper estimate; see the module's why)."""
    frames = [[0, 0]]  # per open group: [items counted, the last item's (a quantifier may multiply it)]
    i = 0
    while i < len(pattern):
        c, frame = pattern[i], frames[-1]
        count = _COUNT.match(pattern, i) if c == "{" else None
        if count is not None:
            frame[1] *= max(int(count[1]), 1)
            i = count.end()
            continue
        if c == "(":
            frames.append([0, 0])
        elif c == ")" and len(frames) > 1:
            inner = frames.pop()
            frames[-1][0] += frames[-1][1]
            frames[-1][1] = inner[0] + inner[1]
        elif c not in "*+?|":
            frame[0] += frame[1]
            frame[1] = 1
        i = _class_end(pattern, i) if c == "[" else i + (2 if c == "\\" else 1)
    while len(frames) > 1:  # unclosed groups: the compiler refuses the pattern anyway
        inner = frames.pop()
        frames[-1][0] += inner[0] + inner[1]
    return frames[0][0] + frames[0][1]


def _class_end(pattern: str, i: int) -> int:
    """The index after the character class opening at i (`[^]a\\]]` is one class)."""
    j = i + 1
    if pattern[j : j + 1] == "^":
        j += 1
    if pattern[j : j + 1] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1
