"""Ground-truth lab: servers with known CCAs behind an emulated Internet path.

The public API (`Lab`, `LabParams`, `lab_hosts_file`, `lab_ca_file`, `groundtruth_dir`,
`LAB_PREFIX`, `is_lab_address`) lives in ccscope.lab.lab and is re-exported here lazily, so the
lab server process does not import the certificate machinery it never uses.
"""

from __future__ import annotations

from typing import Any

_API = {
    "Lab", "LabParams", "LabStatus", "lab_hosts_file", "lab_ca_file", "groundtruth_dir",
    "lab_state_dir", "LAB_PREFIX", "is_lab_address",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _API:
        from ccscope.lab import lab

        return getattr(lab, name)
    raise AttributeError(f"module 'ccscope.lab' has no attribute {name!r}")
