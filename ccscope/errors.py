"""Errors a user can act on. The CLI prints their message, never a traceback."""


class CCScopeError(Exception):
    """Base class: a clear, user-facing failure."""

    exit_code = 1


class ProfileError(CCScopeError, ValueError):
    """A profile or link option that does not make sense."""


class TraceFormatError(CCScopeError, ValueError):
    """A trace file that is not a valid ccscope trace."""


class CaptureError(CCScopeError, ValueError):
    """A packet capture that cannot be turned into traces (corrupt, empty, no handshake...)."""


class ShellError(CCScopeError):
    """The link emulator could not set up or run the command."""


class TargetRefused(CCScopeError):
    """A measurement target that policy forbids (private address outside lab mode, ...)."""

    exit_code = 3


class LabError(CCScopeError):
    """The lab could not be brought up, queried or torn down."""
