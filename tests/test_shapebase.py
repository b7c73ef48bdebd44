"""core.shapebase: a boolean is not a number in any YAML shape (pydantic's lax mode read true as 1)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field, ValidationError

from orchestrator.core.shapebase import Shape, unboolean


class Example(Shape):
    count: int = 0
    seconds: Annotated[float, Field(gt=0)] = 1.0
    maybe: float | None = None
    per_role: dict[str, float] = {}
    steps: list[int] = []
    flag: bool = False
    scalar: str | bool | None = None
    either: dict[str, float] | list[float] | None = None


@pytest.mark.parametrize(
    ("key", "value", "where"),
    [
        ("count", True, ("count",)),
        ("seconds", True, ("seconds",)),
        ("maybe", False, ("maybe",)),
        ("per_role", {"decode": True}, ("per_role", "decode")),
        ("steps", [1, True], ("steps", 1)),
        ("either", {"a": 1.0, "b": False}, ("either",)),  # a union reports per branch; config keeps the deepest
        ("either", [True], ("either",)),
    ],
)
def test_a_boolean_where_a_number_goes_is_refused_at_its_key(key: str, value: object, where: tuple) -> None:
    with pytest.raises(ValidationError) as err:
        Example.model_validate({key: value})
    parsing = [e["loc"] for e in err.value.errors() if e["type"] in ("int_parsing", "float_parsing")]
    assert parsing and all(loc[: len(where)] == where for loc in parsing), err.value.errors()


def test_booleans_where_booleans_go_and_numbers_stay_as_they_are() -> None:
    ok = Example.model_validate({"flag": True, "scalar": False, "count": 3, "per_role": {"decode": 2}, "steps": [1]})
    assert (ok.flag, ok.scalar, ok.count, ok.per_role, ok.steps) == (True, False, 3, {"decode": 2.0}, [1])
    assert unboolean(str | bool | None, True) is True
    assert unboolean(dict[str, str | bool], {"a": True}) == {"a": True}
    assert unboolean(float | None, True) == "true"
