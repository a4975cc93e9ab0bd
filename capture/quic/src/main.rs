//! `ccscope-quic-get`: one HTTP/3 GET over one QUIC connection (quiche), for measurements.
//!
//! Runs inside the ccscope-link shell like the TCP client (capture/fetch.py), started by
//! `python -m ccscope.capture.quic_get`, which vets the target through ccscope's target policy
//! and hands this program the vetted address (`--connect`), never a name to resolve. It
//! downloads one object, discards the body, honours a byte cap and a deadline, verifies the
//! server's certificate (a CA file or the system store; the name is checked too) and prints
//! one JSON line: status, bytes, the 5-tuple, and for a failure the reason and its kind
//! (version negotiation, retry, handshake timeout, no h3, TLS, refused, HTTP/3).
//!
//! With `--min-rounds N` a short object is fetched again over the same connection until the
//! transfer has lasted N smoothed round trips: a congestion controller shows its shape only
//! over many round trips after slow start, and a small object ends inside slow start. The next
//! request is sent while the current response still has about two round trips to go, so the
//! server never runs out of data between them.
//!
//! With `--cap-rtts N --cap-min-s S` (either) the transfer lasts the evidence cap the TCP
//! client keeps, max(S, N x the path's minimum RTT) from the start, at most the timeout: a
//! short object is fetched again until then and a long one is cut there (`truncated`), so a
//! QUIC trace holds as many round trips as a TCP one of the same path.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use quiche::h3::NameValue;

/// What every QUIC endpoint must accept (RFC 9000 §14); the QUIC profiles' links carry it.
const SEND_PAYLOAD: usize = 1200;
/// Our max_udp_payload_size transport parameter: a 1280-byte IP MTU less IPv4 and UDP headers,
/// so no server sends datagrams the profile's link cannot carry.
const RECV_PAYLOAD: usize = 1252;
const H3_NO_ERROR: u64 = 0x100;
const H3_REQUEST_CANCELLED: u64 = 0x10c;

struct Args {
    connect: SocketAddr,
    sni: String,
    authority: String,
    path: String,
    cafile: Option<String>,
    timeout: f64,
    handshake_timeout: f64,
    max_bytes: u64,
    qlog: Option<String>,
    run_id: Option<String>,
    user_agent: String,
    cc: Option<String>,
    min_rounds: f64,
    cap_rtts: f64, // 0: no evidence cap
    cap_min_s: f64,
}

#[derive(Default)]
struct Report {
    status: u16,
    bytes: u64,
    seconds: f64,
    remote: String,
    remote_port: u16,
    local: String,
    local_port: u16,
    truncated: bool,
    error: Option<String>,
    error_kind: Option<&'static str>,
    alpn: String,
    version: u32,
    handshake_ms: Option<f64>,
    retry: bool,
    offered_versions: Vec<u32>,
    location: Option<String>,
    content_length: Option<u64>,
    alt_svc: Option<String>,
    server: Option<String>,
    packets_recv: usize,
    packets_sent: usize,
    lost: usize,
    rtt_ms: f64,
    min_rtt_ms: Option<f64>,
    requests: u32,
    rounds: f64,
    cap_s: Option<f64>, // the evidence cap from the start, once the path's RTT was known
}

/// One request stream's progress (for pipelining the next fetch of the object).
#[derive(Default)]
struct Stream {
    headers: bool,
    got: u64,
    len: Option<u64>,
}

