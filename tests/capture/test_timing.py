"""What `ccscope measure` says about the emulator's timing: nothing when it held, and when it
did not, whether the hypervisor froze the machine meanwhile."""

from __future__ import annotations

from ccscope.capture.measure import shell_timing, timing_warning
from ccscope.cli import format_measurement


def _stats(p99_down_us: int, p99_up_us: int, steal: float | None) -> dict:
    doc: dict = {
        "down": {"lateness_us": {"p99": p99_down_us}},
        "up": {"lateness_us": {"p99": p99_up_us}},
    }
    if steal is not None:
        doc["host"] = {"steal_s": steal, "steal_share": 0.01}
    return doc


def test_timing_reads_the_worse_direction() -> None:
    assert shell_timing(_stats(300, 52_559, 1.3)) == {"lateness_p99_ms": 52.559, "host_steal_s": 1.3}
    assert shell_timing(None) is None
    assert shell_timing({"down": {}, "up": {"lateness_us": {"p99": "x"}}}) == {
        "lateness_p99_ms": None,
        "host_steal_s": None,
    }


def test_warning_names_the_cause() -> None:
    assert timing_warning("A", shell_timing(_stats(300, 400, 0.0))) is None
    frozen = timing_warning("B", shell_timing(_stats(300, 52_559, 1.3)))
    assert frozen and "52.6 ms" in frozen and "1.30 CPU-s" in frozen and "frozen VM" in frozen
    busy = timing_warning("B", shell_timing(_stats(5_000, 10, 0.0)))
    assert busy and "own load" in busy
    unknown = timing_warning("B", shell_timing(_stats(5_000, 10, None)))
    assert unknown and "could not be read" in unknown


def test_measure_output_carries_the_warning() -> None:
    run = {
        "profile": "B", "ok": True, "bytes": 420000, "duration_s": 30.0, "points": 9000,
        "max_bif": 4000, "retransmits": 3, "internet_rtt_ms": 20.0, "base_rtt_ms": 120.0,
        "timing": shell_timing(_stats(300, 52_559, 1.3)),
    }  # fmt: skip
    text = format_measurement(
        {"url": "http://x.lab.test/o", "run_id": "r", "out_dir": "/tmp/r", "runs": [run]}
    )
    assert "timing: profile B" in text and "frozen VM" in text


def test_check_output_carries_the_warning() -> None:
    from ccscope.check import CheckResult

    run = {"profile": "A", "timing": shell_timing(_stats(40_000, 10, 0.8))}
    res = CheckResult(
        "cubic.lab.test", "http://cubic.lab.test/o", None, "/tmp/r", {"runs": [run]}, None, None
    )
    assert "timing: profile A" in res.format() and "0.80 CPU-s" in res.format()
