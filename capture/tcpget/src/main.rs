//! ccscope-tcp-get: the HTTP(S) download client run inside the ccscope-link shell, the compiled
//! twin of `python -m ccscope.capture.fetch` (same options, same one-line JSON report, same exit
//! codes). A measurement runs one per profile, and the interpreter's start-up alone was most of
//! the Python client's CPU on the measuring host (bench/scale); this one starts in a few ms.
//!
//! It resolves the target itself (inside the shell, whose hosts file and DNS may differ from the
//! caller's), vets every address with the same policy as the Python side (src/policy.rs),
//! connects to the vetted address, follows at most five redirects (each vetted again), caps the
//! body and the wall time (and, when asked, the evidence cap: a number of the connection's RTTs)
//! and discards the body. SIGTERM ends the body where it is (adaptive stopping).

mod policy;
mod url;

use std::ffi::{CStr, CString};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use openssl::ssl::{
    HandshakeError, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslStream,
    SslVerifyMode,
};
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::X509;

use policy::{Net, Policy};

const MAX_REDIRECTS: usize = 5;
// After a stop the process outlives its socket's close by this long: the reset the close sends
// must cross the shell's delay line before the shell, seeing its command exit, tears it down.
const STOP_LINGER: Duration = Duration::from_secs(1);
const MAX_HEADER_BYTES: usize = 64 * 1024;
const CHUNK: usize = 64 * 1024;
// The body is read once this much is queued (or at the peer's close, or the deadline): at a
// profile's 100-byte MTU every packet would otherwise wake the client. The kernel ACKs each
// packet whatever the client does (capture/fetch.py BODY_LOWAT says why 8 KB is harmless).
const BODY_LOWAT: libc::c_int = 8 * 1024;
const LAB_NET: &str = "198.18.0.0/16"; // ccscope.lab.registry.LAB_NET
const TCP_INFO_LEN: usize = 232;
// CPython's ssl._DEFAULT_CIPHERS (3.10+): the TLS 1.2 suites its default context offers.
const PYTHON_CIPHERS: &str =
    "@SECLEVEL=2:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:DHE+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM";

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

struct Args {
    url: String,
    lab: bool,
    allow: Vec<Net>,
    cacert: Option<String>,
    ca_pem: Option<String>,
    timeout: f64,
    max_bytes: u64,
    run_id: Option<String>,
    user_agent: String,
    cap_rtts: Option<f64>,
    cap_min_s: f64,
    vet_stdin: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("ccscope-tcp-get: {msg}");
    eprintln!(
        "usage: ccscope-tcp-get URL [--lab] [--allow CIDR]... [--cacert PEM-FILE | --ca-pem PEM] \
         [--timeout S] [--max-bytes N] [--run-id ID] [--user-agent UA] [--cap-rtts N] [--cap-min-s S]\n\
         \x20      ccscope-tcp-get --vet-stdin [--lab] [--allow CIDR]...   (one address per line in, \
         its refusal or an empty line out)"
    );
    std::process::exit(2)
}

fn lab_env() -> bool {
    std::env::var("CCSCOPE_LAB")
        .map(|v| {
            ["1", "true", "yes", "on", "t", "y"].contains(&v.trim().to_ascii_lowercase().as_str())
        })
        .unwrap_or(false)
}

fn parse_args() -> Args {
    let mut a = Args {
        url: String::new(),
        lab: lab_env(),
        allow: Vec::new(),
        cacert: None,
        ca_pem: None,
        timeout: 60.0,
        max_bytes: 16 * 1024 * 1024,
        run_id: None,
        user_agent: concat!("ccscope/", env!("CARGO_PKG_VERSION"), " (ccscope-tcp-get)").into(),
        cap_rtts: None,
        cap_min_s: 0.0,
        vet_stdin: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{k} needs a value")))
        };
        match k.as_str() {
            "--lab" => a.lab = true,
            "--vet-stdin" => a.vet_stdin = true,
            "--allow" => {
                let v = val();
                a.allow.push(
                    Net::parse(&v)
                        .unwrap_or_else(|| usage(&format!("--allow: not a network: {v}"))),
                )
            }
            "--cacert" => a.cacert = Some(val()),
            "--ca-pem" => a.ca_pem = Some(val()),
            "--timeout" => a.timeout = num(&k, &val()),
            "--max-bytes" => {
                a.max_bytes = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--max-bytes needs a whole number"))
            }
            "--run-id" => a.run_id = Some(val()),
            "--user-agent" => a.user_agent = val(),
            "--cap-rtts" => a.cap_rtts = Some(num(&k, &val())),
            "--cap-min-s" => a.cap_min_s = num(&k, &val()),
            "-h" | "--help" => usage("the HTTP(S) download client"),
            s if s.starts_with('-') => usage(&format!("unknown option {s}")),
            s if a.url.is_empty() => a.url = s.to_string(),
            s => usage(&format!("unexpected argument {s}")),
        }
    }
    if a.url.is_empty() && !a.vet_stdin {
        usage("the URL is missing");
    }
    if let Some(r) = a.cap_rtts {
        if !(r > 0.0 && r.is_finite()) {
            usage("--cap-rtts must be a positive number of round trips");
        }
    }
    if !(a.cap_min_s >= 0.0 && a.cap_min_s.is_finite()) {
        usage("--cap-min-s must be a non-negative number of seconds");
    }
    if !(a.timeout > 0.0 && a.timeout.is_finite()) {
        usage("--timeout must be a positive number of seconds");
    }
    a
}

