"""Which QUIC stack is the server? A fingerprint from what the encrypted capture still shows.

Stacks differ in choices the RFCs leave open, and those show in the headers and the timing:

* the length of the connection ID the server picks (its long headers' SCID): quiche 20 bytes,
  aioquic 8, quic-go 4, by default;
* the spin bit (RFC 9000 §17.4 lets a stack never spin it), seen only when the client spins
  too (our quiche client does not: then every server echoes a constant);
* how the server cuts the stream into datagrams: the share of full-size datagrams and how many
  other sizes appear (quiche writes whatever the stream has at each pacing slot);
* pacing: the share of server datagrams sent back to back (< 50 µs apart at the capture point,
  before our bottleneck evens them out);
* how often the server sends an ACK-only datagram.

`fingerprint()` measures these (a small estimator, testable on synthetic captures); `guess()`
names a known stack from the connection ID length, the one feature a deployment rarely changes,
and the ACK-only share where two stacks share a length. Reference values: lab runs, A-quic and
B-quic, 3 MB objects (quiche 20 B IDs, ACK-only 0.1-0.9 %; aioquic 8 B, 2-4 %; quic-go 4 B,
0.3 %); `make bench NAME=quic` prints them for every stack it measures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ccscope.capture.quic_bif import ACK_ONLY_MAX, K_SHORT, Datagrams

BACK_TO_BACK_NS = 50_000


@dataclass(frozen=True)
class StackPrint:
    scid_len: int | None  # the server's connection ID length (None: no long header seen)
    spin: bool  # the server's short headers flip the spin bit
    full_size: int  # the server's commonest data datagram size
    full_share: float  # share of data datagrams at that size
    other_sizes: float  # distinct other data sizes per 100 data datagrams
    back_to_back: float  # share of server datagrams < 50 µs after the previous one
    ack_only_share: float  # share of server datagrams that are ACK-only by size
    datagrams: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint(d: Datagrams) -> StackPrint:
    srv = d.to_client
    t = d.t_ns[srv]
    size = d.size[srv]
    long_scid = d.scid_len[srv & (d.scid_len >= 0)]
    scid = int(np.bincount(long_scid.astype(np.int64)).argmax()) if len(long_scid) else None
    spins = d.spin[srv & (d.kind == K_SHORT)]
    spin = bool(len(spins) > 4 and np.count_nonzero(np.diff(spins)) >= 2)
    data = size[size > ACK_ONLY_MAX]
    if len(data):
        vals, counts = np.unique(data, return_counts=True)
        full = int(vals[counts.argmax()])
        full_share = float(counts.max()) / len(data)
        other = 100.0 * (len(vals) - 1) / len(data)
    else:
        full, full_share, other = 0, 0.0, 0.0
    gaps = np.diff(t)
    b2b = float(np.mean(gaps < BACK_TO_BACK_NS)) if len(gaps) else 0.0
    ack_only = float(np.mean(size <= ACK_ONLY_MAX)) if len(size) else 0.0
    return StackPrint(
        scid,
        spin,
        full,
        round(full_share, 3),
        round(other, 2),
        round(b2b, 3),
        round(ack_only, 4),
        len(t),
    )


# What the lab's stacks look like with their defaults (see the module docstring).
KNOWN: dict[str, dict[str, Any]] = {
    "quiche": {"scid_len": 20, "ack_only": (0.0, 0.015)},
    "aioquic": {"scid_len": 8, "ack_only": (0.015, 0.08)},
    "quicgo": {"scid_len": 4, "ack_only": (0.0, 0.015)},
}


def guess(fp: StackPrint) -> tuple[str | None, str]:
    """The known stack this fingerprint matches, with the reason; None when none or several do."""
    hits = [name for name, ref in KNOWN.items() if fp.scid_len == ref["scid_len"]]
    if len(hits) > 1:
        hits = [h for h in hits if KNOWN[h]["ack_only"][0] <= fp.ack_only_share < KNOWN[h]["ack_only"][1]]
    if len(hits) == 1:
        return hits[
            0
        ], f"{fp.scid_len}-byte connection IDs, {100 * fp.ack_only_share:.1f} % ACK-only datagrams"
    if not hits:
        return None, f"no known stack uses {fp.scid_len}-byte connection IDs"
    return None, "several known stacks fit: " + ", ".join(hits)
