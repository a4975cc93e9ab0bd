//! Thin, checked wrappers over the Linux facilities the shell needs:
//! clocks, TUN devices, namespaces, shell index locks, iproute2 and nft.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const LOCK_DIR: &str = "/run/ccscope/shells";
/// 100.64.0.0/10 holds 2^20 /30 subnets; far more than we will ever need.
pub const MAX_SHELLS: u32 = 1 << 16;
/// Where every shell's /30 lies (`shell_addrs`).
pub const SHELL_RANGE: &str = "100.64.0.0/10";

pub fn errno_str() -> String {
    io::Error::last_os_error().to_string()
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; clock ids used are always supported.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn mono_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

pub fn realtime_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

pub fn is_root() -> bool {
    // SAFETY: trivial syscall.
    unsafe { libc::geteuid() == 0 }
}

/// Shell index -> (outer, inner) IPv4 addresses inside 100.64.0.0/10.
pub fn shell_addrs(idx: u32) -> ([u8; 4], [u8; 4]) {
    let base: u32 = (100u32 << 24 | 64 << 16) + 4 * idx;
    ((base + 1).to_be_bytes(), (base + 2).to_be_bytes())
}

pub fn fmt_v4(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

pub fn subnet_of(idx: u32) -> String {
    let base: u32 = (100u32 << 24 | 64 << 16) + 4 * idx;
    format!("{}/30", fmt_v4(base.to_be_bytes()))
}

/// Create a non-persistent TUN (IFF_TUN|IFF_NO_PI); it vanishes when the fd closes.
pub fn open_tun(name: &str) -> Result<OwnedFd, String> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(format!("interface name too long: {}", name));
    }
    let path = CString::new("/dev/net/tun").unwrap();
    // SAFETY: path is a valid C string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!("cannot open /dev/net/tun: {}", errno_str()));
    }
    // SAFETY: fd was just returned by open.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // struct ifreq: 16-byte name + union (flags is a short at offset 16).
    let mut ifr = [0u8; 40];
    ifr[..name.len()].copy_from_slice(name.as_bytes());
    let flags: libc::c_short = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    ifr[16..18].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: TUNSETIFF reads/writes an ifreq-sized buffer we own.
    let r = unsafe { libc::ioctl(fd, libc::TUNSETIFF as _, ifr.as_mut_ptr()) };
    if r < 0 {
        return Err(format!("cannot create TUN device {}: {}", name, errno_str()));
    }
    Ok(owned)
}

pub fn unshare_net() -> Result<(), String> {
    // SAFETY: plain syscall; process is single-threaded here.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("unshare(CLONE_NEWNET) failed: {}", errno_str()));
    }
    Ok(())
}

pub fn setns_net(fd: RawFd) -> Result<(), String> {
    // SAFETY: fd refers to a /proc/*/ns/net file.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns(net) failed: {}", errno_str()));
    }
    Ok(())
}

pub fn write_sysctl(path: &str, val: &str) -> Result<(), String> {
    fs::write(path, val).map_err(|e| format!("cannot set {}={}: {}", path, val, e))
}

