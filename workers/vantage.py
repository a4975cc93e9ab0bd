"""A vantage point's own network namespace: the worker process runs behind its access path.

`ccscope worker --vantage far --netns --access '--delay 60'` starts the worker inside a
ccscope-link shell whose link is that access path, so everything the worker does — the
downloads (each profile's shell nests inside), the store, the broker, the trace store — leaves
through the vantage point's own namespace and path, as on a separate host. Without `--netns`,
`--access` wraps every download in a shell of its own instead and the worker stays in the
caller's namespace.

From inside the namespace the caller's loopback is out of reach: the store, broker and trace
store must be given at an address the namespace can route to (the caller's namespace answers
for its own addresses through the shell's NAT, e.g. a service bound to an extra address on
its loopback device).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ccscope.errors import EXIT_INTERRUPTED, EXIT_SETUP
from ccscope.settings import settings
from ccscope.workers.supervise import Child

# Set inside the namespace: the inner worker must not try to build another one.
INSIDE_ENV = "CCSCOPE_WORKER_IN_NETNS"
# What the worker inside its namespace is given of this process's environment.
PASSED_PREFIXES = ("CCSCOPE_", "AWS_")
PASSED_NAMES = ("HOME", "REQUESTS_CA_BUNDLE", "PIP_CERT")


def inside() -> bool:
    return settings().worker_in_netns


def run_in_vantage_netns(vantage: str, access: Sequence[str], inner_argv: Sequence[str]) -> int:
    """Run `inner_argv` (a worker command line) inside a fresh namespace behind `access`;
    forward SIGTERM/SIGINT; return its exit status. A namespace that cannot be built is
    reported with ccscope-link's reason and EXIT_SETUP; no measurement was taken, so none is
    lost (the vantage point's queue keeps them for a worker that can run)."""
    from ccscope.capture.shell import link_argv

    env = {**os.environ, INSIDE_ENV: "1"}
    env.pop("CCSCOPE_WORKER_ACCESS", None)  # the namespace is the access path: no second one
    # The shell hands its command an allow-listed environment only; the worker needs its own
    # settings (store, broker, trace store and their credentials) inside.
    passed = sorted(k for k in env if k.startswith(PASSED_PREFIXES) or k in PASSED_NAMES)
    options = [*access, "--quiet", *(o for k in passed for o in ("--pass-env", k))]
    argv = link_argv(options, list(inner_argv), keep_root=True)
    setup_error: list[str] = []

    def relay(line: str) -> None:
        # Pass the worker's log through, and keep the emulator's own set-up error if it says one.
        if line.startswith("ccscope-link: error"):
            setup_error.append(line.strip())
        sys.stderr.write(line)
        sys.stderr.flush()

    child = Child()
    rc = child.run(argv, env, relay)
    if setup_error:
        print(
            f"ccscope worker: the network namespace of vantage point {vantage!r} could not be built: "
            f"{setup_error[-1].removeprefix('ccscope-link: error:').strip()} (nothing was taken from "
            "its queue; its measurements wait for a worker that can run)",
            file=sys.stderr,
        )
        return EXIT_SETUP
    if child.stopping.is_set() and rc:
        return EXIT_INTERRUPTED
    return rc


def check_reachable_services() -> list[str]:
    """Services configured at a loopback address, which a worker inside its own namespace
    cannot reach: a clear refusal beats a worker that retries forever."""
    cfg = settings()
    bad = []
    for name, url in (
        ("CCSCOPE_DB_URL", cfg.db_url),
        ("CCSCOPE_BROKER_URL", cfg.broker_url),
        ("CCSCOPE_S3_ENDPOINT", cfg.s3_endpoint),
    ):
        if url and any(h in url for h in ("@127.", "//127.", "@localhost", "//localhost", "[::1]")):
            bad.append(f"{name} points at loopback ({url.split('@')[-1]})")
    if not cfg.broker_url:
        bad.append("CCSCOPE_BROKER_URL is unset (its default is the loopback Redis)")
    return bad
