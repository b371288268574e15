"""Strict parameters of the registered decoding parts (rules, caches): a frozen dataclass's init fields are its
parameters and their defaults the one place the defaults live; an unknown key or a value of the wrong type is
refused in one line naming key, value and what is allowed."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any


def registrar(table: dict[str, type], kind: str) -> Callable[[type], type]:
    """A class decorator that adds a ``kind`` dataclass (rule, cache) to ``table`` under its ``name``."""

    def register(cls: type) -> type:
        if not cls.name:
            raise TypeError(f"{kind} class {cls.__name__} has no name")
        if cls.name in table and table[cls.name] is not cls:
            raise TypeError(f"{kind} name {cls.name!r} is registered twice ({table[cls.name].__name__}, "
                            f"{cls.__name__})")
        table[cls.name] = cls
        return cls

    return register


def parameters(cls: type) -> tuple[str, ...]:
    """Parameter names of a registered dataclass in declaration order."""
    return tuple(f.name for f in fields(cls) if f.init)


def defaults(cls: type) -> dict[str, Any]:
    """Its parameters at their defaults."""
    out = {}
    for f in fields(cls):
        if f.init:
            out[f.name] = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    return out


def type_ok(value: Any, annotation: Any) -> bool:
    """Whether ``value`` has the annotated type (bool is no int, an int is a float)."""
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    return isinstance(value, annotation)


def type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(annotation))
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def build_strict(kind: str, registry: dict[str, type], name: str, params: dict[str, Any]) -> Any:
    """``registry[name](**params)`` after checking every key and type (ValueError in one line, naming them)."""
    if name not in registry:
        raise ValueError(f"{kind} {name!r} is not one of {sorted(registry)}")
    cls = registry[name]
    allowed = parameters(cls)
    hints = typing.get_type_hints(cls)
    for key, value in params.items():
        if key not in allowed:
            raise ValueError(f"{kind} {name!r}: unknown parameter {key}={value!r}; allowed: {', '.join(allowed) or 'none'}")
        if not type_ok(value, hints[key]):
            raise ValueError(f"{kind} {name!r}: parameter {key}={value!r} must be {type_name(hints[key])}")
    float_keys = {k for k in params if hints[k] is float}
    return cls(**{k: float(v) if k in float_keys else v for k, v in params.items()})
