"""`ccscope check DOMAIN|URL`: which CCA does this server run, in one step.

crawl (the site's largest object, robots.txt obeyed; skipped when URL names an object) ->
measure (profiles A and B, one after the other) -> classify (the sender-aligned traces, the
alignment the model reads) -> the verdict with its explanation, and a PNG of the traces with what
the classifier read in them. Progress goes to stderr; the result to stdout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ccscope.errors import EXIT_FAILED, EXIT_INSUFFICIENT, EXIT_UNKNOWN, CCScopeError
from ccscope.progress import Steps, ticking
from ccscope.verdict import Verdict

RATE_BPS = 200_000  # the standard profiles' bottleneck: how long a download of N bytes takes


class CheckFailed(CCScopeError):
    exit_code = EXIT_FAILED


@dataclass
class CheckResult:
    target: str
    url: str
    object_bytes: int | None
    out_dir: str
    measurement: dict[str, Any]
    verdict: Verdict | None
    plot: str | None
    seconds: dict[str, float] = field(default_factory=dict)
    crawl: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        if self.verdict is None:
            return EXIT_FAILED
        return {"cca": 0, "unknown": EXIT_UNKNOWN, "insufficient": EXIT_INSUFFICIENT}[self.verdict.kind]

    def to_dict(self) -> dict[str, Any]:
        import json

        return {
            "target": self.target,
            "url": self.url,
            "object_bytes": self.object_bytes,
            "out_dir": self.out_dir,
            "plot": self.plot,
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "crawl": self.crawl,
            "measurement": self.measurement,
            "verdict": json.loads(self.verdict.to_json()) if self.verdict else None,
        }

    def format(self) -> str:
        v = self.verdict
        lines = [
            f"{self.target}: {self.url}" + (f" ({self.object_bytes} bytes)" if self.object_bytes else "")
        ]
        if v is None:
            errs = [
                f"{r['profile']}: {r.get('error')}"
                for r in self.measurement.get("runs", [])
                if r.get("error")
            ]
            lines.append("no verdict: " + ("; ".join(errs) or "the measurement failed"))
        else:
            conf = f"  (confidence {v.confidence:.2f}, {v.classifier_version})"
            lines += [f"verdict: {v.display}{conf}", "", v.explanation]
        from ccscope.capture.measure import timing_warning

        # A verdict read from distorted timing says so, with the likely cause.
        for r in self.measurement.get("runs", []):
            if warn := timing_warning(r.get("profile", "?"), r.get("timing")):
                lines.append(warn)
        lines.append("")
        if self.plot:
            lines.append(f"plot:   {self.plot}")
        lines.append(f"traces: {self.out_dir}")
        return "\n".join(lines)


def _is_object_url(target: str) -> bool:
    parts = urlsplit(target)
    return bool(parts.scheme and parts.path not in ("", "/"))


def find_object(target: str, *, lab: bool, timeout: float = 10.0) -> tuple[str, int | None, dict[str, Any]]:
    """The object to download: `target` itself when it names one, else the site's largest."""
    if _is_object_url(target):
        return target, None, {"given": True}
    from ccscope.crawler.discover import Limits, find_largest_object
    from ccscope.crawler.http import SafeClient

    host = urlsplit(target).hostname if "://" in target else target.strip().strip("/")
    if not host:
        raise CCScopeError(f"{target!r} is neither a domain nor a URL")
    bases = (
        [f"{urlsplit(target).scheme}://{host}/"]
        if "://" in target
        else [f"https://{host}/", f"http://{host}/"]
    )
    limits = Limits(request_timeout=timeout)
    found = None
    with SafeClient(lab=lab, timeout=timeout) as c:
        for base in bases:
            found = find_largest_object(base, client=c, limits=limits)
            if found.url:
                break
    assert found is not None
    if not found.url:
        why = "; ".join(found.errors[:3]) or "no object found (or robots.txt forbids them)"
        raise CheckFailed(f"{host}: nothing worth downloading: {why}")
    return (
        found.url,
        found.size,
        {
            "pages": found.pages,
            "probes": found.probes,
            "robots_skipped": found.robots_skipped,
            "alt_svc": found.alt_svc,
        },
    )


def run_check(
    target: str,
    *,
    out_dir: Path | None = None,
    lab: bool = False,
    timeout: float = 90.0,
    max_bytes: int = 16 * 1024 * 1024,
    profiles: tuple[str, ...] = ("A", "B"),
    plot: bool = True,
    model_path: str | None = None,
    transport: str = "tcp",
) -> CheckResult:
    from ccscope.capture.measure import measure
    from ccscope.classifier.model import Model, ModelError
    from ccscope.targets import lab_mode_enabled

    lab = lab_mode_enabled(lab)
    try:  # before minutes of downloads, not after
        model = Model.load(Path(model_path) if model_path else None)
    except ModelError as e:
        raise CCScopeError(str(e)) from None
    steps = Steps(len(profiles) + 3)
    t0 = time.monotonic()
    steps.step(f"finding the largest object on {target} ...")
    url, size, crawl = find_object(target, lab=lab)
    rate = RATE_BPS
    if transport == "quic":
        # the object where the site serves HTTP/3 (its Alt-Svc, else one QUIC probe)
        from ccscope.crawler.h3 import find_h3
        from ccscope.profile import QUIC_PACKET_BYTES

        offer = find_h3(url, crawl.get("alt_svc"), lab=lab)
        if offer.url is None:
            raise CheckFailed(
                f"{url}: no HTTP/3: {offer.how}" + (f" ({offer.detail})" if offer.detail else "")
            )
        url, crawl = offer.url, {**crawl, "h3": offer.how}
        rate = RATE_BPS * QUIC_PACKET_BYTES / 100  # the QUIC profiles keep the packets per RTT
    t_crawl = time.monotonic()
    expect = (size * 8 / rate * 1.2 + 4) if size else None

    def around(name: str, i: int, n: int) -> Any:
        steps.step(f"downloading {url} through profile {name} ({i + 1} of {n}) ...")
        return ticking(f"profile {name}", expect)

    m = measure(
        url,
        profiles,
        out_dir,
        lab=lab,
        timeout=timeout,
        max_bytes=max_bytes,
        on_profile=around,
        transport=transport,
    )
    t_meas = time.monotonic()
    steps.step("classifying ...")
    files = [r.sender_trace_file for r in m.runs if r.sender_trace_file]
    res = CheckResult(target, url, size, m.out_dir, m.to_dict(), None, None, crawl=crawl)
    if files:
        from ccscope.classifier.core import classify
        from ccscope.trace import Trace

        traces = [Trace.load(f) for f in files]
        res.verdict = classify(traces, model)
        if plot:
            from ccscope.plot import plot_traces

            res.plot = str(plot_traces(traces, Path(m.out_dir) / "check.png", res.verdict, title=url))
    t_end = time.monotonic()
    steps.step("done" if res.verdict else "no trace to classify")
    res.seconds = {
        "crawl": t_crawl - t0,
        "measure": t_meas - t_crawl,
        "classify": t_end - t_meas,
        "total": t_end - t0,
    }
    return res
