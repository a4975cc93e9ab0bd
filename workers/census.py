"""A census now: one campaign over the top N sites of a list, run to the end by embedded workers
(one pool per vantage point) through the store, and its report: CCA shares per vantage point
and, where the truth is known (lab sites), the accuracy of the verdicts.

`ccscope census --list FILE --top N` and `ccscope demo` are thin wrappers around `run_census`.
Everything goes through the service's own pieces (store, campaign planning, the worker
pipeline, the crawler, the classifier), so a census seen here is what the API then serves.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ccscope.errors import CCScopeError
from ccscope.progress import bar
from ccscope.store.core import Conflict, NotFound, Store
from ccscope.store.queries import CensusRow
from ccscope.workers.embedded import EmbeddedWorkers
from ccscope.workers.priority import apply_from_settings
from ccscope.workers.tasks import WorkerConfig, plan_campaign

UNKNOWN_KINDS = ("unknown", "insufficient")


@dataclass(frozen=True)
class VantageSpec:
    """A vantage point for an embedded census. `access` (ccscope-link options) emulates the
    access path of a lab vantage point; a real vantage point has none."""

    name: str
    access: tuple[str, ...] = ()
    description: str = ""


@dataclass
class SiteResult:
    measurement_id: int
    domain: str
    vantage: str
    state: str  # classified | failed (or where the run stopped)
    label: str | None = None
    kind: str | None = None
    display: str = ""
    confidence: float | None = None
    truth: str | None = None  # the site's real CCA, when known (lab)
    reason: str | None = None  # why a failed row failed
    transport: str = "tcp"

    @property
    def outcome(self) -> str:
        """correct | wrong | unknown | insufficient | failed | unscored (no truth)."""
        if self.state != "classified":
            return "failed"
        if self.kind in UNKNOWN_KINDS:
            return str(self.kind)
        if self.truth is None:
            return "unscored"
        return "correct" if self.label == self.truth else "wrong"


@dataclass
class CensusReport:
    campaign_id: int
    campaign: str
    slot: str
    list_name: str
    sites: list[str]
    vantages: list[str]
    profiles: list[str]
    results: list[SiteResult]
    shares: list[CensusRow]
    seconds: float
    concurrency: int
    transports: list[str] = field(default_factory=lambda: ["tcp"])

    def scores(self, vantage: str | None = None) -> dict[str, Any]:
        rows = [r for r in self.results if vantage is None or r.vantage == vantage]
        n = dict.fromkeys(("correct", "wrong", "unknown", "insufficient", "failed", "unscored"), 0)
        for r in rows:
            n[r.outcome] += 1
        scored = n["correct"] + n["wrong"] + n["unknown"] + n["insufficient"]
        return {
            "measurements": len(rows),
            **n,
            # Of the sites whose truth is known and that were measured: the share named right.
            # Unknown counts against it (it is not a wrong name, but it is not an answer either).
            "accuracy": round(n["correct"] / scored, 4) if scored else None,
            # Of the named verdicts alone: how often a name given is the right one.
            "precision": round(n["correct"] / (n["correct"] + n["wrong"]), 4)
            if n["correct"] + n["wrong"]
            else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "campaign": self.campaign,
            "slot": self.slot,
            "list": self.list_name,
            "sites": self.sites,
            "vantages": self.vantages,
            "profiles": self.profiles,
            "transports": self.transports,
            "seconds": round(self.seconds, 1),
            "concurrency": self.concurrency,
            "shares": [
                {**asdict(r), "date": r.date.isoformat(), "share": round(r.share, 4)} for r in self.shares
            ],
            "scores": {v: self.scores(v) for v in self.vantages} | {"all": self.scores()},
            "results": [asdict(r) | {"outcome": r.outcome} for r in self.results],
        }

    def format(self) -> str:
        return format_report(self)


# ---- running ----------------------------------------------------------------------------------


def write_list(path: Path, domains: Sequence[str]) -> Path:
    """Domains as a Tranco-style list (rank,domain), the form a census reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{i},{d}\n" for i, d in enumerate(domains, start=1)))
    return path


def import_list_file(store: Store, path: str | Path, name: str | None = None) -> tuple[str, int]:
    """Import a Tranco/Alexa CSV under `name` (default: the file's stem) and its date; a list
    already imported under that name and date is reused. Returns (list name, size)."""
    from ccscope.crawler.lists import ListFormatError, date_from_name, read_list

    p = Path(path)
    try:
        parsed = read_list(p)
    except (ListFormatError, OSError) as e:
        raise CCScopeError(f"{p}: {e}") from None
    list_name = name or p.stem
    day = date_from_name(p) or dt.date.today()
    try:
        sl = store.import_list(list_name, day, parsed.entries, parsed.source_format)
        return list_name, sl.size
    except Conflict:
        return list_name, store.get_list(list_name, day).size


