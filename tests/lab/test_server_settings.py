"""Application-limited sends, the ground-truth pipe trace and sock_diag, without a lab."""

from __future__ import annotations

import socket
import time

import numpy as np

from ccscope.lab import diag, tcpinfo
from ccscope.lab.content import iter_object, object_bytes
from ccscope.lab.groundtruth import pipe_trace
from ccscope.lab.server import _app_limit, _paced
from ccscope.trace import FlowKey, Trace


def test_app_limit_query() -> None:
    assert _app_limit("rate=25000&after=1000") == (25000, 1000)
    assert _app_limit("") == (0, 0)
    assert _app_limit("rate=-5&after=x") == (0, 0)
    assert _app_limit("rate=" + "9" * 20) == (0, 0)


def test_paced_sends_every_byte_at_the_rate_after_the_free_part() -> None:
    n, rate, after = 150_000, 1_000_000, 50_000
    t0 = time.monotonic()
    out = b"".join(bytes(c) for c in _paced(iter_object(n), rate, after))
    took = time.monotonic() - t0
    assert out == object_bytes(n)
    # 100 kB at 1 MB/s: never faster than the rate. No upper bound: a loaded host only
    # makes it slower, and that is not the pacer's behaviour.
    assert took >= 0.09
    assert b"".join(bytes(c) for c in _paced(iter_object(n), 0, 0)) == out


def test_pipe_trace_carries_the_kernels_pipe() -> None:
    t = np.arange(5) / 1000.0
    truth = Trace(
        flow=FlowKey("198.18.0.12", 443, "100.64.0.1", 4000),
        t=t,
        bif=np.array([0, 1000, 2000, 2000, 500]),
        start_time=1.0,
        source="lab-groundtruth",
        alignment="sender",
        columns={"in_flight": np.array([0, 960, 1920, -48, 480]), "srtt_ms": np.full(5, 40.0)},
    )
    like = Trace(flow=truth.flow, t=t, bif=np.zeros(5), start_time=1.0, profile={"name": "A"},
                 base_rtt_ms=140.0, internet_rtt_ms=40.0, object_url="https://x.lab.test/obj/1")  # fmt: skip
    p = pipe_trace(truth, like=like)
    assert p.source == "lab-groundtruth" and p.alignment == "sender"
    assert list(p.pipe) == [0, 960, 1920, 0, 480] and list(p.columns["bif_truth"]) == list(truth.bif)
    assert p.profile == {"name": "A"} and p.internet_rtt_ms == 40.0
    assert Trace.from_dict(p.to_dict()).bif.tolist() == p.bif.tolist()


def test_sock_diag_reads_another_sockets_cca_and_tcp_info() -> None:
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen()
    c = socket.create_connection(ls.getsockname())
    a, _ = ls.accept()
    with ls, c, a:
        tcpinfo.set_cca(a, "reno")
        a.sendall(b"x" * 50_000)
        time.sleep(0.05)
        mine = [s for s in diag.dump() if s.local == a.getsockname() and s.remote == a.getpeername()]
        assert len(mine) == 1 and mine[0].cca == "reno"
        i = tcpinfo.parse_tcp_info(mine[0].info)
        assert i.bytes_acked >= 50_000
        again = diag.lookup(mine[0])
        assert again is not None and again.cookie == mine[0].cookie
    time.sleep(0.05)
    assert diag.lookup(mine[0]) is None
