"""The trace format: one flow's bytes-in-flight series plus the metadata needed to read it.

Defined once here and used by capture (pcap -> Trace), the lab (TCP_INFO ground truth -> Trace),
the classifier (Trace -> Verdict) and the service (stored trace files). On disk a trace is one
JSON document (gzip-compressed when the name ends in `.gz`):

    {"format": "ccscope-trace/1",
     "meta":   {flow, transport, start_time, profile, base_rtt_ms, ...},
     "series": {"t": [...seconds since start_time...], "bif": [...bytes...], <more columns>}}

JSON keeps traces readable by anyone (jq, pandas, a browser) and the files small enough
(a 20 s trace at MTU 100 is ~10k points) that a binary format buys nothing.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ccscope.errors import TraceFormatError
from ccscope.transports import TRANSPORTS

TRACE_FORMAT = "ccscope-trace/1"
SOURCES = ("pcap", "nebby-csv", "lab-groundtruth")

# The largest trace document read, as stored or inflated: ~2M points of t, bif and sacked (an
# hour at 500 packets/s), several times any real download. json.loads holds ~4-5x the text
# while building the lists, so this cap keeps a load under ~300 MB.
MAX_TRACE_BYTES = 64 * 1024 * 1024
# Keys every trace document has; checked on the raw text (C speed, no objects) before parsing
# the numbers, so a document of the wrong shape is refused for the price of reading it.
_TRACE_KEYS = (b'"format"', b'"meta"', b'"flow"', b'"series"', b'"t"', b'"bif"')


@dataclass(frozen=True)
class FlowKey:
    """A flow seen from the measuring side: the server sends data, the client acknowledges."""

    server: str
    server_port: int
    client: str
    client_port: int
    transport: str = "tcp"

    def __str__(self) -> str:
        return f"{self.transport} {self.server}:{self.server_port} -> {self.client}:{self.client_port}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "server_port": self.server_port,
            "client": self.client,
            "client_port": self.client_port,
            "transport": self.transport,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FlowKey:
        return cls(
            server=str(d["server"]),
            server_port=int(d["server_port"]),
            client=str(d["client"]),
            client_port=int(d["client_port"]),
            transport=str(d.get("transport", "tcp")),
        )


@dataclass
class Trace:
    """Bytes in flight of one flow over time.

    `t` is seconds since `start_time` (unix seconds), non-decreasing; `bif` is bytes in flight
    at each instant. `columns` holds further series aligned with `t` (for ground truth: cwnd,
    pacing rate, srtt). `events` holds instants of note (retransmissions, duplicate ACKs).
    """

    flow: FlowKey
    t: np.ndarray
    bif: np.ndarray
    start_time: float
    source: str = "pcap"
    profile: dict[str, Any] | None = None
    base_rtt_ms: float | None = None
    internet_rtt_ms: float | None = None
    bytes_acked: int = 0
    object_url: str | None = None
    partial: bool = False
    alignment: str = "capture"  # "capture": as seen at the bottleneck; "sender": shifted to the server
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    events: dict[str, list[float]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.t = np.asarray(self.t, dtype=np.float64)
        self.bif = np.asarray(self.bif, dtype=np.int64)
        self.columns = {k: np.asarray(v) for k, v in self.columns.items()}
        self.validate()

    @property
    def transport(self) -> str:
        return self.flow.transport

    @property
    def pipe(self) -> np.ndarray:
        """Bytes in the network: BiF less the bytes the receiver reported holding out of order
        (the `sacked` column a capture with SACK carries); BiF itself without that column."""
        sacked = self.columns.get("sacked")
        if sacked is None:
            return self.bif
        return np.maximum(self.bif - sacked.astype(np.int64), 0)

    def with_bif(self, bif: np.ndarray) -> Trace:
        """The same trace carrying another series as its BiF (e.g. the pipe, to score it)."""
        return replace(self, bif=np.asarray(bif), columns={})

    def head(self, seconds: float) -> Trace:
        """The trace's first `seconds`, as a capture stopped then would hold it (to read what a
        shorter download would have shown). The bytes acknowledged by then are not in the series:
        they are taken as proportional to time, which the goodput figures read from them assume
        anyway."""
        if not len(self.t):
            return self
        end = float(self.t[0]) + seconds
        n = int(np.searchsorted(self.t, end, side="right"))
        share = min(1.0, seconds / self.duration) if self.duration > 0 else 1.0
        return replace(
            self,
            t=self.t[:n],
            bif=self.bif[:n],
            bytes_acked=int(self.bytes_acked * share),
            partial=True,
            columns={k: v[:n] for k, v in self.columns.items()},
            events={k: [x for x in v if x <= end] for k, v in self.events.items()},
            extra={**self.extra, "head_s": seconds},
        )

    @property
    def duration(self) -> float:
        return float(self.t[-1] - self.t[0]) if len(self.t) else 0.0

    def validate(self) -> None:
        if self.t.ndim != 1 or self.bif.shape != self.t.shape:
            raise TraceFormatError("series 't' and 'bif' must be 1-D and of equal length")
        for name, col in self.columns.items():
            if col.shape != self.t.shape:
                raise TraceFormatError(f"column {name!r} does not match the length of 't'")
        if len(self.t) and (not np.all(np.isfinite(self.t)) or np.any(np.diff(self.t) < 0)):
            raise TraceFormatError("timestamps must be finite and non-decreasing")
        if self.source not in SOURCES:
            raise TraceFormatError(f"unknown trace source {self.source!r}")
        if self.flow.transport not in TRANSPORTS:
            raise TraceFormatError(f"unknown transport {self.flow.transport!r}")
        if not math.isfinite(self.start_time):
            raise TraceFormatError("start_time must be finite")

    # --- serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        meta = {
            "flow": self.flow.to_dict(),
            "transport": self.transport,
            "start_time": self.start_time,
            "source": self.source,
            "profile": self.profile,
            "base_rtt_ms": self.base_rtt_ms,
            "internet_rtt_ms": self.internet_rtt_ms,
            "bytes_acked": self.bytes_acked,
            "object_url": self.object_url,
            "partial": self.partial,
            "alignment": self.alignment,
            "points": len(self.t),
            "events": self.events,
            "extra": self.extra,
        }
        series: dict[str, list[Any]] = {
            "t": np.round(self.t, 6).tolist(),
            "bif": self.bif.tolist(),
        }
        for name, col in self.columns.items():
            series[name] = col.tolist()
        return {"format": TRACE_FORMAT, "meta": meta, "series": series}

    @classmethod
    def from_dict(cls, doc: Any) -> Trace:
        if not isinstance(doc, dict) or doc.get("format") != TRACE_FORMAT:
            raise TraceFormatError(f"not a {TRACE_FORMAT} document")
        try:
            meta, series = doc["meta"], doc["series"]
            columns = {k: np.asarray(v) for k, v in series.items() if k not in ("t", "bif")}
            return cls(
                flow=FlowKey.from_dict(meta["flow"]),
                t=np.asarray(series["t"], dtype=np.float64),
                bif=np.asarray(series["bif"], dtype=np.int64),
                start_time=float(meta["start_time"]),
                source=str(meta.get("source", "pcap")),
                profile=meta.get("profile"),
                base_rtt_ms=_opt_float(meta.get("base_rtt_ms")),
                internet_rtt_ms=_opt_float(meta.get("internet_rtt_ms")),
                bytes_acked=int(meta.get("bytes_acked", 0)),
                object_url=meta.get("object_url"),
                partial=bool(meta.get("partial", False)),
                alignment=str(meta.get("alignment", "capture")),
                columns=columns,
                events={str(k): [float(x) for x in v] for k, v in meta.get("events", {}).items()},
                extra=dict(meta.get("extra", {})),
            )
        except TraceFormatError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise TraceFormatError(f"malformed trace: {type(e).__name__}: {e}") from e

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        data = json.dumps(self.to_dict(), separators=(",", ":")).encode()
        if path.suffix == ".gz":
            data = gzip.compress(data, mtime=0)  # mtime=0: same trace, same bytes
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)  # never leave a half-written trace behind
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        path = Path(path)
        try:
            with path.open("rb") as f:
                return cls._read(f, str(path), os.fstat(f.fileno()).st_size)
        except OSError as e:
            raise TraceFormatError(f"{path}: cannot read trace: {e}") from e

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "trace") -> Trace:
        """A trace from the bytes of its file (plain or gzipped), as the store keeps them."""
        return cls._read(io.BytesIO(data), name, len(data))

    @classmethod
    def _read(cls, f: BinaryIO, name: str, size: int) -> Trace:
        try:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                # Inflate in a stream, stopping at the cap: a gzip bomb costs the cap, not
                # what it would inflate to.
                with gzip.GzipFile(fileobj=f) as gz:
                    raw = gz.read(MAX_TRACE_BYTES + 1)
                if len(raw) > MAX_TRACE_BYTES:
                    raise TraceFormatError(f"{name}: trace inflates beyond {MAX_TRACE_BYTES} bytes (the cap)")
            else:
                if size > MAX_TRACE_BYTES:
                    raise TraceFormatError(f"{name}: {size} bytes, above the {MAX_TRACE_BYTES}-byte cap")
                raw = f.read(MAX_TRACE_BYTES + 1)
            start = raw[:64].lstrip()
            if not start.startswith(b"{"):
                raise TraceFormatError(f"{name}: cannot read trace: not JSON (starts {raw[:16]!r})")
            missing = [k.decode() for k in _TRACE_KEYS if raw.find(k) < 0]
            if missing:
                raise TraceFormatError(
                    f"{name}: cannot read trace: not a {TRACE_FORMAT} document (no {', '.join(missing)})"
                )
            doc = json.loads(raw)
            del raw
        except TraceFormatError:
            raise
        except (OSError, EOFError, ValueError) as e:
            raise TraceFormatError(f"{name}: cannot read trace: {e}") from e
        try:
            return cls.from_dict(doc)
        except TraceFormatError as e:
            raise TraceFormatError(f"{name}: {e}") from e


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)