fn usage(msg: &str) -> ! {
    eprintln!("ccscope-quic-get: {msg}");
    eprintln!(
        "usage: ccscope-quic-get --connect IP:PORT --sni HOST --authority HOST[:PORT] --path /P \
         [--cafile PEM] [--timeout S] [--handshake-timeout S] [--max-bytes N] [--qlog FILE] \
         [--run-id ID] [--user-agent UA] [--min-rounds N] [--cap-rtts N --cap-min-s S]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        connect: "0.0.0.0:0".parse().unwrap(),
        sni: String::new(),
        authority: String::new(),
        path: "/".into(),
        cafile: None,
        timeout: 60.0,
        handshake_timeout: 10.0,
        max_bytes: 16 << 20,
        qlog: None,
        run_id: None,
        user_agent: "ccscope".into(),
        cc: None,
        min_rounds: 0.0,
        cap_rtts: 0.0,
        cap_min_s: 0.0,
    };
    let mut it = std::env::args().skip(1);
    let mut connect = None;
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| usage(&format!("{k} needs a value")));
        match k.as_str() {
            "--connect" => connect = Some(v()),
            "--sni" => a.sni = v(),
            "--authority" => a.authority = v(),
            "--path" => a.path = v(),
            "--cafile" => a.cafile = Some(v()),
            "--timeout" => a.timeout = v().parse().unwrap_or_else(|_| usage("bad --timeout")),
            "--handshake-timeout" => {
                a.handshake_timeout = v().parse().unwrap_or_else(|_| usage("bad --handshake-timeout"))
            }
            "--max-bytes" => a.max_bytes = v().parse().unwrap_or_else(|_| usage("bad --max-bytes")),
            "--qlog" => a.qlog = Some(v()),
            "--run-id" => a.run_id = Some(v()),
            "--user-agent" => a.user_agent = v(),
            // The client's own sender CC only shapes our few ACK packets; settable for tests.
            "--cc" => a.cc = Some(v()),
            "--min-rounds" => a.min_rounds = v().parse().unwrap_or_else(|_| usage("bad --min-rounds")),
            "--cap-rtts" => a.cap_rtts = v().parse().unwrap_or_else(|_| usage("bad --cap-rtts")),
            "--cap-min-s" => a.cap_min_s = v().parse().unwrap_or_else(|_| usage("bad --cap-min-s")),
            _ => usage(&format!("unknown option {k}")),
        }
    }
    a.connect = connect
        .unwrap_or_else(|| usage("--connect is required"))
        .parse()
        .unwrap_or_else(|_| usage("--connect must be IP:PORT ([v6]:PORT)"));
    if a.sni.is_empty() {
        usage("--sni is required");
    }
    if a.authority.is_empty() {
        a.authority = a.sni.clone();
    }
    if !(a.timeout > 0.0 && a.handshake_timeout > 0.0) {
        usage("timeouts must be > 0");
    }
    if !(0.0..=100_000.0).contains(&a.min_rounds) {
        usage("--min-rounds must be 0..100000");
    }
    if !(0.0..=100_000.0).contains(&a.cap_rtts) || !(0.0..=86_400.0).contains(&a.cap_min_s) {
        usage("--cap-rtts must be 0..100000 and --cap-min-s 0..86400");
    }
    a
}

fn random_cid() -> [u8; quiche::MAX_CONN_ID_LEN] {
    let mut b = [0u8; quiche::MAX_CONN_ID_LEN];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    b
}

/// TLS alert names for the crypto errors a handshake meets most (RFC 8446 §6, QUIC 0x100+alert).
fn alert_name(a: u64) -> &'static str {
    match a {
        40 => "handshake_failure",
        42 => "bad_certificate",
        43 => "unsupported_certificate",
        44 => "certificate_revoked",
        45 => "certificate_expired",
        46 => "certificate_unknown",
        48 => "unknown_ca",
        70 => "protocol_version",
        80 => "internal_error",
        109 => "missing_extension",
        112 => "unrecognized_name",
        120 => "no_application_protocol",
        _ => "alert",
    }
}

fn describe_close(e: &quiche::ConnectionError, by: &str) -> (String, &'static str) {
    let reason = String::from_utf8_lossy(&e.reason).chars().take(120).collect::<String>();
    let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
    if !e.is_app && (0x100..0x200).contains(&e.error_code) {
        let alert = e.error_code - 0x100;
        if alert == 120 {
            return (format!("no h3: {by} refused the h3 ALPN (TLS alert no_application_protocol){why}"), "no_h3");
        }
        return (format!("TLS handshake failed: {by} sent alert {alert} ({}){why}", alert_name(alert)), "tls");
    }
    let layer = if e.is_app { "application" } else { "transport" };
    (format!("connection closed by {by} ({layer} error 0x{:x}){why}", e.error_code), "closed")
}

fn main() {
    let a = parse_args();
    let r = run(&a);
    println!("{}", to_json(&r));
    std::process::exit(if r.error.is_none() && (200..300).contains(&r.status) { 0 } else { 4 });
}

fn fail(r: &mut Report, kind: &'static str, msg: String) {
    if r.error.is_none() {
        r.error = Some(msg);
        r.error_kind = Some(kind);
    }
}

