"""Errors a user can act on. The CLI prints their message, never a traceback."""


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

    kind = "shell"


class TargetRefused(CCScopeError):
    """A measurement target that policy forbids (private address outside lab mode, ...)."""

    exit_code = 3
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
