"""Read Linux `struct tcp_info` (getsockopt TCP_INFO) and the per-socket congestion control.

The layout is the one in include/uapi/linux/tcp.h. That header is append-only, so the offsets
below hold for every kernel since 4.19 (which added tcpi_bytes_sent / tcpi_bytes_retrans); newer
kernels just return a longer struct. Offsets were checked with offsetof() against the 6.1 uapi
header, and `FIELD_OFFSETS` pins them so a slip in the format string fails the tests.
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

TCP_INFO = getattr(socket, "TCP_INFO", 11)
TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
TCP_CA_NAME_MAX = 16

# (name, struct code) in declaration order; "x" fields are the two bitfield bytes we skip.
_LAYOUT: tuple[tuple[str, str], ...] = (
    ("state", "B"), ("ca_state", "B"), ("retransmits", "B"), ("probes", "B"),
    ("backoff", "B"), ("options", "B"), ("_wscale", "B"), ("_app_limited", "B"),
    ("rto", "I"), ("ato", "I"), ("snd_mss", "I"), ("rcv_mss", "I"),
    ("unacked", "I"), ("sacked", "I"), ("lost", "I"), ("retrans", "I"), ("fackets", "I"),
    ("last_data_sent", "I"), ("last_ack_sent", "I"), ("last_data_recv", "I"),
    ("last_ack_recv", "I"),
    ("pmtu", "I"), ("rcv_ssthresh", "I"), ("rtt", "I"), ("rttvar", "I"),
    ("snd_ssthresh", "I"), ("snd_cwnd", "I"), ("advmss", "I"), ("reordering", "I"),
    ("rcv_rtt", "I"), ("rcv_space", "I"), ("total_retrans", "I"),
    ("pacing_rate", "Q"), ("max_pacing_rate", "Q"), ("bytes_acked", "Q"),
    ("bytes_received", "Q"), ("segs_out", "I"), ("segs_in", "I"),
    ("notsent_bytes", "I"), ("min_rtt", "I"), ("data_segs_in", "I"), ("data_segs_out", "I"),
    ("delivery_rate", "Q"), ("busy_time", "Q"), ("rwnd_limited", "Q"), ("sndbuf_limited", "Q"),
    ("delivered", "I"), ("delivered_ce", "I"),
    ("bytes_sent", "Q"), ("bytes_retrans", "Q"), ("dsack_dups", "I"), ("reord_seen", "I"),
    ("rcv_ooopack", "I"), ("snd_wnd", "I"),
)  # fmt: skip

# Offsets from the kernel header (offsetof on struct tcp_info); the tests check _STRUCT against it.
FIELD_OFFSETS: dict[str, int] = {
    "state": 0, "ca_state": 1, "rto": 8, "snd_mss": 16, "unacked": 24, "lost": 32,
    "retrans": 36, "rtt": 68, "rttvar": 72, "snd_ssthresh": 76, "snd_cwnd": 80,
    "total_retrans": 100, "pacing_rate": 104, "bytes_acked": 120, "notsent_bytes": 144,
    "min_rtt": 148, "delivery_rate": 160, "delivered": 192, "bytes_sent": 200,
    "bytes_retrans": 208, "snd_wnd": 228,
}  # fmt: skip

# "=" = native byte order, no implicit padding: every u64 in the struct is already 8-aligned.
_STRUCT = struct.Struct("=" + "".join(code for _, code in _LAYOUT))
TCP_INFO_LEN = _STRUCT.size  # 232: what 5.x/6.x kernels return at least
MIN_TCP_INFO_LEN = 216  # up to tcpi_bytes_retrans (4.19); older layouts are refused
_NAMES = tuple(n for n, _ in _LAYOUT)


def field_offset(name: str) -> int:
    """Byte offset of a field according to _LAYOUT (for checking against FIELD_OFFSETS)."""
    i = _NAMES.index(name)
    return struct.calcsize("=" + "".join(code for _, code in _LAYOUT[:i]))


class TcpInfo(NamedTuple):
    """The fields the lab records. Times are microseconds, sizes bytes unless named otherwise."""

    state: int
    ca_state: int
    snd_mss: int
    unacked: int  # packets sent and not yet cumulatively acked (tp->packets_out)
    sacked: int
    lost: int
    retrans: int
    rtt_us: int  # smoothed RTT
    rttvar_us: int
    snd_ssthresh: int  # packets
    snd_cwnd: int  # packets
    total_retrans: int
    pacing_rate: int  # bytes/s
    bytes_acked: int
    notsent_bytes: int
    min_rtt_us: int
    delivery_rate: int  # bytes/s
    bytes_sent: int  # includes retransmissions
    bytes_retrans: int

    @property
    def bif(self) -> int:
        """Highest sequence sent minus cumulative ACK, as a capture point would compute it."""
        return max(0, self.bytes_sent - self.bytes_retrans - self.bytes_acked)


TCP_STATES = {
    1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
    6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING",
}  # fmt: skip
CA_STATES = {0: "Open", 1: "Disorder", 2: "CWR", 3: "Recovery", 4: "Loss"}


def parse_tcp_info(raw: bytes | bytearray | memoryview) -> TcpInfo:
    """Decode the bytes getsockopt(TCP_INFO) returned."""
    if len(raw) < MIN_TCP_INFO_LEN:
        raise ValueError(f"tcp_info is {len(raw)} bytes; need >= {MIN_TCP_INFO_LEN} (kernel >= 4.19)")
    if len(raw) < TCP_INFO_LEN:
        raw = bytes(raw).ljust(TCP_INFO_LEN, b"\0")  # 4.19-5.x lack the last u32s, unused here
    v = dict(zip(_NAMES, _STRUCT.unpack_from(raw), strict=True))
    return TcpInfo(
        state=v["state"],
        ca_state=v["ca_state"],
        snd_mss=v["snd_mss"],
        unacked=v["unacked"],
        sacked=v["sacked"],
        lost=v["lost"],
        retrans=v["retrans"],
        rtt_us=v["rtt"],
        rttvar_us=v["rttvar"],
        snd_ssthresh=v["snd_ssthresh"],
        snd_cwnd=v["snd_cwnd"],
        total_retrans=v["total_retrans"],
        pacing_rate=v["pacing_rate"],
        bytes_acked=v["bytes_acked"],
        notsent_bytes=v["notsent_bytes"],
        min_rtt_us=v["min_rtt"],
        delivery_rate=v["delivery_rate"],
        bytes_sent=v["bytes_sent"],
        bytes_retrans=v["bytes_retrans"],
    )


def build_tcp_info(**fields: int) -> bytes:
    """Raw struct bytes with the given fields set, others zero (for tests and replay)."""
    names = {"rtt_us": "rtt", "rttvar_us": "rttvar", "min_rtt_us": "min_rtt"}
    vals = dict.fromkeys(_NAMES, 0)
    for k, v in fields.items():
        k = names.get(k, k)
        if k not in vals:
            raise KeyError(f"no tcp_info field {k!r}")
        vals[k] = v
    return _STRUCT.pack(*(vals[n] for n in _NAMES))


def read_tcp_info(sock: socket.socket) -> TcpInfo:
    return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_LEN))


def get_cca(sock: socket.socket) -> str:
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, TCP_CA_NAME_MAX)
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")


def set_cca(sock: socket.socket, cca: str) -> None:
    """Set the socket's congestion control and read it back; raise OSError with a clear reason."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cca.encode())
    except OSError as e:
        raise OSError(
            e.errno, f"cannot set congestion control {cca!r}: {e.strerror} "
            f"(available: {' '.join(available_ccas()) or '?'})"
        ) from e  # fmt: skip
    got = get_cca(sock)
    if got != cca:
        raise OSError(f"asked for congestion control {cca!r}, the socket reports {got!r}")


def available_ccas() -> list[str]:
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return f.read().split()
    except OSError:
        return []