def run_census(
    store: Store,
    list_name: str,
    top: int,
    vantages: Sequence[VantageSpec],
    *,
    profiles: Sequence[str] = ("A", "B"),
    lab: bool = False,
    concurrency: int = 16,
    timeout: float = 120.0,
    campaign_name: str | None = None,
    truth: Callable[..., str | None] | None = None,
    worker_overrides: dict[str, Any] | None = None,
    progress: bool = True,
    transports: Sequence[str] = ("tcp",),
) -> CensusReport:
    """Create a one-off campaign over the top `top` sites and run it now from every vantage
    point (each its own pool of `concurrency` concurrent measurements). `progress`: a bar of
    finished measurements on stderr (only when it is a terminal)."""
    if top < 1:
        raise CCScopeError("--top must be at least 1")
    if not vantages:
        raise CCScopeError("a census needs at least one vantage point")
    for v in vantages:
        store.add_vantage(v.name, v.description)
    apply_from_settings()  # CCSCOPE_WORKER_NICE, off by default (workers/priority.py)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = campaign_name or f"census-{list_name}-{stamp}"
    c = store.create_campaign(
        name,
        list_name,
        top,
        list(transports),
        ["default"],  # one measurement downloads through every profile in `profiles`
        [v.name for v in vantages],
        "0 0 1 1 *",  # a one-off: beat would run it yearly if it were enabled, and it is not
        enabled=False,
    )
    cfgs = [
        replace(
            WorkerConfig(vantage=v.name),
            profiles=tuple(profiles),
            lab=lab,
            timeout=timeout,
            access=v.access,
            **(worker_overrides or {}),
        )
        for v in vantages
    ]
    slot = f"census-{stamp}"
    t0 = time.monotonic()
    errors: dict[int, str] = {}
    with EmbeddedWorkers(store, cfgs, concurrency=concurrency) as w:
        planned = plan_campaign(store, c.id, slot)
        futures = {f: mid for mid, f in w.submit_planned(planned).items()}
        b = bar(len(futures), "census", unit="site") if progress else None
        for f in as_completed(futures):
            mid = futures[f]
            # One measurement's unexpected error must not lose the census: its row stays where
            # it stopped (e.g. captured, for a later re-classification) and the report says why.
            try:
                out = f.result()
                if b is not None:
                    b.set_postfix_str(f"{getattr(out, 'detail', '')}"[:40], refresh=False)
            except Exception as e:
                errors[mid] = f"{type(e).__name__}: {e}"
            if b is not None:
                b.update(1)
        if b is not None:
            b.close()
    seconds = time.monotonic() - t0
    results = [_site_result(store, p.measurement_id, truth, errors.get(p.measurement_id)) for p in planned]
    results.sort(key=lambda r: (r.domain, r.vantage))
    sites = store.top_sites(c.list_id, top)
    return CensusReport(
        campaign_id=c.id,
        campaign=name,
        slot=slot,
        list_name=list_name,
        sites=sites,
        vantages=[v.name for v in vantages],
        profiles=list(profiles),
        results=results,
        shares=store.census(campaign_id=c.id),
        seconds=seconds,
        concurrency=concurrency,
        transports=list(transports),
    )


def _site_result(
    store: Store, mid: int, truth: Callable[..., str | None] | None, error: str | None = None
) -> SiteResult:
    m = store.get_measurement(mid)
    r = SiteResult(
        mid, m.site.domain, m.vantage.name, m.state, reason=m.failure_reason or error, transport=m.transport
    )
    v = store.get_verdict(mid)
    if v is not None:
        r.label, r.kind, r.confidence = v.label, v.kind, round(v.confidence, 3)
        r.display = str(v.evidence.get("display") or v.label)
    if truth is not None:
        r.truth = truth(m.site.domain, m.transport)
    return r


def lab_truth(
    state_dir: str | Path | None = None, *, quic_classes: bool | None = None
) -> Callable[..., str | None]:
    """(domain, transport) -> the CCA its lab server runs over that transport (by the address
    the lab's hosts file gives it), under the classifier's label for it. Over QUIC that is the
    stack's own class (quiche:cubic) where the model has QUIC classes (`quic_classes`, default:
    whether the shipped model has), else the TCP family the stack's CCA implements (cubic)."""
    from ccscope.classifier.dataset import label_of
    from ccscope.classifier.quic_dataset import family
    from ccscope.lab.lab import Lab, lab_resolve

    lab = Lab(state_dir)
    by_addr = {s.addr: s.cca for s in lab.servers()}
    quic_by_addr = {q["addr"]: q["label"] for q in (lab.state() or {}).get("quic_servers") or []}

    def truth(domain: str, transport: str = "tcp") -> str | None:
        for a in lab_resolve(domain, state_dir):
            if transport == "quic" and a in quic_by_addr:
                stack_class = model_has_quic_classes() if quic_classes is None else quic_classes
                return quic_by_addr[a] if stack_class else family(quic_by_addr[a])
            if transport == "tcp" and a in by_addr:
                return label_of(by_addr[a])
        return None

    return truth


