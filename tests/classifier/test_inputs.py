"""Honest inputs: classify refuses what cannot be one server's traces, one alignment rule for
every file type (and the verdict says which), gzipped captures, one JSON shape, the trace plot."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from tests.classifier.conftest import cli, fixture_path


def _verdicts(stdout: str) -> list[dict]:
    doc = json.loads(stdout)  # one document, whatever the number of verdicts
    return [v["verdict"] for v in doc["verdicts"]]


def test_different_servers_are_refused_unless_forced() -> None:
    a, b = str(fixture_path("cubic", "A")), str(fixture_path("bbr", "B"))
    r = cli("classify", a, b)
    assert r.returncode == 1 and "different servers" in r.stderr and "--force" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    r = cli("classify", "--force", "--json", a, b)
    assert r.returncode in (0, 5, 6) and "warning: the traces are of different servers" in r.stderr
    assert len(_verdicts(r.stdout)) == 1


def test_the_same_profile_twice_is_refused(tmp_path: Path) -> None:
    a = fixture_path("cubic", "A")
    copy = tmp_path / "again.trace.json.gz"
    shutil.copy(a, copy)
    for args in ((str(a), str(a)), (str(a), str(copy))):
        r = cli("classify", *args)
        assert r.returncode == 1 and "both profile A" in r.stderr


def test_each_and_single_give_one_json_shape() -> None:
    a, b = str(fixture_path("cubic", "A")), str(fixture_path("bbr", "A"))
    one = json.loads(cli("classify", "--json", a).stdout)
    each = json.loads(cli("classify", "--each", "--json", a, b).stdout)
    assert set(one) == set(each) == {"verdicts"}
    assert [v["files"] for v in each["verdicts"]] == [[a], [b]]
    assert one["verdicts"][0] == each["verdicts"][0]
    assert each["verdicts"][1]["verdict"]["format"] == "ccscope-verdict/1"


def test_one_alignment_rule_whatever_the_file_type(tmp_path: Path) -> None:
    from tests.capture.synth import bulk_flow, write_pcap

    pcap = write_pcap(tmp_path / "f.pcap", bulk_flow(n_data=3000, loss=0.01).packets())
    gz = tmp_path / "f.pcap.gz"
    gz.write_bytes(gzip.compress(pcap.read_bytes()))
    direct = cli("classify", "--json", str(pcap))
    assert direct.returncode in (0, 5, 6), direct.stderr
    v_direct = _verdicts(direct.stdout)[0]
    assert v_direct["evidence"]["alignment"] == "sender"
    # imported first with the default alignment: the same verdict
    r = cli("trace", "import", "--json", "--out", str(tmp_path / "imp"), str(pcap))
    assert r.returncode == 0, r.stderr
    imported = json.loads(r.stdout)[0]["file"]
    assert _verdicts(cli("classify", "--json", imported).stdout)[0] == v_direct
    # gzipped capture, read directly: the same verdict
    assert _verdicts(cli("classify", "--json", str(gz)).stdout)[0] == v_direct
    # a capture-aligned trace is refused, and --force records what it read
    r = cli("trace", "import", "--json", "--align", "capture", "--out", str(tmp_path / "cap"), str(pcap))
    cap = json.loads(r.stdout)[0]["file"]
    r = cli("classify", cap)
    assert r.returncode == 1 and "capture-aligned" in r.stderr and "sender" in r.stderr
    forced = cli("classify", "--force", "--json", cap)
    assert _verdicts(forced.stdout)[0]["evidence"]["alignment"] == "capture"


def test_trace_plot_and_classify_plot(tmp_path: Path) -> None:
    a, b = str(fixture_path("cubic", "A")), str(fixture_path("cubic", "B"))
    out = tmp_path / "p.png"
    r = cli("trace", "plot", "--classify", "--json", "--out", str(out), a, b)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"plot": str(out)}
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    r = cli("classify", "--plot", str(tmp_path / "v.png"), a, b)
    # exit 0 for a named CCA, 5 for Unknown: the plot is written either way
    assert r.returncode in (0, 5) and (tmp_path / "v.png").stat().st_size > 20_000


def test_exit_codes_are_in_the_help() -> None:
    text = " ".join(cli("classify", "--help").stdout.split())  # argparse wraps lines
    assert "exit codes:" in text and "5 verdict: unknown" in text
    text = " ".join(cli("shell", "--help").stdout.split())
    assert "2 usage error" in text and "7 the emulated link could not be set up" in text
