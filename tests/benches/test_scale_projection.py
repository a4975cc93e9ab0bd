"""bench/scale's projection for a host that only measures: which split row it reads and what it
keeps beside it (the bench's own arithmetic; the census runs are the bench's)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

SCALE = Path(__file__).resolve().parents[2] / "bench" / "scale"


@pytest.fixture(scope="module")
def modules() -> Any:
    sys.path.insert(0, str(SCALE))
    try:
        import split
        import sweep

        yield split, sweep
    finally:
        sys.path.remove(str(SCALE))


def _split_row(k: int, util: float, cpu: float, sph: float, p99_ok: bool = True) -> dict[str, Any]:
    return {
        "concurrency": k,
        "per_cpu": {"0": {"utilisation": util}},
        "cpu_s_per_measurement_measuring_cpu": cpu,
        "sites_per_hour": sph,
        "lateness_p99_ms_max": 0.2 if p99_ok else 5.0,
        "p99_under_1ms": p99_ok,
    }


def _sweep_row(k: int, cpu: float) -> dict[str, Any]:
    return {
        "concurrency": k,
        "cpu_s_per_measurement_measuring_side": cpu,
        "seconds": 100.0,
        "sites_per_hour": 1000.0,
        "measurements": k,
        "p99_under_1ms": True,
    }


def test_the_cost_at_the_assumed_load_decides(modules: Any) -> None:
    split, _ = modules
    rows = [
        _split_row(8, 0.33, 0.85, 1350.0),
        _split_row(16, 0.64, 0.95, 2400.0),
        _split_row(32, 0.97, 1.4, 2500.0),
    ]
    got = split.split_projection(rows)
    # the cost at 70 %, between K = 16 (64 %) and K = 32 (97 %): neither the lighter row's
    # flattering cost nor the saturated one's
    want = round(0.95 + (0.70 - 0.64) / (0.97 - 0.64) * (1.4 - 0.95), 3)
    assert got["cpu_s_per_measurement_measuring_cpu"] == want
    assert got["sites_per_hour"] == round(2 * 0.7 * 3600 / want)
    assert got["nearest_row"]["concurrency"] == 16
    assert got["nearest_row"]["sites_per_hour"] == round(2 * 0.7 * 3600 / 0.95)
    assert got["heaviest_row_kept_timing"]["sites_per_hour_all_cores"] == 5000
    assert got["seconds_per_measurement"] == round(16 * 3600 / 2400.0, 1)
    # with no row above the load, the nearest row's cost
    assert split.split_projection(rows[:2])["cpu_s_per_measurement_measuring_cpu"] == 0.95
    # a row whose emulators lost their timing is never used, however near its load
    rows[1] = _split_row(16, 0.64, 0.95, 2400.0, p99_ok=False)
    want = round(0.85 + (0.70 - 0.33) / (0.97 - 0.33) * (1.4 - 0.85), 3)
    assert split.split_projection(rows)["cpu_s_per_measurement_measuring_cpu"] == want
    assert split.split_projection([rows[1]]) is None


def test_the_headline_takes_the_split_and_keeps_the_shared_cores_figure(modules: Any) -> None:
    _, sweep = modules
    rows = [_sweep_row(16, 2.0), _sweep_row(32, 2.2)]
    alone = sweep.projection(rows)
    assert alone["sites_per_hour_projected"] == round(2 * 0.7 * 3600 / 2.1)
    both = sweep.projection(rows, split=[_split_row(16, 0.64, 0.95, 2400.0)])
    assert both["sites_per_hour_projected"] == round(2 * 0.7 * 3600 / 0.95)
    assert both["cpu_s_per_measurement_measuring_side"] == 0.95
    shared = both["projection_derivation"]["shared_cores"]
    assert shared["sites_per_hour"] == alone["sites_per_hour_projected"]
    assert both["projection_derivation"]["concurrency_needed"] == round(
        both["sites_per_hour_projected"] * 24.0 / 3600
    )


def test_the_concurrency_bound_reads_every_run_of_a_k(modules: Any) -> None:
    """One run at the edge does not decide a K: it counts when it kept its timing in at least
    80 % of its runs, the sweep's and its repeats'."""
    _, sweep = modules

    def row(k: int, ok: bool, strict: bool | None = None) -> dict[str, Any]:
        r = {**_sweep_row(k, 2.0), "p99_under_1ms": ok}
        return r if strict is None else {**r, "p99_under_1ms_every_direction": strict}

    rows = [row(16, True), row(64, True), row(128, False, False)]
    assert sweep.projection(rows)["max_concurrency_p99_under_1ms"] == 64
    # four of five runs of K = 128 kept their timing: it counts
    again = [row(128, True, True), row(128, True, False), row(128, True, True), row(128, True, True)]
    got = sweep.projection(rows, repeats=again)
    assert got["max_concurrency_p99_under_1ms"] == 128
    assert got["max_concurrency_runs"] == {"16": "1 of 1", "64": "1 of 1", "128": "4 of 5"}
    # by the strict reading three of five: it does not
    assert got["max_concurrency_p99_under_1ms_every_direction"] == 64
    # two of four: it does not
    half = sweep.projection(rows, repeats=[*again[:2], row(128, False)])
    assert half["max_concurrency_p99_under_1ms"] == 64 and half["max_concurrency_runs"]["128"] == "2 of 4"


def test_the_lab_shells_outer_device_is_found_by_its_process_group(modules: Any) -> None:
    """RPS is set on the devices the lab's own shells hold open, never on another shell's."""
    import os
    import subprocess
    import time

    from ccscope.capture.shell import link_binary

    split, _ = modules
    procs = [
        subprocess.Popen(
            [str(link_binary()), "--", "sleep", "20"],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        got: list[list[str]] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            got = [split.outer_tuns(os.getpgid(p.pid)) for p in procs]
            if all(got):
                break
            time.sleep(0.2)
        assert all(len(g) == 1 and g[0].startswith("ccs") and g[0].endswith("o") for g in got), got
        assert got[0] != got[1]
        assert split.outer_tuns(os.getpgid(0)) == []  # this test's own group holds none
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=20)


def test_client_ab_pairs_draws_and_tests_the_discordant_ones() -> None:
    sys.path.insert(0, str(SCALE))
    try:
        import client_ab
    finally:
        sys.path.remove(str(SCALE))
    assert client_ab.sign_test_p(0, 0) == 1.0
    assert client_ab.sign_test_p(5, 0) == pytest.approx(2 / 32)
    assert client_ab.sign_test_p(2, 4) == pytest.approx(0.6875)

    def row(label: str, verdict: str, outcome: str) -> dict[str, str]:
        return {"label": label, "verdict": verdict, "outcome": outcome}

    a = {
        "d1": row("reno", "reno", "right"),
        "d2": row("bic", "unknown", "unknown"),
        "d3": row("htcp", "nv", "wrong"),
    }
    b = {"d1": row("reno", "unknown", "unknown"), "d2": row("bic", "unknown", "unknown"),
         "d3": row("htcp", "htcp", "right"), "d4": row("lp", "lp", "right")}  # fmt: skip
    res = client_ab.compare(a, b)
    assert res["draws"] == 3  # only draws measured with both clients
    assert (res["compiled_better"], res["python_better"]) == (1, 1)
    assert [d["draw"] for d in res["differ"]] == ["d1", "d3"]