fn run(a: &Args) -> Report {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(a.timeout);
    let hs_deadline = start + Duration::from_secs_f64(a.handshake_timeout.min(a.timeout));
    let mut r = Report { remote: a.connect.ip().to_string(), remote_port: a.connect.port(), ..Default::default() };

    let bind: SocketAddr = if a.connect.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().unwrap();
    let sock = match UdpSocket::bind(bind).and_then(|s| s.connect(a.connect).map(|_| s)) {
        Ok(s) => s,
        Err(e) => {
            fail(&mut r, "socket", format!("cannot open a UDP socket to {}: {e}", a.connect));
            return r;
        }
    };
    let local = sock.local_addr().unwrap_or(bind);
    r.local = local.ip().to_string();
    r.local_port = local.port();

    let mut cfg = match quiche::Config::new(quiche::PROTOCOL_VERSION) {
        Ok(c) => c,
        Err(e) => {
            fail(&mut r, "internal", format!("quiche config: {e}"));
            return r;
        }
    };
    cfg.verify_peer(true);
    let ca = match &a.cafile {
        Some(f) => cfg.load_verify_locations_from_file(f),
        None => cfg
            .load_verify_locations_from_file("/etc/ssl/certs/ca-certificates.crt")
            .or_else(|_| cfg.load_verify_locations_from_directory("/etc/ssl/certs")),
    };
    if let Err(e) = ca {
        fail(&mut r, "tls", format!("cannot load CA certificates: {e}"));
        return r;
    }
    let _ = cfg.set_application_protos(quiche::h3::APPLICATION_PROTOCOL);
    cfg.set_max_idle_timeout((a.timeout * 1000.0) as u64 + 5000);
    cfg.set_max_recv_udp_payload_size(RECV_PAYLOAD);
    cfg.set_max_send_udp_payload_size(SEND_PAYLOAD);
    cfg.discover_pmtu(false);
    // Flow control must never be what limits the server: the window is its CCA's alone.
    let window = (a.max_bytes + (8 << 20)).min(1 << 30);
    cfg.set_initial_max_data(window);
    cfg.set_initial_max_stream_data_bidi_local(window);
    cfg.set_initial_max_stream_data_bidi_remote(1 << 20);
    cfg.set_initial_max_stream_data_uni(1 << 20);
    cfg.set_initial_max_streams_bidi(16);
    cfg.set_initial_max_streams_uni(16);
    cfg.set_disable_active_migration(true);
    if let Some(cc) = &a.cc {
        let _ = cfg.set_cc_algorithm_name(cc);
    }

    let scid_bytes = random_cid();
    let scid = quiche::ConnectionId::from_ref(&scid_bytes);
    let mut conn = match quiche::connect(Some(&a.sni), &scid, local, a.connect, &mut cfg) {
        Ok(c) => c,
        Err(e) => {
            fail(&mut r, "internal", format!("quiche connect: {e}"));
            return r;
        }
    };
    if let Some(path) = &a.qlog {
        match std::fs::File::create(path) {
            Ok(f) => conn.set_qlog(
                Box::new(std::io::BufWriter::new(f)),
                "ccscope-quic-get".into(),
                format!("{} {}", a.authority, a.path),
            ),
            Err(e) => eprintln!("ccscope-quic-get: cannot write qlog {path}: {e}"),
        }
    }

    let h3_cfg = quiche::h3::Config::new().expect("h3 config");
    let mut h3: Option<quiche::h3::Connection> = None;
    let mut buf = vec![0u8; 65536];
    let mut out = vec![0u8; 2048];
    let mut got_any = false;
    let mut req_sent = false;
    let mut done = false; // the response ended (or we stopped it): close and leave
    let mut first_sid: Option<u64> = None;
    let mut first_done = false;
    let mut open: HashMap<u64, Stream> = HashMap::new(); // request streams not finished yet
    let mut newest: Option<u64> = None;
    let want_cap = a.cap_rtts > 0.0 || a.cap_min_s > 0.0;
    let mut repeat = a.min_rounds > 0.0 || want_cap; // false once a repeated fetch fails
    let mut cap_end: Option<Instant> = None; // the evidence cap's end, set at the first byte
    let mut first_byte: Option<Instant> = None;
    let mut tick: Option<Instant> = None; // the last time round trips were counted

    loop {
        // -- send everything quiche has --
        loop {
            match conn.send(&mut out) {
                Ok((n, _)) => match sock.send(&out[..n]) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        fail(&mut r, "refused", format!("{}: nothing listens on UDP port {} (ICMP port unreachable)", a.connect.ip(), a.connect.port()));
                        done = true;
                        break;
                    }
                    Err(e) => {
                        fail(&mut r, "socket", format!("send failed: {e}"));
                        done = true;
                        break;
                    }
                },
                Err(quiche::Error::Done) => break,
                Err(e) => {
                    fail(&mut r, "closed", format!("quiche send: {e}"));
                    done = true;
                    break;
                }
            }
        }
        if done || conn.is_closed() {
            break;
        }

        // -- wait for a datagram or the next timer --
        let now = Instant::now();
        if now >= deadline {
            if conn.is_established() && req_sent && r.status != 0 {
                r.truncated = !first_done;
                let _ = conn.close(true, H3_REQUEST_CANCELLED, b"deadline");
            } else {
                let what = if conn.is_established() { "the response did not start" } else { "the handshake did not finish" };
                fail(&mut r, "timeout", format!("deadline of {:.0} s passed: {what}", a.timeout));
                let _ = conn.close(false, 0, b"");
            }
            done = true;
            continue;
        }
        if !conn.is_established() && now >= hs_deadline {
            let msg = if !got_any {
                format!("handshake timed out after {:.0} s: no answer from {} over UDP (QUIC not offered or filtered)", a.handshake_timeout, a.connect)
            } else if r.retry {
                format!("handshake timed out after {:.0} s: the server answered with a Retry but the handshake never completed", a.handshake_timeout)
            } else {
                format!("handshake timed out after {:.0} s: the server answered but the handshake never completed", a.handshake_timeout)
            };
            fail(&mut r, "handshake_timeout", msg);
            let _ = conn.close(false, 0, b"");
            done = true;
            continue;
        }
        let timer = conn.timeout().unwrap_or(Duration::from_secs(1));
        let mut wait = timer.min(deadline - now);
        if let Some(e) = cap_end {
            wait = wait.min(e.saturating_duration_since(now));
        }
        if !conn.is_established() {
            wait = wait.min(hs_deadline.saturating_duration_since(now));
        }
        let _ = sock.set_read_timeout(Some(wait.max(Duration::from_micros(200))));
        match sock.recv(&mut buf) {
            Ok(len) => {
                got_any = true;
                note_header(&mut r, &buf[..len]);
                let info = quiche::RecvInfo { from: a.connect, to: local };
                if let Err(e) = conn.recv(&mut buf[..len], info) {
                    if e != quiche::Error::Done && !r.offered_versions.is_empty() {
                        {
                        let m = vn_message(&r.offered_versions);
                        fail(&mut r, "version_negotiation", m);
                    }
                    }
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                fail(&mut r, "refused", format!("{}: nothing listens on UDP port {} (ICMP port unreachable)", a.connect.ip(), a.connect.port()));
                break;
            }
            Err(e) => {
                fail(&mut r, "socket", format!("receive failed: {e}"));
                break;
            }
        }
        if conn.timeout() == Some(Duration::ZERO) {
            conn.on_timeout();
        }
        if conn.is_closed() {
            break;
        }

        // -- HTTP/3 once the handshake is done --
        if conn.is_established() && r.handshake_ms.is_none() {
            r.handshake_ms = Some(start.elapsed().as_secs_f64() * 1000.0);
            r.alpn = String::from_utf8_lossy(conn.application_proto()).into_owned();
            r.version = quiche::PROTOCOL_VERSION;
            if conn.application_proto() != b"h3" {
                let m = format!("no h3: the server chose ALPN {:?}", r.alpn);
                fail(&mut r, "no_h3", m);
                let _ = conn.close(false, 0x178, b"");
                done = true;
                continue;
            }
            match quiche::h3::Connection::with_transport(&mut conn, &h3_cfg) {
                Ok(h) => h3 = Some(h),
                Err(e) => {
                    fail(&mut r, "h3", format!("HTTP/3 set-up failed: {e}"));
                    let _ = conn.close(true, 0x101, b"");
                    done = true;
                    continue;
                }
            }
        }
        let Some(h) = h3.as_mut() else { continue };
        loop {
            match h.poll(&mut conn) {
                Ok((sid, quiche::h3::Event::Headers { list, .. })) if Some(sid) != first_sid => {
                    // a repeated fetch: only its status and length matter
                    if let Some(s) = open.get_mut(&sid) {
                        s.headers = true;
                    }
                    for hd in &list {
                        let v = String::from_utf8_lossy(hd.value()).into_owned();
                        match hd.name() {
                            b":status" if !v.starts_with('2') => repeat = false,
                            b"content-length" => {
                                if let Some(s) = open.get_mut(&sid) {
                                    s.len = v.parse().ok();
                                }
                            }
                            _ => {}
                        }
                    }
                }
                Ok((sid, quiche::h3::Event::Headers { list, .. })) => {
                    if let Some(s) = open.get_mut(&sid) {
                        s.headers = true;
                    }
                    for hd in &list {
                        let v = String::from_utf8_lossy(hd.value()).chars().take(2048).collect::<String>();
                        match hd.name() {
                            b":status" => r.status = v.parse().unwrap_or(0),
                            b"location" => r.location = Some(v),
                            b"content-length" => {
                                r.content_length = v.parse().ok();
                                if let Some(s) = open.get_mut(&sid) {
                                    s.len = r.content_length;
                                }
                            }
                            b"alt-svc" => r.alt_svc = Some(v),
                            b"server" => r.server = Some(v),
                            _ => {}
                        }
                    }
                    if (300..400).contains(&r.status) && r.location.is_some() {
                        // the caller follows it (vetting the new target first)
                        let _ = conn.close(true, H3_REQUEST_CANCELLED, b"redirect");
                        done = true;
                        break;
                    }
                }
                Ok((sid, quiche::h3::Event::Data)) => {
                    while let Ok(n) = h.recv_body(&mut conn, sid, &mut buf) {
                        r.bytes += n as u64;
                        if let Some(s) = open.get_mut(&sid) {
                            s.got += n as u64;
                        }
                        if tick.is_none() && n > 0 {
                            first_byte = Some(Instant::now());
                            tick = first_byte;
                        }
                    }
                    if r.bytes >= a.max_bytes {
                        r.truncated = !first_done; // the cap ends repeats, not the object
                        let _ = conn.close(true, H3_REQUEST_CANCELLED, b"enough");
                        done = true;
                        break;
                    }
                }
                Ok((sid, quiche::h3::Event::Finished)) => {
                    let s = open.remove(&sid).unwrap_or_default();
                    if Some(sid) == first_sid {
                        if let Some(cl) = r.content_length {
                            r.truncated |= s.got < cl;
                        }
                        first_done = true;
                    }
                    // more round trips may be needed: the check after this loop closes or asks again
                }
                Ok((sid, quiche::h3::Event::Reset(_))) if Some(sid) != first_sid => {
                    open.remove(&sid);
                    repeat = false;
                }
                Ok((_, quiche::h3::Event::Reset(code))) => {
                    fail(&mut r, "h3", format!("the server reset the request stream (HTTP/3 error 0x{code:x})"));
                    r.truncated = true;
                    let _ = conn.close(true, H3_NO_ERROR, b"");
                    done = true;
                    break;
                }
                Ok(_) => {}
                Err(quiche::h3::Error::Done) => break,
                Err(e) => {
                    fail(&mut r, "h3", format!("HTTP/3 error: {e}"));
                    let _ = conn.close(true, 0x101, b""); // H3_GENERAL_PROTOCOL_ERROR
                    done = true;
                    break;
                }
            }
        }
        // Round trips of transfer so far, each interval over the smoothed RTT of its time.
        if let Some(t) = tick {
            let now = Instant::now();
            if let Some(p) = conn.path_stats().next() {
                if !p.rtt.is_zero() {
                    r.rounds += (now - t).as_secs_f64() / p.rtt.as_secs_f64();
                }
            }
            tick = Some(now);
        }
        // The evidence cap, fixed once the response starts: the handshake and the request have
        // given the path's minimum RTT by then, as TCP_INFO gives the TCP client.
        if cap_end.is_none() && want_cap && first_byte.is_some() {
            let min_rtt = conn.path_stats().next().and_then(|p| p.min_rtt).map_or(0.0, |d| d.as_secs_f64());
            let cap = a.cap_min_s.max(a.cap_rtts * min_rtt).min(a.timeout);
            r.cap_s = Some(cap);
            cap_end = Some(start + Duration::from_secs_f64(cap));
        }
        let short_of_cap = cap_end.map_or(want_cap, |e| Instant::now() < e);
        if done {
            continue;
        }
        if cap_end.is_some() && !short_of_cap && r.status != 0 {
            r.truncated = !first_done; // an object still coming is cut there, as TCP's is
            let _ = conn.close(true, H3_REQUEST_CANCELLED, b"evidence cap");
            done = true;
            continue;
        }
        if first_done && (!repeat || (r.rounds >= a.min_rounds && !short_of_cap)) {
            let _ = conn.close(true, H3_NO_ERROR, b"");
            done = true;
            continue;
        }
        let again = req_sent && repeat && (200..300).contains(&r.status) && (r.rounds < a.min_rounds || short_of_cap)
            && open.len() < 2 && newest.map_or(true, |sid| {
                let srtt = conn.path_stats().next().map_or(0.0, |p| p.rtt.as_secs_f64());
                near_end(open.get(&sid), r.bytes, first_byte, srtt)
            });
        if !req_sent || again {
            match send_get(h, &mut conn, a, !req_sent) {
                Ok(sid) => {
                    if !req_sent {
                        first_sid = Some(sid);
                    }
                    req_sent = true;
                    r.requests += 1;
                    open.insert(sid, Stream::default());
                    newest = Some(sid);
                }
                Err(quiche::h3::Error::StreamBlocked) => {}
                Err(_) if req_sent => repeat = false, // the first fetch goes on
                Err(e) => {
                    fail(&mut r, "h3", format!("cannot send the request: {e}"));
                    done = true;
                    continue;
                }
            }
        }
    }

    // -- why it ended, if not by finishing --
    if r.error.is_none() && !done {
        if let Some(e) = conn.peer_error() {
            let (m, k) = describe_close(e, "the server");
            fail(&mut r, k, m);
        } else if let Some(e) = conn.local_error() {
            let (m, k) = describe_close(e, "this client");
            fail(&mut r, k, m);
        } else if !r.offered_versions.is_empty() {
            {
                        let m = vn_message(&r.offered_versions);
                        fail(&mut r, "version_negotiation", m);
                    }
        } else if conn.is_timed_out() {
            fail(&mut r, "timeout", "the connection went idle (QUIC idle timeout)".into());
        } else if r.status == 0 {
            fail(&mut r, "closed", "the connection ended before a response".into());
        }
    }
    if r.error.is_none() && r.status == 0 {
        if let Some(e) = conn.peer_error() {
            let (m, k) = describe_close(e, "the server");
            fail(&mut r, k, m);
        }
    }
    let st = conn.stats();
    r.packets_recv = st.recv;
    r.packets_sent = st.sent;
    r.lost = st.lost;
    if let Some(p) = conn.path_stats().next() {
        r.rtt_ms = p.rtt.as_secs_f64() * 1000.0;
        r.min_rtt_ms = p.min_rtt.map(|d| d.as_secs_f64() * 1000.0);
    }
    r.seconds = start.elapsed().as_secs_f64();
    r
}

