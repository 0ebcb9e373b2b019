"""One error hierarchy for the harness.

Every message names the file, field or row at fault and how to fix it. The CLI turns a
``HarnessError`` into one line on stderr and a non-zero exit status.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base class of every error the harness raises on purpose."""

    exit_code = 1


class ConfigError(HarnessError):
    """A configuration file or option is wrong (unknown key, wrong type, missing file)."""

    exit_code = 2


class DataError(HarnessError):
    """Input data (a JSONL file, a Parquet shard, a table) is malformed."""

    exit_code = 3


class BackendError(HarnessError):
    """A generation or labelling backend failed (engine start, server error, bad output)."""

    exit_code = 4
