"""The store's commands, through a parser built the way ccscope/cli.py builds its own."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ccscope.store import Store
from ccscope.store.cli import register


def _run(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers(required=True))
    args = ap.parse_args(argv)
    return int(args.func(args))


def test_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 's.db'}", "--traces", str(tmp_path / "t")]
    lst = tmp_path / "tranco_2026-11-01.csv"
    lst.write_text("1,a.example\n2,b.example\nbogus\n")
    assert _run(["db", "migrate", *db]) == 0
    assert _run(["lists", "import", str(lst), "--name", "tranco", *db]) == 0
    assert "imported 2 sites as tranco 2026-11-01" in capsys.readouterr().out
    assert _run(["vantage", "add", "paris", *db]) == 0
    assert _run(["optout", "add", "b.example", *db]) == 0
    assert "opted out" in capsys.readouterr().out
    s = Store(db[1], db[3])
    assert s.get_list("tranco").size == 2 and [v.name for v in s.vantages()] == ["paris"]
    assert s.is_opted_out("www.b.example")


def test_json_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 's.db'}", "--traces", str(tmp_path / "t")]
    lst = tmp_path / "tranco_2026-11-01.csv"
    lst.write_text("1,a.example\n2,b.example\nbogus\n")
    assert _run(["lists", "import", str(lst), "--name", "tranco", "--json", *db]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["name"], doc["date"], doc["sites"], doc["skipped"]) == ("tranco", "2026-11-01", 2, 1)
    assert _run(["vantage", "add", "paris", "--description", "EU", "--json", *db]) == 0
    capsys.readouterr()
    assert _run(["vantage", "list", "--json", *db]) == 0
    assert json.loads(capsys.readouterr().out) == [{"name": "paris", "description": "EU"}]