/// Locate a system tool even when PATH is minimal (sudo, cron).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in ["/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Run a tool, feeding `stdin`; error text includes the tool's stderr.
pub fn run_tool(tool: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut cmd = Command::new(tool);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {}: {}", tool.display(), e))?;
    if let Some(s) = stdin {
        if let Some(mut w) = child.stdin.take() {
            let _ = w.write_all(s.as_bytes());
        }
    }
    let out = child.wait_with_output().map_err(|e| format!("{}: {}", tool.display(), e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} {} failed: {}{}",
            tool.display(),
            args.join(" "),
            err.trim(),
            stdin.map(|s| format!(" (input: {})", s.trim().replace('\n', "; "))).unwrap_or_default()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn flock_nb(fd: RawFd) -> io::Result<()> {
    // SAFETY: fd is an open file.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// True if the open file is still the one named by `path` (guards against
/// a concurrent cleanup unlinking it between our open and our flock).
fn same_inode(f: &File, path: &Path) -> bool {
    match (f.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

fn open_lock(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o644).open(path)
}

pub struct ShellLock {
    pub idx: u32,
    file: File,
    path: PathBuf,
}

impl ShellLock {
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Remove our lock file while still holding the lock, then release.
    pub fn release(self) {
        if same_inode(&self.file, &self.path) {
            let _ = fs::remove_file(&self.path);
        }
        drop(self.file);
    }
}

/// Take the lowest free shell index; the flock lives as long as the process.
pub fn acquire_index() -> Result<ShellLock, String> {
    fs::create_dir_all(LOCK_DIR).map_err(|e| format!("cannot create {}: {}", LOCK_DIR, e))?;
    let pid = std::process::id();
    let mut idx = 0;
    let mut retries = 0;
    while idx < MAX_SHELLS {
        let path = PathBuf::from(format!("{}/{}.lock", LOCK_DIR, idx));
        let file = open_lock(&path).map_err(|e| format!("cannot open {}: {}", path.display(), e))?;
        match flock_nb(file.as_raw_fd()) {
            Ok(()) => {
                if !same_inode(&file, &path) {
                    // Lost a race with a cleanup; try the same index again.
                    retries += 1;
                    if retries > 100 {
                        return Err("lock directory keeps changing under us".into());
                    }
                    continue;
                }
                let _ = file.set_len(0);
                let mut f = &file;
                let _ = f.write_all(format!("{}\n", pid).as_bytes());
                return Ok(ShellLock { idx, file, path });
            }
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => idx += 1,
            Err(e) => return Err(format!("flock {}: {}", path.display(), e)),
        }
    }
    Err("no free shell index".into())
}

/// Is shell `idx` alive and owned by `pid`? (lock held + pid recorded)
fn shell_alive(idx: u32, pid: u32) -> bool {
    let path = PathBuf::from(format!("{}/{}.lock", LOCK_DIR, idx));
    let Ok(file) = OpenOptions::new().read(true).open(&path) else {
        return false;
    };
    let mut s = String::new();
    let _ = (&file).read_to_string(&mut s);
    if s.trim().parse::<u32>().ok() != Some(pid) {
        return false;
    }
    match flock_nb(file.as_raw_fd()) {
        Ok(()) => false, // nobody holds it (dropping `file` releases our probe lock)
        Err(_) => true,
    }
}

/// Parse `ccscope_<idx>_<pid>` table names.
pub fn parse_table_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("ccscope_")?;
    let (a, b) = rest.split_once('_')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Remove leftovers of shells that died without teardown (SIGKILL): unheld
/// lock files and nft tables whose owner is gone. Returns what was removed.
pub fn cleanup_stale(nft: Option<&Path>) -> Vec<String> {
    let mut removed = Vec::new();
    if let Ok(rd) = fs::read_dir(LOCK_DIR) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(num) = name.strip_suffix(".lock") else { continue };
            if num.parse::<u32>().is_err() {
                continue;
            }
            let path = e.path();
            let Ok(file) = open_lock(&path) else { continue };
            if flock_nb(file.as_raw_fd()).is_ok() && same_inode(&file, &path) {
                let mut s = String::new();
                let _ = (&file).read_to_string(&mut s);
                if fs::remove_file(&path).is_ok() {
                    removed.push(format!("lock {} (pid {})", path.display(), s.trim()));
                }
            }
        }
    }
    if let Some(nft) = nft {
        if let Ok(out) = run_tool(nft, &["list", "tables"], None) {
            for line in out.lines() {
                let parts: Vec<&str> = line.split_whitespace().collect();
                if parts.len() != 3 || parts[0] != "table" {
                    continue;
                }
                let (family, name) = (parts[1], parts[2]);
                let Some((idx, pid)) = parse_table_name(name) else { continue };
                if !shell_alive(idx, pid)
                    && run_tool(nft, &["delete", "table", family, name], None).is_ok()
                {
                    removed.push(format!("nft table {} {}", family, name));
                }
            }
        }
    }
    removed
}

/// Block the signals we handle synchronously and return a signalfd for them.
pub fn block_signals() -> Result<(OwnedFd, libc::sigset_t), String> {
    // SAFETY: sigset manipulation on local storage; signalfd on a valid mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, s);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        if libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old) != 0 {
            return Err(format!("sigprocmask: {}", errno_str()));
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(format!("signalfd: {}", errno_str()));
        }
        Ok((OwnedFd::from_raw_fd(fd), old))
    }
}

/// Drain the signalfd; returns the signal numbers received.
pub fn read_signals(fd: RawFd) -> Vec<i32> {
    let mut v = Vec::new();
    loop {
        // SAFETY: signalfd_siginfo is plain old data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let sz = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading into a buffer of exactly sz bytes.
        let n = unsafe { libc::read(fd, &mut info as *mut _ as *mut libc::c_void, sz) };
        if n != sz as isize {
            break;
        }
        v.push(info.ssi_signo as i32);
    }
    v
}

/// SCHED_FIFO keeps wakeups on time when the CPUs are busy with the
/// traffic endpoints; RESET_ON_FORK so helpers/children stay normal.
/// Returns the policy actually in force.
pub fn set_realtime(enable: bool) -> &'static str {
    if !enable {
        return "other";
    }
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: plain syscall on ourselves.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &p) };
    if r == 0 { "fifo" } else { "other" }
}

