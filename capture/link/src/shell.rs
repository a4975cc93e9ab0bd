//! Shell lifecycle: setup (namespaces, TUNs, NAT), the child command, the
//! packet event loop, and a teardown that runs on every exit path.

use crate::config::{self, Config, Mode};
use crate::emu::{Direction, Verdict};
use crate::json::Json;
use crate::pcap::PcapWriter;
use crate::sys::{self, ShellLock};
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const PCAP_FLUSH_NS: u64 = 100_000_000;
const KILL_GRACE_NS: u64 = 2_000_000_000;
/// Longest post-exit drain: a profile-B delay plus a full 2xBDP queue at 200 kbit/s fits.
const DRAIN_MAX_NS: u64 = 1_500_000_000;
/// Packets read per device before servicing due writes again, so a flood
/// in one direction can't starve the timing of the other.
const READ_BUDGET: usize = 64;
const BUF_SIZE: usize = 65536 + 64;

fn eprint_err(msg: &str) {
    eprintln!("ccscope-link: error: {}", msg);
}

/// Exit status when the link could not be set up or run (distinct from 2, a usage error).
pub const EXIT_SETUP: i32 = 7;

pub fn main_entry() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match config::parse_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprint_err(&e);
            eprintln!("{}", config::USAGE.trim_end());
            return 2;
        }
    };
    match cfg.mode.clone() {
        Mode::Help => {
            print!("{}", config::USAGE);
            0
        }
        Mode::Check => {
            println!("{}", cfg.to_json().to_string_pretty());
            0
        }
        Mode::Cleanup => {
            if !sys::is_root() {
                eprint_err("must run as root");
                return EXIT_SETUP;
            }
            let nft = sys::find_tool("nft");
            for r in sys::cleanup_stale(nft.as_deref()) {
                println!("removed {}", r);
            }
            0
        }
        Mode::Run(cmd) => match run(&cfg, cmd) {
            Ok(code) => code,
            Err(e) => {
                eprint_err(&e);
                EXIT_SETUP
            }
        },
    }
}

/// Everything that must be undone; filled in as setup progresses.
#[derive(Default)]
struct Resources {
    lock: Option<ShellLock>,
    nft: Option<PathBuf>,
    outer_tun: Option<OwnedFd>,
    inner_tun: Option<OwnedFd>,
    inner_ns: Option<File>,
    orig_ns: Option<File>,
    child: Option<libc::pid_t>,
}

