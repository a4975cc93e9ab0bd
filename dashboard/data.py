"""What the dashboard shows besides the store: the published censuses, the lab's evaluation.

* `data/census_history.csv`: shares of sites per CCA in five published censuses, 2001-2023
  (TBIT 2001 and 2004, CAAI 2011, Gordon 2019, Nebby 2023), as collected in the thesis's table
  7.1; `data/census_2023_regions.csv`: Nebby's 2023 census of the Alexa top 20k per AWS region
  (the thesis's table 6.5). Copied from the project's shared data; their header comments cite
  the source.
* The classifier's evaluation (`ccscope eval`'s eval.json: confusion matrices) and the robustness
  bench (bench/results/robustness.json), read defensively: a missing or malformed file is
  "not yet measured", never an error page.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ccscope.settings import settings

# Our labels -> the families the published censuses group CCAs into (the history's `class`).
CLASS_OF: dict[str, str] = {
    "reno": "loss-aimd", "newreno": "loss-aimd", "reno/dctcp": "loss-aimd", "dctcp": "loss-aimd",
    "tahoe": "loss-aimd", "cubic": "loss-mimd", "bic": "loss-mimd", "highspeed": "loss-mimd",
    "scalable": "loss-mimd", "hybla": "loss-mimd", "vegas": "delay-aimd", "westwood": "delay-aimd",
    "lp": "delay-aimd", "nv": "delay-aimd", "cdg": "delay-aimd", "ctcp": "delay-mimd",
    "illinois": "delay-mimd", "veno": "delay-mimd", "yeah": "delay-mimd", "htcp": "delay-mimd",
    "bbr": "rate", "bbr1": "rate", "bbr2": "rate", "bbr3": "rate", "akamaicc": "rate",
}  # fmt: skip
CLASSES = ("loss-aimd", "loss-mimd", "delay-aimd", "delay-mimd", "rate", "other")
CLASS_NAMES = {
    "loss-aimd": "loss-based AIMD (Reno family)",
    "loss-mimd": "loss-based, faster growth (CUBIC, BIC...)",
    "delay-aimd": "delay-based (Vegas, Westwood...)",
    "delay-mimd": "loss+delay hybrids (Illinois, YeAH, H-TCP...)",
    "rate": "rate-based (BBR)",
    "other": "unknown, unclassified, other",
}
HISTORY_SOURCE = (
    "Published censuses as collected in the thesis's table 7.1: TBIT 2001 (Padhye & Floyd), "
    "TBIT 2004 (Medina et al.), CAAI 2011 (Yang et al.), Gordon 2019 and Nebby 2023 (Alexa top "
    "20k; Nebby from 5 regions)."
)
REGIONS_SOURCE = "Nebby 2023, Alexa top 20k over TCP per AWS region (the thesis's table 6.5)."
REPO_ROOT = Path(__file__).resolve().parent.parent
EVAL_SET_NAMES = {
    "unseen": "unseen network conditions",
    "heldout_runs": "held-out runs",
    "heldout_conditions": "held-out network conditions",
    "other_profiles": "other profiles",
    "variants": "untrained variants",
}


def class_of(label: str) -> str:
    return CLASS_OF.get(label, "other")


def _read_csv(name: str) -> list[dict[str, str]]:
    text = resources.files("ccscope.dashboard").joinpath("data", name).read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if line and not line.startswith("#")))


@dataclass(frozen=True)
class Study:
    name: str
    year: int
    shares: dict[str, float]  # cca -> share of all hosts measured
    classes: dict[str, float] = field(default_factory=dict)  # family -> share


@lru_cache(maxsize=1)
def history() -> tuple[Study, ...]:
    studies: dict[str, dict[str, Any]] = {}
    for r in _read_csv("census_history.csv"):
        s = studies.setdefault(r["study"], {"year": int(r["year"]), "shares": {}, "classes": {}})
        share = float(r["share"])
        s["shares"][r["cca"]] = share
        cls = r["class"] if r["class"] in CLASSES else "other"
        s["classes"][cls] = s["classes"].get(cls, 0.0) + share
    out = [Study(n, d["year"], d["shares"], d["classes"]) for n, d in studies.items()]
    return tuple(sorted(out, key=lambda s: s.year))


@lru_cache(maxsize=1)
def regions_2023() -> dict[str, dict[str, int]]:
    """region -> {cca: sites}."""
    out: dict[str, dict[str, int]] = {}
    for r in _read_csv("census_2023_regions.csv"):
        out.setdefault(r["region"], {})[r["cca"]] = int(r["sites"])
    return out


def eval_path() -> Path:
    return settings().eval_json or REPO_ROOT / "bench" / "classifier" / "eval" / "eval.json"


def robustness_path() -> Path:
    return settings().robustness_json or REPO_ROOT / "bench" / "results" / "robustness.json"


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


@lru_cache(maxsize=4)
def _cached_json(path: str, mtime: float) -> dict[str, Any] | None:
    return _load_json(Path(path))


def load_json_file(path: Path) -> dict[str, Any] | None:
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    return _cached_json(str(path), mtime)


@dataclass(frozen=True)
class Confusion:
    name: str
    rows: list[str]
    cols: list[str]
    matrix: list[list[int]]
    mean_recall: float | None
    unknown_rate: float | None


def evaluation() -> tuple[str | None, list[Confusion], dict[str, Any]]:
    """(model version, confusion matrices, headline figures); empty when not measured."""
    doc = load_json_file(eval_path())
    if not doc:
        return None, [], {}
    out = []
    # Known evaluation sets first, in this order; then any other part that has a confusion matrix
    # (the evaluation's sets change with the classifier).
    known = [k for k in EVAL_SET_NAMES if k in doc]
    extra = sorted(k for k, v in doc.items() if isinstance(v, dict) and "confusion" in v and k not in known)
    for key in known + extra:
        name = EVAL_SET_NAMES.get(key, key.replace("_", " "))
        part = doc.get(key)
        conf = (part or {}).get("confusion") if isinstance(part, dict) else None
        try:
            rows, cols, m = (
                list(conf["rows"]),
                list(conf["cols"]),
                [[int(x) for x in r] for r in conf["matrix"]],
            )
        except (KeyError, TypeError, ValueError):
            continue
        if len(m) != len(rows) or any(len(r) != len(cols) for r in m):
            continue
        out.append(
            Confusion(name, rows, cols, m, _num(part.get("mean_recall")), _num(part.get("unknown_rate")))
        )
    variants = doc.get("variants") if isinstance(doc.get("variants"), dict) else {}
    head = {
        "unknown_rate_variants": _num(variants.get("unknown_rate")),
        "unknown_rate_known": _num(doc.get("unknown_rate_known")),
    }
    return str(doc.get("model_version") or "") or None, out, head


def robustness() -> dict[str, Any] | None:
    """{"factors": [{"factor", "recall", "ci": (lo, hi) | None}], "recall_unseen": x | None}, or
    None when the bench has not run. Shape read loosely: any missing piece is left out."""
    doc = load_json_file(robustness_path())
    if not doc:
        return None
    factors = []
    for f in doc.get("factor_out") or []:
        if not isinstance(f, dict) or _num(f.get("recall")) is None:
            continue
        ci = f.get("ci")
        ci_t = (float(ci[0]), float(ci[1])) if isinstance(ci, list | tuple) and len(ci) == 2 else None
        factors.append({"factor": str(f.get("factor", "?")), "recall": _num(f.get("recall")), "ci": ci_t})
    return {"factors": factors, "recall_unseen": _num(doc.get("recall_unseen"))}


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None  # NaN -> None
