"""Prompt suites, registered by name. Later suites (personas, homogeneity, names, StereoMap)
register a loader here the same way."""

from __future__ import annotations

from harness.errors import ConfigError
from harness.registry import Registry
from harness.suites.base import Prompt, Role, Suite

SUITES: Registry = Registry("suite")
SUITES.register("laissez-faire", "harness.suites.laissez_faire:load")
SUITES.register("homogeneity", "harness.suites.homogeneity:load")


def get_suite(name: str, wording: str | None = None) -> Suite:
    """Load a registered suite; ``wording=None`` takes the suite's default."""
    try:
        loader = SUITES.get(name)
    except KeyError as e:
        raise ConfigError(f"suite: {e.args[0]}") from None
    return loader() if wording is None else loader(wording=wording)


__all__ = ["SUITES", "Prompt", "Role", "Suite", "get_suite"]
