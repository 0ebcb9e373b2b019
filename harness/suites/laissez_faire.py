"""The laissez-faire suite (seed 000): 100 prompts, 50 scenarios, two wordings.

Data: ``harness/data/suites/laissez_faire.yaml``. ``wording="released"`` (the default) uses the
authors' released queries, the wording of the published data; ``wording="paper"`` uses Tables
S3-S5 as printed. Each prompt records its roles: power-neutral characters are "baseline";
in power-laden prompts the subject is dominant and the object subordinate.
"""

from __future__ import annotations

from harness.errors import ConfigError
from harness.suites.base import Prompt, Role, Suite, data_file, load_yaml

WORDINGS = ("released", "paper")
REQUIRED = ("id", "domain", "condition", "scenario", "subject", "text")


def load(wording: str = "released") -> Suite:
    if wording not in WORDINGS:
        raise ConfigError(f"suite wording must be one of {', '.join(WORDINGS)}, got {wording!r}")
    path = data_file("laissez_faire.yaml")
    doc = load_yaml(path)
    prompts = []
    for i, row in enumerate(doc["prompts"]):
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise ConfigError(f"{path}: prompt #{i} lacks {', '.join(missing)}")
        laden = row["condition"] == "laden"
        released = wording == "released"  # the published data's wording: its own text and roles where they differ
        pick = lambda key: row.get(f"{key}_released", row.get(key)) if released else row.get(key)  # noqa: E731
        roles = [Role("subject", pick("subject"), "dominant" if laden else "baseline")]
        if row.get("object"):
            roles.append(Role("object", pick("object"), "subordinate" if laden else "baseline"))
        text = pick("text")
        prompts.append(
            Prompt(
                id=row["id"],
                suite=doc["suite"],
                text=text,
                domain=row["domain"],
                condition=row["condition"],
                scenario=row["scenario"],
                roles=tuple(roles),
                love_type=row.get("love_type"),
                wording=wording,
            )
        )
    return Suite(doc["suite"], int(doc["version"]), wording, tuple(prompts), doc.get("citation", ""))