fn num(k: &str, v: &str) -> f64 {
    v.parse()
        .unwrap_or_else(|_| usage(&format!("{k} needs a number, not {v:?}")))
}

/// A failure as the report states it: the message, its kind (capture.fetch's error_kind) and the
/// exit code (3: refused, 4: any other failure).
struct Fail {
    msg: String,
    kind: &'static str,
    code: i32,
}

impl Fail {
    fn new(msg: impl Into<String>, kind: &'static str) -> Fail {
        Fail {
            msg: msg.into(),
            kind,
            code: 4,
        }
    }
    fn refused(msg: impl Into<String>, kind: &'static str) -> Fail {
        Fail {
            msg: format!("refused: {}", msg.into()),
            kind,
            code: 3,
        }
    }
    fn stopped() -> Fail {
        Fail::new("stopped on request before the body", "stopped")
    }
}

fn io_kind(e: &std::io::Error) -> &'static str {
    match e.kind() {
        ErrorKind::ConnectionRefused => "connection_refused",
        ErrorKind::TimedOut | ErrorKind::WouldBlock => "timeout",
        _ if matches!(
            e.raw_os_error(),
            Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH)
        ) =>
        {
            "unreachable"
        }
        _ => "network",
    }
}

fn io_msg(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => "timed out".into(),
        _ => e.to_string(),
    }
}

#[derive(Default)]
struct Report {
    url: String,
    final_url: String,
    status: u16,
    bytes: u64,
    seconds: f64,
    remote: String,
    remote_port: u16,
    local_port: u16,
    redirects: Vec<String>,
    truncated: bool,
    stopped: bool,
    rtt_ms: Option<f64>,
    cap_s: Option<f64>,
    error: Option<String>,
    error_kind: Option<&'static str>,
}

fn resolve(host: &str, port: u16) -> Result<Vec<IpAddr>, Fail> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let c_host = CString::new(host)
        .map_err(|_| Fail::refused(format!("cannot resolve {host:?}"), "target_refused"))?;
    let c_port = CString::new(port.to_string()).expect("digits");
    // SAFETY: zeroed addrinfo is the documented "no hints" value; the list is freed below.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    let rc = unsafe { libc::getaddrinfo(c_host.as_ptr(), c_port.as_ptr(), &hints, &mut res) };
    if rc != 0 {
        let why = unsafe { CStr::from_ptr(libc::gai_strerror(rc)) }
            .to_string_lossy()
            .into_owned();
        return Err(if rc == libc::EAI_AGAIN {
            Fail::refused(
                format!("cannot resolve '{host}' for now: [Errno {rc}] {why}"),
                "dns_temporary",
            )
        } else {
            Fail::refused(
                format!("cannot resolve '{host}': [Errno {rc}] {why}"),
                "target_refused",
            )
        });
    }
    let mut out: Vec<IpAddr> = Vec::new();
    let mut p = res;
    while !p.is_null() {
        // SAFETY: p walks the list getaddrinfo returned; each ai_addr matches its ai_family.
        let ai = unsafe { &*p };
        let ip = match ai.ai_family {
            libc::AF_INET => {
                let sa = unsafe { &*(ai.ai_addr as *const libc::sockaddr_in) };
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let sa = unsafe { &*(ai.ai_addr as *const libc::sockaddr_in6) };
                Some(IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr)))
            }
            _ => None,
        };
        if let Some(ip) = ip.filter(|ip| !out.contains(ip)) {
            out.push(ip);
        }
        p = ai.ai_next;
    }
    unsafe { libc::freeaddrinfo(res) };
    if out.is_empty() {
        return Err(Fail::refused(
            format!("'{host}' has no addresses"),
            "target_refused",
        ));
    }
    Ok(out)
}

