//! `ccscope-quiche-server`: the lab's HTTP/3 server on quiche, with a chosen congestion control
//! and a qlog per connection (its `recovery:metrics_updated` events are the ground truth for
//! bytes in flight and cwnd).
//!
//! Serves what lab/server.py serves over TCP: `/obj/<bytes>`, `/large`, `/health`, `/`. Honours
//! quiche's pacing (`SendInfo::at`): a datagram is held until its time, so paced CCAs pace.
//! When a request carries `x-ccscope-run: ID`, the connection's record
//! `<runs-dir>/<ID>.json` (stack, cca, qlog file, peer) is written once the connection is over
//! and its qlog flushed.
//!
//! `--mode` makes a misbehaving server for the bad-input tests: `vn` answers every Initial with
//! a Version Negotiation offering no version the client speaks, `retry-loop` answers every
//! Initial with a Retry (the handshake never completes), `silent` never answers, `no-h3` offers
//! only the `hq-interop` ALPN.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quiche::h3::NameValue;

const MAX_OBJECT: u64 = 1 << 30;
const SEND_PAYLOAD: usize = 1200;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Normal,
    Vn,
    RetryLoop,
    Silent,
    NoH3,
}

struct Args {
    listen: SocketAddr,
    cert: String,
    key: String,
    cc: String,
    label: String,
    qlog_dir: Option<PathBuf>,
    runs_dir: Option<PathBuf>,
    large: u64,
    mode: Mode,
}

fn usage(msg: &str) -> ! {
    eprintln!("ccscope-quiche-server: {msg}");
    eprintln!(
        "usage: ccscope-quiche-server --listen IP:PORT --cert PEM --key PEM [--cc reno|cubic|bbr2_gcongestion] \
         [--label NAME] [--qlog-dir DIR] [--runs-dir DIR] [--large BYTES] [--mode normal|vn|retry-loop|silent|no-h3]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        listen: "0.0.0.0:443".parse().unwrap(),
        cert: String::new(),
        key: String::new(),
        cc: "cubic".into(),
        label: String::new(),
        qlog_dir: None,
        runs_dir: None,
        large: 1_000_000,
        mode: Mode::Normal,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| usage(&format!("{k} needs a value")));
        match k.as_str() {
            "--listen" => a.listen = v().parse().unwrap_or_else(|_| usage("bad --listen")),
            "--cert" => a.cert = v(),
            "--key" => a.key = v(),
            "--cc" => a.cc = v(),
            "--label" => a.label = v(),
            "--qlog-dir" => a.qlog_dir = Some(v().into()),
            "--runs-dir" => a.runs_dir = Some(v().into()),
            "--large" => a.large = v().parse().unwrap_or_else(|_| usage("bad --large")),
            "--mode" => {
                a.mode = match v().as_str() {
                    "normal" => Mode::Normal,
                    "vn" => Mode::Vn,
                    "retry-loop" => Mode::RetryLoop,
                    "silent" => Mode::Silent,
                    "no-h3" => Mode::NoH3,
                    m => usage(&format!("unknown mode {m}")),
                }
            }
            _ => usage(&format!("unknown option {k}")),
        }
    }
    if a.mode != Mode::Silent && a.mode != Mode::Vn && (a.cert.is_empty() || a.key.is_empty()) {
        usage("--cert and --key are required");
    }
    if a.label.is_empty() {
        a.label = format!("quiche:{}", a.cc);
    }
    a
}

