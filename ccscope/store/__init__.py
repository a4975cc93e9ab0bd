"""The ccscope store: site lists, campaigns, measurements, traces, verdicts, politeness state.

SQLite + a local trace directory by default; PostgreSQL (CCSCOPE_DB_URL) for the distributed
deployment, with the same code.
"""

from ccscope.store.core import (
    STATES,
    TRANSITIONS,
    TRANSPORTS,
    Conflict,
    IllegalTransition,
    NotFound,
    OptedOut,
    Store,
    StoreError,
    normalize_domain,
)
from ccscope.store.queries import CensusRow

__all__ = [
    "STATES",
    "TRANSITIONS",
    "TRANSPORTS",
    "CensusRow",
    "Conflict",
    "IllegalTransition",
    "NotFound",
    "OptedOut",
    "Store",
    "StoreError",
    "normalize_domain",
]