/// The URL's target: parsed, resolved and every address vetted (TargetPolicy.resolve).
fn vet(pol: &Policy, u: &str) -> Result<(url::Url, Vec<IpAddr>), Fail> {
    let t = url::parse(u).map_err(|m| Fail::refused(m, "target_refused"))?;
    let addrs = resolve(&t.host, t.port)?;
    for a in &addrs {
        if let Some(why) = pol.refusal(*a) {
            return Err(Fail::refused(
                format!("{} resolves to {a} ({why})", t.host),
                "target_refused",
            ));
        }
    }
    Ok((t, addrs))
}

enum Conn {
    Plain(TcpStream),
    Tls(Box<SslStream<TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref(),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(buf),
            Conn::Tls(s) => s.write_all(buf),
        }
    }
}

fn tls_context(a: &Args) -> Result<SslContext, Fail> {
    let tls_err =
        |e: openssl::error::ErrorStack| Fail::new(format!("TLS set-up failed: {e}"), "tls");
    // Not SslConnector::builder: it loads the system's whole CA bundle up front (some 20 ms of
    // CPU, most of this client's), even where a CA of our own replaces it below.
    let mut b = SslContextBuilder::new(SslMethod::tls_client()).map_err(tls_err)?;
    // The handshake Python's ssl.create_default_context() makes on the same OpenSSL: its options
    // and cipher list, so the ClientHello (padded to 512 bytes) and the server's answer are the
    // bytes the classifier's training downloads (made with the Python client) put on the wire.
    b.set_options(
        (SslOptions::ALL - SslOptions::DONT_INSERT_EMPTY_FRAGMENTS)
            | SslOptions::NO_COMPRESSION
            | SslOptions::NO_SSLV2
            | SslOptions::NO_SSLV3
            | SslOptions::CIPHER_SERVER_PREFERENCE
            | SslOptions::ENABLE_MIDDLEBOX_COMPAT,
    );
    b.set_cipher_list(PYTHON_CIPHERS).map_err(tls_err)?;
    b.set_min_proto_version(Some(openssl::ssl::SslVersion::TLS1_2))
        .map_err(tls_err)?;
    b.set_verify(SslVerifyMode::PEER);
    let pem = match (&a.ca_pem, &a.cacert) {
        (Some(p), _) => Some(p.clone().into_bytes()),
        (None, Some(f)) => Some(
            std::fs::read(f)
                .map_err(|e| Fail::new(format!("cannot read the CA bundle {f}: {e}"), "tls"))?,
        ),
        (None, None) => None,
    };
    match pem {
        // Given a CA, trust only it (as ssl.create_default_context(cafile=...) does).
        Some(pem) => {
            let mut st = X509StoreBuilder::new().map_err(tls_err)?;
            let certs = X509::stack_from_pem(&pem)
                .map_err(|e| Fail::new(format!("unreadable CA certificate: {e}"), "tls"))?;
            if certs.is_empty() {
                return Err(Fail::new("the CA bundle holds no certificate", "tls"));
            }
            for c in certs {
                st.add_cert(c).map_err(tls_err)?;
            }
            b.set_cert_store(st.build());
        }
        None => b.set_default_verify_paths().map_err(tls_err)?,
    }
    Ok(b.build())
}

