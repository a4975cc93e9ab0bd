"""atheris harness: arbitrary bytes -> flows_from_pcap (and the per-packet path).

    .venv/bin/python tests/fuzz/fuzz_pcap.py -max_total_time=60 [corpus_dir ...]
    .venv/bin/python tests/fuzz/fuzz_pcap.py --csv -max_total_time=60   # the CSV importer
    .venv/bin/python tests/fuzz/fuzz_pcap.py --quic -max_total_time=60  # QUIC bytes in flight

Only CaptureError / TraceFormatError may escape; traces must validate and the vectorised and
per-packet pcap paths must agree. Without a corpus directory the harness seeds a temporary one
with the synthetic captures used by the tests, so the fuzzer starts from valid files.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.capture.synth (seeds)

with atheris.instrument_imports():
    from ccscope.capture.nebby_csv import traces_from_csv
    from ccscope.capture.pcap import PcapReader
    from ccscope.capture.quic_bif import read_quic, traces_from_quic
    from ccscope.capture.tcp_bif import flows_from_pcap, traces_from_packets
    from ccscope.errors import CaptureError, TraceFormatError

from tests.capture.quic_synth import seed_quic_pcaps, simulate  # noqa: E402
from tests.capture.synth import seed_csvs, seed_pcaps  # noqa: E402

CSV_MODE = "--csv" in sys.argv
QUIC_MODE = "--quic" in sys.argv
QUIC_PROFILE = simulate(packets=1).profile


def _check(res) -> None:  # type: ignore[no-untyped-def]
    for tr in res.traces:
        tr.validate()
        if (tr.bif < 0).any():
            raise AssertionError("negative bytes in flight")
        if (tr.pipe < 0).any() or (tr.pipe > tr.bif).any():
            raise AssertionError("pipe outside [0, BiF]")


def one_pcap(data: bytes) -> None:
    align = "sender" if data[-1:] == b"\x01" else "capture"  # let the fuzzer pick the mode
    try:
        res = flows_from_pcap(data, align=align)
    except (CaptureError, TraceFormatError):
        return
    _check(res)
    rd = PcapReader(data)
    slow = traces_from_packets(rd, align=align, partial=rd.truncated)
    if [(t.bif.tolist(), t.pipe.tolist()) for t in slow.traces] != [
        (t.bif.tolist(), t.pipe.tolist()) for t in res.traces
    ]:
        raise AssertionError("vectorised and per-packet paths disagree")


def one_csv(data: bytes) -> None:
    try:
        res = traces_from_csv(data)
    except (CaptureError, TraceFormatError):
        return
    _check(res)


def one_quic(data: bytes) -> None:
    try:
        cap = read_quic(data)
        for align in ("capture", "sender"):
            for prof in (QUIC_PROFILE, None):
                _check(traces_from_quic(cap, align=align, profile=prof))
    except (CaptureError, TraceFormatError):
        return


def main() -> None:
    argv = [a for a in sys.argv if a not in ("--csv", "--quic")]
    seeds = seed_csvs() if CSV_MODE else seed_quic_pcaps() if QUIC_MODE else seed_pcaps()
    if not any(not a.startswith("-") for a in argv[1:]):
        corpus = Path(tempfile.mkdtemp(prefix="ccscope-fuzz-"))
        for i, s in enumerate(seeds):
            (corpus / f"seed{i}").write_bytes(s)
        argv.append(str(corpus))
    atheris.Setup(argv, one_csv if CSV_MODE else one_quic if QUIC_MODE else one_pcap)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
