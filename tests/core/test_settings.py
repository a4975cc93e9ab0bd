"""One settings class: every CCSCOPE_* variable in the sources is a field of ccscope.settings
(or a native tool's, listed there), documented in the README table, and read through the class."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

import pytest

from ccscope.errors import CCScopeError
from ccscope.settings import NATIVE, TESTS, Settings, env_name, settings

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bCCSCOPE_[A-Z0-9_]*[A-Z0-9]\b")
SOURCES = ("*.py", "*.rs", "*.c", "*.sh", "Makefile")
SKIP = (".venv", "target", ".git", "fixtures")


def _sources() -> list[Path]:
    out = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP]  # never walk the venv or build trees
        out += [Path(top, f) for f in files if any(fnmatch.fnmatch(f, pat) for pat in SOURCES)]
    return out


def _fields() -> set[str]:
    return {env_name(f) for f in Settings.model_fields}


def test_every_variable_is_a_setting_and_documented() -> None:
    used = {n for p in _sources() for n in NAME.findall(p.read_text(errors="replace"))}
    known = _fields() | set(NATIVE) | set(TESTS)
    assert used - known == set(), "add these to ccscope/settings.py (or NATIVE)"
    readme = (ROOT / "README.md").read_text()
    table = set(re.findall(r"^\| `(CCSCOPE_[A-Z0-9_]+)` \|", readme, flags=re.M))
    assert known - table == set(), "document these in the README's settings table"
    assert table - known == set(), "the README documents variables nothing reads"


def test_python_reads_settings_only_through_the_class() -> None:
    fields = "|".join(sorted(_fields()))
    # os.environ.get("X") / getenv("X") / os.environ["X"] not followed by an assignment (setting
    # a variable for a child process is fine)
    read = re.compile(
        rf"""(?:getenv\(|environ\.get\()\s*["']({fields})["']|environ\[\s*["']({fields})["']\s*\](?!\s*=[^=])"""
    )
    offenders = []
    for p in _sources():
        # the code (tests set and read the environment to drive it)
        if p.suffix == ".py" and p.name != "settings.py" and "tests" not in p.relative_to(ROOT).parts:
            text = p.read_text()
            offenders += [f"{p.relative_to(ROOT)}: {m.group(1) or m.group(2)}" for m in read.finditer(text)]
    assert offenders == []


def test_values_parse_and_bad_ones_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCSCOPE_DB_POOL", "7")
    monkeypatch.setenv("CCSCOPE_LAB", "yes")
    monkeypatch.setenv("CCSCOPE_WORKER_KEEP_PCAP", "")  # empty: unset
    s = settings()
    assert (s.db_pool, s.lab, s.worker_keep_pcap) == (7, True, False)
    monkeypatch.setenv("CCSCOPE_DB_POOL", "many")
    with pytest.raises(CCScopeError, match="CCSCOPE_DB_POOL"):
        settings()