/// A TLS session for `host`: SNI for a name, and the certificate checked against the name or
/// the IP address (what SslConnector::configure does).
fn tls_session(ctx: &SslContext, host: &str) -> Result<Ssl, openssl::error::ErrorStack> {
    let mut ssl = Ssl::new(ctx)?;
    match host.parse::<IpAddr>() {
        Ok(ip) => ssl.param_mut().set_ip(ip)?,
        Err(_) => {
            ssl.set_hostname(host)?;
            ssl.param_mut().set_host(host)?;
        }
    }
    Ok(ssl)
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn connect(
    t: &url::Url,
    addrs: &[IpAddr],
    deadline: Instant,
    tls: &Option<SslContext>,
) -> Result<Conn, Fail> {
    let mut last: Option<std::io::Error> = None;
    for ip in addrs {
        let wait = left(deadline).clamp(Duration::from_millis(100), Duration::from_secs(10));
        let s = match TcpStream::connect_timeout(&SocketAddr::new(*ip, t.port), wait) {
            Ok(s) => s,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        let Some(ctx) = tls.as_ref().filter(|_| t.scheme == "https") else {
            return Ok(Conn::Plain(s));
        };
        let _ = s.set_read_timeout(Some(wait));
        let _ = s.set_write_timeout(Some(wait));
        let ssl = tls_session(ctx, &t.host)
            .map_err(|e| Fail::new(format!("TLS set-up failed: {e}"), "tls"))?;
        return match ssl.connect(s) {
            Ok(ss) => Ok(Conn::Tls(Box::new(ss))),
            Err(HandshakeError::Failure(mid)) | Err(HandshakeError::WouldBlock(mid)) => {
                let e = mid.error();
                let kind = e.io_error().map(io_kind).unwrap_or("tls");
                if STOP.load(Ordering::SeqCst) {
                    return Err(Fail::stopped());
                }
                Err(Fail::new(
                    format!("TLS handshake with {} failed: {e}", t.host),
                    kind,
                ))
            }
            Err(HandshakeError::SetupFailure(e)) => Err(Fail::new(
                format!("TLS handshake with {} failed: {e}", t.host),
                "tls",
            )),
        };
    }
    if STOP.load(Ordering::SeqCst) {
        return Err(Fail::stopped());
    }
    let (msg, kind) = match &last {
        Some(e) => (e.to_string(), io_kind(e)),
        None => ("no address".into(), "network"),
    };
    Err(Fail::new(
        format!("cannot connect to {}:{}: {msg}", t.host, t.port),
        kind,
    ))
}

/// Header fields, names in lower case, in the order received.
type Headers = Vec<(String, String)>;

/// The response head: status, headers and the body bytes read with it.
fn read_head(c: &mut Conn, deadline: Instant) -> Result<(u16, Headers, Vec<u8>), Fail> {
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEADER_BYTES {
            return Err(Fail::new("response headers exceed 64 KiB", "protocol"));
        }
        let _ = c
            .tcp()
            .set_read_timeout(Some(left(deadline).max(Duration::from_millis(100))));
        match c.read(&mut chunk) {
            Ok(0) => {
                return Err(Fail::new(
                    "connection closed before the response headers",
                    "network",
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                if STOP.load(Ordering::SeqCst) {
                    return Err(Fail::stopped());
                }
            }
            Err(e) => return Err(Fail::new(io_msg(&e), io_kind(&e))),
        }
    };
    let rest = buf.split_off(end + 4);
    // latin-1, as the Python client decodes the head: every byte is one character
    let head: String = buf[..end].iter().map(|&b| b as char).collect();
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let status = first
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| {
            Fail::new(
                format!(
                    "malformed status line {:?}",
                    first.chars().take(80).collect::<String>()
                ),
                "protocol",
            )
        })?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((status, headers, rest))
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    // the last one wins, as in the Python client's dict
    h.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The connection's RTT as the kernel measured it: its minimum, else the smoothed one.
fn path_rtt_s(s: &TcpStream) -> Option<f64> {
    let mut buf = [0u8; TCP_INFO_LEN];
    let mut len = TCP_INFO_LEN as libc::socklen_t;
    // SAFETY: buf is TCP_INFO_LEN bytes and len says so; the kernel writes at most that.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let at = |off: usize| {
        (off + 4 <= len as usize).then(|| u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()))
    };
    // tcpi_min_rtt (offset 148), then tcpi_rtt (68), in microseconds; ~0U: no sample yet
    [at(148), at(68)]
        .into_iter()
        .flatten()
        .find(|&us| us > 0 && us < u32::MAX)
        .map(|us| us as f64 / 1e6)
}

fn set_lowat(s: &TcpStream, n: libc::c_int) {
    // where the option is refused every byte wakes the reader, as without it
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&n as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Wait until the socket is readable (at its low-water mark, or hung up) or `wait` passes;
/// false when it did not become readable (the deadline, or a signal to look at).
fn readable(s: &TcpStream, wait: Duration) -> Result<bool, Fail> {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    match unsafe { libc::poll(&mut p, 1, ms) } {
        -1 => {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(Fail::new(io_msg(&e), io_kind(&e)))
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}

/// The bytes already here when the deadline came (fewer than the low-water mark): counted, not
/// left unread in the socket. `buf`: the body loop's read buffer.
fn drain(c: &mut Conn, buf: &mut [u8], limit: u64) -> u64 {
    set_lowat(c.tcp(), 1);
    if c.tcp().set_nonblocking(true).is_err() {
        return 0;
    }
    let mut got = 0u64;
    while got < limit {
        let n = (limit - got).min(buf.len() as u64) as usize;
        match c.read(&mut buf[..n]) {
            Ok(0) | Err(_) => break, // nothing more here (TLS's want-read is an error too)
            Ok(n) => got += n as u64,
        }
    }
    got
}

fn fetch(a: &Args, pol: &Policy, r: &mut Report) -> Result<(), Fail> {
    let start = Instant::now();
    let mut deadline = start + Duration::from_secs_f64(a.timeout);
    let mut tls: Option<SslContext> = None; // made at the first https hop
    let mut current = a.url.clone();
    for _ in 0..=MAX_REDIRECTS {
        let (t, addrs) = vet(pol, &current)?;
        if t.scheme == "https" && tls.is_none() {
            tls = Some(tls_context(a)?);
        }
        let mut c = connect(&t, &addrs, deadline, &tls)?;
        if STOP.load(Ordering::SeqCst) {
            return Err(Fail::stopped());
        }
        let peer = c
            .tcp()
            .peer_addr()
            .map_err(|e| Fail::new(io_msg(&e), io_kind(&e)))?;
        r.remote = peer.ip().to_string();
        r.remote_port = peer.port();
        r.local_port = c.tcp().local_addr().map(|l| l.port()).unwrap_or(0);
        let host_hdr = if t.default_port() {
            bracket(&t.host)
        } else {
            format!("{}:{}", bracket(&t.host), t.port)
        };
        let mut req = format!(
            "GET {} HTTP/1.1\r\nHost: {host_hdr}\r\nUser-Agent: {}\r\nAccept: */*\r\n\
             Accept-Encoding: identity\r\nConnection: close\r\n",
            t.path, a.user_agent
        );
        if let Some(id) = &a.run_id {
            req.push_str(&format!("X-CCScope-Run: {id}\r\n"));
        }
        req.push_str("\r\n");
        let _ = c
            .tcp()
            .set_write_timeout(Some(left(deadline).max(Duration::from_millis(100))));
        c.write_all(req.as_bytes())
            .map_err(|e| Fail::new(io_msg(&e), io_kind(&e)))?;
        let (status, headers, body) = read_head(&mut c, deadline)?;
        r.status = status;
        if let Some(rtts) = a.cap_rtts {
            let rtt = path_rtt_s(c.tcp());
            let cap = rtt.map_or(a.cap_min_s, |x| a.cap_min_s.max(rtts * x));
            r.rtt_ms = rtt.map(|x| (x * 1e6).round() / 1e3);
            r.cap_s = Some((cap.min(a.timeout) * 1e3).round() / 1e3);
            deadline = deadline.min(start + Duration::from_secs_f64(cap));
        }
        if matches!(status, 301 | 302 | 303 | 307 | 308) {
            if let Some(loc) = header(&headers, "location") {
                current = url::join(&current, loc);
                r.redirects.push(current.clone());
                continue;
            }
        }
        if STOP.load(Ordering::SeqCst) {
            return Err(Fail::stopped());
        }
        r.bytes = body.len() as u64;
        set_lowat(c.tcp(), BODY_LOWAT);
        c.tcp()
            .set_nonblocking(true)
            .map_err(|e| Fail::new(io_msg(&e), io_kind(&e)))?;
        let mut buf = vec![0u8; CHUNK];
        loop {
            if r.bytes >= a.max_bytes {
                r.truncated = true;
                break;
            }
            if STOP.load(Ordering::SeqCst) {
                r.truncated = true;
                r.stopped = true;
                break;
            }
            let wait = left(deadline);
            if wait.is_zero() {
                r.truncated = true;
                r.bytes += drain(&mut c, &mut buf, a.max_bytes - r.bytes);
                break;
            }
            // Python's reads, step for step (its socket in timeout mode is non-blocking): plain
            // HTTP polls, then reads what is there; TLS tries the read first and polls only
            // when the record is incomplete. A poll waits for the low-water mark, so a record
            // is finished only once 8 KB more is queued. A blocking read would finish it as soon
            // as its last bytes came; that reads sooner, so the socket's window opens
            // differently, and the lab's reno sites were named differently.
            let plain = matches!(c, Conn::Plain(_));
            if plain && !readable(c.tcp(), wait)? {
                continue; // the deadline or a signal: the next turn drains or stops
            }
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => r.bytes += n as u64,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if !plain {
                        readable(c.tcp(), wait)?;
                    }
                }
                Err(e) => return Err(Fail::new(io_msg(&e), io_kind(&e))),
            }
        }
        if let Some(n) = header(&headers, "content-length")
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        {
            // the server closed before the body was complete: a cut download, not a whole one
            if n.parse::<u64>().map_or(true, |n| r.bytes < n) {
                r.truncated = true;
            }
        }
        r.final_url = current;
        r.seconds = start.elapsed().as_secs_f64();
        return Ok(());
    }
    Err(Fail::new(
        format!("more than {MAX_REDIRECTS} redirects"),
        "redirects",
    ))
}

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut b = [0u16; 2];
                for u in c.encode_utf16(&mut b) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_f(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x}"),
        _ => "null".into(),
    }
}

