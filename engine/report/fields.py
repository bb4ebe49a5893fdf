"""Typed reads of decoded report JSON, each failure a ReportError naming the field's path.

``Fields`` wraps one JSON object at a path (``runs[3].batches[0]``) and reads its keys as a given type:
``number``, ``integer``, ``string``, ``boolean``, nested objects and lists, numeric arrays, or opaque JSON
(copied, depth- and size-limited). Keys it did not read are ``rest()``: a schema keeps them so nothing
in a file is lost. bools are never numbers; NaN/inf are read only where JSON null is allowed, and mean
what null means there. ``to_json`` is the way back: numpy to lists, NaN to null.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, Literal, overload

import numpy as np

from engine.core.errors import ReportError

#: opaque JSON nested deeper than this is refused (a report's own structure is far shallower)
MAX_DEPTH = 64
#: items of one opaque JSON list, keys of one opaque object
MAX_OPAQUE_ITEMS = 1_000_000
#: values (all axes together) of one numeric array: tracks, telemetry series
MAX_ARRAY_VALUES = 10**7
#: characters of a found value quoted in an error message
QUOTE_CHARS = 40

_NUMBER_TYPES = (int, float)


def join(path: str, key: str | int) -> str:
    """The path of a key (str) or list index (int) under path: ``runs[3].stage_ms``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def describe(value: Any) -> str:
    """A short rendering of a found value for an error message."""
    if isinstance(value, dict):
        return "an object" if value else "{}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} items" if value else "[]"
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."


def fail(path: str, expected: str, value: Any) -> ReportError:
    """The error for a value of the wrong type or range at path."""
    return ReportError(f"{path or 'the report'} should be {expected}, found {describe(value)}")


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBER_TYPES) and not isinstance(value, bool)


@overload
def number_value(value: Any, path: str, nullable: Literal[False] = ..., minimum: float | None = ...) -> float: ...
@overload
def number_value(value: Any, path: str, nullable: bool, minimum: float | None = ...) -> float | None: ...
def number_value(value: Any, path: str, nullable: bool = False, minimum: float | None = None) -> float | None:
    """A finite float; None for null, NaN or inf where nullable."""
    if value is None and nullable:
        return None
    if not _is_number(value):
        raise fail(path, "a number" + (" or null" if nullable else ""), value)
    value = float(value)
    if not math.isfinite(value):
        if nullable:
            return None
        raise fail(path, "a finite number", value)
    if minimum is not None and value < minimum:
        raise fail(path, f"a number >= {minimum:g}", value)
    return value


@overload
def integer_value(value: Any, path: str, nullable: Literal[False] = ..., minimum: int | None = ...) -> int: ...
@overload
def integer_value(value: Any, path: str, nullable: bool, minimum: int | None = ...) -> int | None: ...
def integer_value(value: Any, path: str, nullable: bool = False, minimum: int | None = None) -> int | None:
    """A whole number (an integral float is accepted); None for null where nullable."""
    if value is None and nullable:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(path, "a whole number" + (" or null" if nullable else ""), value)
    if minimum is not None and value < minimum:
        raise fail(path, f"a whole number >= {minimum}", value)
    return value


@overload
def string_value(value: Any, path: str, nullable: Literal[False] = ...) -> str: ...
@overload
def string_value(value: Any, path: str, nullable: bool) -> str | None: ...
def string_value(value: Any, path: str, nullable: bool = False) -> str | None:
    """A string; None for null where nullable."""
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise fail(path, "a string" + (" or null" if nullable else ""), value)
    return value


