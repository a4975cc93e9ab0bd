"""Bounded, deterministic mutation fuzzing of pcap -> traces and CSV -> traces.

The same property as tests/fuzz (atheris), without atheris, so CI exercises it: whatever the
bytes, only CaptureError / TraceFormatError may escape, every trace is valid, and the fast
(vectorised) pcap path agrees exactly with the per-packet path.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable

import numpy as np

from ccscope.capture.nebby_csv import traces_from_csv
from ccscope.capture.pcap import PcapReader
from ccscope.capture.quic_bif import read_quic, traces_from_quic
from ccscope.capture.tcp_bif import CaptureResult, flows_from_pcap, traces_from_packets
from ccscope.errors import CaptureError, TraceFormatError
from tests.capture.quic_synth import seed_quic_pcaps, simulate
from tests.capture.synth import seed_csvs, seed_pcaps

BUDGET_S = 2.5  # per input kind; the loop also stops at a fixed iteration count
MIN_ITERATIONS = 300
INTERESTING32 = (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 65535, 65536, 262144, 262145)
TOKENS = (b"99999999999999999999999", b"-1", b"0x", b"nan", b"inf", b"1e308", b'"', b"\t",
          b",", b"\n", b"4294967296", b"::1", b"0x0012", b"")  # fmt: skip


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        op = rng.randrange(9)
        if not b:
            b = bytearray(rng.randbytes(rng.randrange(64)))
            continue
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.randrange(256)
        elif op == 2 and i + 4 <= len(b):
            struct.pack_into(rng.choice("<>") + "I", b, i, rng.choice(INTERESTING32))
        elif op == 3:
            del b[i : i + rng.randrange(1, 64)]
        elif op == 4:
            b[i:i] = rng.randbytes(rng.randrange(1, 32))
        elif op == 5:
            b = b[: rng.randrange(len(b) + 1)]
        elif op == 6:
            j = rng.randrange(len(b))
            b[i:i] = b[j : j + rng.randrange(1, 128)]  # duplicate a chunk (records, rows)
        elif op == 7:
            b[i:i] = rng.choice(TOKENS)  # text-level values that break naive number parsing
        else:
            other = rng.choice(pool)
            j = rng.randrange(len(other) + 1)
            b = b[:i] + other[j:]  # splice two inputs
    return bytes(b)


def check_result(res: CaptureResult) -> None:
    assert res.traces
    for tr in res.traces:
        tr.validate()
        assert np.all(tr.bif >= 0)
        assert np.all(tr.pipe >= 0) and np.all(tr.pipe <= tr.bif)
        assert tr.t[0] == 0.0
        assert tr.bytes_acked >= 0
        assert all(np.isfinite(v) for v in tr.events["retransmit"] + tr.events["dupack"])


def run(
    seeds: list[bytes],
    target: Callable[[bytes], None],
    iterations: int,
    seed: int,
) -> tuple[int, int]:
    rng = random.Random(seed)
    deadline = time.monotonic() + BUDGET_S
    ok = errors = 0
    for i in range(iterations):
        if i >= MIN_ITERATIONS and time.monotonic() > deadline:
            break  # the first MIN_ITERATIONS inputs always run: same coverage on a busy CI box
        data = mutate(rng, rng.choice(seeds), seeds)
        try:
            target(data)
            ok += 1
        except (CaptureError, TraceFormatError):
            errors += 1
        except Exception as e:  # the property under test: nothing else may escape
            raise AssertionError(f"{type(e).__name__}: {e} on input {data[:200]!r}...") from e
    return ok, errors


def pcap_target(data: bytes) -> None:
    for align in ("capture", "sender"):
        res = flows_from_pcap(data, align=align)
        check_result(res)
        rd = PcapReader(data)
        slow = traces_from_packets(rd, align=align, partial=rd.truncated)
        assert [t.flow for t in slow.traces] == [t.flow for t in res.traces]
        for a, b in zip(res.traces, slow.traces, strict=True):
            assert a.bif.tolist() == b.bif.tolist()
            assert a.pipe.tolist() == b.pipe.tolist()
            assert a.t.tolist() == b.t.tolist()
            assert a.events == b.events


def csv_target(data: bytes) -> None:
    check_result(traces_from_csv(data))
    check_result(traces_from_csv(data, align="sender"))


def test_pcap_mutation_smoke() -> None:
    seeds = seed_pcaps()
    for s in seeds:
        pcap_target(s)  # seeds themselves must be valid
    ok, errors = run(seeds, pcap_target, iterations=4000, seed=1234)
    assert ok > 20 and errors > 20  # both paths were exercised


def test_csv_mutation_smoke() -> None:
    seeds = seed_csvs()
    for s in seeds:
        csv_target(s)
    ok, errors = run(seeds, csv_target, iterations=4000, seed=4321)
    assert ok > 20 and errors > 5


QUIC_PROFILE = simulate(packets=1).profile


def quic_target(data: bytes) -> None:
    """Whatever the datagrams say, every estimator yields valid, non-negative traces, and every
    datagram is either in a flow or counted as skipped."""
    cap = read_quic(data)
    if not cap.flows:
        raise CaptureError("no QUIC flow")
    kept = sum(len(f.d) for f in cap.flows)
    skipped = sum(cap.stats[k] for k in ("non_ip", "non_udp", "fragments", "malformed", "not_quic"))
    assert kept + skipped <= cap.stats["packets"] + cap.stats["non_ip"] + cap.stats["malformed"]
    for align in ("capture", "sender"):
        for prof in (QUIC_PROFILE, None):
            res = traces_from_quic(cap, align=align, profile=prof)
            for tr in res.traces:
                tr.validate()
                assert np.all(tr.bif >= 0) and np.all(tr.columns["bif_published"] >= 0)
                assert all(np.isfinite(v) for v in tr.events["loss"])


def test_quic_mutation_smoke() -> None:
    seeds = seed_quic_pcaps()
    for s in seeds[:2]:
        quic_target(s)
    ok, errors = run(seeds, quic_target, iterations=3000, seed=2121)
    assert ok > 20 and errors > 5
