"""The base of every shape a YAML file is validated into (matrix, inventory, gates, hunt, metrics).

One place for the rules every key of those files follows: unknown keys are refused (a typo is an
error, not a default), inf and nan are not numbers, and a boolean is not a number. Pydantic's lax
mode reads true as 1 and false as 0, and YAML 1.1 reads on/off and yes/no as booleans, so without
the last rule `timeout: on` was a 1-second timeout and `replicates: yes` one replicate.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """A boolean where a number goes becomes its text, which the number's own parsing then
        refuses at the exact key (`health_timeouts.decode`), quoting what the file says."""
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else unboolean(field.annotation, value)


def unboolean(annotation: Any, value: Any) -> Any:
    """`value` with each boolean that sits where `annotation` wants a number (int or float, also
    inside Optional, unions without bool, and the values of dicts, lists and tuples) turned into
    "true" / "false"; everything else as it was."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return unboolean(args[0], value)
    if isinstance(value, bool):
        return str(value).lower() if _takes_number(annotation) else value
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if isinstance(value, dict | list) and typing.get_origin(arg) in _CONTAINERS[isinstance(value, dict)]:
                return unboolean(arg, value)
        return value
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return {k: unboolean(args[1], v) for k, v in value.items()}
    if origin in (list, tuple) and isinstance(value, list) and args:
        return [unboolean(args[0], v) for v in value]
    return value


_CONTAINERS: dict[bool, tuple[type, ...]] = {True: (dict,), False: (list, tuple)}  # is a dict -> origins


def _takes_number(annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _takes_number(args[0])
    if origin in (typing.Union, types.UnionType):
        return bool not in args and any(_takes_number(a) for a in args)
    return annotation in (int, float)


YAML_BOOLEANS = frozenset("y yes n no true false on off".split())  # YAML 1.1, any case