@functools.lru_cache(maxsize=1)  # the model file is ~12 MB: read it once per process
def model_has_quic_classes() -> bool:
    """Whether the shipped model names QUIC stacks' CCAs (else it reads QUIC with TCP classes)."""
    from ccscope.classifier.model import Model, ModelError

    try:
        return "quic" in Model.load().estimators
    except (ModelError, OSError, ValueError):
        return False


# ---- the report -------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def format_report(rep: CensusReport) -> str:
    out: list[str] = []
    n_sites, n_v = len(rep.sites), len(rep.vantages)
    out.append(
        f"census {rep.campaign!r} (campaign {rep.campaign_id}): top {n_sites} sites of {rep.list_name} "
        f"x {n_v} vantage point{'s' if n_v != 1 else ''}, {'+'.join(rep.transports)}, "
        f"profiles {'+'.join(rep.profiles)}; "
        f"{len(rep.results)} measurements in {rep.seconds:.0f} s ({rep.concurrency} concurrent per vantage)"
    )
    # Shares: one column per vantage point.
    counts: dict[str, dict[str, int]] = {}
    totals = {v: 0 for v in rep.vantages}
    for row in rep.shares:
        per = counts.setdefault(row.label, {})
        per[row.vantage] = per.get(row.vantage, 0) + row.count
        totals[row.vantage] = totals.get(row.vantage, 0) + row.count
    if counts:
        out.append("")
        head = f"{'verdict':<16}" + "".join(f"{v:>18}" for v in rep.vantages)
        out += [head, "-" * len(head)]
        order = sorted(counts, key=lambda lab: (-sum(counts[lab].values()), lab))
        for label in order:
            cells = []
            for v in rep.vantages:
                k, t = counts[label].get(v, 0), totals.get(v, 0)
                cells.append(f"{k:>4} ({_pct(k / t if t else None):>4})" if k else f"{'-':>11}")
            out.append(f"{label:<16}" + "".join(f"{c:>18}" for c in cells))
        out.append(f"{'classified':<16}" + "".join(f"{totals.get(v, 0):>18}" for v in rep.vantages))
    failed = [r for r in rep.results if r.state != "classified"]
    if failed:
        out.append(f"{'failed':<16}" + "".join(
            f"{sum(1 for r in failed if r.vantage == v):>18}" for v in rep.vantages
        ))  # fmt: skip
    # Per site, when there is something to compare with.
    if any(r.truth for r in rep.results) or len(rep.results) <= 60:
        out.append("")
        by_site: dict[str, dict[str, SiteResult]] = {}
        for r in rep.results:
            by_site.setdefault(r.domain, {})[r.vantage] = r
        has_truth = any(r.truth for r in rep.results)
        sw = max([24, *(len(d) + 2 for d in rep.sites)])
        tw = max([7, *(len(r.truth or "") + 2 for r in rep.results)])
        head = f"{'site':<{sw}}" + (f"{'truth':<{tw}}" if has_truth else "")
        head += "".join(f"{v:<34}" for v in rep.vantages)
        out += [head.rstrip(), "-" * len(head.rstrip())]
        for d in rep.sites:
            rs = by_site.get(d, {})
            t = next((r.truth for r in rs.values() if r.truth), None)
            line = f"{d:<{sw}}" + (f"{t or '?':<{tw}}" if has_truth else "")
            for v in rep.vantages:
                line += f"{_cell(rs.get(v)):<34}"
            out.append(line.rstrip())
    if any(r.truth for r in rep.results):
        out.append("")
        for v in [*rep.vantages, None]:
            s = rep.scores(v)
            out.append(
                f"accuracy {v or 'overall':<12} {_pct(s['accuracy']):>5}  "
                f"({s['correct']} right, {s['wrong']} wrong, {s['unknown']} unknown, "
                f"{s['insufficient']} insufficient, {s['failed']} failed; "
                f"named verdicts right: {_pct(s['precision'])})"
            )
    return "\n".join(out)


def _cell(r: SiteResult | None) -> str:
    if r is None:
        return "-"
    if r.state != "classified":
        return f"failed: {(r.reason or r.state)[:24]}"
    mark = {"correct": " ok", "wrong": " WRONG"}.get(r.outcome, "")
    conf = f" {r.confidence:.2f}" if r.confidence is not None and r.kind == "cca" else ""
    return f"{r.display[:26]}{conf}{mark}"


__all__ = [
    "CensusReport",
    "NotFound",
    "SiteResult",
    "VantageSpec",
    "format_report",
    "import_list_file",
    "lab_truth",
    "run_census",
    "write_list",
]
