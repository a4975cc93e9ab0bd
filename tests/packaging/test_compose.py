"""docker-compose.yml and the Dockerfiles, read without an engine: every image builds FROM the
Debian base (no registry), the worker has what its shells need and the rest run unprivileged.
Bringing it up for real is `make bench NAME=compose` (bench/results/compose.json)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(doc, dict)
    return doc


def from_lines(dockerfile: Path) -> list[str]:
    return re.findall(r"^FROM\s+(\S+)", dockerfile.read_text(), re.M)


def test_every_image_starts_from_the_debian_base() -> None:
    services = compose()["services"]
    for name, svc in services.items():
        df = ROOT / svc["build"]["dockerfile"]
        assert df.is_file(), f"{name}: {df} is missing"
        for base in from_lines(df):
            assert base.startswith("ccscope/"), f"{name}: FROM {base} needs a registry"
    assert "debootstrap" in (ROOT / "deploy/build-base.sh").read_text()


def test_the_service_has_its_parts() -> None:
    services = compose()["services"]
    for needed in ("postgres", "redis", "s3", "prometheus", "api", "beat", "migrate"):
        assert needed in services
    workers = [s for n, s in services.items() if n.startswith("worker")]
    assert not any(s.get("privileged") for s in services.values())
    assert len(workers) >= 2
    for w in workers:
        assert {"NET_ADMIN", "SYS_ADMIN"} <= set(w["cap_add"])
        assert "BPF" not in w["cap_add"] and not w.get("privileged")  # BPF: the lab's, not theirs
        assert any("/dev/net/tun" in d for d in w["devices"])
        assert any(v.startswith("/run/ccscope:") for v in w["volumes"])  # shared shell locks
        assert w["network_mode"] == "host" and w["pid"] == "host"


@pytest.mark.parametrize("dockerfile", ["api.Dockerfile", "beat.Dockerfile", "s3.Dockerfile"])
def test_services_without_privileges_drop_root(dockerfile: str) -> None:
    text = (ROOT / "deploy/docker" / dockerfile).read_text()
    assert re.search(r"^USER\s+(?!root)\S+", text, re.M), f"{dockerfile} runs as root"
