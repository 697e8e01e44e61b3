"""The one schema library (pydantic v2) for every configuration file and the engine's request bodies.

`Schema` is the base of each settings model: types are strict (`block_size: 16.5` or `"16"` is an error, not 16;
YAML ints are still accepted for float fields), unknown keys are refused with the list of known ones (a typo must not
silently fall back to a default), and each field keeps its docstring as its description (`sluicegate engine --help`
prints it; config/*.yaml points to it). `explain` turns a ValidationError into the one-line message users see: the
field's path, the value given and the fix, e.g. `models.tiny.block_size=16.5: Input should be a valid integer`.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

UNKNOWN_KEYS = "unknown_keys"
"""Error type of a mapping with keys the model does not define (its message lists the known ones)."""


def _fspath(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _list_as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


Path = Annotated[str, Field(min_length=1), BeforeValidator(_fspath)]
"""A file or folder path: a non-empty str, or a pathlib.Path given in code (kept as its str)."""
Tuple = BeforeValidator(_list_as_tuple)
"""Annotated[tuple[int, ...], Tuple]: YAML has lists, and strict mode takes only tuples for a tuple field."""

# RFC 1123 labels, plus the underscore Docker's service names may hold (its DNS resolves them)
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def _host(value: str) -> str:
    """An IP address or a host name whose last label is not all digits: "999.1.1.1" is a mistyped address and
    "127.0.0.1:8000" holds a port, which would otherwise reach the resolver and fail as the server starts."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.removesuffix(".").split(".")
    if len(value) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels) or labels[-1].isdigit():
        raise ValueError("neither an IP address (0.0.0.0, 127.0.0.1, ::) nor a host name")
    return value


Host = Annotated[str, AfterValidator(_host)]
"""An address to listen on or be reached at: an IP address or a host name."""


class Schema(BaseModel):
    model_config = ConfigDict(
        strict=True, extra="forbid", frozen=True, use_attribute_docstrings=True, populate_by_name=True,
        allow_inf_nan=False,
    )  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _known_keys_only(cls, data: Any) -> Any:
        # pydantic's own extra="forbid" reports each key alone; listing the known ones names the fix.
        if isinstance(data, dict):
            known = set(cls.model_fields) | {info.alias for info in cls.model_fields.values() if info.alias}
            unknown = sorted(str(key) for key in set(data) - known)
            if unknown:
                raise PydanticCustomError(
                    UNKNOWN_KEYS, "unknown keys {unknown}; known: {known}", {"unknown": unknown, "known": sorted(known)}
                )
        return data


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """('models', 'tiny', 'replicas', 0) -> 'models.tiny.replicas[0]' (after `prefix`, when given)."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def explain(error: ValidationError, prefix: str = "") -> str:
    """Every problem as `path=value: what is wrong or expected`, joined by '; ' (one line for a log or stderr)."""
    return "; ".join(_one(detail, prefix) for detail in error.errors(include_url=False))


def _one(detail: Any, prefix: str) -> str:
    path = field_path(detail["loc"], prefix)
    message = _message(detail)
    if detail["type"] == "missing":
        return f"{path} is required"
    if detail["type"] == UNKNOWN_KEYS or not detail["loc"]:  # about the mapping itself, not one value in it
        return f"{path}: {message}" if path else message
    return f"{path}={detail['input']!r}: {message}"


def _message(detail: Any) -> str:
    # A ValueError from a validator reads "Value error, <our text>": our text already names the fix.
    error = (detail.get("ctx") or {}).get("error")
    return str(error) if detail["type"] == "value_error" and error is not None else detail["msg"]
