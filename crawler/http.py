"""The crawler's HTTP client: every request, and every redirect hop, goes to a vetted address.

Each URL, and each redirect hop, is resolved and checked by the client's `TargetPolicy`
(public addresses only; lab mode adds the lab's own prefixes), then the connection goes to that
very address (Host header and TLS SNI carry
the name), so a DNS answer that changes between the check and the connect cannot redirect us to
an internal address. Bodies are read to a cap and a deadline, never to their end.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urljoin

import httpx

from ccscope.errors import TargetRefused
from ccscope.identity import USER_AGENT
from ccscope.targets import TargetPolicy

MAX_REDIRECTS = 5


class CrawlError(Exception):
    pass


@dataclass
class Response:
    url: str  # after redirects
    status: int
    headers: dict[str, str]
    body: bytes = b""
    truncated: bool = False
    redirects: list[str] = field(default_factory=list)


class SafeClient:
    def __init__(
        self,
        *,
        lab: bool = False,
        timeout: float = 10.0,
        verify: bool | ssl.SSLContext = True,  # a context with the lab CA, in the lab
        user_agent: str = USER_AGENT,
        policy: TargetPolicy | None = None,  # default: lab mode's if `lab` (or CCSCOPE_LAB=1)
    ) -> None:
        self.policy = policy or TargetPolicy.from_mode(lab)
        self.timeout = timeout
        self.user_agent = user_agent
        self.requests = 0
        if verify is True:
            verify = _tls_context(self.policy.lab)
        # No environment proxies: a proxy would connect to names we did not vet.
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            verify=verify,
            trust_env=False,
            headers={"User-Agent": user_agent, "Accept-Encoding": "identity"},
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SafeClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        max_bytes: int = 2 * 1024 * 1024,
        deadline: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """One request, following up to MAX_REDIRECTS redirects (each vetted); the body (GET)
        is read up to `max_bytes` or until `deadline` (time.monotonic())."""
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout
        current = url
        redirects: list[str] = []
        for _ in range(MAX_REDIRECTS + 1):
            target = self.policy.resolve(current)
            addr = target.addresses[0]
            host_in_url = f"[{addr}]" if ipaddress.ip_address(addr).version == 6 else addr
            pinned = f"{target.scheme}://{host_in_url}:{target.port}{target.path}"
            default_port = 443 if target.scheme == "https" else 80
            hdrs = dict(headers or {})
            hdrs["Host"] = target.host if target.port == default_port else f"{target.host}:{target.port}"
            ext = {"sni_hostname": target.host} if target.scheme == "https" else {}
            left = deadline - time.monotonic()
            if left <= 0:
                raise CrawlError(f"deadline passed before {current}")
            self.requests += 1
            req = self._client.build_request(
                method,
                pinned,
                headers=hdrs,
                extensions={**ext, "timeout": httpx.Timeout(min(self.timeout, left)).as_dict()},
            )
            try:
                resp = self._client.send(req, stream=True)
            except httpx.HTTPError as e:
                raise CrawlError(f"{method} {current}: {type(e).__name__}: {e}") from None
            try:
                if resp.status_code in (301, 302, 303, 307, 308) and "location" in resp.headers:
                    current = urljoin(current, resp.headers["location"])
                    redirects.append(current)
                    continue
                out = Response(
                    url=current,
                    status=resp.status_code,
                    headers={k.lower(): v for k, v in resp.headers.items()},
                    redirects=redirects,
                )
                if method != "HEAD":
                    out.body, out.truncated = _read_capped(resp, max_bytes, deadline)
                return out
            finally:
                resp.close()
        raise CrawlError(f"more than {MAX_REDIRECTS} redirects from {url}")


# Each thread's TLS contexts, by what they trust. Loading a CA store costs ~25 ms of CPU, and
# a worker made a client twice per site (robots.txt, the crawl): ~0.03 of the ~0.85 CPU-s a
# measurement costs (bench/scale, split). Not shared between threads: httpcore sets ALPN on the
# context for every connection it opens, which must not race another thread's handshake.
_TLS = threading.local()


def _tls_context(lab: bool) -> ssl.SSLContext:
    """This thread's context trusting httpx's default store, or in lab mode the system's and
    the lab CA, when a lab is up (a new lab's CA, a new context)."""
    from ccscope.errors import CCScopeError
    from ccscope.lab.lab import lab_ca_file

    ca: str | None = None
    key: tuple[object, ...] = ("default",)
    if lab:
        try:
            ca = str(lab_ca_file())
            st = os.stat(ca)
            key = ("lab", ca, st.st_mtime_ns, st.st_size)
        except (CCScopeError, OSError):
            ca = None
    cache: dict[tuple[object, ...], ssl.SSLContext] = _TLS.__dict__.setdefault("contexts", {})
    ctx = cache.get(key)
    if ctx is None:
        if ca is None:
            ctx = httpx.create_ssl_context(trust_env=False)
        else:
            ctx = ssl.create_default_context()
            try:
                ctx.load_verify_locations(cafile=ca)
            except (OSError, ssl.SSLError):
                ctx = httpx.create_ssl_context(trust_env=False)
        for old in [k for k in cache if k[0] == key[0]]:
            del cache[old]  # a lab's old CA is not kept
        cache[key] = ctx
    return ctx


def _read_capped(resp: httpx.Response, max_bytes: int, deadline: float) -> tuple[bytes, bool]:
    buf = bytearray()
    try:
        for chunk in resp.iter_raw(64 * 1024):
            buf += chunk
            if len(buf) >= max_bytes:
                return bytes(buf[:max_bytes]), True
            if time.monotonic() > deadline:
                return bytes(buf), True
    except httpx.HTTPError:
        return bytes(buf), True  # a read timeout ends a slow (endless) body: keep what came
    return bytes(buf), False


__all__ = ["MAX_REDIRECTS", "USER_AGENT", "CrawlError", "Response", "SafeClient", "TargetRefused"]
