"""The dashboard's pages, as a FastAPI router the API process mounts at `/`.

Server-rendered HTML (Jinja2) with SVG charts drawn in Python (dashboard/charts.py): the pages
work without JavaScript, and the one small script only adds keyboard-friendly highlighting.
Everything is read through the store's query functions (no SQL here) and the blob store.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from functools import lru_cache
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from ccscope import __version__
from ccscope.dashboard import charts, data
from ccscope.errors import CCScopeError
from ccscope.store.blobs import BlobError
from ccscope.store.core import NotFound, Store, StoreError, normalize_domain

DOMAIN_RE = r"^[A-Za-z0-9.-]{1,253}$"
MAX_SERIES = 9  # labels drawn per census chart; the rest stack as "other"
CANON = {"bbr1": "bbr", "newreno": "reno", "reno/dctcp": "reno", "unclassified": "unknown"}
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


@lru_cache(maxsize=1)
def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("ccscope.dashboard", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pct"] = lambda x: "–" if x is None else f"{float(x):.1%}"
    env.filters["num"] = lambda x: "–" if x is None else f"{float(x):.2f}"
    return env


def _page(name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    html = _env().get_template(name).render(version=__version__, **ctx)
    return HTMLResponse(html, status_code=status)


def canon(label: str) -> str:
    """One vocabulary for our labels and the published ones (BBRv1 is `bbr`, NewReno `reno`)."""
    return {"bbr1": "bbr", "newreno": "reno", "reno/dctcp": "reno", "unclassified": "unknown"}.get(
        label, label
    )


def _series_order(totals: dict[str, int]) -> list[str]:
    """Labels by size, at most MAX_SERIES named; unknown and insufficient kept on top."""
    tail = [lab for lab in ("unknown", "insufficient data") if lab in totals]
    named = [lab for lab, _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])) if lab not in tail]
    keep = named[:MAX_SERIES]
    return keep + (["other"] if len(named) > MAX_SERIES else []) + tail


def census_view(store: Store, campaign_id: int | None, transport: str | None) -> dict[str, Any]:
    rows = store.census(None, None, None, transport, campaign_id)
    groups: dict[tuple[str, str], dict[dt.date, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    totals: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    day_totals: dict[dt.date, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        groups[(r.vantage, r.transport)][r.date][r.label] = r.count
        totals[(r.vantage, r.transport)][r.label] += r.count
        day_totals[r.date][r.label] += r.count
    panels = []
    for i, ((vantage, tr), by_day) in enumerate(sorted(groups.items())):
        order = _series_order(totals[(vantage, tr)])
        days = sorted(by_day)
        series: dict[str, list[float]] = {lab: [] for lab in order}
        table = []
        for d in days:
            cnt = by_day[d]
            n = sum(cnt.values()) or 1
            for lab in order:
                if lab == "other":
                    v = sum(c for k, c in cnt.items() if k not in order) / n
                else:
                    v = cnt.get(lab, 0) / n
                series[lab].append(v)
            table.append(
                {"date": d.isoformat(), "n": sum(cnt.values()), "shares": [series[lab][-1] for lab in order]}
            )
        title = f"CCA shares over time, vantage point {vantage}, {tr.upper()}"
        desc = (
            f"Stacked areas: the share of sites per verdict on each census day from {vantage} over {tr}, "
            f"{len(days)} day(s); largest: "
            + ", ".join(f"{lab} {series[lab][-1]:.0%}" for lab in order[:3])
            + " on the latest day."
        )
        svg = charts.stacked_area(f"census-{i}", title, desc, [d.isoformat() for d in days], series)
        panels.append({"vantage": vantage, "transport": tr, "svg": svg, "labels": order, "table": table,
                       "title": title, "id": f"census-{i}"})  # fmt: skip
    return {"panels": panels, "day_totals": day_totals, "rows": rows}


def history_view(day_totals: dict[dt.date, dict[str, int]]) -> dict[str, Any]:
    """The published studies and our census days, by CCA family, on one time axis."""
    points: list[tuple[float, str, dict[str, float], str]] = []
    for s in data.history():
        total = sum(s.classes.values()) or 1.0
        points.append(
            (
                float(s.year),
                f"{s.name}",
                {c: s.classes.get(c, 0.0) / total for c in data.CLASSES},
                "published",
            )
        )
    ours_first = None
    for d in sorted(day_totals):
        cnt = day_totals[d]
        n = sum(cnt.values()) or 1
        fam: dict[str, float] = dict.fromkeys(data.CLASSES, 0.0)
        for lab, c in cnt.items():
            fam[data.class_of(canon(lab))] += c / n
        x = d.year + (d.timetuple().tm_yday - 1) / 366.0
        ours_first = ours_first if ours_first is not None else x
        points.append((x, f"ccscope {d.isoformat()}", fam, "ours"))
    points.sort(key=lambda p: p[0])
    series = {c: [p[2][c] for p in points] for c in data.CLASSES}
    labels = [p[1] for p in points]
    desc = (
        "Stacked areas of CCA families across five published censuses (2001 to 2023) and this "
        f"store's census days ({sum(1 for p in points if p[3] == 'ours')}), on a time axis in years."
    )
    svg = charts.stacked_area(
        "history",
        "CCA families in published censuses 2001-2023 and in ours",
        desc,
        [lab.split(" ")[0] if lab.startswith("ccscope") else lab for lab in labels],
        series,
        x_pos=[p[0] for p in points],
        markers=[(ours_first, "ccscope")] if ours_first is not None else [],
        box=charts.Box(width=760, right=250),
    )
    table = [{"label": p[1], "source": p[3], "shares": [p[2][c] for c in data.CLASSES]} for p in points]
    return {"svg": svg, "table": table, "classes": data.CLASSES, "class_names": data.CLASS_NAMES}


def regions_view(rows: list[Any]) -> dict[str, Any]:
    """Nebby's 2023 regions beside our vantage points' latest census day (shares per CCA)."""
    cols: list[tuple[str, dict[str, float], int, str]] = []
    for region, counts in data.regions_2023().items():
        n = sum(counts.values()) or 1
        merged: dict[str, float] = defaultdict(float)
        for k, c in counts.items():
            merged[canon(k)] += c / n
        cols.append((region, merged, n, "Nebby 2023"))
    latest: dict[tuple[str, str], dt.date] = {}
    for r in rows:
        key = (r.vantage, r.transport)
        latest[key] = max(latest.get(key, r.date), r.date)
    ours: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        if r.date == latest[(r.vantage, r.transport)]:
            ours[(r.vantage, r.transport)][canon(r.label)] += r.count
    for (v, tr), counts in sorted(ours.items()):
        n = sum(counts.values()) or 1
        cols.append((f"{v} ({tr})", {k: c / n for k, c in counts.items()}, n, f"ccscope {latest[(v, tr)]}"))
    labels = sorted(
        {lab for _, sh, _, _ in cols for lab in sh},
        key=lambda lab: -max(sh.get(lab, 0) for _, sh, _, _ in cols),
    )
    return {"cols": cols, "labels": labels}


def unknown_view(store: Store) -> dict[str, Any]:
    rows = store.census()
    share: dict[tuple[str, str], dict[dt.date, list[int]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0, 0])
    )
    for r in rows:
        cell = share[(r.vantage, r.transport)][r.date]
        cell[2] = r.total
        if r.label == "unknown":
            cell[0] += r.count
        elif r.label == "insufficient data":
            cell[1] += r.count
    panels = []
    for i, ((v, tr), by_day) in enumerate(sorted(share.items())):
        days = sorted(by_day)
        unk = [by_day[d][0] / (by_day[d][2] or 1) for d in days]
        ins = [by_day[d][1] / (by_day[d][2] or 1) for d in days]
        svg = charts.stacked_area(
            f"unknown-{i}",
            f"Unknown and insufficient-data shares, {v}, {tr.upper()}",
            f"Stacked areas: the share of verdicts that named no trained CCA (unknown) or could not be "
            f"read (insufficient data) per census day from {v} over {tr}.",
            [d.isoformat() for d in days],
            {"unknown": unk, "insufficient data": ins},
            box=charts.Box(height=220),
        )
        table = [{"date": d.isoformat(), "unknown": u, "insufficient": s, "n": by_day[d][2]}
                 for d, u, s in zip(days, unk, ins, strict=True)]  # fmt: skip
        panels.append({"id": f"unknown-{i}", "vantage": v, "transport": tr, "svg": svg, "table": table})
    fam_rows = store.unknown_families()
    fam_tot: dict[str, int] = defaultdict(int)
    for _d, _v, _t, fam, n in fam_rows:
        fam_tot[fam] += n
    total = sum(fam_tot.values())
    items = sorted(fam_tot.items(), key=lambda kv: (-kv[1], kv[0]))
    fam_svg = charts.hbars(
        "families",
        "Unknown verdicts by nearest family",
        "Horizontal bars: how many Unknown verdicts lay closest to each trained family (the 'X-like' "
        "in 'unknown, X-like').",
        [(f"{f}-like", n, f"{n} ({n / (total or 1):.0%})") for f, n in items],
    ) if items else ""  # fmt: skip
    return {"panels": panels, "families": items, "families_total": total, "families_svg": fam_svg,
            "family_rows": fam_rows[-200:]}  # fmt: skip


def accuracy_view() -> dict[str, Any]:
    version, confusions, head = data.evaluation()
    mats = []
    for i, c in enumerate(confusions):
        svg = charts.heatmap(
            f"confusion-{i}",
            f"Confusion matrix on {c.name}",
            f"A grid of counts: rows are the CCA a lab server really ran, columns the verdict; the "
            f"diagonal is right. Mean recall {c.mean_recall or 0:.3f}.",
            c.rows,
            c.cols,
            c.matrix,
        )
        mats.append({"c": c, "svg": svg, "id": f"confusion-{i}"})
    rob = data.robustness()
    rob_svg = ""
    if rob and rob["factors"]:
        rob_svg = charts.hbars(
            "robustness",
            "Recall with one factor of the network held out",
            "Horizontal bars: mean recall when the classifier is tested on a network factor it was "
            "not trained on, with 95 % intervals.",
            [(f["factor"], f["recall"], f"{f['recall']:.3f}") for f in rob["factors"]],
            max_value=1.0,
            intervals=[f["ci"] for f in rob["factors"]],
        )
    return {"version": version, "mats": mats, "head": head, "rob": rob, "rob_svg": rob_svg,
            "eval_path": str(data.eval_path()), "rob_path": str(data.robustness_path())}  # fmt: skip


_SVG_CACHE: dict[tuple[str, str, str], tuple[str, dict[str, Any]]] = {}
SVG_CACHE_SIZE = 256  # drawn traces kept per process (a trace never changes: content-addressed)


def _trace_svg(store: Store, sha256: str, chart_id: str, ev_json: str) -> tuple[str, dict[str, Any]]:
    key = (sha256, chart_id, ev_json)
    hit = _SVG_CACHE.get(key)
    if hit is not None:
        return hit
    from ccscope.plot import trace_marks
    from ccscope.trace import Trace

    tr = Trace.from_dict(json.loads(store.read_trace(sha256)))
    marks = trace_marks(json.loads(ev_json) if ev_json else None)
    lines = {"bif": tr.bif}
    if "sacked" in tr.columns:
        lines["pipe"] = tr.pipe
    prof = (tr.profile or {}).get("name", "?")
    title = f"Bytes in flight, profile {prof}"
    desc = (
        f"Lines: bytes in flight{' and the pipe' if 'pipe' in lines else ''} over {tr.duration:.0f} s of "
        f"the download from {tr.flow.server}; shaded: the {len(marks['segments'])} segments the "
        f"classifier fitted; dashed: {len(marks['backoffs'])} back-offs."
    )
    svg = charts.trace_chart(chart_id, title, desc, tr.t, lines, marks)
    info = {"profile": prof, "points": len(tr.t), "duration": tr.duration, "server": tr.flow.server,
            "alignment": tr.alignment, "marks": marks}  # fmt: skip
    if len(_SVG_CACHE) >= SVG_CACHE_SIZE:
        _SVG_CACHE.clear()
    _SVG_CACHE[key] = (svg, info)
    return svg, info


def domain_view(store: Store, domain: str) -> dict[str, Any]:
    latest, history, total = store.domain_report(domain, limit=50)
    plots = []
    for v in latest[:4]:
        try:
            m = store.get_measurement(v.measurement_id)
        except NotFound:
            continue
        per_trace = ((v.evidence or {}).get("evidence") or {}).get("traces") or []
        stored = [t for t in m.traces if t.media_type == "application/json"]
        for i, t in enumerate(stored):
            ev = per_trace[i] if i < len(per_trace) and isinstance(per_trace[i], dict) else None
            cid = f"trace-{v.measurement_id}-{i}"
            try:
                svg, info = _trace_svg(store, t.sha256, cid, json.dumps(ev, sort_keys=True) if ev else "")
            except (BlobError, CCScopeError, ValueError):  # a missing or bad file: said so, page stays
                plots.append({"verdict": v, "svg": "", "info": {"profile": t.profile}, "missing": True})
                continue
            plots.append({"verdict": v, "svg": svg, "info": info, "missing": False, "id": cid,
                          "href": f"/v1/measurements/{m.id}/trace?sha256={t.sha256}"})  # fmt: skip
    return {"latest": latest, "history": history, "total": total, "plots": plots}


PAGE_CACHE_SIZE = 64  # rendered census-derived pages kept per process


def dashboard_router(store: Store) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    # The census and Unknown pages are built from verdicts only, and every recorded verdict bumps
    # the census version: a page rendered under the current version is current (a campaign
    # created since, with no verdict yet, joins the campaign list with its first verdict).
    cache: dict[tuple[Any, ...], tuple[int, str]] = {}

    def cached(key: tuple[Any, ...], render: Any) -> HTMLResponse:
        version = store.census_version()
        hit = cache.get(key)
        if hit is not None and hit[0] == version:
            return HTMLResponse(hit[1])
        page = render()
        if len(cache) >= PAGE_CACHE_SIZE:
            cache.clear()
        cache[key] = (version, page.body.decode())
        return page

    @r.get("/", response_class=HTMLResponse)
    def census_page(
        campaign_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
        transport: Annotated[str | None, Query(pattern="^(tcp|quic)$")] = None,
    ) -> HTMLResponse:
        return cached(("census", campaign_id, transport), lambda: render_census(campaign_id, transport))

    def render_census(campaign_id: int | None, transport: str | None) -> HTMLResponse:
        view = census_view(store, campaign_id, transport)
        campaigns, _ = store.list_campaigns(200, 0)
        return _page(
            "census.html",
            nav="census",
            view=view,
            history=history_view(view["day_totals"]),
            regions=regions_view(view["rows"]),
            campaigns=campaigns,
            campaign_id=campaign_id,
            transport=transport,
            recent=store.recent_domains(12),
            history_source=data.HISTORY_SOURCE,
            regions_source=data.REGIONS_SOURCE,
        )

    @r.get("/domains", response_class=HTMLResponse)
    def find_domain(q: Annotated[str, Query(max_length=253)] = "") -> Response:
        q = q.strip().lower().removeprefix("https://").removeprefix("http://").split("/")[0]
        if not q:
            return RedirectResponse("/", status_code=303)
        return RedirectResponse(f"/domains/{q}", status_code=303)

    @r.get("/domains/{domain}", response_class=HTMLResponse)
    def domain_page(domain: Annotated[str, Path(max_length=253)]) -> HTMLResponse:
        try:
            d = normalize_domain(domain)
            view = domain_view(store, d)
        except NotFound:
            return _page("notfound.html", 404, nav="", what=f"No measurements of {domain} yet.")
        except StoreError as e:  # a malformed name is the user's mistake, not a server error
            return _page("notfound.html", 404, nav="", what=str(e))
        return _page("domain.html", nav="", domain=d, view=view)

    @r.get("/unknown", response_class=HTMLResponse)
    def unknown_page() -> HTMLResponse:
        return cached(("unknown",), lambda: _page("unknown.html", nav="unknown", view=unknown_view(store)))

    @r.get("/accuracy", response_class=HTMLResponse)
    def accuracy_page() -> HTMLResponse:
        return _page("accuracy.html", nav="accuracy", view=accuracy_view())

    @r.get("/static/{name}")
    def static(name: Annotated[str, Path(pattern=r"^[a-z0-9_-]+\.(css|js)$")]) -> Response:
        try:
            body = resources.files("ccscope.dashboard").joinpath("static", name).read_bytes()
        except (FileNotFoundError, OSError):
            return Response("not found", status_code=404, media_type="text/plain")
        suffix = name[name.rindex(".") :]
        return Response(
            body, media_type=STATIC_TYPES[suffix], headers={"Cache-Control": "public, max-age=3600"}
        )

    return r
