"""A small registry of named objects, modelled on lm-evaluation-harness.

Entries are either objects registered with the decorator or lazy ``"module:attr"`` strings that
are imported on first use, so registering a backend never imports vLLM or torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects; a miss lists the names that exist."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}
        self._frozen = False

    def register(self, name: str, obj: T | str | None = None) -> Callable[[T], T] | T | str:
        """Register ``obj`` (or a lazy ``"module:attr"`` string) under ``name``.

        Used bare as a decorator: ``@registry.register("name")``.
        """
        if obj is None:
            def deco(o: T) -> T:
                self._add(name, o)
                return o
            return deco
        self._add(name, obj)
        return obj

    def _add(self, name: str, obj: Any) -> None:
        if self._frozen:
            raise RuntimeError(f"{self.kind} registry is frozen; cannot add {name!r}")
        if name in self._entries and self._entries[name] is not obj:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj

    def get(self, name: str) -> T:
        try:
            obj = self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise KeyError(f"unknown {self.kind} {name!r}; available: {known}") from None
        if isinstance(obj, str) and ":" in obj:
            module, attr = obj.split(":", 1)
            obj = getattr(importlib.import_module(module), attr)
            self._entries[name] = obj
        return obj

    def freeze(self) -> None:
        self._frozen = True

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        return sorted(self._entries)
