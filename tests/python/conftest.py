"""Fixtures for the installed nanovllm package: the demo model (NANOVLLM_TEST_MODEL, written by run_pytest.sh),
the `nanovllm` command to compare with (NANOVLLM_CLI) and the source tree (NANOVLLM_SOURCE_DIR)."""
import faulthandler
import os
import sys
from pathlib import Path

import pytest

from nanovllm import LLM

# Small CPU settings, shared by every LLM of the tests and the command-line runs they are compared with.
ENGINE_KWARGS = {"device": "cpu", "max_model_len": 512, "cpu_kvcache_space_gib": 0.25, "seed": 0}
CLI_FLAGS = ["--device", "cpu", "--max-model-len", "512", "--cpu-kvcache-space", "0.25", "--seed", "0"]


def _env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the tests through tests/python/run_pytest.sh")
    return Path(value)


@pytest.fixture(scope="session")
def model_dir() -> str:
    return str(_env_path("NANOVLLM_TEST_MODEL"))


@pytest.fixture(scope="session")
def cli() -> str:
    return str(_env_path("NANOVLLM_CLI"))


@pytest.fixture(scope="session")
def source_dir() -> Path:
    return _env_path("NANOVLLM_SOURCE_DIR")


@pytest.fixture(scope="session")
def llm(model_dir):
    """One engine for the tests that only read from it."""
    with LLM(model_dir, **ENGINE_KWARGS) as engine:
        yield engine


def pytest_sessionfinish(session, exitstatus):
    """A process that has not exited two minutes after the last test (a thread or destructor stuck at interpreter
    exit) prints every thread's Python stack and exits with an error, instead of waiting for ctest's timeout."""
    faulthandler.dump_traceback_later(120, exit=True, file=sys.stderr)