/// A GET for the object; the first carries the lab's run id (the server's record is per run).
fn send_get(
    h: &mut quiche::h3::Connection,
    conn: &mut quiche::Connection,
    a: &Args,
    first: bool,
) -> Result<u64, quiche::h3::Error> {
    let mut hdrs = vec![
        quiche::h3::Header::new(b":method", b"GET"),
        quiche::h3::Header::new(b":scheme", b"https"),
        quiche::h3::Header::new(b":authority", a.authority.as_bytes()),
        quiche::h3::Header::new(b":path", a.path.as_bytes()),
        quiche::h3::Header::new(b"user-agent", a.user_agent.as_bytes()),
        quiche::h3::Header::new(b"accept", b"*/*"),
        quiche::h3::Header::new(b"accept-encoding", b"identity"),
    ];
    if let (true, Some(id)) = (first, &a.run_id) {
        hdrs.push(quiche::h3::Header::new(b"x-ccscope-run", id.as_bytes()));
    }
    h.send_request(conn, &hdrs, true)
}

/// Whether the newest response ends within about two round trips at the goodput so far (the
/// next request then reaches the server before it runs dry), or has ended, or has started
/// without a length (then the next request goes at once: the server queues it behind).
fn near_end(s: Option<&Stream>, total: u64, first_byte: Option<Instant>, srtt: f64) -> bool {
    let Some(s) = s else { return true };
    if !s.headers {
        return false;
    }
    let Some(len) = s.len else { return true };
    let Some(t0) = first_byte else { return false };
    let rate = total as f64 / t0.elapsed().as_secs_f64().max(1e-3);
    (len.saturating_sub(s.got) as f64) <= rate * 2.0 * srtt.max(0.001)
}