/// Ask cpuidle for zero exit latency while the shell runs (PM QoS, released when the returned
/// file closes). On VMs an idle vCPU otherwise halts and wakes 0.1-3 ms late, which is what
/// limits delay accuracy with many shells; polling idle keeps wakeups in the tens of µs.
pub fn request_low_latency(enable: bool) -> Option<std::fs::File> {
    if !enable {
        return None;
    }
    let mut f = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency").ok()?;
    use std::io::Write;
    f.write_all(&0i32.to_ne_bytes()).ok()?;
    Some(f)
}

pub fn rusage_self() -> (u64, u64) {
    // SAFETY: getrusage fills a struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn addressing() {
        assert_eq!(shell_addrs(0), ([100, 64, 0, 1], [100, 64, 0, 2]));
        assert_eq!(shell_addrs(1), ([100, 64, 0, 5], [100, 64, 0, 6]));
        assert_eq!(shell_addrs(64), ([100, 64, 1, 1], [100, 64, 1, 2]));
        assert_eq!(subnet_of(3), "100.64.0.12/30");
        let (o, _) = shell_addrs(MAX_SHELLS - 1);
        assert!(o[1] & 0xc0 == 64); // still inside 100.64.0.0/10
    }
    #[test]
    fn table_names() {
        assert_eq!(parse_table_name("ccscope_3_1234"), Some((3, 1234)));
        assert_eq!(parse_table_name("ccscope_x_1"), None);
        assert_eq!(parse_table_name("filter"), None);
    }
}

/// The user a shell's command runs as when it does not keep root.
#[derive(Debug, Clone)]
pub struct Creds {
    pub name: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub home: String,
}

fn passwd_entry(name: Option<&str>, uid: Option<libc::uid_t>) -> Option<Creds> {
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0u8; 16384];
    let cname = name.and_then(|n| CString::new(n).ok());
    // SAFETY: getpw*_r fill `pw` with pointers into `buf`, which outlives their use below.
    let rc = unsafe {
        match (&cname, uid) {
            (Some(n), _) => libc::getpwnam_r(n.as_ptr(), &mut pw, buf.as_mut_ptr() as *mut _, buf.len(), &mut out),
            (None, Some(u)) => libc::getpwuid_r(u, &mut pw, buf.as_mut_ptr() as *mut _, buf.len(), &mut out),
            _ => return None,
        }
    };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: the strings point into `buf`, NUL-terminated by libc.
    let s = |p: *const libc::c_char| unsafe { std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned() };
    Some(Creds { name: s(pw.pw_name), uid: pw.pw_uid, gid: pw.pw_gid, home: s(pw.pw_dir) })
}

/// `--user NAME|UID`, or the default: the `ccscope` system user deploy/install.sh creates,
/// else `nobody`. Root is refused here: keeping root is spelled `--keep-root`.
pub fn lookup_user(spec: Option<&str>) -> Result<Creds, String> {
    let found = match spec {
        Some(s) => match s.parse::<libc::uid_t>() {
            Ok(uid) => passwd_entry(None, Some(uid)).or(Some(Creds {
                name: s.to_string(),
                uid,
                gid: uid,
                home: "/".into(),
            })),
            Err(_) => passwd_entry(Some(s), None),
        },
        None => passwd_entry(Some("ccscope"), None).or_else(|| passwd_entry(Some("nobody"), None)),
    };
    let c = found.ok_or_else(|| match spec {
        Some(s) => format!("--user {}: no such user", s),
        None => "no unprivileged user to run the command as (neither `ccscope` nor `nobody` exists; \
                 run deploy/install.sh or pass --user)"
            .to_string(),
    })?;
    if c.uid == 0 || c.gid == 0 {
        return Err(format!("--user {}: that is root; use --keep-root to run the command as root", c.name));
    }
    Ok(c)
}

/// The highest capability number this kernel knows (for dropping the whole bounding set).
pub fn cap_last_cap() -> u32 {
    fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Ask the kernel to send `sig` to this process when its parent exits, and make sure the
/// parent it meant is still there (it may have exited before the request was made).
pub fn die_with_parent(sig: i32, parent: libc::pid_t) -> Result<(), String> {
    // SAFETY: prctl with integer arguments; getppid is trivial.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) != 0 {
            return Err(format!("prctl(PR_SET_PDEATHSIG): {}", errno_str()));
        }
        if libc::getppid() != parent {
            return Err("the process that started the shell has already exited".into());
        }
    }
    Ok(())
}
