"""Routers the API app includes beside its own routes: operations and open-data downloads;
and what the app's routes and the routers share."""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException

from ccscope.store.blobs import BlobError
from ccscope.store.core import NotFound, Store

log = logging.getLogger("ccscope.api")


def stored_trace(
    store: Store, measurement_id: int, sha256: str | None, media_type: str | None = None
) -> tuple[Any, bytes]:
    """A measurement's trace (the first one, or the one `sha256` names; of `media_type` when
    given) and its bytes: 404 when there is none, 503 when its blob cannot be read (the
    reason is logged, not sent)."""
    m = store.get_measurement(measurement_id)
    traces = [t for t in m.traces if sha256 in (None, t.sha256) and media_type in (None, t.media_type)]
    if not traces:
        raise NotFound(f"measurement {measurement_id} has no such trace")
    t = traces[0]
    try:
        return t, store.read_trace(t.sha256)
    except BlobError as e:
        log.error("trace %s: %s", t.sha256, e)
        raise HTTPException(503, "the trace file is unavailable") from None
