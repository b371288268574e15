"""Strict parameters of the registered decoding parts (rules, caches, policies): a frozen dataclass's init fields are its
parameters and their defaults the one place the defaults live; an unknown key or a value of the wrong type is
refused in one line naming key, value and what is allowed."""

from __future__ import annotations

import importlib
import pkgutil
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import MISSING, fields
from typing import Any


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


class Registry(dict[str, type]):
    """The registered dataclasses of one kind (rule, cache, policy) by name: filled by ``register`` where each is
    defined, built strictly by ``build``; ``prepare(cls, params)`` turns a builder's keywords into the class's
    parameters first (a policy's preset)."""

    def __init__(self, kind: str, prepare: Callable[[type, dict[str, Any]], dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.kind = kind
        self.prepare = prepare

    def register(self, cls: type) -> type:
        """Class decorator: add a dataclass under its ``name`` (a second class under one name is an error)."""
        if not cls.name:
            raise TypeError(f"{self.kind} class {cls.__name__} has no name")
        if cls.name in self and self[cls.name] is not cls:
            raise TypeError(f"{self.kind} name {cls.name!r} is registered twice ({self[cls.name].__name__}, "
                            f"{cls.__name__})")
        self[cls.name] = cls
        return cls

    def parameters(self, name: str) -> tuple[str, ...] | None:
        """Parameter names of ``name`` in declaration order (None for an unknown name)."""
        cls = self.get(name)
        return None if cls is None else parameters(cls)

    def defaults(self, name: str) -> dict[str, Any]:
        """The published defaults of ``name``: its dataclass defaults (conf/<kind>/<name>.yaml extends them)."""
        return defaults(self[name])

    def build(self, name: str, **params: Any) -> Any:
        """``name`` with ``params`` (the rest at their defaults); ValueError names a bad key, value or range."""
        if self.prepare is not None and name in self:
            params = self.prepare(self[name], dict(params))
        return build_strict(self.kind, self, name, params)


def import_submodules(package: str, path: Iterable[str], skip: str = "base") -> None:
    """Import every module of a package but ``skip``, so that each registers what it defines."""
    for module in sorted(m.name for m in pkgutil.iter_modules(path)):
        if module != skip:
            importlib.import_module(f"{package}.{module}")

