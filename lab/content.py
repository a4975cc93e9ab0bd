"""The deterministic bytes the lab serves, so a client can check every byte it received.

Object `/obj/N` is the first N bytes of an endless repetition of a 1 MiB block of SHA-256
counter output: incompressible (no transparent compression can shrink the transfer) and cheap to
serve (slices of one precomputed block).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from functools import lru_cache

BLOCK_SIZE = 1 << 20
MAX_OBJECT_BYTES = 64 << 20


@lru_cache(maxsize=1)
def block() -> bytes:
    seed = b"ccscope-lab-object/1"
    out = bytearray()
    i = 0
    while len(out) < BLOCK_SIZE:
        out += hashlib.sha256(seed + i.to_bytes(8, "big")).digest()
        i += 1
    return bytes(out[:BLOCK_SIZE])


def iter_object(n: int, chunk: int = 64 * 1024) -> Iterator[memoryview]:
    """Object bytes in chunks of at most `chunk` bytes (zero-copy slices of the block)."""
    if n < 0 or n > MAX_OBJECT_BYTES:
        raise ValueError(f"object size must be in [0, {MAX_OBJECT_BYTES}]")
    view = memoryview(block())
    pos = 0
    while pos < n:
        off = pos % BLOCK_SIZE
        take = min(chunk, n - pos, BLOCK_SIZE - off)
        yield view[off : off + take]
        pos += take


def object_bytes(n: int) -> bytes:
    return b"".join(iter_object(n, BLOCK_SIZE))