fn to_json(r: &Report, cpu_s: f64) -> String {
    let mut o = String::from("{\"url\": ");
    json_str(&mut o, &r.url);
    o.push_str(", \"final_url\": ");
    json_str(&mut o, &r.final_url);
    o.push_str(&format!(
        ", \"status\": {}, \"bytes\": {}, \"seconds\": {}, \"remote\": ",
        r.status, r.bytes, r.seconds
    ));
    json_str(&mut o, &r.remote);
    o.push_str(&format!(
        ", \"remote_port\": {}, \"local_port\": {}, \"redirects\": [",
        r.remote_port, r.local_port
    ));
    for (i, u) in r.redirects.iter().enumerate() {
        if i > 0 {
            o.push_str(", ");
        }
        json_str(&mut o, u);
    }
    o.push_str(&format!(
        "], \"truncated\": {}, \"stopped\": {}, \"rtt_ms\": {}, \"cap_s\": {}, \"error\": ",
        r.truncated,
        r.stopped,
        json_f(r.rtt_ms),
        json_f(r.cap_s)
    ));
    match &r.error {
        Some(e) => json_str(&mut o, e),
        None => o.push_str("null"),
    }
    o.push_str(", \"error_kind\": ");
    match r.error_kind {
        Some(k) => json_str(&mut o, k),
        None => o.push_str("null"),
    }
    o.push_str(&format!(", \"cpu_s\": {cpu_s}}}"));
    o
}

fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    ((s(ru.ru_utime) + s(ru.ru_stime)) * 1e4).round() / 1e4
}

fn vet_stdin(pol: &Policy) -> i32 {
    let mut input = String::new();
    if std::io::stdin().read_to_string(&mut input).is_err() {
        return 2;
    }
    let mut out = String::new();
    for line in input.lines() {
        let a = line.trim();
        let why = match a.split('%').next().unwrap_or("").parse::<IpAddr>() {
            Ok(ip) => pol.refusal(ip).unwrap_or_default(),
            Err(_) => "not an IP address".into(),
        };
        out.push_str(&why);
        out.push('\n');
    }
    print!("{out}");
    0
}

fn main() {
    let a = parse_args();
    let mut allowed = a.allow.clone();
    if a.lab {
        allowed.insert(0, Net::parse(LAB_NET).expect("the lab prefix"));
    }
    let pol = Policy {
        allowed,
        lab: a.lab,
    };
    if a.vet_stdin {
        std::process::exit(vet_stdin(&pol));
    }
    // SIGTERM interrupts the blocking calls (no SA_RESTART): the loop sees the flag at once.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigterm as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
    let mut r = Report {
        url: a.url.clone(),
        ..Default::default()
    };
    let code = match fetch(&a, &pol, &mut r) {
        Ok(()) => {
            if (200..300).contains(&r.status) {
                0
            } else {
                4
            }
        }
        Err(f) => {
            // a failure reports nothing of the download but what failed (as the Python client)
            r = Report {
                url: a.url.clone(),
                error: Some(f.msg),
                error_kind: Some(f.kind),
                stopped: f.kind == "stopped",
                ..Default::default()
            };
            f.code
        }
    };
    println!("{}", to_json(&r, cpu_s()));
    let _ = std::io::stdout().flush();
    if r.stopped {
        std::thread::sleep(STOP_LINGER);
    }
    std::process::exit(code);
}
