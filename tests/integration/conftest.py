"""A real lab (servers behind an emulated 10 ms path) for the modules that measure against it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from ccscope.lab.lab import Lab, LabParams
from ccscope.lab.registry import lab_prefix
from tests.lab.lab_testkit import link_binary_or_skip

# Not instance 0, so a developer's own `ccscope lab up` can stay up while the tests run.
INSTANCE = 7


@pytest.fixture(scope="module")
def lab_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    link_binary_or_skip()
    prefix = lab_prefix(INSTANCE)
    out = subprocess.run(["ip", "-j", "route", "show", prefix], capture_output=True, text=True).stdout
    if json.loads(out or "[]"):
        pytest.fail(f"{prefix} is already routed: another lab is up on this instance")
    state = tmp_path_factory.mktemp("labstate")
    old = os.environ.get("CCSCOPE_LAB_DIR")
    os.environ["CCSCOPE_LAB_DIR"] = str(state)  # measure() and CLI subprocesses find this lab
    lab = Lab(state)
    lab.up(LabParams(delay_ms=10, instance=INSTANCE))
    try:
        yield lab
    finally:
        lab.down()
        if old is None:
            os.environ.pop("CCSCOPE_LAB_DIR", None)
        else:
            os.environ["CCSCOPE_LAB_DIR"] = old
