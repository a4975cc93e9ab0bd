"""The wheel carries everything a user needs: built from the tracked sources, installed into a
fresh virtual environment (offline: its dependencies are read from the project's environment,
not downloaded), it runs `ccscope eval` on the shipped reference summaries and `ccscope
classify` on a fixture, writing only where it is told, and serves the dashboard's files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "traces"


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]


@pytest.mark.slow
def test_wheel_installs_and_runs_eval_and_classify(tmp_path: Path) -> None:
    # The sources as git would ship them (tracked and new, not ignored), built without network.
    files = _run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT).stdout.split()
    src = tmp_path / "src"
    for f in files:
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
              str(tmp_path / "dist"), str(src)])  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("ccscope-*.whl")
    venv = tmp_path / "venv"
    r = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert r.returncode == 0, r.stderr
    py = venv / "bin" / "python"
    site = Path(
        _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    # The dependencies, offline: the project environment's packages as a plain path (its .pth
    # files, such as the editable ccscope, are not processed from there).
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = _run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", str(wheel)]
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    where = _run([str(py), "-c", "import ccscope, sys; print(ccscope.__file__)"], cwd=work).stdout.strip()
    assert where.startswith(str(site)), where  # the wheel, not the source tree
    exe = venv / "bin" / "ccscope"
    empty = tmp_path / "no-traces"
    empty.mkdir()
    r = _run([str(exe), "eval", "--json", "--root", str(empty)], cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)  # the headline figures (their names are the classifier's)
    assert (work / "eval" / "eval.json").exists()  # the current directory, not the package
    assert not list((site / "ccscope").rglob("eval.json"))
    r = _run([str(exe), "classify", "--json", str(FIXTURE / "cubic-d5-A.trace.json.gz"),
              str(FIXTURE / "cubic-d5-B.trace.json.gz")], cwd=work)  # fmt: skip
    assert r.returncode in (0, 5), r.stderr[-2000:]  # a CCA or Unknown: both are verdicts
    assert json.loads(r.stdout)["verdicts"][0]["verdict"]["format"] == "ccscope-verdict/1"
    for rel in ("dashboard/templates/census.html", "dashboard/static/dashboard.css",
                "dashboard/data/census_history.csv", "schemas/ccscope-trace-1.json",
                "schemas/ccscope-verdict-1.json", "api/routers/ops.py"):  # fmt: skip
        assert (site / "ccscope" / rel).exists(), rel
    assert list((site / "ccscope" / "classifier" / "models").glob("reference-*.json.gz"))
