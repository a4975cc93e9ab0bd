"""Open data: the census and traces in formats any tool reads (CSV, Parquet, pcap).

One place builds each export, so `ccscope export ...` and the API's downloads give the same bytes:

* the census, per verdict (`verdicts`: one row per measured site, vantage point and transport,
  columns `Store.EXPORT_COLUMNS`) or as shares (`shares`: the /v1/census rows);
* a trace as Parquet: one row per sample (`t`, `bif`, and every further column such as
  `sacked`), the trace's metadata as JSON in the file's key-value metadata (`ccscope-trace`).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from ccscope.errors import CCScopeError
from ccscope.trace import Trace

FORMATS = ("csv", "parquet")
LEVELS = ("verdicts", "shares")
MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "parquet": "application/vnd.apache.parquet"}
SHARE_COLUMNS = ("date", "vantage", "transport", "label", "count", "total", "share")


def census_rows(
    store: Any, level: str = "verdicts", **filters: Any
) -> tuple[tuple[str, ...], Iterator[tuple]]:
    """(column names, rows) of the census at `level`, filtered like /v1/census."""
    if level == "verdicts":
        return tuple(store.EXPORT_COLUMNS), store.export_verdicts(**filters)
    if level == "shares":
        rows = store.census(
            filters.get("date_from"),
            filters.get("date_to"),
            filters.get("vantage"),
            filters.get("transport"),
            filters.get("campaign_id"),
        )
        return SHARE_COLUMNS, iter(
            (r.date, r.vantage, r.transport, r.label, r.count, r.total, round(r.share, 6)) for r in rows
        )
    raise CCScopeError(f"census level must be one of {', '.join(LEVELS)}")


def _cell(x: Any) -> Any:
    if isinstance(x, dt.datetime):
        return x.isoformat()
    if isinstance(x, dt.date):
        return x.isoformat()
    return x


def iter_csv(columns: tuple[str, ...], rows: Iterable[tuple]) -> Iterator[str]:
    """CSV text in chunks (a header, then rows), for streaming responses and files alike."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for i, r in enumerate(rows, 1):
        w.writerow([_cell(x) for x in r])
        if i % 2000 == 0:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def _census_schema(columns: tuple[str, ...]) -> Any:
    import pyarrow as pa

    types = {
        "measurement_id": pa.int64(), "campaign_id": pa.int64(), "confidence": pa.float64(),
        "measured_on": pa.date32(), "date": pa.date32(), "created_at": pa.timestamp("us", tz="UTC"),
        "count": pa.int64(), "total": pa.int64(), "share": pa.float64(),
    }  # fmt: skip
    return pa.schema([(c, types.get(c, pa.string())) for c in columns])


def to_parquet(columns: tuple[str, ...], rows: Iterable[tuple], meta: dict[str, str] | None = None) -> bytes:
    """A Parquet file of the rows (typed columns: dates, timestamps, numbers)."""
    import pyarrow.parquet as pq

    schema = _census_schema(columns).with_metadata({k.encode(): v.encode() for k, v in (meta or {}).items()})
    out = io.BytesIO()
    with pq.ParquetWriter(out, schema, compression="zstd") as w:
        batch: list[tuple] = []
        for r in rows:
            batch.append(r)
            if len(batch) >= 20_000:
                w.write_table(_table(schema, batch))
                batch = []
        w.write_table(_table(schema, batch))
    return out.getvalue()


def _table(schema: Any, batch: list[tuple]) -> Any:
    import pyarrow as pa

    cols = list(zip(*batch, strict=True)) if batch else [[] for _ in schema]
    return pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, schema, strict=True)],
                                schema=schema)  # fmt: skip


def census_bytes(store: Any, fmt: str, level: str = "verdicts", **filters: Any) -> bytes:
    if fmt not in FORMATS:
        raise CCScopeError(f"format must be one of {', '.join(FORMATS)}")
    columns, rows = census_rows(store, level, **filters)
    if fmt == "csv":
        return "".join(iter_csv(columns, rows)).encode()
    meta = {"ccscope-census": json.dumps({"level": level, **{k: _cell(v) for k, v in filters.items()}})}
    return to_parquet(columns, rows, meta)


def trace_parquet(trace: Trace) -> bytes:
    """One trace as Parquet: a row per sample; the metadata (format, flow, profile...) as JSON."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    doc = trace.to_dict()
    cols = {"t": pa.array(trace.t, pa.float64()), "bif": pa.array(trace.bif, pa.int64())}
    for name, col in trace.columns.items():
        cols[name] = pa.array(col)
    table = pa.table(cols).replace_schema_metadata(
        {b"ccscope-trace": json.dumps({"format": doc["format"], "meta": doc["meta"]}).encode()}
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


def trace_from_parquet(data: bytes) -> Trace:
    """The inverse of trace_parquet (round trip; also how a reader gets the metadata back)."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    meta = json.loads((table.schema.metadata or {}).get(b"ccscope-trace", b"{}"))
    series = {name: table.column(name).to_pylist() for name in table.column_names}
    return Trace.from_dict({"format": meta.get("format"), "meta": meta.get("meta", {}), "series": series})
