"""SACK: option parsing (scalar and vectorised agree, damaged options yield nothing) and the
scoreboard behind the `sacked` column (pipe = BiF - SACKed bytes)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest

from ccscope.capture.packets import TCP_ACK, ipv4_tcp, parse_ip, sack_blocks, tcp_header
from ccscope.capture.pcap import ip_frames, read_records
from ccscope.capture.tcp_bif import flows_from_pcap, read_pcap_table
from ccscope.trace import Trace
from tests.capture.synth import Flow, sack_loss_flow, sack_option, write_pcap

TS = b"\x01\x01\x08\x0a" + struct.pack("!II", 7, 9)


@pytest.mark.parametrize(
    "opts,blocks",
    [
        (b"", ()),
        (TS, ()),
        (TS + sack_option([(100, 200)]), ((100, 200),)),
        (TS + sack_option([(5, 6), (1, 2), (3, 4)]), ((5, 6), (1, 2), (3, 4))),
        (sack_option([(1, 2), (3, 4), (5, 6), (7, 8)], nops=False), ((1, 2), (3, 4), (5, 6), (7, 8))),
        (b"\x00" + sack_option([(1, 2)]), ()),  # end of list before the option
        (b"\x05\x09" + b"\x00" * 7, ()),  # SACK length not 2 + 8n
        (b"\x05\x02", ()),  # no block
        (b"\x05\x2a" + b"\x00" * 40, ()),  # five blocks cannot fit a TCP header
        (b"\x01\x05\x12" + b"\x00" * 8, ()),  # length runs past the end
        (b"\x08\x01" + sack_option([(1, 2)]), ()),  # a length below 2 ends the walk
        (b"\x01", ()),
        (b"\x08", ()),  # kind without its length byte
    ],
)
def test_sack_blocks(opts: bytes, blocks: tuple[tuple[int, int], ...]) -> None:
    assert sack_blocks(opts) == blocks


def _random_options(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.3:
        o = TS + sack_option([(rng.getrandbits(32), rng.getrandbits(32)) for _ in range(rng.randint(1, 3))])
    elif kind < 0.5:
        o = TS
    elif kind < 0.6:
        o = sack_option([(rng.getrandbits(32), rng.getrandbits(32)) for _ in range(rng.randint(1, 4))])
    else:  # garbage, and damaged SACK options
        o = bytes(rng.choice((0, 1, 5, 8, rng.randrange(256))) for _ in range(rng.randint(0, 40)))
    return o[:40]


def test_vectorised_parse_equals_scalar(tmp_path: Path) -> None:
    """Every option area of a capture (valid, damaged, cut short by the snap length) gives the
    same blocks from the batch parser as from the one-packet parser."""
    rng = random.Random(5)
    src, dst = bytes([192, 0, 2, 1]), bytes([10, 0, 0, 2])
    pkts = []
    for i in range(600):
        hdr, wire = ipv4_tcp(src, dst, tcp_header(443, 40000, i, i, TCP_ACK, options=_random_options(rng)), 0)
        if i % 7 == 0:  # the capture kept only part of the options
            hdr = hdr[: rng.randint(40, len(hdr))]
        pkts.append((i * 1000, hdr, wire))
    path = write_pcap(tmp_path / "opts.pcap", pkts)
    table, _, _ = read_pcap_table(path)
    fr = ip_frames(read_records(path))
    assert len(table) == len(pkts)
    seen = 0
    for i in range(len(pkts)):
        o, c = int(fr.ip_off[i]), int(fr.ip_caplen[i])
        seg = parse_ip(fr.data[o : o + c], int(fr.ip_orig_len[i]))
        assert seg is not None
        got = tuple((int(table.sack_le[i, j]), int(table.sack_re[i, j])) for j in range(table.sack_n[i]))
        assert got == seg.sack, i
        seen += bool(got)
    assert seen > 150  # the valid SACK options were read


def _at(tr: Trace, t: float) -> int:
    """The trace point in force at time t (the last one at or before it)."""
    return int(np.searchsorted(tr.t, t, side="right")) - 1


def test_scoreboard_follows_one_hole(tmp_path: Path) -> None:
    tr = flows_from_pcap(write_pcap(tmp_path / "l.pcap", sack_loss_flow().packets())).main
    assert tr.extra["sack"] is True
    sacked = tr.columns["sacked"]
    # at each SACK: 100..700 bytes above the hole; gone once the cumulative ACK covers them
    at_acks = [int(sacked[i]) for i in range(len(tr.t)) if tr.t[i] >= 0.32 - 1e-9 and tr.t[i] < 0.39]
    assert at_acks == [100, 200, 300, 400, 500, 600, 700]
    assert int(sacked[-1]) == 0
    # the pipe: 1000 bytes outstanding above ACK 201 less the 700 the client holds
    i = _at(tr, 0.385)
    assert tr.bif[i] == 800 and tr.pipe[i] == 100
    assert np.all(tr.pipe <= tr.bif) and np.all(tr.pipe >= 0)
    # the column survives the on-disk format, and the sender alignment carries it too
    back = Trace.load(tr.save(tmp_path / "t.json"))
    assert back.pipe.tolist() == tr.pipe.tolist()
    snd = flows_from_pcap(tmp_path / "l.pcap", align="sender").main
    assert sorted(set(snd.columns["sacked"].tolist())) == sorted(set(sacked.tolist()))


def test_scoreboard_remembers_blocks_an_ack_no_longer_reports(tmp_path: Path) -> None:
    """Five holes: an ACK names at most three blocks (the newest first), yet the receiver still
    holds the older ones until the cumulative ACK passes them."""
    f = Flow()
    f.handshake()
    for i in range(12):
        f.s(0.20 + 0.01 * i, 1 + 100 * i, 100, ack=101)
    held: list[tuple[int, int]] = []
    for k, seg in enumerate((3, 5, 7, 9, 11)):  # segments 2, 4, 6, 8 and 10 are lost
        held.insert(0, (1 + 100 * seg, 101 + 100 * seg))
        f.c(0.40 + 0.01 * k, 201, seq=101, sack=tuple(held[:3]))
    f.c(0.50, 201, seq=101, sack=tuple(held[:3]))
    tr = flows_from_pcap(write_pcap(tmp_path / "m.pcap", f.packets())).main
    assert int(tr.columns["sacked"][_at(tr, 0.505)]) == 500  # all five blocks, not the three last named


def test_dsack_and_impossible_blocks_do_not_count(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    for i in range(4):
        f.s(0.20 + 0.01 * i, 1 + 100 * i, 100, ack=101)
    f.c(0.30, 201, seq=101, sack=((101, 201),))  # D-SACK: below the cumulative ACK
    f.c(0.31, 201, seq=101, sack=((301, 90_000),))  # beyond anything the server sent
    tr = flows_from_pcap(write_pcap(tmp_path / "d.pcap", f.packets())).main
    s = tr.columns["sacked"]
    assert int(s[_at(tr, 0.305)]) == 0
    assert int(s[_at(tr, 0.315)]) == 100  # clipped to the highest byte sent (401)


def test_no_sack_no_column(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    f.s(0.2, 1, 100, ack=101)
    f.c(0.3, 101, seq=101)
    tr = flows_from_pcap(write_pcap(tmp_path / "n.pcap", f.packets())).main
    assert tr.extra["sack"] is False and "sacked" not in tr.columns
    assert tr.pipe.tolist() == tr.bif.tolist()
