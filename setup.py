"""Installs one import package, `memloop`: the repository's engine/, eval/, jobs/ and bench/ folders become
memloop.engine, memloop.eval, memloop.jobs and memloop.bench (everything else is in pyproject.toml)."""

from setuptools import find_packages, setup

SUBPACKAGES = ("engine", "eval", "jobs", "bench")

setup(
    package_dir={"memloop": "memloop", **{f"memloop.{name}": name for name in SUBPACKAGES}},
    packages=[
        "memloop",
        *(f"memloop.{p}" for p in find_packages(include=[f"{s}{t}" for s in SUBPACKAGES for t in ("", ".*")])),
    ],
)
