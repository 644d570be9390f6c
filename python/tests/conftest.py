"""Shared fixtures: the bundled tiny model (models/stories260K) and, for the `model` tests, the
real chat model named by UC_SMOLLM2_GGUF (scripts/fetch-smollm2.sh prints its path)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "model: needs the SmolLM2 GGUF (UC_SMOLLM2_GGUF)")
    config.addinivalue_line("markers", "mpi: starts several processes with mpirun")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tiny_model() -> str:
    return str(ROOT / "models" / "stories260K")


@pytest.fixture(scope="session")
def smollm2() -> str:
    path = os.environ.get("UC_SMOLLM2_GGUF", "")
    if not path or not os.path.exists(path):
        if os.environ.get("UC_REQUIRE_MODELS") == "1":
            pytest.fail("UC_SMOLLM2_GGUF does not name the SmolLM2 GGUF (scripts/fetch-smollm2.sh)")
        pytest.skip("UC_SMOLLM2_GGUF not set")
    return path


@pytest.fixture(scope="session")
def cli() -> str:
    path = os.environ.get("UC_CLI", "")
    if not path:
        pytest.skip("UC_CLI (the undercurrent binary) not set")
    return path
