"""harness: an offline audit harness for social bias in what language models write."""

__version__ = "0.1.0"

__all__ = ["__version__"]
