"""Typed task contracts: a task's input and output as dataclasses or TypedDicts.

:func:`from_json` checks a JSON value against a type and builds it (dataclass instances,
TypedDict dicts, lists, …), collecting every problem with its JSON path; :func:`to_json` turns
a handler's answer back into JSON and checks it against the declared output type.

Supported: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any``/``object``, ``Optional``
and ``Union`` (also ``X | Y``), ``Literal``, ``List``/``list``, ``Sequence``, ``Tuple``,
``Dict``/``dict``/``Mapping`` with string keys, ``Enum``, dataclasses and TypedDicts, nested.
Unknown members of an object are ignored (a newer workflow may send more).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import sys
import typing
from typing import Any, Dict, List, Tuple

from .errors import OrbitValidationError

__all__ = ["from_json", "to_json", "describe_type"]

_UnionType: Any = getattr(__import__("types"), "UnionType", None)  # X | Y, Python >= 3.10


class _Invalid:
    pass


_INVALID = _Invalid()


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def describe_type(tp: Any) -> str:
    """A short name of a type for messages (``str``, ``List[int]``, ``ChargeInput``)."""
    if tp is type(None) or tp is None:
        return "null"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _hints(tp: Any) -> Dict[str, Any]:
    try:
        if sys.version_info >= (3, 9):
            return typing.get_type_hints(tp, include_extras=False)
        return typing.get_type_hints(tp)  # pragma: no cover
    except Exception:  # unresolvable forward references: take the annotations as written
        return dict(getattr(tp, "__annotations__", {}))


def _convert(tp: Any, value: Any, path: str, issues: List[Dict[str, str]]) -> Any:
    def bad(message: str) -> _Invalid:
        issues.append({"path": path, "message": message})
        return _INVALID

    if tp is Any or tp is object:
        return value
    if tp is None or tp is type(None):
        return None if value is None else bad(f"expected null, got {_type_name(value)}")
    if isinstance(tp, str):  # an unresolved forward reference: accept as is
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    if origin is typing.Union or (_UnionType is not None and isinstance(tp, _UnionType)):
        if value is None and type(None) in args:
            return None
        for member in args:
            if member is type(None):
                continue
            trial: List[Dict[str, str]] = []
            out = _convert(member, value, path, trial)
            if not trial:
                return out
        names = " | ".join(describe_type(a) for a in args)
        return bad(f"expected {names}, got {_type_name(value)}")
    if origin is typing.Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        return bad(f"expected one of {', '.join(repr(a) for a in args)}, got {value!r}")
    if tp is bool:
        return value if isinstance(value, bool) else bad(f"expected boolean, got {_type_name(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return bad(f"expected integer, got {_type_name(value)}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return bad(f"expected number, got {_type_name(value)}")
    if tp is str:
        return value if isinstance(value, str) else bad(f"expected string, got {_type_name(value)}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in tp)
            return bad(f"expected one of {allowed}, got {value!r}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            return bad(f"expected object ({tp.__name__}), got {_type_name(value)}")
        hints = _hints(tp)
        kwargs: Dict[str, Any] = {}
        ok = True
        for field in dataclasses.fields(tp):
            if not field.init:
                continue
            here = f"{path}.{field.name}"
            if field.name not in value:
                if (
                    field.default is dataclasses.MISSING
                    and field.default_factory is dataclasses.MISSING
                ):
                    issues.append({"path": here, "message": "required"})
                    ok = False
                continue
            out = _convert(hints.get(field.name, Any), value[field.name], here, issues)
            if out is _INVALID:
                ok = False
            else:
                kwargs[field.name] = out
        if not ok:
            return _INVALID
        try:
            return tp(**kwargs)
        except Exception as err:  # a __post_init__ that refuses the value
            return bad(f"{tp.__name__}: {err}")
    if _is_typeddict(tp):
        if not isinstance(value, dict):
            return bad(f"expected object ({tp.__name__}), got {_type_name(value)}")
        hints = _hints(tp)
        required = getattr(tp, "__required_keys__", frozenset(hints) if getattr(tp, "__total__", True) else ())
        result: Dict[str, Any] = {}
        ok = True
        for name, member in hints.items():
            here = f"{path}.{name}"
            if name not in value:
                if name in required:
                    issues.append({"path": here, "message": "required"})
                    ok = False
                continue
            out = _convert(member, value[name], here, issues)
            if out is _INVALID:
                ok = False
            else:
                result[name] = out
        return result if ok else _INVALID
    if tp in (list, tuple) or origin in (list, tuple, collections.abc.Sequence, typing.List):
        if not isinstance(value, list):
            return bad(f"expected array, got {_type_name(value)}")
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                return bad(f"expected an array of {len(args)} items, got {len(value)}")
            items = [_convert(a, v, f"{path}[{i}]", issues) for i, (a, v) in enumerate(zip(args, value))]
        else:
            item_tp = args[0] if args else Any
            items = [_convert(item_tp, v, f"{path}[{i}]", issues) for i, v in enumerate(value)]
        if any(i is _INVALID for i in items):
            return _INVALID
        return tuple(items) if (tp is tuple or origin is tuple) else items
    if tp is dict or origin in (dict, collections.abc.Mapping, typing.Dict):
        if not isinstance(value, dict):
            return bad(f"expected object, got {_type_name(value)}")
        val_tp = args[1] if len(args) == 2 else Any
        out_map: Dict[str, Any] = {}
        ok = True
        for k, v in value.items():
            out = _convert(val_tp, v, f"{path}.{k}", issues)
            if out is _INVALID:
                ok = False
            else:
                out_map[k] = out
        return out_map if ok else _INVALID
    if isinstance(tp, type):
        return value if isinstance(value, tp) else bad(f"expected {tp.__name__}, got {_type_name(value)}")
    return value  # a construct this module does not know: not checked


def from_json(tp: Any, value: Any, what: str = "value") -> Any:
    """Checks ``value`` (decoded JSON) against ``tp`` and builds it.

    Raises :class:`OrbitValidationError` listing every problem (``$.items[0].qty: expected
    integer, got string``).
    """
    issues: List[Dict[str, str]] = []
    out = _convert(tp, value, "$", issues)
    if issues or out is _INVALID:
        if not issues:
            issues.append({"path": "$", "message": "invalid"})
        text = "; ".join(f"{i['path']}: {i['message']}" for i in issues)
        raise OrbitValidationError(f"invalid {what}: {text}", issues)
    return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_json(tp: Any, value: Any, what: str = "value") -> Any:
    """Turns a handler's answer (dataclass instances, enums, tuples …) into JSON and, with a
    type, checks it against that type. Raises :class:`OrbitValidationError`."""
    plain = _plain(value)
    if tp is not None and tp is not Any:
        from_json(tp, plain, what)
    return plain


def contract_types(fn: Any) -> Tuple[Any, Any]:
    """The input and output types a handler declares: its first parameter's annotation and its
    return annotation (``Any`` where there is none)."""
    import inspect

    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = dict(getattr(fn, "__annotations__", {}))
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    input_tp = hints.get(params[0].name, Any) if params else Any
    output_tp = hints.get("return", Any)
    return input_tp, output_tp
