"""Packaging: the project's top-level folders installed under the one import name ``scarce``.

The folders stay at the top of the repository (``algorithms/``, ``tasks/``, ``flows/``,
``bench/``, ``configs/``) and install as ``scarce.algorithms``, ``scarce.tasks`` and so on:
site-packages gets ``scarce/`` and nothing else.  Generic top-level names such as ``tasks`` or
``flows`` collide with other distributions and with a user's own ``tasks.py``.  setuptools'
``package_dir`` does the mapping; it is computed here rather than listed in pyproject.toml
because every subpackage must be named under its new name, and a list written by hand would
silently leave out the next subpackage someone adds.  Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

FOLDERS = ("algorithms", "tasks", "flows", "bench")

setup(
    packages=["scarce", "scarce.configs", "scarce.configs.experiments"]
    + [f"scarce.{p}" for p in find_packages(include=[f"{f}*" for f in FOLDERS])],
    package_dir={"scarce": "scarce", "scarce.configs": "configs",
                 **{f"scarce.{f}": f for f in FOLDERS}},
    package_data={"scarce.configs": ["*.yaml"], "scarce.configs.experiments": ["*.yaml"]},
)
