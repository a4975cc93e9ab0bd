"""The command line: real subprocesses, clear errors, never a traceback."""

import json
import subprocess

from tests.capture.synth import bulk_flow, write_pcap
from tests.netutil import CCSCOPE


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CCSCOPE, *args], capture_output=True, text=True, timeout=60)


def test_import_pcap_then_show(tmp_path):
    pcap = write_pcap(tmp_path / "d.pcap", bulk_flow(n_data=400).packets())
    r = run("trace", "import", str(pcap), "--out", str(tmp_path), "--align", "sender", "--json")
    assert r.returncode == 0, r.stderr
    written = json.loads(r.stdout)
    assert len(written) == 1 and written[0]["points"] > 400
    r = run("trace", "show", written[0]["file"], "--json")
    info = json.loads(r.stdout)
    assert info["alignment"] == "sender" and info["bytes_acked"] == 400 * 48


def test_bad_inputs_give_one_line_errors(tmp_path):
    bad = tmp_path / "bad.trace.json"
    bad.write_text('{"format": "ccscope-trace/1", "meta": {}}')
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"\x00" * 10)
    for args in (
        ("trace", "show", str(bad)),
        ("trace", "import", str(junk), "--out", str(tmp_path)),
        ("measure", "ftp://example.com/x"),
        ("shell", "--", "--delay"),
    ):
        r = run(*args)
        assert r.returncode != 0, args
        assert "Traceback" not in r.stderr and r.stderr.startswith("ccscope: error:"), (args, r.stderr)


def test_help_lists_the_components():
    r = run("--help")
    for cmd in ("shell", "measure", "trace", "lab", "demo", "cleanup"):
        assert cmd in r.stdout
