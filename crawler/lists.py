"""Ranked site lists: Tranco-style headerless `rank,domain` CSV and Alexa-style CSV with a header.

Lists come from outside, so every line is checked; bad lines are skipped and counted, never fatal,
except when nothing usable is left.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from ccscope.store.core import StoreError, normalize_domain

MAX_LIST_BYTES = 200 * 1024 * 1024  # a full Tranco list is ~25 MB
_DATE_IN_NAME = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})")


class ListFormatError(ValueError):
    pass


@dataclass
class ParsedList:
    entries: list[tuple[int, str]]
    source_format: str  # "tranco" | "alexa"
    skipped: int = 0
    problems: list[str] = field(default_factory=list)  # the first few, for the user


def parse_list(text: str, source_format: str | None = None) -> ParsedList:
    """Parse a list. With a header (Alexa-style) the rank and domain columns are found by name;
    without one (Tranco) the columns are `rank,domain`."""
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r and any(c.strip() for c in r) and not r[0].lstrip().startswith("#")]
    if not rows:
        raise ListFormatError("the list is empty")
    first = [c.strip().lower() for c in rows[0]]
    has_header = not first[0].isdigit()
    fmt = source_format or ("alexa" if has_header else "tranco")
    rank_col, dom_col = 0, 1
    if has_header:
        rank_col = _column(first, ("rank", "#", "position"), 0)
        dom_col = _column(first, ("domain", "site", "url", "host", "origin"), 1)
        rows = rows[1:]
    out = ParsedList(entries=[], source_format=fmt)
    for lineno, r in enumerate(rows, start=2 if has_header else 1):
        try:
            rank = int(r[rank_col])
            if rank < 1:
                raise ValueError("rank must be positive")
            out.entries.append((rank, normalize_domain(_host_of(r[dom_col]))))
        except (IndexError, ValueError, StoreError) as e:
            out.skipped += 1
            if len(out.problems) < 10:
                out.problems.append(f"line {lineno}: {e}")
    if not out.entries:
        raise ListFormatError(f"no usable lines ({'; '.join(out.problems[:3])})")
    out.entries.sort()
    return out


def read_list(path: str | Path, source_format: str | None = None) -> ParsedList:
    p = Path(path)
    if p.stat().st_size > MAX_LIST_BYTES:
        raise ListFormatError(f"{p} is larger than {MAX_LIST_BYTES} bytes")
    return parse_list(p.read_text(encoding="utf-8", errors="replace"), source_format)


def date_from_name(path: str | Path) -> dt.date | None:
    """Lists are usually named after their day (tranco_2026-11-01.csv); None if not."""
    m = _DATE_IN_NAME.search(Path(path).name)
    if not m:
        return None
    try:
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return None


def _column(header: list[str], names: tuple[str, ...], default: int) -> int:
    for i, h in enumerate(header):
        if h in names:
            return i
    return default


def _host_of(cell: str) -> str:
    # Some lists carry origins ("https://www.example.com/") instead of bare names.
    c = cell.strip()
    if "://" in c:
        c = c.split("://", 1)[1]
    return c.split("/", 1)[0]
