"""Every `CCSCOPE_*` environment variable ccscope's Python code reads, in one class.

`settings()` reads the environment each time it is called (a process that changes its
environment, as the CLI does before starting workers, or a test, sees the change); a value that
does not parse is a clear error naming the variable. Command-line options override these where
both exist. Variables read only by the native tools (ccscope-link, ccscope-cca) or exported by
ccscope-link into its shells are listed in `NATIVE`, the test suite's own in `TESTS`, for the
README table; tests/core/test_settings.py checks that every `CCSCOPE_*` name in the sources is in
one of the three and in the README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from ccscope.errors import CCScopeError


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CCSCOPE_", env_ignore_empty=True, extra="ignore")

    # ---- store -------------------------------------------------------------------------------
    data_dir: Path | None = Field(
        None, description="embedded data directory (default ~/.local/share/ccscope)"
    )
    db_url: str | None = Field(
        None, description="SQLAlchemy URL of the store (default: SQLite in the data dir)"
    )
    trace_dir: str | None = Field(None, description="trace files: a directory or s3://bucket/prefix")
    db_pool: int = Field(20, ge=1, description="database connections per process (overflow: twice that)")
    s3_endpoint: str | None = Field(None, description="S3-compatible endpoint URL for s3:// trace dirs")
    # ---- API and dashboard -------------------------------------------------------------------
    api_token: str = Field("", description="bearer token for API writes (none: writes refused)")
    api_workers: int | None = Field(None, ge=1, description="uvicorn worker processes (default: one per CPU)")
    eval_json: Path | None = Field(
        None,
        description="`ccscope eval`'s eval.json for the accuracy page "
        "(default bench/classifier/eval/eval.json)",
    )
    robustness_json: Path | None = Field(
        None, description="the robustness bench for the accuracy page (default bench/results/robustness.json)"
    )
    # ---- broker (Celery) ---------------------------------------------------------------------
    broker_url: str | None = Field(None, description="Celery broker (default redis://127.0.0.1:6379/0)")
    result_url: str | None = Field(None, description="Celery result backend (default: the broker)")
    visibility_timeout: float = Field(
        3600.0, gt=0, description="seconds before an unacked task is redelivered"
    )
    restore_interval: float = Field(10.0, gt=0, description="seconds between restores of unacked tasks")
    sweep_interval: float = Field(
        300.0, gt=0, description="seconds between beat's sweeps for dead runs and lost messages"
    )
    # ---- workers -----------------------------------------------------------------------------
    worker_profiles: str | None = Field(None, description="profiles of a 'default' measurement (default A,B)")
    worker_timeout: float | None = Field(None, gt=0, description="seconds per download (default 60)")
    worker_lease: float | None = Field(
        None, gt=0, description="site lease, seconds after the last beat (default 120)"
    )
    worker_stale_after: float | None = Field(
        None, gt=0, description="seconds of silence before a run is dead (default 120)"
    )
    worker_heartbeat: float | None = Field(
        None, gt=0, description="seconds between a run's beats (default 20)"
    )
    worker_min_gap: float | None = Field(
        None, ge=0, description="seconds between two visits of one site (default 10)"
    )
    worker_max_bytes: int | None = Field(None, gt=0, description="largest download, bytes (default 16 MiB)")
    worker_access: str | None = Field(
        None, description="ccscope-link options of an emulated access path (lab vantage points)"
    )
    worker_dir: Path | None = Field(
        None, description="scratch directory for downloads (default $TMPDIR/ccscope-work)"
    )
    worker_keep_pcap: bool = Field(False, description="store each profile's pcap beside its trace")
    worker_in_netns: bool = Field(
        False, description="set by `ccscope worker --netns` inside the vantage point's namespace"
    )
    worker_concurrent_profiles: bool | None = Field(
        None, description="download a measurement's profiles at the same time (default true)"
    )
    worker_adaptive: bool | None = Field(
        None,
        description="adaptive stopping: stop the downloads once the verdict has settled "
        "(classifier/stopping.py; default true)",
    )
    worker_nice: int = Field(
        0,
        ge=-20,
        le=19,
        description="nice value of a worker's own threads (checks, classification, store); "
        "a negative one takes CPU from the downloads it measures (workers/priority.py: off)",
    )
    worker_retry_base: float = Field(5.0, gt=0, description="first retry delay of a transient failure, s")
    worker_retry_cap: float = Field(300.0, gt=0, description="longest retry delay, s")
    worker_max_retries: int = Field(30, ge=0, description="retries before a measurement fails")
    # ---- lab and capture ---------------------------------------------------------------------
    lab: bool = Field(False, description="lab mode: private and loopback targets allowed")
    lab_dir: Path | None = Field(None, description="lab state directory (default /run/ccscope/lab)")
    link: Path | None = Field(None, description="the ccscope-link binary (default: the repository build)")
    cca_bin: Path | None = Field(None, description="the ccscope-cca loader binary (BPF zoo)")
    quic_get: Path | None = Field(None, description="the QUIC client binary (default: the repository build)")
    tcp_get: Path | None = Field(
        None, description="the compiled HTTP(S) client binary (default: the repository build)"
    )
    tcp_client: Literal["compiled", "python"] = Field(
        "compiled",
        description="the TCP download client: compiled (ccscope-tcp-get; the Python one where it is not "
        "built) or python (capture/fetch.py): the same reads and report, a tenth of the CPU",
    )


# Read by the native tools, or set by ccscope-link for the command it runs (not settings of the
# Python code, though it reads the last group to find its own shell).
NATIVE: dict[str, str] = {
    "CCSCOPE_LINK_DEBUG": "ccscope-link: print its event loop's decisions",
    "CCSCOPE_LINK_SCHED": "ccscope-link: `other` leaves it off SCHED_FIFO",
    "CCSCOPE_LINK_IDLE": "ccscope-link: `normal` drops its PM QoS zero-latency request",
    "CCSCOPE_CCA_OBJ": "ccscope-cca: directory of the BPF objects",
    "CCSCOPE_CCA_DEBUG": "ccscope-cca: verbose loading",
    "CCSCOPE_SHELL": "set by ccscope-link inside a shell: 1",
    "CCSCOPE_SHELL_DEPTH": "set by ccscope-link: how many shells deep",
    "CCSCOPE_SHELL_INNER_ADDR": "set by ccscope-link: the shell's own address",
    "CCSCOPE_SHELL_OUTER_ADDR": "set by ccscope-link: the address outside the shell",
    "CCSCOPE_SHELL_INDEX": "set by ccscope-link: the shell's index",
    "CCSCOPE_CCA_MAP": "set by the lab for nginx's listen() shim: address=CCA pairs",
    "CCSCOPE_MAXSEG": "set by the lab for nginx's listen() shim: TCP_MAXSEG of the listeners",
}
# Knobs of the test suite only.
TESTS: dict[str, str] = {
    "CCSCOPE_VALIDATE_INSTANCE": "tests/zoo: lab instance of the zoo validation test (default 3)",
    "CCSCOPE_VALIDATE_DIR": "tests/zoo: its lab state directory (default /run/ccscope/lab-validate-test)",
}


def settings() -> Settings:
    """The settings from the environment now; a malformed value is a CCScopeError."""
    try:
        return Settings()
    except ValidationError as e:
        bad = "; ".join(
            f"CCSCOPE_{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}" for err in e.errors()
        )
        raise CCScopeError(f"bad environment setting: {bad}") from None


def env_name(field: str) -> str:
    return f"CCSCOPE_{field.upper()}"