impl Resources {
    fn teardown(&mut self) {
        if let Some(pid) = self.child.take() {
            // Only reached on error paths: don't leave the command running.
            // SAFETY: signalling/reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        // Make sure the devices close in the namespace we started in.
        if let Some(ns) = &self.orig_ns {
            let _ = sys::setns_net(ns.as_raw_fd());
        }
        // Closing non-persistent TUNs deletes the devices and their routes.
        self.outer_tun.take();
        self.inner_tun.take();
        self.inner_ns.take();
        if let Some(l) = self.lock.take() {
            l.release();
        }
    }
}

struct Net {
    idx: u32,
    outer_addr: String,
    inner_addr: String,
    outer_dev: String,
    inner_dev: String,
}

fn setup(cfg: &Config, res: &mut Resources, creds: Option<&sys::Creds>) -> Result<Net, String> {
    let ip = sys::find_tool("ip").ok_or("iproute2 `ip` not found")?;
    let lock = sys::acquire_index()?;
    let idx = lock.idx;
    res.lock = Some(lock);
    let (o, i) = sys::shell_addrs(idx);
    let net = Net {
        idx,
        outer_addr: sys::fmt_v4(o),
        inner_addr: sys::fmt_v4(i),
        outer_dev: format!("ccs{}o", idx),
        inner_dev: format!("ccs{}i", idx),
    };
    res.orig_ns = Some(File::open("/proc/self/ns/net").map_err(|e| format!("open netns: {}", e))?);
    sys::unshare_net()?;
    res.inner_ns = Some(File::open("/proc/self/ns/net").map_err(|e| format!("open netns: {}", e))?);
    res.inner_tun = Some(sys::open_tun(&net.inner_dev)?);
    // IPv4 only: disable IPv6 before link-up so no RS/MLD chatter crosses the link.
    let _ = sys::write_sysctl(&format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", net.inner_dev), "1");
    let mut batch = format!(
        "link set dev lo up\n\
         addr add {inner}/30 dev {dev}\n\
         link set dev {dev} mtu {mtu} up\n\
         route add default via {outer} dev {dev}\n",
        inner = net.inner_addr,
        outer = net.outer_addr,
        dev = net.inner_dev,
        mtu = cfg.mtu
    );
    for a in &cfg.inner_addrs {
        batch.push_str(&format!("addr add {} dev lo\n", a));
    }
    sys::run_tool(&ip, &["-batch", "-"], Some(&batch))?;
    sys::write_sysctl("/proc/sys/net/ipv4/tcp_no_metrics_save", "1")?;
    sys::write_sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
    if cfg.no_sack {
        sys::write_sysctl("/proc/sys/net/ipv4/tcp_sack", "0")?;
    }
    // Linux advertises an MSS of at least route.min_adv_mss (256), so with a tiny MTU the server
    // would send segments larger than the link. Lower the floor so the SYN carries MTU-40.
    let adv_mss = cfg.mtu.saturating_sub(40).clamp(8, 256);
    sys::write_sysctl("/proc/sys/net/ipv4/route/min_adv_mss", &adv_mss.to_string())?;
    if let Some(c) = creds {
        // The command has no CAP_NET_RAW: let its group open ICMP echo (datagram) sockets here.
        let _ = sys::write_sysctl("/proc/sys/net/ipv4/ping_group_range", &format!("{} {}", c.gid, c.gid));
    }

    sys::setns_net(res.orig_ns.as_ref().unwrap().as_raw_fd())?;
    res.outer_tun = Some(sys::open_tun(&net.outer_dev)?);
    let _ = sys::write_sysctl(&format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", net.outer_dev), "1");
    // The outer side takes whatever the Internet sends (the bottleneck's MTU is the client's):
    // a small MTU here would make the outer kernel fragment forwarded server packets.
    let mut batch = format!(
        "addr add {outer}/30 dev {dev}\n\
         link set dev {dev} mtu {mtu} up\n",
        outer = net.outer_addr,
        dev = net.outer_dev,
        mtu = cfg.mtu.max(1500)
    );
    for r in &cfg.routes {
        batch.push_str(&format!("route add {} via {} dev {}\n", r, net.inner_addr, net.outer_dev));
    }
    sys::run_tool(&ip, &["-batch", "-"], Some(&batch))?;
    sys::write_sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
    if let Some(nft) = res.nft.clone() {
        ensure_shared_table(&nft)?;
    }
    Ok(net)
}

/// The NAT and forwarding rules of every shell started in this namespace: one static table,
/// made by the first shell and left in place (like `ip_forward=1`). A table per shell cost
/// each shell four nft runs, and every nft run loads the whole ruleset: at 128 shells' tables
/// one run took ~70 ms instead of ~3, so a worker's shell set-up grew with the square of its
/// concurrency. Masquerade what a shell forwards out of its subnet (it arrives through the
/// shell's outer device, `ccs<idx>o`, and never leaves through it: the inner namespace
/// delivers its own addresses locally), as each shell's own table did.
pub const SHARED_TABLE: &str = "ccscope_shells";

fn ensure_shared_table(nft: &Path) -> Result<(), String> {
    if sys::run_tool(nft, &["list", "table", "ip", SHARED_TABLE], None).is_ok() {
        return Ok(());
    }
    // One transaction that replaces any copy: shells starting together each leave one table.
    let rules = format!(
        "add table ip {t}\n\
         delete table ip {t}\n\
         table ip {t} {{\n\
         \tchain ccs_post {{ type nat hook postrouting priority 100; ip saddr {range} iifname \"ccs*\" masquerade; }}\n\
         \tchain ccs_fwd {{ type filter hook forward priority 0; iifname \"ccs*\" accept; oifname \"ccs*\" accept; }}\n\
         }}\n",
        t = SHARED_TABLE,
        range = sys::SHELL_RANGE
    );
    sys::run_tool(nft, &["-f", "-"], Some(&rules)).map(|_| ())
}

/// Everything the forked child needs, prepared before fork so the child
/// only makes async-signal-safe calls.
struct ChildPlan {
    /// Closed first thing in the child so the index lock dies with the parent.
    lock_fd: RawFd,
    argv: Vec<CString>,
    envp: Vec<CString>,
    inner_ns: RawFd,
    hosts: Option<CString>,
    ready_fd: Option<i32>,
    sigmask: libc::sigset_t,
    parent: libc::pid_t,
    /// (uid, gid) to drop to, or None with --keep-root.
    drop_to: Option<(libc::uid_t, libc::gid_t)>,
    last_cap: u32,
}

/// Variables the command sees besides ours (CCSCOPE_SHELL_*) and --pass-env: the caller's
/// environment may hold secrets (API tokens, database URLs) and loader knobs (PYTHONPATH,
/// LD_PRELOAD) that have no business in a client talking to untrusted servers, so it is an
/// allow-list, as mahimahi's shells do. SSL_CERT_* and CCSCOPE_LAB* reach the lab's CA and
/// hosts; CCSCOPE_LINK* tune nested shells.
const ENV_ALLOWED: &[&str] = &[
    "PATH", "TERM", "LANG", "LANGUAGE", "TZ", "SHELL", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "CCSCOPE_LAB", "CCSCOPE_LAB_DIR", "CCSCOPE_LINK", "CCSCOPE_LINK_SCHED", "CCSCOPE_LINK_IDLE",
    "CCSCOPE_LINK_DEBUG",
];

fn env_allowed(name: &[u8], cfg: &Config) -> bool {
    name.starts_with(b"LC_")
        || ENV_ALLOWED.iter().any(|a| a.as_bytes() == name)
        || cfg.pass_env.iter().any(|a| a.as_bytes() == name)
}

fn plan_child(
    cfg: &Config,
    mut cmd: Vec<String>,
    net: &Net,
    res: &Resources,
    sigmask: libc::sigset_t,
    creds: Option<&sys::Creds>,
) -> Result<ChildPlan, String> {
    if cmd.is_empty() {
        cmd.push(std::env::var("SHELL").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "/bin/sh".into()));
    }
    let argv = cmd
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| "command contains a NUL byte".to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let depth = std::env::var("CCSCOPE_SHELL_DEPTH").ok().and_then(|d| d.parse::<u32>().ok()).unwrap_or(0) + 1;
    let mut ours = vec![
        ("CCSCOPE_SHELL", "1".to_string()),
        ("CCSCOPE_SHELL_DEPTH", depth.to_string()),
        ("CCSCOPE_SHELL_INNER_ADDR", net.inner_addr.clone()),
        ("CCSCOPE_SHELL_OUTER_ADDR", net.outer_addr.clone()),
        ("CCSCOPE_SHELL_INDEX", net.idx.to_string()),
    ];
    match creds {
        Some(c) => {
            ours.push(("HOME", c.home.clone()));
            ours.push(("USER", c.name.clone()));
            ours.push(("LOGNAME", c.name.clone()));
        }
        None => ours.push(("HOME", std::env::var("HOME").unwrap_or_else(|_| "/root".into()))),
    }
    if std::env::var_os("PATH").is_none() {
        ours.push(("PATH", "/usr/local/bin:/usr/bin:/bin".into()));
    }
    let mut envp = Vec::new();
    for (k, v) in std::env::vars_os() {
        if ours.iter().any(|(n, _)| OsStr::new(n) == k) || !env_allowed(k.as_bytes(), cfg) {
            continue;
        }
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        if let Ok(c) = CString::new(kv) {
            envp.push(c);
        }
    }
    for (k, v) in ours {
        envp.push(CString::new(format!("{}={}", k, v)).unwrap());
    }
    let hosts = match &cfg.hosts {
        Some(h) => {
            let abs = std::fs::canonicalize(h).map_err(|e| format!("--hosts {}: {}", h, e))?;
            if !abs.is_file() {
                return Err(format!("--hosts {}: not a regular file", h));
            }
            Some(CString::new(abs.as_os_str().as_bytes()).map_err(|_| "bad --hosts path")?)
        }
        None => None,
    };
    Ok(ChildPlan {
        lock_fd: res.lock.as_ref().map(|l| l.raw_fd()).unwrap_or(-1),
        argv,
        envp,
        inner_ns: res.inner_ns.as_ref().unwrap().as_raw_fd(),
        hosts,
        ready_fd: cfg.ready_fd,
        sigmask,
        // SAFETY: trivial syscall.
        parent: unsafe { libc::getpid() },
        drop_to: creds.map(|c| (c.uid, c.gid)),
        last_cap: sys::cap_last_cap(),
    })
}

/// The capability header and data of capset(2), version 3 (two 32-bit words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Become (uid, gid) with no supplementary groups, no capabilities in any set (bounding and
/// ambient included) and no way to gain privileges again (no_new_privs: setuid binaries and
/// file capabilities stay inert). Post-fork child only: raw syscalls, returns what failed.
fn drop_privileges(uid: libc::uid_t, gid: libc::gid_t, last_cap: u32) -> Result<(), &'static [u8]> {
    // SAFETY: raw syscalls on our own credentials, async-signal-safe after fork.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(b"setgroups failed");
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            return Err(b"setresgid failed");
        }
        // The bounding set can only shrink while we still hold CAP_SETPCAP, i.e. before setresuid.
        for cap in 0..=last_cap {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 && *libc::__errno_location() != libc::EINVAL {
                return Err(b"dropping the capability bounding set failed");
            }
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0);
        if libc::setresuid(uid, uid, uid) != 0 {
            return Err(b"setresuid failed");
        }
        let mut hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
        let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
        if libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) != 0 {
            return Err(b"clearing capabilities failed");
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(b"PR_SET_NO_NEW_PRIVS failed");
        }
        if libc::getuid() == 0 || libc::geteuid() == 0 || libc::getegid() == 0 {
            return Err(b"still root after dropping privileges");
        }
        Ok(())
    }
}

