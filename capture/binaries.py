"""Where the capture's compiled programs are found: one rule for the emulator and the QUIC client."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_built(name: str, override: str | None, repo_build: Path) -> Path | None:
    """The program `name`: the settings' `override` (an environment variable), the repository's
    build (`make setup`), or one on PATH; the first that is an executable file, else None."""
    candidates = [Path(override)] if override else []
    candidates.append(repo_build)
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)
