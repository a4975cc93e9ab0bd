import gzip
import json

import numpy as np
import pytest

from ccscope.errors import TraceFormatError
from ccscope.profile import get_profile
from ccscope.trace import FlowKey, Trace

FLOW = FlowKey("198.18.0.12", 443, "100.64.0.2", 40000)


def make_trace(**kw):
    base = dict(
        flow=FLOW,
        t=[0.0, 0.1, 0.2, 0.35],
        bif=[0, 480, 960, 0],
        start_time=1_700_000_000.5,
        profile=get_profile("A").to_dict(),
        base_rtt_ms=120.0,
        internet_rtt_ms=20.0,
        bytes_acked=1440,
        object_url="https://cubic.lab.test/obj/1440",
        columns={"cwnd_bytes": [480, 960, 1440, 1440]},
        events={"retransmit": [0.2]},
    )
    base.update(kw)
    return Trace(**base)


@pytest.mark.parametrize("name", ["a.trace.json", "a.trace.json.gz"])
def test_roundtrip_is_lossless(tmp_path, name):
    t = make_trace()
    t2 = Trace.load(t.save(tmp_path / name))
    assert t2.flow == FLOW
    assert np.array_equal(t2.t, t.t) and np.array_equal(t2.bif, t.bif)
    assert t2.columns["cwnd_bytes"].tolist() == [480, 960, 1440, 1440]
    assert t2.events == {"retransmit": [0.2]}
    assert t2.profile["name"] == "A" and t2.profile["bdp_bytes"] == pytest.approx(2500.0)
    assert t2.base_rtt_ms == 120.0 and t2.bytes_acked == 1440


def test_same_trace_same_bytes(tmp_path):
    a = make_trace().save(tmp_path / "a.json.gz").read_bytes()
    b = make_trace().save(tmp_path / "b.json.gz").read_bytes()
    assert a == b


@pytest.mark.parametrize(
    "doc",
    [
        b"",
        b"not json",
        b"[]",
        json.dumps({"format": "other"}).encode(),
        json.dumps({"format": "ccscope-trace/1", "meta": {}, "series": {}}).encode(),
        json.dumps(
            {
                "format": "ccscope-trace/1",
                "meta": {
                    "flow": {"server": "x", "server_port": 1, "client": "y", "client_port": 2},
                    "start_time": 0,
                },
                "series": {"t": [0, 1], "bif": [1]},
            }
        ).encode(),
        json.dumps(
            {
                "format": "ccscope-trace/1",
                "meta": {
                    "flow": {"server": "x", "server_port": 1, "client": "y", "client_port": 2},
                    "start_time": 0,
                },
                "series": {"t": [1, 0], "bif": [1, 2]},
            }
        ).encode(),
        gzip.compress(b"{truncated")[:-4],
    ],
)
def test_malformed_files_give_clear_errors(tmp_path, doc):
    p = tmp_path / "bad.json"
    p.write_bytes(doc)
    with pytest.raises(TraceFormatError) as e:
        Trace.load(p)
    assert "bad.json" in str(e.value)


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceFormatError):
        Trace.load(tmp_path / "nope.json")
