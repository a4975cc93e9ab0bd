"""struct tcp_info decoding against real kernel sockets, for every built-in CCA."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ccscope.lab import tcpinfo
from tests.lab.lab_testkit import needs_root

BUILTIN = ("reno", "cubic", "bbr")


def test_layout_offsets_match_kernel_header() -> None:
    for name, off in tcpinfo.FIELD_OFFSETS.items():
        assert tcpinfo.field_offset(name) == off, name
    assert tcpinfo.TCP_INFO_LEN == 232


def test_short_struct_is_refused() -> None:
    with pytest.raises(ValueError, match=r"4\.19"):
        tcpinfo.parse_tcp_info(bytes(104))


def _transfer(cca: str, nbytes: int) -> tuple[tcpinfo.TcpInfo, tcpinfo.TcpInfo, str]:
    """Send nbytes over loopback with `cca` on the sender; TCP_INFO mid-way and after all ACKs."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    tcpinfo.set_cca(lsock, cca)
    received = bytearray()

    def client() -> None:
        with socket.create_connection(lsock.getsockname()) as c:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            while True:
                b = c.recv(65536)
                if not b:
                    return
                received.extend(b)
                time.sleep(0.001)  # a slow reader keeps data in flight

    t = threading.Thread(target=client)
    t.start()
    conn, _ = lsock.accept()
    with conn:
        got_cca = tcpinfo.get_cca(conn)
        conn.sendall(b"x" * (nbytes // 2))
        mid = tcpinfo.read_tcp_info(conn)
        conn.sendall(b"x" * (nbytes - nbytes // 2))
        deadline = time.monotonic() + 10
        while True:
            end = tcpinfo.read_tcp_info(conn)
            if (end.unacked == 0 and end.notsent_bytes == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.002)
    t.join()
    lsock.close()
    assert len(received) == nbytes
    return mid, end, got_cca


@needs_root
@pytest.mark.parametrize("cca", BUILTIN)
def test_tcp_info_on_real_connection(cca: str) -> None:
    if cca not in tcpinfo.available_ccas():
        with socket.socket() as s:
            try:
                tcpinfo.set_cca(s, cca)
            except OSError:
                pytest.skip(f"{cca} not available")
    n = 4_000_000
    mid, end, got = _transfer(cca, n)
    assert got == cca  # accepted sockets inherit the listener's CCA
    for i in (mid, end):
        assert i.state == 1  # ESTABLISHED
        assert 0 <= i.ca_state <= 4
        assert 500 <= i.snd_mss <= 65535
        assert i.snd_cwnd > 0
        assert 0 < i.rtt_us < 1_000_000  # loopback: well under a second
        assert 0 < i.min_rtt_us <= i.rtt_us * 4
        assert i.pacing_rate > 0
        assert i.bytes_acked <= i.bytes_sent
        assert i.bytes_retrans <= i.bytes_sent
    # Mid-transfer: the kernel holds data, bytes sent but not acked form the bytes in flight.
    assert mid.bytes_sent > 0
    assert mid.bif == max(0, mid.bytes_sent - mid.bytes_retrans - mid.bytes_acked)
    # After the last ACK: every byte went out and came back acknowledged.
    assert end.bytes_acked == n
    assert end.bytes_sent - end.bytes_retrans == n
    assert end.bif == 0 and end.unacked == 0 and end.notsent_bytes == 0
    assert end.delivery_rate > 0


@needs_root
def test_unknown_cca_fails_loudly() -> None:
    with socket.socket() as s, pytest.raises(OSError, match="no-such-cca"):
        tcpinfo.set_cca(s, "no-such-cca")


def test_recorder_keeps_raw_samples_and_caps_them() -> None:
    from ccscope.lab.server import Recorder, samples_to_rows

    with socket.create_server(("127.0.0.1", 0)) as ls:
        c = socket.create_connection(ls.getsockname())
        s, _ = ls.accept()
        with c, s:
            rec = Recorder(s, max_samples=5)
            for _ in range(8):
                rec.sample()
            rec.finish()
            rec.finish()  # idempotent
            assert rec.count == 5 and rec.truncated
            rows = list(samples_to_rows(rec.samples()))
            assert len(rows) == 5
            assert all(r[1] == 1 for r in rows)  # ESTABLISHED
            assert [r[0] for r in rows] == sorted(r[0] for r in rows)
            s.sendall(b"still open")  # finish() released only the duplicate fd
            assert c.recv(100) == b"still open"
