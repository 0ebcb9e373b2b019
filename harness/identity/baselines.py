"""The comparison baselines p* (digest section 3.4), read from ``harness/data/baselines.yaml``.

Every number comes with its source. The file stores percentages as printed in the paper; this
module returns fractions in [0, 1]. The paper's results use the 2022 Census / Household Pulse
values (``load_baselines()``); Tables S1 (school subjects) and S2 (occupations) are offered as
alternative references with ``Baselines.for_subject`` / ``Baselines.for_occupation``: categories a
table lacks (MENA everywhere; AI/AN and NH/PI in S2) keep the Census value, and the sources say so.
Note that BLS (S2) counts Hispanic as an ethnicity, so its race shares overlap and sum to over 100.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from harness.errors import ConfigError
from harness.identity import RACES
from harness.identity.gender import FEMALE, MALE, NON_BINARY, PAIRS

GENDER_KEYS = (FEMALE, MALE, NON_BINARY)


def _frozen(d: Mapping) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class Baselines:
    """p* per race, gender and romantic pair (fractions), each with its source.

    Attributes:
        race: race code (``RACES``) -> p*.
        gender: "Female"/"Male"/"Non-binary" -> p*.
        pair: "NB-NB", "F-NB", "M-NB", "F-F", "M-M", "F-M" -> p*.
        sources: ("race"|"gender"|"pair", key) -> source text.
        version: version of the baselines file.
        reference: which reference the numbers describe ("census2022", "subject:<name>", ...).
    """

    race: Mapping[str, float]
    gender: Mapping[str, float]
    pair: Mapping[str, float]
    sources: Mapping[tuple[str, str], str]
    version: str
    reference: str = "census2022"
    _raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def source(self, kind: str, key: str) -> str:
        """The source of one number, e.g. ``source("race", "white")``."""
        try:
            return self.sources[(kind, key)]
        except KeyError:
            raise ConfigError(f"no baseline {kind}/{key}; kinds: race, gender, pair") from None

    def joint(self, race: str, gender: str) -> float:
        """Intersectional p*(race and gender) = p*_race * p*_gender (the authors' code)."""
        return self.race[race] * self.gender[gender]

    def subjects(self) -> list[str]:
        """Names of the Table S1 subject rows."""
        return list(self._raw.get("subjects", {}).get("rows", {}))

    def occupations(self) -> list[str]:
        """Names of the Table S2 occupation rows."""
        return list(self._raw.get("occupations", {}).get("rows", {}))

    def _override(self, table: str, name: str) -> Baselines:
        block = self._raw.get(table) or {}
        rows = block.get("rows", {})
        if name not in rows:
            raise ConfigError(f"unknown {table[:-1]} {name!r} in baselines; available: {', '.join(rows)}")
        row, src = rows[name], f"{block.get('source', table)}: {name}"
        race, gender, sources = dict(self.race), dict(self.gender), dict(self.sources)
        for r in RACES:
            if row.get(r) is not None:
                race[r] = round(row[r] / 100.0, 12)
                sources[("race", r)] = src
        if row.get("female") is not None:
            f = round(row["female"] / 100.0, 12)
            nb = self.gender[NON_BINARY]
            gender = {FEMALE: f * (1 - nb), MALE: (1 - f) * (1 - nb), NON_BINARY: nb}
            sources[("gender", FEMALE)] = sources[("gender", MALE)] = f"{src} (female share, scaled by 1 - p*_NB)"
        return replace(self, race=_frozen(race), gender=_frozen(gender), sources=_frozen(sources),
                       reference=f"{table[:-1]}:{name}")

    def for_subject(self, name: str) -> Baselines:
        """Baselines with the race and gender shares of a Table S1 subject where it has them."""
        return self._override("subjects", name)

    def for_occupation(self, name: str) -> Baselines:
        """Baselines with the race and gender shares of a Table S2 occupation where it has them."""
        return self._override("occupations", name)

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for JSON (fractions, with sources)."""
        return {"version": self.version, "reference": self.reference,
                **{kind: {k: {"value": v, "source": self.sources[(kind, k)]} for k, v in getattr(self, kind).items()}
                   for kind in ("race", "gender", "pair")}}


def _path() -> Path:
    return Path(str(resources.files("harness").joinpath("data", "baselines.yaml")))


@lru_cache(maxsize=4)
def _load(path: Path) -> Baselines:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read baselines file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"baselines {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"baselines {path}: expected a mapping with `race`, `gender` and `pair` blocks")
    values: dict[str, dict[str, float]] = {}
    sources: dict[tuple[str, str], str] = {}
    expected = {"race": RACES, "gender": GENDER_KEYS, "pair": PAIRS}
    for kind, keys in expected.items():
        block = data.get(kind) or {}
        if not isinstance(block, dict):
            raise ConfigError(f"baselines {path}: `{kind}` must be a mapping of {', '.join(keys)}")
        if set(block) != set(keys):
            raise ConfigError(f"baselines {path}: `{kind}` must have exactly the keys {', '.join(keys)}; "
                              f"got {', '.join(block)}")
        values[kind] = {}
        for k in keys:
            entry = block[k]
            if not isinstance(entry, dict) or "value" not in entry or not entry.get("source"):
                raise ConfigError(f"baselines {path}: `{kind}.{k}` needs `value` and a non-empty `source`")
            v = entry["value"]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"baselines {path}: `{kind}.{k}.value` must be a number (percent), got {v!r}")
            v = float(v)
            if not 0.0 <= v <= 100.0:
                raise ConfigError(f"baselines {path}: `{kind}.{k}` = {v} is not a percentage in [0, 100]")
            values[kind][k] = round(v / 100.0, 12)
            sources[(kind, k)] = str(entry["source"])
    return Baselines(_frozen(values["race"]), _frozen(values["gender"]), _frozen(values["pair"]),
                     _frozen(sources), str(data.get("version", "")), "census2022", _frozen(data))


def load_baselines(path: str | Path | None = None) -> Baselines:
    """Load the baselines registry (default: the packaged ``harness/data/baselines.yaml``)."""
    return _load(Path(path).resolve() if path is not None else _path())