/// Runs in the forked child; never returns.
fn child_exec(p: &ChildPlan) -> ! {
    // SAFETY: post-fork child of a single-threaded parent; only raw syscalls.
    unsafe {
        if p.lock_fd >= 0 {
            libc::close(p.lock_fd);
        }
        let fail = |what: &[u8]| -> ! {
            let pre = b"ccscope-link: error: child: ";
            libc::write(2, pre.as_ptr() as *const _, pre.len());
            libc::write(2, what.as_ptr() as *const _, what.len());
            libc::write(2, b"\n".as_ptr() as *const _, 1);
            libc::_exit(127)
        };
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() != p.parent {
            libc::_exit(127);
        }
        // Undo what the emulator changed for itself.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::sigprocmask(libc::SIG_SETMASK, &p.sigmask, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_TIMERSLACK, 0 as libc::c_ulong);
        // A caller running ahead of its downloads (a worker at a negative nice) does not hand
        // that to the command: like SCHED_RESET_ON_FORK, a negative nice goes back to 0.
        if libc::getpriority(libc::PRIO_PROCESS, 0) < 0 {
            libc::setpriority(libc::PRIO_PROCESS, 0, 0);
        }
        if let Some(fd) = p.ready_fd {
            if fd > 2 {
                libc::close(fd);
            }
        }
        if libc::setns(p.inner_ns, libc::CLONE_NEWNET) != 0 {
            fail(b"setns into shell namespace failed");
        }
        if let Some(h) = &p.hosts {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                fail(b"unshare(CLONE_NEWNS) failed");
            }
            let root = b"/\0";
            if libc::mount(std::ptr::null(), root.as_ptr() as *const _, std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
                fail(b"making mounts private failed");
            }
            let target = b"/etc/hosts\0";
            if libc::mount(h.as_ptr(), target.as_ptr() as *const _, std::ptr::null(), libc::MS_BIND, std::ptr::null()) != 0 {
                fail(b"bind-mounting --hosts over /etc/hosts failed");
            }
        }
        if let Some((uid, gid)) = p.drop_to {
            if let Err(what) = drop_privileges(uid, gid, p.last_cap) {
                fail(what);
            }
            // A change of credentials clears the parent-death signal: ask again.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != p.parent {
                libc::_exit(127);
            }
        }
        let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|c| c.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        libc::execvpe(argv[0], argv.as_ptr(), envp.as_ptr());
        let mut msg = b"cannot execute ".to_vec();
        msg.extend_from_slice(p.argv[0].as_bytes());
        fail(&msg)
    }
}

