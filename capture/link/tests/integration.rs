//! End-to-end tests of the real binary. They need root, /dev/net/tun,
//! iproute2 and nft; without root they are skipped (reported, not failed).
//! They run one at a time (global lock) so device checks are meaningful.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ccscope-link")
}

fn root() -> bool {
    // SAFETY: trivial syscall.
    let ok = unsafe { libc::geteuid() } == 0 && std::path::Path::new("/dev/net/tun").exists();
    if !ok {
        eprintln!("SKIP: needs root and /dev/net/tun");
    }
    ok
}

fn have(tool: &str) -> bool {
    let ok = Command::new("sh").args(["-c", &format!("command -v {}", tool)]).output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        eprintln!("SKIP: {} not installed", tool);
    }
    ok
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ccscope-link-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn sh(cmd: &str) -> String {
    let o = Command::new("sh").args(["-c", cmd]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ccs_devices() -> Vec<String> {
    sh("ip -o link show")
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(|s| s.trim().split('@').next().unwrap_or("").to_string()))
        .filter(|n| n.starts_with("ccs"))
        .collect()
}

/// Per-shell nft tables (the shared `ccscope_shells` table is static plumbing, not a shell's).
fn ccs_tables() -> Vec<String> {
    sh("nft list tables 2>/dev/null")
        .lines()
        .filter(|l| l.contains("ccscope_") && !l.contains("ccscope_shells"))
        .map(String::from)
        .collect()
}

/// Is `pid` a descendant of this test process?
fn ours(pid: u32) -> bool {
    let me = std::process::id();
    let mut p = pid;
    for _ in 0..64 {
        if p == me {
            return true;
        }
        let Ok(st) = std::fs::read_to_string(format!("/proc/{}/stat", p)) else { return false };
        let Some(rest) = st.rsplit_once(')').map(|x| x.1) else { return false };
        match rest.split_whitespace().nth(1).and_then(|x| x.parse().ok()) {
            Some(pp) if pp > 1 => p = pp,
            _ => return false,
        }
    }
    false
}

/// Shell index named by a device (ccs<idx>o) or table (ccscope_<idx>_<pid>).
fn index_of(name: &str) -> Option<u32> {
    if let Some(i) = name.find("ccscope_") {
        return name[i + 8..].split('_').next()?.parse().ok();
    }
    name.strip_prefix("ccs")?.trim_end_matches(['o', 'i']).parse().ok()
}

/// Entries belonging to live shells of other users of this machine.
fn foreign(name: &str) -> bool {
    let Some(idx) = index_of(name) else { return false };
    let pid = std::fs::read_to_string(format!("/run/ccscope/shells/{}.lock", idx))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    matches!(pid, Some(p) if std::path::Path::new(&format!("/proc/{}", p)).exists() && !ours(p))
}

/// Run a test body, then check that no shell state is left behind
/// (ignoring live shells that other programs on this machine own).
fn guarded(f: impl FnOnce()) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    f();
    // Teardown is synchronous, but give the kernel a moment to unregister.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut left: Vec<String> = ccs_devices().into_iter().chain(ccs_tables()).filter(|n| !foreign(n)).collect();
        left.sort();
        if left.is_empty() || Instant::now() > deadline {
            assert!(left.is_empty(), "shell state left behind: {:?}", left);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn stats(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Pull a number out of our own pretty JSON without a JSON dependency:
/// finds `"key": value` after the first occurrence of `section`.
fn num_after(json: &str, section: &str, key: &str) -> f64 {
    let start = json.find(section).unwrap_or_else(|| panic!("{} not in stats", section));
    let rest = &json[start..];
    let k = format!("\"{}\": ", key);
    let i = rest.find(&k).unwrap_or_else(|| panic!("{} not in stats", key)) + k.len();
    let v: String = rest[i..].chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-' || *c == 'e').collect();
    v.parse().unwrap_or_else(|_| panic!("bad number for {}: {:?}", key, &rest[i..i + 20]))
}

/// Start the binary with a pipe on fd 3 for --ready-fd; waits for "ready".
fn spawn_ready(args: &[&str]) -> Child {
    let mut fds = [0i32; 2];
    // CLOEXEC so children spawned by concurrently running tests don't inherit it.
    // SAFETY: pipe2() fills two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (r, w) = (fds[0], fds[1]);
    let mut cmd = Command::new(bin());
    cmd.args(["--ready-fd", "3"]).args(args).stdin(Stdio::null());
    // SAFETY: only dup2/fcntl between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            // dup2 onto 3 clears CLOEXEC; if w already is 3, clear it by hand.
            let rc = if w == 3 { libc::fcntl(3, libc::F_SETFD, 0) } else { libc::dup2(w, 3) };
            if rc < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    // SAFETY: closing our copy of the write end; r is owned by `f` below.
    unsafe { libc::close(w) };
    let mut f = unsafe { std::fs::File::from_raw_fd(r) };
    let mut s = Vec::new();
    let mut b = [0u8; 1];
    while f.read(&mut b).unwrap_or(0) == 1 {
        s.push(b[0]);
        if b[0] == b'\n' {
            break;
        }
    }
    assert_eq!(text(&s), "ready\n", "shell did not report ready");
    child
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling a child we spawned.
    unsafe { libc::kill(child.id() as i32, sig) };
}

#[test]
fn check_mode_and_bad_options() {
    let o = run(&["--check", "--rate", "500pps:1500p,334pps:1500p,500pps", "--buffer", "2bdp", "--delay", "50"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("\"packets\": 100"), "{}", out);
    assert!(out.contains("500pps:1500p,334pps:1500p,500pps"));
    let o = run(&["--check", "--rate", "fast"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).starts_with("ccscope-link: error: "), "{}", text(&o.stderr));
    let o = run(&["--delay", "x", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn ping_rtt_with_delay() {
    if !root() || !have("ping") {
        return;
    }
    guarded(|| {
        let st = tmp("ping.json");
        let o = run(&[
            "--delay", "25", "--stats", st.to_str().unwrap(), "--keep-root", "--",
            "sh", "-c", "ping -c 20 -i 0.05 $CCSCOPE_SHELL_OUTER_ADDR",
        ]);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{}\n{}", out, text(&o.stderr));
        let line = out.lines().find(|l| l.contains("min/avg/max")).expect("ping summary");
        let nums: Vec<f64> = line.split('=').nth(1).unwrap().trim().split(' ').next().unwrap().split('/').map(|x| x.parse().unwrap()).collect();
        let (min, avg) = (nums[0], nums[1]);
        // Functional bounds only: timing precision is measured by bench/emulator, and a loaded CI
        // box has shown stalls of tens of ms. The minimum of 20 pings is what the delay sets.
        assert!((50.0..60.0).contains(&min), "rtt min {} avg {} (want ~50 ms)", min, avg);
        assert!(out.contains(" 0% packet loss"), "{}", out);
        let s = stats(&st);
        // >= : a stray packet (e.g. a late RST from an earlier test) may cross too
        assert!(num_after(&s, "\"down\": {\n    \"packets_in\"", "packets_in") as u64 >= 20);
        // Lateness is reported (its figures are the bench's, it depends on the host's load).
        assert!(num_after(&s, "\"up\": {\n    \"packets_in\"", "p99") >= 0.0);
        assert_eq!(num_after(&s, "\"exit_status\"", "exit_status"), 0.0);
    });
}

/// A bulk TCP download from a listener in the root namespace through a
/// 1 Mbit/s bottleneck with a 20-packet buffer.
/// The (left, right) edges of the SACK blocks in a TCP header's options.
fn sack_blocks(tcp: &[u8]) -> Vec<(u32, u32)> {
    let end = ((tcp[12] >> 4) as usize * 4).min(tcp.len());
    let mut out = Vec::new();
    let mut i = 20;
    while i < end {
        match tcp[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let len = *tcp.get(i + 1).unwrap_or(&0) as usize;
                if len < 2 || i + len > end {
                    break;
                }
                if kind == 5 {
                    out.extend(tcp[i + 2..i + len].chunks_exact(8).map(|b| {
                        (u32::from_be_bytes(b[0..4].try_into().unwrap()), u32::from_be_bytes(b[4..8].try_into().unwrap()))
                    }));
                }
                i += len;
            }
        }
    }
    out
}

#[test]
fn tcp_transfer_rate_and_pcap() {
    if !root() {
        return;
    }
    guarded(|| {
        const BYTES: usize = 500_000;
        let l = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let srv = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let buf = vec![7u8; 16384];
            let mut left = BYTES;
            while left > 0 {
                let n = left.min(buf.len());
                c.write_all(&buf[..n]).unwrap();
                left -= n;
            }
        });
        let pcap = tmp("bulk.pcap");
        let st = tmp("bulk.json");
        let cmd = format!("exec 3<>/dev/tcp/$CCSCOPE_SHELL_OUTER_ADDR/{} && cat <&3 | wc -c", port);
        let o = run(&[
            "--rate", "1mbit", "--buffer", "20p", "--pcap", pcap.to_str().unwrap(),
            "--stats", st.to_str().unwrap(), "--quiet", "--", "bash", "-c", &cmd,
        ]);
        srv.join().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(text(&o.stdout).trim(), BYTES.to_string());
        assert!(o.stderr.is_empty(), "--quiet printed: {}", text(&o.stderr));

        // pcap: parses, headers only, both directions, in time order
        let raw = std::fs::read(&pcap).unwrap();
        let recs = ccscope_link::pcap::read_all(&raw).expect("pcap parses");
        assert!(recs.len() > 300);
        assert!(recs.windows(2).all(|w| w[0].0 <= w[1].0), "pcap not in time order");
        assert!(recs.iter().all(|r| r.1 <= 60 + 20 && r.1 <= r.2));
        // Goodput from the receiver's ACKs (up packets are stamped after the
        // bottleneck's outer edge; ACKs pace at the bottleneck). The cumulative
        // ACK stalls through a loss recovery and then jumps, so an end point
        // taken mid-stall reads the rate up to ~8 % high; the highest SACKed
        // byte runs ahead of it by the holes. Count the bytes delivered: the
        // ACK plus the SACK blocks above it.
        let inner: Vec<u8> = recs.iter().find(|r| r.3[9] == 6).map(|r| r.3[12..16].to_vec()).unwrap();
        let delivered: Vec<(u64, u32)> = recs
            .iter()
            .filter(|r| r.3.len() >= 40 && r.3[9] == 6 && r.3[12..16] == inner[..])
            .filter_map(|r| {
                let ihl = (r.3[0] & 15) as usize * 4;
                let tcp = &r.3[ihl..];
                if tcp.len() < 20 || tcp[13] & 0x10 == 0 {
                    return None;
                }
                let ack = u32::from_be_bytes(tcp[8..12].try_into().unwrap());
                let sacked: u32 = sack_blocks(tcp)
                    .into_iter()
                    .filter(|&(l, r)| l.wrapping_sub(ack) as i32 >= 0 && r.wrapping_sub(l) as i32 > 0)
                    .map(|(l, r)| r.wrapping_sub(l))
                    .sum();
                Some((r.0, ack.wrapping_add(sacked)))
            })
            .collect();
        // Sequence numbers are absolute (random ISN): work relative to the first.
        let base = delivered[0].1;
        let mut high = 0u32;
        let curve: Vec<(u64, u32)> = delivered
            .iter()
            .map(|&(t, a)| {
                high = high.max(a.wrapping_sub(base));
                (t, high)
            })
            .collect();
        let (t0, a0) = curve.iter().find(|(_, a)| *a > 100_000).copied().unwrap();
        let (t1, a1) = *curve.last().unwrap();
        let goodput = (a1 - a0) as f64 * 8.0 / ((t1 - t0) as f64 / 1e9);
        // 1448 payload bytes per 1500-byte packet: ~0.965 Mbit/s of goodput.
        assert!((0.93e6..1.0e6).contains(&goodput), "goodput {} bit/s", goodput);

        let s = stats(&st);
        let achieved = num_after(&s, "\"down\": {\n    \"packets_in\"", "achieved_rate_bps");
        assert!((achieved - 1e6).abs() < 0.01e6, "achieved {} bit/s", achieved);
        let maxq = num_after(&s, "\"down\": {\n    \"packets_in\"", "max_queue_packets");
        assert!(maxq <= 20.0, "queue {} > buffer", maxq);
        // Lateness is reported, not judged here: how late the emulator runs depends on the
        // host's load (bench/scale measures where it breaks); a test asserts behaviour only.
        let p99 = num_after(&s, "\"down\": {\n    \"packets_in\"", "p99");
        assert!(p99.is_finite() && p99 >= 0.0, "lateness p99 {} us", p99);
    });
}

#[test]
fn sigterm_is_forwarded_and_torn_down() {
    if !root() {
        return;
    }
    guarded(|| {
        let mut c = spawn_ready(&["--quiet", "--", "sleep", "30"]);
        assert!(!ccs_devices().is_empty());
        let t = Instant::now();
        signal(&c, libc::SIGTERM);
        let st = c.wait().unwrap();
        assert_eq!(st.code(), Some(128 + libc::SIGTERM));
        assert!(t.elapsed() < Duration::from_secs(10), "teardown hung");
    });
}

/// After the command exits, the shell keeps forwarding what is still on the link. That drain
/// must sleep between packets: it once spun from the first spent one-second child check to
/// the drain's end, and at SCHED_FIFO a spinning shell starves every other shell on its CPU.
#[test]
fn drain_after_exit_sleeps_between_packets() {
    if !root() || !have("ping") {
        return;
    }
    guarded(|| {
        let st = tmp("drain.json");
        // The echo request waits 1.4 s on the way up: the command has long exited when it
        // leaves, past the child check at 1 s (and inside the 1.5 s drain).
        let o = run(&[
            "--quiet", "--delay", "1400", "--stats", st.to_str().unwrap(), "--keep-root", "--",
            "sh", "-c", "ping -c 1 -W 3 $CCSCOPE_SHELL_OUTER_ADDR >/dev/null 2>&1 & sleep 0.1; exit 0",
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let s = stats(&st);
        // The request did cross: the drain lasted past the 1 s check.
        assert!(num_after(&s, "\"up\": {\n    \"packets_in\"", "packets_out") as u64 >= 1, "{}", s);
        assert!(num_after(&s, "\"loop_sys_us\"", "duration_s") > 1.2, "{}", s);
        let loop_us = num_after(&s, "\"loop_user_us\"", "loop_user_us") + num_after(&s, "\"loop_sys_us\"", "loop_sys_us");
        // Sleeping, the loop costs a few ms; the spin cost the 0.4 s from 1 s to the release.
        assert!(loop_us < 150_000.0, "the drain spun: loop CPU {} us\n{}", loop_us, s);
    });
}

#[test]
fn exit_status_is_propagated() {
    if !root() {
        return;
    }
    guarded(|| {
        let o = run(&["--quiet", "--", "sh", "-c", "exit 7"]);
        assert_eq!(o.status.code(), Some(7));
        let o = run(&["--quiet", "--", "/nonexistent/cmd"]);
        assert_eq!(o.status.code(), Some(127));
    });
}

#[test]
fn cleanup_after_sigkill() {
    if !root() || !have("nft") {
        return;
    }
    guarded(|| {
        let mut c = spawn_ready(&["--quiet", "--", "sleep", "30"]);
        let pid = c.id();
        // Shells share one static NAT table and make none of their own: nothing of a killed
        // shell's is left in nftables, only its lock for the next pass to remove.
        assert!(sh("nft list tables").contains("ccscope_shells"));
        assert!(ccs_tables().is_empty(), "{:?}", ccs_tables());
        signal(&c, libc::SIGKILL);
        c.wait().unwrap();
        // The killed shell's forked child may take a moment to die (PDEATHSIG), and holds the
        // lock until it does.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut out = String::new();
        loop {
            let o = run(&["--cleanup"]);
            assert!(o.status.success());
            out.push_str(&text(&o.stdout));
            if out.contains(".lock") || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(out.contains(".lock") && out.contains(&format!("pid {}", pid)), "cleanup output: {}", out);
        assert!(ccs_tables().is_empty());
    });
}

#[test]
fn nested_shells() {
    if !root() || !have("ping") {
        return;
    }
    guarded(|| {
        let cmd = format!(
            "export A=$CCSCOPE_SHELL_OUTER_ADDR; {} --quiet --delay 5 --keep-root --pass-env A -- sh -c 'echo depth=$CCSCOPE_SHELL_DEPTH; ping -c 5 -i 0.05 $A'",
            bin()
        );
        // A nested shell needs root to build its namespace; ping needs CAP_NET_RAW.
        let o = run(&["--quiet", "--delay", "10", "--keep-root", "--", "sh", "-c", &cmd]);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{}\n{}", out, text(&o.stderr));
        assert!(out.contains("depth=2"), "{}", out);
        let line = out.lines().find(|l| l.contains("min/avg/max")).expect("ping summary");
        // The minimum of the pings: both delays once each (30 ms), not one of them twice (40).
        let min: f64 = line.split('=').nth(1).unwrap().trim().split('/').next().unwrap().parse().unwrap();
        assert!((30.0..38.0).contains(&min), "nested rtt {} (want ~30 ms)", min);
    });
}

#[test]
fn server_inside_with_route_inner_addr_and_hosts() {
    if !root() || !have("python3") {
        return;
    }
    guarded(|| {
        let hosts = tmp("hosts");
        // 198.19.254.0/24: outside 198.18.0.0/16, where lab instances live, so a running lab
        // (a developer's, or the demo's) does not collide with this test.
        std::fs::write(&hosts, "127.0.0.1 localhost\n198.19.254.1 cubic.lab.test\n").unwrap();
        let seen = tmp("seen");
        let cmd = format!(
            "getent hosts cubic.lab.test > {}; exec python3 -m http.server 18123 --bind 198.19.254.1",
            seen.display()
        );
        // A server writing into the test's (root's) temporary directory: it keeps root, as the
        // lab's servers do.
        let mut c = spawn_ready(&[
            "--quiet", "--delay", "5", "--inner-addr", "198.19.254.1/32", "--route", "198.19.254.0/24",
            "--hosts", hosts.to_str().unwrap(), "--keep-root", "--", "sh", "-c", &cmd,
        ]);
        // Outside, the lab name must not resolve via the shell's hosts file.
        assert!(!std::fs::read_to_string("/etc/hosts").unwrap().contains("cubic.lab.test"));
        let deadline = Instant::now() + Duration::from_secs(10);
        let rtt = loop {
            let t = Instant::now();
            match TcpStream::connect_timeout(&"198.19.254.1:18123".parse().unwrap(), Duration::from_secs(2)) {
                Ok(mut s) => {
                    let rtt = t.elapsed();
                    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
                    let mut r = String::new();
                    let _ = s.read_to_string(&mut r);
                    assert!(r.starts_with("HTTP/1.0 200"), "{}", r);
                    break rtt;
                }
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => panic!("cannot reach server inside the shell: {}", e),
            }
        };
        // One sample: only the delay's floor is behaviour (a loaded host has stalled this one
        // connect by 70 ms; the ping tests bound the delay from above by their minimum).
        assert!(rtt >= Duration::from_millis(10), "connect rtt {:?}", rtt);
        assert!(std::fs::read_to_string(&seen).unwrap().contains("198.19.254.1"));
        signal(&c, libc::SIGTERM);
        let st = c.wait().unwrap();
        assert_eq!(st.code(), Some(128 + libc::SIGTERM));
    });
}

#[test]
fn failed_setup_is_torn_down() {
    if !root() {
        return;
    }
    guarded(|| {
        // 127.0.0.1/8 already exists on the inner lo: setup fails half-way.
        let o = run(&["--quiet", "--inner-addr", "127.0.0.1/8", "--", "true"]);
        assert_eq!(o.status.code(), Some(7)); // set-up failure, not a usage error
        let err = text(&o.stderr);
        assert!(err.starts_with("ccscope-link: error: "), "{}", err);
        // Bad output path: rejected before any network state exists.
        let o = run(&["--quiet", "--pcap", "/nonexistent/dir/x.pcap", "--", "true"]);
        assert_eq!(o.status.code(), Some(7));
        assert!(text(&o.stderr).contains("--pcap"));
    });
}

/// The command's pid: the shell's only child, once it has exec'd the command.
fn inner_pid(shell: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let kids = std::fs::read_to_string(format!("/proc/{}/task/{}/children", shell, shell)).unwrap_or_default();
        if let Some(p) = kids.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()) {
            let comm = std::fs::read_to_string(format!("/proc/{}/comm", p)).unwrap_or_default();
            if !comm.is_empty() && comm.trim() != "ccscope-link" {
                return p;
            }
        }
        assert!(Instant::now() < deadline, "the shell started no command");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status_field(pid: u32, key: &str) -> String {
    let st = std::fs::read_to_string(format!("/proc/{}/status", pid)).unwrap();
    st.lines().find(|l| l.starts_with(&format!("{}:", key))).unwrap().split_once(':').unwrap().1.trim().to_string()
}

#[test]
fn command_runs_unprivileged_with_a_scrubbed_environment() {
    if !root() {
        return;
    }
    guarded(|| {
        let mut cmd = Command::new(bin());
        cmd.args(["--ready-fd", "1", "--quiet", "--pass-env", "KEEP_ME", "--", "sleep", "30"])
            .env("CCSCOPE_API_TOKEN", "secret-token")
            .env("PYTHONPATH", "/tmp/evil")
            .env("KEEP_ME", "yes")
            .env("LC_ALL", "C")
            .stdout(Stdio::piped());
        let mut c = cmd.spawn().unwrap();
        let mut line = [0u8; 6];
        c.stdout.as_mut().unwrap().read_exact(&mut line).unwrap();
        let pid = inner_pid(c.id());
        let uid = status_field(pid, "Uid");
        assert!(uid.split_whitespace().all(|u| u != "0"), "command runs as uid {}", uid);
        assert!(status_field(pid, "Gid").split_whitespace().all(|g| g != "0"));
        assert_eq!(status_field(pid, "Groups"), "");
        for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(status_field(pid, cap), "0000000000000000", "{} of the command", cap);
        }
        assert_eq!(status_field(pid, "NoNewPrivs"), "1");
        let env = std::fs::read(format!("/proc/{}/environ", pid)).unwrap();
        let env: Vec<String> = env.split(|b| *b == 0).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
        assert!(!env.iter().any(|v| v.starts_with("CCSCOPE_API_TOKEN=") || v.starts_with("PYTHONPATH=")), "{:?}", env);
        for want in ["KEEP_ME=yes", "LC_ALL=C", "CCSCOPE_SHELL_DEPTH=1"] {
            assert!(env.iter().any(|v| v == want), "{} missing from {:?}", want, env);
        }
        assert!(env.iter().any(|v| v.starts_with("PATH=")));
        signal(&c, libc::SIGTERM);
        c.wait().unwrap();
    });
}

#[test]
fn keep_root_keeps_root_and_nests() {
    if !root() {
        return;
    }
    guarded(|| {
        let cmd = format!("grep ^CapEff /proc/self/status; {} --quiet -- id -u", bin());
        let o = run(&["--quiet", "--keep-root", "--", "sh", "-c", &cmd]);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{}{}", out, text(&o.stderr));
        assert!(!out.contains("CapEff:\t0000000000000000"), "{}", out);
        let inner_uid: u32 = out.lines().last().unwrap().trim().parse().unwrap();
        assert_ne!(inner_uid, 0, "the nested shell's command must drop root");
        // Without --keep-root a nested shell cannot build its namespace: a set-up failure (7).
        let o = run(&["--quiet", "--", bin(), "--quiet", "--", "true"]);
        assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains("must run as root"));
    });
}

#[test]
fn shell_stops_when_its_parent_is_killed() {
    if !root() {
        return;
    }
    guarded(|| {
        // A parent that starts a shell and is then SIGKILLed, as a worker can be.
        let script = format!("{} --quiet -- sleep 60 & echo $!; wait", bin());
        let mut parent = Command::new("sh").args(["-c", &script]).stdout(Stdio::piped()).spawn().unwrap();
        let mut buf = String::new();
        let mut b = [0u8; 1];
        while parent.stdout.as_mut().unwrap().read(&mut b).unwrap() == 1 && b[0] != b'\n' {
            buf.push(b[0] as char);
        }
        let link: u32 = buf.trim().parse().unwrap();
        let sleeper = inner_pid(link);
        signal(&parent, libc::SIGKILL);
        parent.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while (std::path::Path::new(&format!("/proc/{}", link)).exists()
            || std::path::Path::new(&format!("/proc/{}", sleeper)).exists())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        // (Reaped by init: a zombie would still show; its state must not be running.)
        for p in [link, sleeper] {
            let st = std::fs::read_to_string(format!("/proc/{}/stat", p)).unwrap_or_default();
            assert!(st.is_empty() || st.contains(") Z"), "pid {} survived its parent: {}", p, st);
        }
    });
}