fn vn_message(v: &[u32]) -> String {
    let list: Vec<String> = v.iter().map(|x| format!("0x{x:08x}")).collect();
    format!(
        "version negotiation: the server offers only {} and this client speaks 0x{:08x}",
        list.join(", "),
        quiche::PROTOCOL_VERSION
    )
}

/// Watch the long headers the server sends before quiche consumes them: a Version Negotiation
/// or a Retry is a reason worth reporting when the handshake fails.
fn note_header(r: &mut Report, d: &[u8]) {
    if d.is_empty() || d[0] & 0x80 == 0 {
        return;
    }
    let mut copy = d[..d.len().min(1500)].to_vec();
    if let Ok(h) = quiche::Header::from_slice(&mut copy, quiche::MAX_CONN_ID_LEN) {
        match h.ty {
            quiche::Type::VersionNegotiation => {
                if let Some(v) = h.versions {
                    r.offered_versions = v.into_iter().take(16).collect();
                }
            }
            quiche::Type::Retry => r.retry = true,
            _ => {}
        }
    }
}

// --- one JSON line, by hand (no serde for a dozen fields) ---

fn js(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn opt_s(out: &mut String, k: &str, v: &Option<String>) {
    let _ = write!(out, ",\"{k}\":");
    match v {
        Some(s) => js(out, s),
        None => out.push_str("null"),
    }
}

fn to_json(r: &Report) -> String {
    let mut o = String::with_capacity(512);
    let _ = write!(o, "{{\"status\":{},\"bytes\":{},\"seconds\":{:.4}", r.status, r.bytes, r.seconds);
    o.push_str(",\"remote\":");
    js(&mut o, &r.remote);
    let _ = write!(o, ",\"remote_port\":{}", r.remote_port);
    o.push_str(",\"local\":");
    js(&mut o, &r.local);
    let _ = write!(o, ",\"local_port\":{},\"truncated\":{}", r.local_port, r.truncated);
    opt_s(&mut o, "error", &r.error);
    opt_s(&mut o, "error_kind", &r.error_kind.map(String::from));
    o.push_str(",\"alpn\":");
    js(&mut o, &r.alpn);
    let _ = write!(o, ",\"quic_version\":{}", r.version);
    match r.handshake_ms {
        Some(h) => {
            let _ = write!(o, ",\"handshake_ms\":{h:.3}");
        }
        None => o.push_str(",\"handshake_ms\":null"),
    }
    let _ = write!(o, ",\"retry\":{}", r.retry);
    let vs: Vec<String> = r.offered_versions.iter().map(|v| v.to_string()).collect();
    let _ = write!(o, ",\"offered_versions\":[{}]", vs.join(","));
    opt_s(&mut o, "location", &r.location);
    match r.content_length {
        Some(c) => {
            let _ = write!(o, ",\"content_length\":{c}");
        }
        None => o.push_str(",\"content_length\":null"),
    }
    opt_s(&mut o, "alt_svc", &r.alt_svc);
    opt_s(&mut o, "server", &r.server);
    let _ = write!(
        o,
        ",\"packets_recv\":{},\"packets_sent\":{},\"lost\":{},\"rtt_ms\":{:.3}",
        r.packets_recv, r.packets_sent, r.lost, r.rtt_ms
    );
    match r.min_rtt_ms {
        Some(m) => {
            let _ = write!(o, ",\"min_rtt_ms\":{m:.3}");
        }
        None => o.push_str(",\"min_rtt_ms\":null"),
    }
    let _ = write!(o, ",\"requests\":{},\"rounds\":{:.1}", r.requests, r.rounds);
    match r.cap_s {
        Some(c) => {
            let _ = write!(o, ",\"cap_s\":{c:.3}");
        }
        None => o.push_str(",\"cap_s\":null"),
    }
    o.push('}');
    o
}
