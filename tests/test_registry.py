"""harness.registry: duplicate names refused, a frozen registry, lazy imports cached."""

from __future__ import annotations

import sys

import pytest

import harness.registry as registry_mod
from harness.registry import Registry


def test_register_and_get_with_the_decorator_and_a_miss_lists_names():
    reg: Registry[object] = Registry("backend")

    @reg.register("b")
    def b():
        return 1

    assert reg.register("a", len) is len and reg.get("a") is len and reg.get("b") is b
    assert "a" in reg and "z" not in reg and list(reg) == reg.names() == ["a", "b"]
    with pytest.raises(KeyError, match=r"unknown backend 'z'; available: a, b"):
        reg.get("z")


def test_a_duplicate_name_is_refused_the_same_object_again_is_not():
    """A second object under a taken name silently replaced the first (a backend swapped by an import)."""
    reg: Registry[object] = Registry("backend")
    reg.register("a", len)
    reg.register("a", len)  # re-registering the same object (a module imported twice) is fine
    with pytest.raises(ValueError, match=r"backend 'a' is already registered"):
        reg.register("a", max)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(max)
    assert reg.get("a") is len


def test_a_frozen_registry_refuses_new_names():
    reg: Registry[object] = Registry("suite")
    reg.register("a", len)
    reg.freeze()
    with pytest.raises(RuntimeError, match=r"suite registry is frozen; cannot add 'b'"):
        reg.register("b", max)
    with pytest.raises(RuntimeError, match="frozen"):
        reg.register("c")(min)
    assert reg.names() == ["a"] and reg.get("a") is len


def test_lazy_entries_import_on_first_get_only_and_are_cached(tmp_path, monkeypatch):
    """A "module:attr" string imports nothing when registered (no vLLM or torch at import time); the first get
    imports it, later gets reuse the object without importing again."""
    (tmp_path / "lazy_reg_probe_mod.py").write_text("VALUE = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_reg_probe_mod", raising=False)
    reg: Registry[object] = Registry("backend")
    assert reg.register("p", "lazy_reg_probe_mod:VALUE") == "lazy_reg_probe_mod:VALUE"
    assert "lazy_reg_probe_mod" not in sys.modules
    calls = []
    real_import = registry_mod.importlib.import_module
    monkeypatch.setattr(registry_mod.importlib, "import_module", lambda m: calls.append(m) or real_import(m))
    first = reg.get("p")
    assert first is sys.modules["lazy_reg_probe_mod"].VALUE and calls == ["lazy_reg_probe_mod"]
    assert reg.get("p") is first and calls == ["lazy_reg_probe_mod"]
    reg.register("p", first)  # the resolved object is now the entry: registering it again is no duplicate