pub fn run(cfg: &Config, cmd: Vec<String>) -> Result<i32, String> {
    // SAFETY: trivial syscall.
    let parent = unsafe { libc::getppid() };
    if !sys::is_root() {
        return Err("must run as root (needs network namespaces and TUN devices)".into());
    }
    if !cfg.detach {
        // If whoever started us dies (a worker killed with -9, an outer shell), stop too: the
        // SIGTERM arrives on the signalfd like any other, so the command is stopped and the
        // namespace, TUNs and NAT table are torn down instead of downloading on as orphans.
        sys::die_with_parent(libc::SIGTERM, parent)?;
    }
    let creds = if cfg.keep_root { None } else { Some(sys::lookup_user(cfg.user.as_deref())?) };
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err("/dev/net/tun is missing (load the tun module)".into());
    }
    let nft = if cfg.no_nat {
        sys::find_tool("nft")
    } else {
        Some(sys::find_tool("nft").ok_or("nft (nftables) not found; install nftables or pass --no-nat")?)
    };
    if let Some(fd) = cfg.ready_fd {
        // SAFETY: F_GETFD only queries the descriptor.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(format!("--ready-fd {}: not an open file descriptor", fd));
        }
    }
    // Open outputs before touching the network so bad paths fail cleanly.
    let mut pcap = match &cfg.pcap {
        Some(p) => Some(
            PcapWriter::new(File::create(p).map_err(|e| format!("--pcap {}: {}", p, e))?)
                .map_err(|e| format!("--pcap {}: {}", p, e))?,
        ),
        None => None,
    };
    let mut stats_file = match &cfg.stats {
        Some(p) => Some(File::create(p).map_err(|e| format!("--stats {}: {}", p, e))?),
        None => None,
    };

    // Signals are handled via signalfd from here on, so a SIGTERM during
    // setup can't kill us before teardown.
    let (sigfd, oldmask) = sys::block_signals()?;
    // SAFETY: prctl with integer args.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };

    let _ = sys::cleanup_stale(nft.as_deref());
    let mut res = Resources { nft: if cfg.no_nat { None } else { nft }, ..Default::default() };
    let start_mono = sys::mono_ns();
    let rt_offset = sys::realtime_ns().wrapping_sub(start_mono);

    let body = || -> Result<i32, String> {
        let net = setup(cfg, &mut res, creds.as_ref())?;
        let plan = plan_child(cfg, cmd, &net, &res, oldmask, creds.as_ref())?;
        // Abort before starting the command if we were told to stop during setup.
        let early = sys::read_signals(sigfd.as_raw_fd());
        if let Some(s) = early.iter().find(|&&s| s != libc::SIGCHLD) {
            return Ok(128 + s);
        }
        if !cfg.quiet {
            eprintln!(
                "ccscope-link: shell {} up: inner {} ({}) outer {} ({}), base RTT {} ms",
                net.idx, net.inner_addr, net.inner_dev, net.outer_addr, net.outer_dev, cfg.base_rtt_ms()
            );
        }
        if let Some(fd) = cfg.ready_fd {
            let line = b"ready\n";
            // SAFETY: writing a static buffer to a caller-provided fd.
            unsafe { libc::write(fd, line.as_ptr() as *const _, line.len()) };
        }
        // SAFETY: single-threaded; the child only runs child_exec.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", sys::errno_str()));
        }
        if pid == 0 {
            child_exec(&plan);
        }
        res.child = Some(pid);
        if let Some(fd) = cfg.ready_fd {
            if fd > 2 {
                // SAFETY: the caller handed us this fd for the notification only.
                unsafe { libc::close(fd) };
            }
        }
        let mut lp = Loop {
            outer: res.outer_tun.as_ref().unwrap().as_raw_fd(),
            inner: res.inner_tun.as_ref().unwrap().as_raw_fd(),
            sigfd: sigfd.as_raw_fd(),
            child: pid,
            down: Direction::new(&cfg.down, cfg.down_limit, cfg.base_rtt_ms(), cfg.seed.wrapping_mul(2)),
            up: Direction::new(&cfg.up, cfg.up_limit, cfg.base_rtt_ms(), cfg.seed.wrapping_mul(2).wrapping_add(1)),
            pcap: pcap.as_mut(),
            rt_offset,
            buf: vec![0u8; BUF_SIZE],
            kill_at: None,
            exited: None,
            next_flush: sys::mono_ns() + PCAP_FLUSH_NS,
            debug: std::env::var_os("CCSCOPE_LINK_DEBUG").is_some(),
        };
        let sched = sys::set_realtime(std::env::var("CCSCOPE_LINK_SCHED").as_deref() != Ok("other"));
        let _pm_qos = sys::request_low_latency(std::env::var("CCSCOPE_LINK_IDLE").as_deref() != Ok("normal"));
        let low_latency = _pm_qos.is_some();
        let cmd_start = sys::mono_ns();
        let cpu_start = sys::rusage_self();
        let status = lp.run();
        res.child = None;
        let duration = (sys::mono_ns() - cmd_start) as f64 / 1e9;
        let (code, status_json) = status;
        if let Some(f) = stats_file.as_mut() {
            let (u, s) = sys::rusage_self();
            let j = Json::obj()
                .set("config", cfg.to_json())
                .set(
                    "shell",
                    Json::obj()
                        .set("index", net.idx)
                        .set("pid", std::process::id())
                        .set("outer_addr", net.outer_addr.clone())
                        .set("inner_addr", net.inner_addr.clone())
                        .set("outer_dev", net.outer_dev.clone())
                        .set("inner_dev", net.inner_dev.clone()),
                )
                .set("down", lp.down.to_json())
                .set("up", lp.up.to_json())
                .set(
                    "cpu",
                    Json::obj()
                        .set("user_us", u)
                        .set("sys_us", s)
                        // Event loop only (excludes namespace/NAT setup).
                        .set("loop_user_us", u.saturating_sub(cpu_start.0))
                        .set("loop_sys_us", s.saturating_sub(cpu_start.1)),
                )
                .set("duration_s", duration)
                .set("exit_status", code)
                .set("exit", status_json)
                .set("pcap_records", lp.pcap.as_ref().map(|p| p.records()))
                .set("sched", sched)
                .set("low_latency_idle", low_latency);
            let _ = f.write_all(j.to_string_pretty().as_bytes());
            let _ = f.write_all(b"\n");
        }
        Ok(code)
    };
    // A bug must never skip teardown (stale devices/NAT rules as root).
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => Err("internal error (panic); shell torn down".into()),
    };
    res.teardown();
    if let Some(p) = pcap.as_mut() {
        let _ = p.flush();
    }
    result
}

