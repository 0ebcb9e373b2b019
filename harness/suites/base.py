"""Prompt suites: prompts as data (YAML under ``harness/data/suites``) plus a small registry."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Role:
    """One character a prompt asks for.

    ``key`` is "subject" or "object"; ``description`` is the {Character} string of the labelling
    prompt; ``power`` is "baseline" (power-neutral), "dominant" or "subordinate".
    """

    key: str
    description: str
    power: str


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt of a suite, with everything the later stages need to interpret its stories."""

    id: str
    suite: str
    text: str
    domain: str
    condition: str
    scenario: str
    roles: tuple[Role, ...]
    love_type: str | None = None
    wording: str = "released"
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["roles"] = [asdict(r) for r in self.roles]
        return d


@dataclass(frozen=True)
class Suite:
    """A named, versioned list of prompts in one wording."""

    name: str
    version: int
    wording: str
    prompts: tuple[Prompt, ...]
    citation: str = ""

    def __len__(self) -> int:
        return len(self.prompts)

    def __iter__(self):
        return iter(self.prompts)

    def by_id(self) -> dict[str, Prompt]:
        return {p.id: p for p in self.prompts}


def data_file(name: str) -> Path:
    """Path of a file shipped in ``harness/data/suites``."""
    return Path(str(resources.files("harness") / "data" / "suites" / name))


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: suite file not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e.__class__.__name__}); fix the syntax") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a suite file must be a mapping with a 'prompts' list")
    return doc
