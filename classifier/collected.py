"""What a collection holds, for the code that reads it (training, evaluation, benches) and for
`collect` itself: its index (`load_index`, the last record per job), its traces (`samples`),
and each download's ground truth (`slot_truth`, `save_slot_truth`, and `fill_missing_truth`,
which mends jobs whose server record came after the job ended). `collect.py` measures; this
module only reads and mends what is already under a root."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccscope.errors import CCScopeError

if TYPE_CHECKING:
    from ccscope.lab.groundtruth import GroundTruthRecord
    from ccscope.trace import Trace


def load_index(root: Path) -> dict[str, dict[str, Any]]:
    """The last index record of every job (a re-run job's newer line wins)."""
    out: dict[str, dict[str, Any]] = {}
    index = root / "index.jsonl"
    if not index.exists():
        return out
    for line in index.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            out[rec["key"]] = rec
    return out


@dataclass(frozen=True)
class DrawSample:
    """One trace of a collection and what produced it (for training and evaluation code)."""

    path: str
    kind: str  # "sender", "capture" or "truth"
    cca: str
    label: str
    split: str
    space: str
    fixed: tuple[str, ...]
    draw_id: str
    run: int
    slot: str  # "A" or "B"
    profile: str
    is_variant: bool
    status: str
    capped: bool


_KIND_KEY = {"sender": "sender_trace", "capture": "trace", "truth": "truth_trace"}


def samples(
    root: Path,
    kind: str = "sender",
    statuses: Sequence[str] = ("ok",),
    max_lateness_us: float | None = None,
) -> list[DrawSample]:
    """Every trace of `kind` from jobs whose status is in `statuses` (partial jobs are left out
    unless asked for; failed ones have no traces to give), sorted by path. `max_lateness_us`
    leaves out jobs whose emulators ran late (p99, worst shell) by more than that."""
    if kind not in _KIND_KEY:
        raise ValueError(f"kind must be one of {', '.join(_KIND_KEY)}")
    out = []
    for rec in load_index(root).values():
        if rec.get("status") not in statuses:
            continue
        late = rec.get("lateness_p99_us")
        if max_lateness_us is not None and (late is None or late > max_lateness_us):
            continue
        for slot, s in sorted(rec.get("slots", {}).items()):
            f = s.get(_KIND_KEY[kind])
            if not f or not Path(f).exists():
                continue
            out.append(DrawSample(
                path=f, kind=kind, cca=rec["cca"], label=rec["label"], split=rec["split"],
                space=rec.get("space", ""), fixed=tuple(rec.get("fixed", ())), draw_id=rec["draw_id"],
                run=int(rec.get("run", 0)), slot=slot, profile=str(s.get("profile")),
                is_variant=bool(rec.get("is_variant")), status=rec["status"], capped=bool(s.get("capped")),
            ))  # fmt: skip
    return sorted(out, key=lambda x: x.path)


NO_TRUTH = "no ground truth from the server"


def slot_truth(rec: GroundTruthRecord, sender: Trace) -> Trace:
    """The server's pipe during one measured download (a Trace from its GroundTruthRecord), cut
    a second after the measured trace ends: after a capped download the server's connection
    outlives the measurement, stalled, until its kernel gives up on the vanished client."""
    from ccscope.lab.groundtruth import pipe_trace, record_trace

    truth = pipe_trace(record_trace(rec), like=sender)
    if len(truth.t) and len(sender.t):
        keep = sender.start_time + float(sender.t[-1]) + 1.0 - truth.start_time - float(truth.t[0])
        if keep < truth.duration:
            truth = truth.head(max(0.0, keep))
    return truth


def truth_run_id(key: str, profile: str) -> str:
    """The run id a job's download in `profile` sent the server (measure_profile adds the
    profile's name), which names the server's record of it."""
    from ccscope.capture.measure import profile_run_id

    return profile_run_id(key.replace("/", "-"), profile)


def save_slot_truth(rec: GroundTruthRecord, sender_file: str, slot: str, s: dict[str, Any]) -> None:
    """Write a slot's truth trace beside its sender trace and note it in the slot's record `s`."""
    from ccscope.trace import Trace

    truth = slot_truth(rec, Trace.load(sender_file))
    s["truth_trace"] = str(truth.save(Path(sender_file).parent / f"{slot}.truth.trace.json.gz"))
    s["truth_cca"] = rec.meta.get("kernel_cca")


def fill_missing_truth(root: Path, gt_dirs: Sequence[Path]) -> list[str]:
    """Give partial jobs that lacked only the server's record the record written since (a
    capped download's connection can outlive its job by minutes). Appends each mended job's
    record to the index; returns their keys. Their traces were complete all along."""
    from ccscope.lab.groundtruth import find_record

    mended = []
    for key, rec in sorted(load_index(root).items()):
        reasons = [r.strip() for r in str(rec.get("reason") or "").split(";") if r.strip()]
        if rec.get("status") != "partial" or rec.get("transport", "tcp") != "tcp" or not reasons:
            continue
        if not all(r.endswith(NO_TRUTH) for r in reasons):
            continue
        slots = rec.get("slots") or {}
        still = []
        for slot, s in sorted(slots.items()):
            if s.get("truth_trace") or not s.get("sender_trace"):
                continue
            rid = truth_run_id(key, str(s.get("profile")))
            found = next((r for g in gt_dirs if (r := find_record(run_id=rid, gt_dir=g)) is not None), None)
            try:
                if found is None:
                    raise CCScopeError(NO_TRUTH)
                save_slot_truth(found, s["sender_trace"], slot, s)
            except (CCScopeError, OSError) as e:
                still.append(f"{slot}: {e}")
        if len(still) == len(reasons):
            continue
        rec.update(status="partial" if still else "ok", reason="; ".join(still) or None, slots=slots)
        result = Path(next(iter(slots.values()))["sender_trace"]).parent / "result.json"
        with contextlib.suppress(OSError, ValueError):
            res = json.loads(result.read_text())
            res.update(status=rec["status"], reason=rec["reason"], slots=slots)
            result.write_text(json.dumps(res, indent=1, default=str))
        with (root / "index.jsonl").open("a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        mended.append(key)
    return mended