fn log(msg: &str) {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    eprintln!("{t:.3} quiche-server: {msg}");
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    b
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

struct Response {
    headers: Option<Vec<quiche::h3::Header>>,
    left: u64,
}

struct Client {
    conn: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    responses: HashMap<u64, Response>,
    peer: SocketAddr,
    qlog: Option<String>,
    run_id: Option<String>,
    started: f64,
    held: Option<(Vec<u8>, Instant)>, // a paced datagram waiting for its time
    odcid: Vec<u8>,
}

static PATTERN: [u8; 16384] = {
    let mut p = [0u8; 16384];
    let mut i = 0;
    while i < p.len() {
        p[i] = b'a' + (i % 26) as u8;
        i += 1;
    }
    p
};

fn main() {
    let a = parse_args();
    // The lab runs as root; keep the qlog and run records readable by the tools that read them.
    let sock = UdpSocket::bind(a.listen).unwrap_or_else(|e| {
        log(&format!("cannot bind {}: {e}", a.listen));
        std::process::exit(1)
    });
    let local = sock.local_addr().unwrap();
    log(&format!("listening on {local} ({}, cc {}, mode {})", a.label, a.cc, mode_name(a.mode)));

    let mut cfg = quiche::Config::new(quiche::PROTOCOL_VERSION).expect("config");
    if a.mode != Mode::Silent && a.mode != Mode::Vn {
        if let Err(e) = cfg.load_cert_chain_from_pem_file(&a.cert) {
            log(&format!("cannot load {}: {e}", a.cert));
            std::process::exit(1);
        }
        if let Err(e) = cfg.load_priv_key_from_pem_file(&a.key) {
            log(&format!("cannot load {}: {e}", a.key));
            std::process::exit(1);
        }
    }
    let alpn: &[&[u8]] = if a.mode == Mode::NoH3 { &[b"hq-interop"] } else { quiche::h3::APPLICATION_PROTOCOL };
    cfg.set_application_protos(alpn).expect("alpn");
    if cfg.set_cc_algorithm_name(&a.cc).is_err() {
        log(&format!("unknown congestion control {:?}", a.cc));
        std::process::exit(2);
    }
    cfg.set_max_idle_timeout(30_000);
    cfg.set_max_recv_udp_payload_size(1350);
    cfg.set_max_send_udp_payload_size(SEND_PAYLOAD);
    cfg.discover_pmtu(false);
    cfg.enable_pacing(true);
    cfg.set_initial_max_data(10_000_000);
    cfg.set_initial_max_stream_data_bidi_local(1_000_000);
    cfg.set_initial_max_stream_data_bidi_remote(1_000_000);
    cfg.set_initial_max_stream_data_uni(1_000_000);
    cfg.set_initial_max_streams_bidi(100);
    cfg.set_initial_max_streams_uni(100);
    cfg.set_disable_active_migration(true);
    let h3_cfg = quiche::h3::Config::new().expect("h3 config");

    let mut clients: HashMap<Vec<u8>, Client> = HashMap::new();
    let mut aliases: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    let mut out = vec![0u8; 1500];
    let mut stop = false;
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_term as *const () as libc::sighandler_t);
    }

    while !stop {
        // Next wake-up: a connection timer or a held (paced) datagram.
        let now = Instant::now();
        let mut wait = Duration::from_millis(100);
        for c in clients.values() {
            if let Some(t) = c.conn.timeout() {
                wait = wait.min(t);
            }
            if let Some((_, at)) = &c.held {
                wait = wait.min(at.saturating_duration_since(now));
            }
        }
        let _ = sock.set_read_timeout(Some(wait.max(Duration::from_micros(50))));
        // Read whatever is waiting (the first read blocks up to `wait`).
        let mut first = true;
        loop {
            if !first {
                let _ = sock.set_nonblocking(true);
            }
            let got = sock.recv_from(&mut buf);
            if !first {
                let _ = sock.set_nonblocking(false);
            }
            first = false;
            let (len, from) = match got {
                Ok(v) => v,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => break,
                Err(e) => {
                    log(&format!("recv: {e}"));
                    break;
                }
            };
            if a.mode == Mode::Silent {
                continue;
            }
            handle_datagram(&a, &mut cfg, &h3_cfg, &sock, local, &mut clients, &mut aliases, &mut buf[..len], from, &mut out);
        }
        if TERM.load(std::sync::atomic::Ordering::Relaxed) {
            stop = true;
        }
        for c in clients.values_mut() {
            if c.conn.timeout() == Some(Duration::ZERO) {
                c.conn.on_timeout();
            }
        }
        // Send, honouring pacing: a datagram due later is held and sent when its time comes.
        for c in clients.values_mut() {
            flush(c, &sock, &mut out);
        }
        // Connections that are over: drop them (flushing their qlog), then write their record.
        let done: Vec<Vec<u8>> = clients.iter().filter(|(_, c)| c.conn.is_closed()).map(|(k, _)| k.clone()).collect();
        for k in done {
            if let Some(c) = clients.remove(&k) {
                aliases.remove(&c.odcid);
                finish(&a, c);
            }
        }
    }
    for (_, c) in clients.drain() {
        finish(&a, c);
    }
}

