"""QUIC rows in the worker pipeline: measured through the QUIC transport, and a server that
answers QUIC only partly fails its row at once, with the client's reason (no retries). A fake
download (measure_fn) stands in for the capture; the store is the real SQLite one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ccscope.store.core import Store
from ccscope.workers.tasks import WorkerConfig, run_measurement


def _run(error_kind: str | None, error: str | None) -> SimpleNamespace:
    return SimpleNamespace(
        profile="A-quic",
        fetch={"status": 0, "error_kind": error_kind, "error": error},
        error=error,
        trace_file=None,
    )


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("version_negotiation", "version negotiation: the server offers only 0x1a2a3a4a"),
        ("no_h3", "no h3: the server refused the h3 ALPN"),
        ("handshake_timeout", "handshake timed out after 10 s: no answer over UDP"),
    ],
)
def test_partial_quic_server_fails_the_row_with_its_reason(
    store: Store, tmp_path: Path, kind: str, why: str
) -> None:
    m, _ = store.enqueue_measurement("h3.example", "paris", "quic", "s1", url="https://h3.example/big")
    seen: dict[str, Any] = {}

    def download(url: str, profiles: tuple[str, ...], out: Path, **kw: Any) -> SimpleNamespace:
        seen.update(kw, url=url)
        return SimpleNamespace(runs=[_run(kind, why), _run(kind, why)])

    cfg = WorkerConfig(vantage="paris", min_gap_seconds=0.0, out_root=tmp_path)
    out = run_measurement(store, m.id, cfg, measure_fn=download)
    assert seen["transport"] == "quic" and seen["url"] == "https://h3.example/big"
    assert out.state == "failed"
    reason = store.get_measurement(m.id).failure_reason or ""
    assert reason.startswith(f"QUIC {kind}:") and why in reason
