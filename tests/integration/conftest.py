"""A real lab (servers behind an emulated 10 ms path) for the modules that measure against it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ccscope.lab.lab import Lab, LabParams
from tests.lab.lab_testkit import running_lab

# Not instance 0, so a developer's own `ccscope lab up` can stay up while the tests run.
INSTANCE = 7


@pytest.fixture(scope="module")
def lab_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("labstate"), LabParams(delay_ms=10, instance=INSTANCE)) as lab:
        yield lab
