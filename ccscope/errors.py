"""Errors a user can act on. The CLI prints their message, never a traceback.

Exit codes are shared by every `ccscope` command (each `--help` lists the ones it uses):
"""

EXIT_OK = 0
EXIT_ERROR = 1  # a clear error message (bad input, unreadable file, refused by policy below)
EXIT_USAGE = 2  # the command line itself is wrong (argparse)
EXIT_REFUSED = 3  # the target is refused by policy (private address outside lab mode, opted out)
EXIT_FAILED = 4  # the work ran but failed (a download, a measurement, a census row)
EXIT_UNKNOWN = 5  # classify/check: the CCA is none the model knows
EXIT_INSUFFICIENT = 6  # classify/check: the trace cannot carry a verdict
EXIT_SETUP = 7  # the link emulator could not be set up (ccscope-link's own set-up failure code)
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM

EXIT_TEXT = {
    EXIT_OK: "success",
    EXIT_ERROR: "error (the message says which)",
    EXIT_USAGE: "usage error",
    EXIT_REFUSED: "target refused by policy",
    EXIT_FAILED: "the measurement or download failed",
    EXIT_UNKNOWN: "verdict: unknown CCA",
    EXIT_INSUFFICIENT: "verdict: insufficient data",
    EXIT_SETUP: "the emulated link could not be set up (root, TUN, nftables)",
    EXIT_INTERRUPTED: "interrupted",
}


def exit_codes_help(*codes: int) -> str:
    """An argparse epilog listing `codes` (0, 1 and 2 always)."""
    shown = sorted({EXIT_OK, EXIT_ERROR, EXIT_USAGE, *codes})
    return "exit codes: " + "; ".join(f"{c} {EXIT_TEXT[c]}" for c in shown)


class CCScopeError(Exception):
    """Base class: a clear, user-facing failure."""

    exit_code = 1
    # What kind of failure, for whoever decides whether trying again can help (the workers'
    # retry table, workers/tasks.py); a download's kinds are capture.fetch's `error_kind`.
    kind = "error"


class ProfileError(CCScopeError, ValueError):
    """A profile or link option that does not make sense."""


class TraceFormatError(CCScopeError, ValueError):
    """A trace file that is not a valid ccscope trace."""


class CaptureError(CCScopeError, ValueError):
    """A packet capture that cannot be turned into traces (corrupt, empty, no handshake...)."""

    kind = "capture"


class ShellError(CCScopeError):
    """The link emulator could not set up or run the command."""

    exit_code = EXIT_SETUP
    kind = "shell"


class TargetRefused(CCScopeError):
    """A measurement target that policy forbids (private address outside lab mode, ...)."""

    exit_code = EXIT_REFUSED
    kind = "target_refused"


class TargetUnresolved(TargetRefused):
    """A name whose lookup failed for now (EAI_AGAIN: no answer from DNS), not for good."""

    kind = "dns_temporary"


class LabError(CCScopeError):
    """The lab could not be brought up, queried or torn down."""

    kind = "lab"


class LabNotUp(LabError):
    """The lab's state (hosts file, CA) is missing: nobody brought it up, or it is coming up."""

    kind = "lab_down"
