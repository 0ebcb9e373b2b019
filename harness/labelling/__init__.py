"""Labelling: each character's name and the words that refer to it (issue 5, digest section 4).

Three labellers behind one interface (``harness.labelling.base.Labeller``), registered by name:

* ``encoder`` (default): all-MiniLM-L6-v2 fine-tuned for role-conditioned word tagging
  (``harness.labelling.encoder``; its decoder ``harness.labelling.decoder``); ``harness label train``
  trains it (``harness.labelling.training``).
* ``llm``: the paper's method, the Table S7 prompts sent through any generation backend, with JSON
  repair and retries (``harness.labelling.llm``).
* ``rules``: spaCy PERSON entities plus pronoun and title heuristics (``harness.labelling.rules``).

``evaluate`` scores a labeller against hand labels as Table S8 does. Nothing heavy is imported here.
"""

from __future__ import annotations

from typing import Any

from harness.labelling.base import CharacterLabel, Labeller, RoleSpec, StoryInput, StoryLabels
from harness.registry import Registry

LABELLERS: Registry = Registry("labeller")
LABELLERS.register("encoder", "harness.labelling.encoder:EncoderLabeller")
LABELLERS.register("llm", "harness.labelling.llm:LLMLabeller")
LABELLERS.register("rules", "harness.labelling.rules:RulesLabeller")
DEFAULT_LABELLER = "encoder"


def get_labeller(name: str = DEFAULT_LABELLER, **kwargs: Any) -> Labeller:
    """Build the labeller registered as ``name`` with its keyword options.

    >>> sorted(LABELLERS.names())
    ['encoder', 'llm', 'rules']
    """
    from harness.errors import ConfigError

    try:
        cls = LABELLERS.get(name)
    except KeyError as e:
        raise ConfigError(f"labeller: {e.args[0]}") from None
    return cls(**kwargs)


__all__ = ["CharacterLabel", "DEFAULT_LABELLER", "LABELLERS", "Labeller", "RoleSpec", "StoryInput", "StoryLabels",
           "get_labeller"]
