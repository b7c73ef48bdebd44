"""core.regexsize's estimate where groups nest and where a pattern is malformed: a group's count
multiplies everything the group holds, items before a nested group included, and a stray `)` is
counted as the character it is, so the compiler refuses the pattern at its line (exit 2) rather
than the estimate crashing first. (Mutation round six: each case failed on a mutant the fuzz
tests let through.) Classes: `]` right after `[` or `[^`, or escaped, is a member, not the end."""

from __future__ import annotations

import pytest

from orchestrator.core import yamlsrc
from orchestrator.core.config import compile_pattern
from orchestrator.core.regexsize import unrolled_size
from orchestrator.errors import ConfigError


@pytest.mark.parametrize(
    ("pattern", "items"),
    [
        (r"(a(b){2}){3}", 9),  # (a b b) three times: the a before the inner group counted in its group
        (r"x(a(b){2}c){3}y", 14),  # x, (a b b c) x 3, y
        (r"((a){2}(b){3}){4}", 20),  # (a a b b b) x 4
        (r"a)b{3}", 5),  # a stray `)`: a literal to this count (the compiler refuses it)
        (r"a))b", 4),
        (r"(ab{5}", 6),  # an unclosed group: what it holds is counted all the same
        (r"x(a(b{3}", 5),
        (r"x(a(b{3})c{2}", 7),
        (r"[^]a]{5}", 5),  # `]` first in a negated class is a member, the class one item
        (r"[\]]x{4}", 5),  # an escaped `]` does not close the class
        (r"[a\]b]{3}c", 4),
    ],
)
def test_nested_groups_multiply_all_they_hold(pattern: str, items: int) -> None:
    assert unrolled_size(pattern) == items


@pytest.mark.parametrize("pattern", [r"(?P<value>\d+))", r")x{5}", r"a)(b", r"(?P<value>\d+", r"x(a(b{3}"])
def test_an_unbalanced_parenthesis_is_refused_at_its_line(pattern: str) -> None:
    _, source = yamlsrc.parse_yaml(f"metrics:\n  tps:\n    regex: {pattern!r}\n", "m.yaml")
    with pytest.raises(ConfigError) as caught:
        compile_pattern(pattern, source, ("metrics", "tps", "regex"))
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith("m.yaml:3: metrics.tps.regex: invalid regular expression: ")