def json_copy(value: Any, path: str, depth: int = 0) -> Any:
    """A copy of opaque JSON (objects, lists, strings, numbers, bools, null); tuples become lists.

    Refuses nesting deeper than MAX_DEPTH, containers over MAX_OPAQUE_ITEMS and non-JSON values.
    """
    if depth > MAX_DEPTH:
        raise ReportError(f"{path} is nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return json_copy(value.item(), path, depth)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (dict, list, tuple)) and len(value) > MAX_OPAQUE_ITEMS:
        raise ReportError(f"{path} holds {len(value)} items, more than the {MAX_OPAQUE_ITEMS} a report may have")
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise fail(path, "an object with string keys", key)
            out[key] = json_copy(item, join(path, key), depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [json_copy(item, join(path, i), depth + 1) for i, item in enumerate(value)]
    raise fail(path, "a JSON value", value)


def _regular_array(value: Any, path: str, ndim: int, what: str) -> np.ndarray | None:
    """Nested JSON lists as an object array of exactly ndim axes, size-checked; None when empty."""
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise fail(path, f"a list{' of lists' * (ndim - 1)} of {what}", value)
    _check_leaf_depth(value, path, ndim)
    try:
        arr = np.array(value, dtype=object)
    except (ValueError, TypeError):
        raise fail(path, f"a regular {ndim}-axis list of {what}", value) from None
    if arr.size == 0 and arr.ndim <= ndim:
        return None
    if arr.ndim != ndim:
        raise fail(path, f"a regular {ndim}-axis list of {what} (found {arr.ndim} axes)", value)
    _check_size(arr, path)
    return arr


def number_array(value: Any, path: str, ndim: int, nullable: bool = True, dtype: Any = np.float64
                 ) -> np.ndarray:
    """Nested JSON lists of numbers as an array of ndim axes; null (or NaN, inf) is NaN where nullable.

    An empty list is shape [0] * ndim. bools are refused; ragged lists are refused.
    """
    arr = _regular_array(value, path, ndim, "numbers")
    if arr is None:
        return np.zeros((0,) * ndim, dtype=dtype)
    flat = arr.reshape(-1)
    kinds = set(map(type, flat))
    allowed = {int, float, type(None)} if nullable else {int, float}
    if not kinds <= allowed:
        bad = next(v for v in flat if type(v) not in allowed)
        index = np.unravel_index(next(i for i, v in enumerate(flat) if v is bad), arr.shape)
        where = path + "".join(f"[{int(i)}]" for i in index)
        raise fail(where, "a number" + (" or null" if nullable else ""), bad)
    if type(None) in kinds:
        # numpy's stubs have no overload for an elementwise comparison with None (an object array's nulls)
        flat = np.where(np.equal(flat, None), np.nan, flat)  # type: ignore[call-overload]
    out = np.asarray(flat.astype(np.float64).reshape(arr.shape))
    finite = np.isfinite(out)
    if not finite.all():
        if not nullable:
            raise fail(path, "a list of finite numbers", value)
        out[~finite] = np.nan  # NaN and inf stand where null could: they mean null
    limit = np.finfo(dtype).max
    if limit < np.finfo(np.float64).max and np.abs(out[finite]).max(initial=0.0) > limit:
        raise fail(path, f"a list of numbers within +-{limit:.3g}", value)
    return out.astype(dtype, copy=False)


def bool_array(value: Any, path: str, ndim: int) -> np.ndarray:
    """Nested JSON lists of 0/1 or true/false as a bool array of ndim axes."""
    arr = _regular_array(value, path, ndim, "0/1")
    if arr is None:
        return np.zeros((0,) * ndim, dtype=bool)
    flat = arr.reshape(-1)
    if not set(map(type, flat)) <= {int, bool} or not all(v in (0, 1) for v in flat):
        raise fail(path, "a list of 0/1 or true/false", value)
    return flat.astype(bool).reshape(arr.shape)


def _check_size(arr: np.ndarray, path: str) -> None:
    if arr.size > MAX_ARRAY_VALUES:
        raise ReportError(f"{path} holds {arr.size} values, more than the {MAX_ARRAY_VALUES} a report may have")


def _check_leaf_depth(value: Any, path: str, ndim: int) -> None:
    """Refuse lists nested deeper than ndim along the first items (cheap, before numpy sees them)."""
    item = value
    for _ in range(ndim):
        if not isinstance(item, (list, tuple, np.ndarray)) or len(item) == 0:
            return
        item = item[0]
    if isinstance(item, (list, tuple, dict, np.ndarray)):
        raise fail(path, f"a {ndim}-axis list of numbers", value)


class Fields:
    """Typed reads of one JSON object at ``path``; unknown keys are kept for ``rest()``."""

    def __init__(self, data: Any, path: str):
        if not isinstance(data, Mapping):
            raise fail(path, "an object", data)
        self.data = data
        self.path = path
        self._read: set[str] = set()

    def at(self, key: str) -> str:
        """The path of key in this object."""
        return join(self.path, key)

    def raw(self, key: str, required: bool = False) -> Any:
        """The value of key as decoded (None when missing); marks it read."""
        self._read.add(key)
        if key not in self.data:
            if required:
                raise ReportError(f"{self.at(key)} is missing")
            return None
        return self.data[key]

    def number(self, key: str, default: float | None = None, minimum: float | None = None) -> float:
        """A required finite number (or default when missing/null and a default is given)."""
        value = self.raw(key, required=default is None)
        if value is None and default is not None:
            return default
        return number_value(value, self.at(key), minimum=minimum)

    def opt_number(self, key: str, minimum: float | None = None) -> float | None:
        """A number, None when missing, null, NaN or inf."""
        return number_value(self.raw(key), self.at(key), nullable=True, minimum=minimum)

    def integer(self, key: str, default: int | None = None, minimum: int | None = None) -> int:
        """A required whole number (or default when missing/null and a default is given)."""
        value = self.raw(key, required=default is None)
        if value is None and default is not None:
            return default
        return integer_value(value, self.at(key), minimum=minimum)

    def opt_integer(self, key: str, minimum: int | None = None) -> int | None:
        """A whole number, None when missing or null."""
        return integer_value(self.raw(key), self.at(key), nullable=True, minimum=minimum)

    def string(self, key: str, default: str | None = None) -> str:
        """A string (default when missing or null and a default is given)."""
        value = self.raw(key, required=default is None)
        if value is None and default is not None:
            return default
        return string_value(value, self.at(key))

    def opt_string(self, key: str) -> str | None:
        """A string, None when missing or null."""
        return string_value(self.raw(key), self.at(key), nullable=True)

    def boolean(self, key: str, default: bool) -> bool:
        """true/false (default when missing or null)."""
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise fail(self.at(key), "true or false", value)
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        """One of choices (default when missing or null)."""
        value = self.string(key, default)
        if value not in choices:
            raise fail(self.at(key), "one of " + ", ".join(choices), value)
        return value

    def obj(self, key: str, required: bool = True) -> Fields | None:
        """The nested object at key; None when it is optional and missing or null."""
        value = self.raw(key, required=required)
        if value is None and not required:
            return None
        return Fields(value, self.at(key))

    def items(self, key: str, max_items: int, required: bool = False) -> Iterator[tuple[str, Any]]:
        """(path, item) of the list at key (nothing when optional and missing/null)."""
        value = self.raw(key, required=required)
        if value is None and not required:
            return iter(())
        if not isinstance(value, (list, tuple)):
            raise fail(self.at(key), "a list", value)
        if len(value) > max_items:
            raise ReportError(f"{self.at(key)} holds {len(value)} items, more than the {max_items} a report may have")
        return ((join(self.at(key), i), item) for i, item in enumerate(value))

    def strings(self, key: str, max_items: int, required: bool = False) -> tuple[str, ...]:
        """The list of strings at key (empty when optional and missing/null)."""
        return tuple(string_value(item, path) for path, item in self.items(key, max_items, required))

    def number_map(self, key: str, nullable: bool = False) -> dict[str, float | None]:
        """{name: number} at key ({} when missing or null)."""
        sub = self.obj(key, required=False)
        if sub is None:
            return {}
        return {name: number_value(v, sub.at(name), nullable=nullable) for name, v in sub.data.items()}

    def string_map(self, key: str) -> dict[str, str]:
        """{name: string} at key ({} when missing or null)."""
        sub = self.obj(key, required=False)
        if sub is None:
            return {}
        return {name: string_value(v, sub.at(name)) for name, v in sub.data.items()}

    def opaque(self, key: str) -> Any:
        """The JSON at key, copied (None when missing)."""
        return json_copy(self.raw(key), self.at(key), _depth(self.path))

    def opaque_map(self, key: str) -> dict[str, Any] | None:
        """An opaque object at key, copied; None when missing or null."""
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise fail(self.at(key), "an object", value)
        return json_copy(dict(value), self.at(key), _depth(self.path))

    def rest(self) -> dict[str, Any]:
        """The keys not read so far, copied as opaque JSON."""
        return {k: json_copy(v, self.at(k), _depth(self.path) + 1) for k, v in self.data.items()
                if k not in self._read}


def _depth(path: str) -> int:
    """How deep a path is (its dots and brackets), to count opaque JSON's nesting from the top."""
    return path.count(".") + path.count("[") + (1 if path else 0)


def to_json(value: Any, decimals: int | None = None) -> Any:
    """Plain JSON types: arrays to lists (rounded to decimals when given), NaN/inf to null, tuples to lists."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "b":
            return value.astype(np.int8).tolist()
        if value.dtype.kind in "iu":
            return value.tolist()
        arr = value.astype(np.float64)
        if decimals is not None:
            arr = np.round(arr, decimals)
        finite = np.isfinite(arr)
        if finite.all():
            return arr.tolist()
        obj = arr.astype(object)
        obj[~finite] = None
        return obj.tolist()
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
