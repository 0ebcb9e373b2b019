"""Fixtures of the homogeneity tests; the helpers live in ``homogeneity_fixtures`` (a unique module
name: ``from conftest import ...`` would pick whichever conftest pytest imported first)."""

from homogeneity_fixtures import *  # noqa: F401,F403