static TERM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Normal => "normal",
        Mode::Vn => "vn",
        Mode::RetryLoop => "retry-loop",
        Mode::Silent => "silent",
        Mode::NoH3 => "no-h3",
    }
}

fn flush(c: &mut Client, sock: &UdpSocket, out: &mut [u8]) {
    loop {
        if let Some((d, at)) = &c.held {
            if *at > Instant::now() {
                return;
            }
            let _ = sock.send_to(d, c.peer);
            c.held = None;
        }
        match c.conn.send(out) {
            Ok((n, info)) => {
                if info.at > Instant::now() + Duration::from_micros(100) {
                    c.held = Some((out[..n].to_vec(), info.at));
                    return;
                }
                if let Err(e) = sock.send_to(&out[..n], info.to) {
                    if e.kind() != ErrorKind::WouldBlock {
                        log(&format!("send: {e}"));
                    }
                    return;
                }
            }
            Err(quiche::Error::Done) => return,
            Err(e) => {
                log(&format!("{} send failed: {e:?}", c.conn.trace_id()));
                let _ = c.conn.close(false, 0x1, b"fail");
                return;
            }
        }
    }
}

fn finish(a: &Args, c: Client) {
    let Client { conn, qlog, run_id, peer, started, .. } = c;
    let stats = conn.stats();
    drop(conn); // flushes the qlog writer
    let (Some(dir), Some(id)) = (&a.runs_dir, run_id) else { return };
    let mut doc = String::new();
    let _ = write!(
        doc,
        "{{\"run_id\":{},\"stack\":\"quiche\",\"cca\":{},\"label\":{},\"qlog\":{},\"peer\":\"{}\",\"started\":{:.6},\"ended\":{:.6},\"sent\":{},\"lost\":{}}}",
        jstr(&id), jstr(&a.cc), jstr(&a.label), qlog.as_deref().map(jstr).unwrap_or("null".into()), peer, started,
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64(), stats.sent, stats.lost
    );
    let path = dir.join(format!("{id}.json"));
    let tmp = dir.join(format!(".{id}.json.tmp"));
    if std::fs::File::create(&tmp).and_then(|mut f| f.write_all(doc.as_bytes())).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

fn jstr(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[allow(clippy::too_many_arguments)]
fn handle_datagram(
    a: &Args,
    cfg: &mut quiche::Config,
    h3_cfg: &quiche::h3::Config,
    sock: &UdpSocket,
    local: SocketAddr,
    clients: &mut HashMap<Vec<u8>, Client>,
    aliases: &mut HashMap<Vec<u8>, Vec<u8>>,
    pkt: &mut [u8],
    from: SocketAddr,
    out: &mut [u8],
) {
    let hdr = match quiche::Header::from_slice(pkt, quiche::MAX_CONN_ID_LEN) {
        Ok(h) => h,
        Err(_) => return,
    };
    let mut key = hdr.dcid.to_vec();
    if let Some(k) = aliases.get(&key) {
        key = k.clone();
    }
    if !clients.contains_key(&key) {
        if hdr.ty != quiche::Type::Initial {
            return;
        }
        if a.mode == Mode::Vn || !quiche::version_is_supported(hdr.version) {
            let n = if a.mode == Mode::Vn {
                bogus_version_negotiation(&hdr.scid, &hdr.dcid, out)
            } else {
                match quiche::negotiate_version(&hdr.scid, &hdr.dcid, out) {
                    Ok(n) => n,
                    Err(_) => return,
                }
            };
            let _ = sock.send_to(&out[..n], from);
            return;
        }
        if a.mode == Mode::RetryLoop {
            let new_scid = random_bytes::<{ quiche::MAX_CONN_ID_LEN }>();
            let token = random_bytes::<16>();
            if let Ok(n) = quiche::retry(
                &hdr.scid,
                &hdr.dcid,
                &quiche::ConnectionId::from_ref(&new_scid),
                &token,
                hdr.version,
                out,
            ) {
                let _ = sock.send_to(&out[..n], from);
            }
            return;
        }
        let scid_bytes = random_bytes::<{ quiche::MAX_CONN_ID_LEN }>();
        let scid = quiche::ConnectionId::from_ref(&scid_bytes);
        let mut conn = match quiche::accept(&scid, None, local, from, cfg) {
            Ok(c) => c,
            Err(e) => {
                log(&format!("accept failed: {e}"));
                return;
            }
        };
        let mut qlog = None;
        if let Some(dir) = &a.qlog_dir {
            let path = dir.join(format!("{}.sqlog", hex(&hdr.dcid)));
            match std::fs::File::create(&path) {
                Ok(f) => {
                    conn.set_qlog(
                        Box::new(std::io::BufWriter::with_capacity(1 << 16, f)),
                        format!("ccscope-quiche-server {}", a.label),
                        format!("peer {from}"),
                    );
                    qlog = Some(path.to_string_lossy().into_owned());
                }
                Err(e) => log(&format!("cannot write qlog {}: {e}", path.display())),
            }
        }
        let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        let c = Client {
            conn, h3: None, responses: HashMap::new(), peer: from, qlog, run_id: None, started, held: None,
            odcid: key.clone(),
        };
        // Later packets carry our SCID; the first (and any retransmitted Initial) the client's
        // chosen DCID, which the alias maps to the same connection.
        aliases.insert(key, scid_bytes.to_vec());
        clients.insert(scid_bytes.to_vec(), c);
        let c = clients.get_mut(&scid_bytes.to_vec()).unwrap();
        recv_and_serve(a, h3_cfg, c, pkt, from, local);
        return;
    }
    if let Some(c) = clients.get_mut(&key) {
        recv_and_serve(a, h3_cfg, c, pkt, from, local);
    }
}

fn recv_and_serve(
    a: &Args,
    h3_cfg: &quiche::h3::Config,
    c: &mut Client,
    pkt: &mut [u8],
    from: SocketAddr,
    local: SocketAddr,
) {
    if c.conn.recv(pkt, quiche::RecvInfo { from, to: local }).is_err() {
        return;
    }
    if c.conn.is_established() && c.h3.is_none() {
        if c.conn.application_proto() != b"h3" {
            return; // hq-interop mode: the handshake completes, nothing is served
        }
        match quiche::h3::Connection::with_transport(&mut c.conn, h3_cfg) {
            Ok(h) => c.h3 = Some(h),
            Err(e) => {
                log(&format!("h3 set-up failed: {e}"));
                return;
            }
        }
    }
    let Some(h3) = c.h3.as_mut() else { return };
    loop {
        match h3.poll(&mut c.conn) {
            Ok((sid, quiche::h3::Event::Headers { list, .. })) => {
                let mut path = String::from("/");
                for h in &list {
                    match h.name() {
                        b":path" => path = String::from_utf8_lossy(h.value()).into_owned(),
                        b"x-ccscope-run" => {
                            let id = String::from_utf8_lossy(h.value()).into_owned();
                            if !id.is_empty()
                                && id.len() <= 128
                                && id.chars().all(|ch| ch.is_ascii_alphanumeric() || "._:-".contains(ch))
                            {
                                c.run_id = Some(id);
                            }
                        }
                        _ => {}
                    }
                }
                let (status, body_len, small) = route(a, &path);
                let mut hdrs = vec![
                    quiche::h3::Header::new(b":status", status.to_string().as_bytes()),
                    quiche::h3::Header::new(b"server", b"ccscope-quiche-server"),
                    quiche::h3::Header::new(b"content-length", body_len.to_string().as_bytes()),
                ];
                if small.is_some() {
                    hdrs.push(quiche::h3::Header::new(b"content-type", b"application/json"));
                }
                if let Some(body) = small {
                    let _ = h3.send_response(&mut c.conn, sid, &hdrs, false);
                    let _ = h3.send_body(&mut c.conn, sid, body.as_bytes(), true);
                } else {
                    c.responses.insert(sid, Response { headers: Some(hdrs), left: body_len });
                }
            }
            Ok(_) => {}
            Err(quiche::h3::Error::Done) => break,
            Err(e) => {
                log(&format!("{} HTTP/3 error {e:?}", c.conn.trace_id()));
                break;
            }
        }
    }
    // Stream out every response as far as flow control lets it.
    let sids: Vec<u64> = c.responses.keys().copied().collect();
    for sid in sids {
        let r = c.responses.get_mut(&sid).unwrap();
        if let Some(h) = r.headers.take() {
            match h3.send_response(&mut c.conn, sid, &h, r.left == 0) {
                Ok(()) => {}
                Err(quiche::h3::Error::StreamBlocked) => {
                    r.headers = Some(h);
                    continue;
                }
                Err(_) => {
                    c.responses.remove(&sid);
                    continue;
                }
            }
        }
        while r.left > 0 {
            let n = (r.left as usize).min(PATTERN.len());
            match h3.send_body(&mut c.conn, sid, &PATTERN[..n], r.left as usize == n) {
                Ok(w) if w > 0 => r.left -= w as u64,
                _ => break,
            }
        }
        if r.left == 0 {
            c.responses.remove(&sid);
        }
    }
}

/// (status, body length, small body): `/obj/N` and `/large` are streamed, the rest is small.
fn route(a: &Args, path: &str) -> (u16, u64, Option<String>) {
    let p = path.split('?').next().unwrap_or("/");
    if let Some(n) = p.strip_prefix("/obj/") {
        return match n.parse::<u64>() {
            Ok(v) if v <= MAX_OBJECT && n.len() <= 10 => (200, v, None),
            _ => (404, 10, Some("not found\n".into())),
        };
    }
    match p {
        "/large" => (200, a.large, None),
        "/health" => {
            let b = format!("{{\"stack\":\"quiche\",\"cca\":{},\"label\":{},\"pid\":{}}}\n", jstr(&a.cc), jstr(&a.label), std::process::id());
            (200, b.len() as u64, Some(b))
        }
        "/" => {
            let b = format!(
                "<html><body><h1>{}</h1><a href=\"/large\">large</a></body></html>\n",
                a.label
            );
            (200, b.len() as u64, Some(b))
        }
        _ => (404, 10, Some("not found\n".into())),
    }
}

/// A Version Negotiation packet offering only versions no client speaks (a reserved greasing
/// version and an old draft), for the bad-input tests.
fn bogus_version_negotiation(scid: &quiche::ConnectionId, dcid: &quiche::ConnectionId, out: &mut [u8]) -> usize {
    let mut n = 0;
    out[n] = 0x80 | (random_bytes::<1>()[0] & 0x7f);
    n += 1;
    out[n..n + 4].copy_from_slice(&0u32.to_be_bytes());
    n += 4;
    // The VN echoes the client's connection IDs swapped (RFC 9000 §17.2.1).
    out[n] = scid.len() as u8;
    n += 1;
    out[n..n + scid.len()].copy_from_slice(scid);
    n += scid.len();
    out[n] = dcid.len() as u8;
    n += 1;
    out[n..n + dcid.len()].copy_from_slice(dcid);
    n += dcid.len();
    for v in [0x1a2a_3a4au32, 0xff00_001d] {
        out[n..n + 4].copy_from_slice(&v.to_be_bytes());
        n += 4;
    }
    n
}