struct Loop<'a> {
    outer: RawFd,
    inner: RawFd,
    sigfd: RawFd,
    child: libc::pid_t,
    down: Direction,
    up: Direction,
    pcap: Option<&'a mut PcapWriter<File>>,
    rt_offset: u64,
    buf: Vec<u8>,
    kill_at: Option<u64>,
    /// The command's exit status and the end of the post-exit drain.
    exited: Option<((i32, Json), u64)>,
    next_flush: u64,
    debug: bool,
}

impl Loop<'_> {
    /// Write every packet whose release time has come, both directions.
    fn service_writes(&mut self) {
        let now = sys::mono_ns();
        while let Some(s) = self.down.pop_due(now) {
            let t = sys::mono_ns();
            if write_pkt(self.inner, &s.data) {
                if self.debug && t > s.release + 1_000_000 {
                    eprintln!("late down {} us at {} (now {} r {})", (t - s.release) / 1000, t, now, s.release);
                }
                self.down.on_written(&s, t);
            } else {
                self.down.on_write_failed();
            }
        }
        while let Some(s) = self.up.pop_due(now) {
            let t = sys::mono_ns();
            if write_pkt(self.outer, &s.data) {
                self.up.on_written(&s, t);
                if let Some(p) = self.pcap.as_mut() {
                    p.record(t.wrapping_add(self.rt_offset), &s.data);
                }
            } else {
                self.up.on_write_failed();
            }
        }
    }

    /// Read up to READ_BUDGET packets from a TUN; returns true if more may remain.
    fn service_reads(&mut self, down: bool) -> bool {
        let fd = if down { self.outer } else { self.inner };
        for _ in 0..READ_BUDGET {
            // SAFETY: reading into our own buffer of BUF_SIZE bytes.
            let n = unsafe { libc::read(fd, self.buf.as_mut_ptr() as *mut _, self.buf.len()) };
            if n <= 0 {
                return false;
            }
            let t = sys::mono_ns();
            let data = self.buf[..n as usize].to_vec();
            if down {
                if let Some(p) = self.pcap.as_mut() {
                    p.record(t.wrapping_add(self.rt_offset), &data);
                }
                let _: Verdict = self.down.enqueue(t, data);
            } else {
                let _: Verdict = self.up.enqueue(t, data);
            }
        }
        true
    }

    /// Returns (exit code, description).
    fn run(&mut self) -> (i32, Json) {
        let mut check_child_at = sys::mono_ns() + 1_000_000_000;
        loop {
            self.service_writes();
            let now = sys::mono_ns();
            // File writes can take ~0.5 ms: do them in a quiet gap when one
            // comes (after 50 ms), and unconditionally at the 100 ms mark.
            let next_pkt = self.down.next_release().into_iter().chain(self.up.next_release()).min();
            let quiet = next_pkt.is_none_or(|t| t > now + 2_000_000);
            if now >= self.next_flush || (quiet && now + PCAP_FLUSH_NS / 2 >= self.next_flush) {
                if let Some(p) = self.pcap.as_mut() {
                    let _ = p.flush();
                }
                if self.debug {
                    let d = sys::mono_ns() - now;
                    if d > 200_000 {
                        eprintln!("slow flush {} us at {}", d / 1000, now);
                    }
                }
                self.next_flush = now + PCAP_FLUSH_NS;
            }
            if self.exited.is_none() && self.kill_at.is_some_and(|k| now >= k) {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(self.child, libc::SIGKILL) };
                self.kill_at = None;
            }
            if let Some((r, until)) = self.exited.as_ref() {
                let idle = self.down.next_release().is_none() && self.up.next_release().is_none();
                if idle || now >= *until {
                    return r.clone();
                }
            } else if now >= check_child_at {
                check_child_at = now + 1_000_000_000;
                self.note_exit(now);
            }
            // Only timers that can still fire: once the command has exited, the child check and
            // the kill are spent, and a deadline left in the past would spin this loop, at
            // SCHED_FIFO, through the whole drain, starving every other shell on the CPU.
            let mut deadline = match self.exited.as_ref() {
                Some((_, until)) => (*until).min(self.next_flush),
                None => check_child_at.min(self.next_flush),
            };
            for t in [self.down.next_release(), self.up.next_release(), self.kill_at].into_iter().flatten() {
                deadline = deadline.min(t);
            }
            let wait = deadline.saturating_sub(now);
            let ts = libc::timespec { tv_sec: (wait / 1_000_000_000) as _, tv_nsec: (wait % 1_000_000_000) as _ };
            let mut fds = [
                libc::pollfd { fd: self.outer, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.inner, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.sigfd, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: fds is a valid array; signal mask unchanged (null).
            let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 3, &ts, std::ptr::null()) };
            if self.debug {
                let t = sys::mono_ns();
                if r == 0 && t > deadline + 1_000_000 {
                    eprintln!("late wake {} us at {} (asked {} us)", (t - deadline) / 1000, t, wait / 1000);
                }
            }
            if r < 0 {
                continue; // EINTR
            }
            let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
            if (fds[0].revents | fds[1].revents) & bad != 0 {
                // A TUN went away under us: stop the command rather than spin.
                eprint_err(&format!(
                    "TUN device error (outer revents {:#x}, inner revents {:#x}); stopping the shell",
                    fds[0].revents, fds[1].revents
                ));
                // SAFETY: signalling our own child.
                unsafe { libc::kill(self.child, libc::SIGKILL) };
                let mut st = 0;
                // SAFETY: reaping our own child.
                unsafe { libc::waitpid(self.child, &mut st, 0) };
                return (2, Json::obj().set("error", "tun device error"));
            }
            // Write first: anything due now shouldn't wait behind reads.
            self.service_writes();
            let mut more_down = fds[0].revents & libc::POLLIN != 0;
            let mut more_up = fds[1].revents & libc::POLLIN != 0;
            while more_down || more_up {
                if more_down {
                    more_down = self.service_reads(true);
                }
                if more_up {
                    more_up = self.service_reads(false);
                }
                self.service_writes();
            }
            if fds[2].revents & libc::POLLIN != 0 {
                for s in sys::read_signals(self.sigfd) {
                    if s == libc::SIGCHLD {
                        if self.exited.is_none() {
                            self.note_exit(sys::mono_ns());
                        }
                    } else if self.exited.is_none() {
                        // SAFETY: forwarding to our own child.
                        unsafe { libc::kill(self.child, s) };
                        if self.kill_at.is_none() {
                            self.kill_at = Some(sys::mono_ns() + KILL_GRACE_NS);
                        }
                    }
                }
            }
        }
    }

    /// Once the command has exited, keep forwarding what is already on the link (the
    /// client's last ACKs and FIN, queued behind the delay) for up to DRAIN_MAX_NS, so the
    /// server sees a clean end instead of RTO retransmissions into a vanished link.
    fn note_exit(&mut self, now: u64) {
        if let Some(r) = self.reap() {
            self.exited = Some((r, now + DRAIN_MAX_NS));
            self.kill_at = None;
        }
    }

    fn reap(&mut self) -> Option<(i32, Json)> {
        let mut st = 0;
        // SAFETY: waiting for our own child only, never -1 (ip/nft helpers are reaped by std).
        let r = unsafe { libc::waitpid(self.child, &mut st, libc::WNOHANG) };
        if r != self.child {
            return None;
        }
        if libc::WIFEXITED(st) {
            let c = libc::WEXITSTATUS(st);
            Some((c, Json::obj().set("exited", c)))
        } else if libc::WIFSIGNALED(st) {
            let s = libc::WTERMSIG(st);
            Some((128 + s, Json::obj().set("signal", s)))
        } else {
            None
        }
    }
}

fn write_pkt(fd: RawFd, data: &[u8]) -> bool {
    // SAFETY: writing our own buffer.
    let n = unsafe { libc::write(fd, data.as_ptr() as *const _, data.len()) };
    n == data.len() as isize
}
