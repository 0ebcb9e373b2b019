"""Package layout only; metadata lives in pyproject.toml.

``kernels/`` sits at the top level of the repository but installs as ``harness.kernels``:
a PyPI package named ``kernels`` exists and transformers probes for it, so the bare name
must never be importable from an installed harness.
"""

from setuptools import find_packages, setup

packages = find_packages(include=["harness", "harness.*"])
packages += ["harness.kernels"] + [
    "harness.kernels." + p for p in find_packages(where="kernels")
]

setup(
    packages=packages,
    package_dir={"harness": "harness", "harness.kernels": "kernels"},
)
