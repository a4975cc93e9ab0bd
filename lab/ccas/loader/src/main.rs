//! ccscope-cca: registers ccscope's BPF congestion-control zoo with the kernel.
//!
//! Each CCA is a `tcp_congestion_ops` struct_ops map in `<obj>/<base>.bpf.o`. Loading
//! sets its load-time parameters (`const volatile` globals in .rodata) and its
//! registered name, loads it, attaches it as a struct_ops *link* and pins the link at
//! /sys/fs/bpf/ccscope/<name>, so the registration outlives this process. Unloading
//! removes the pin: the link is released and the kernel unregisters the CCA.
//! Everything done is recorded in /run/ccscope/ccas.json so nothing is left behind
//! that the lab did not record.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use libbpf_rs::btf::types::{DataSec, Struct};
use libbpf_rs::btf::Btf;
use libbpf_rs::{AsRawLibbpf, MapCore, MapType, ObjectBuilder, PrintLevel};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

const BPFFS: &str = "/sys/fs/bpf";
const BPFFS_MAGIC: i64 = 0xcafe4a11;
const PIN_DIR: &str = "/sys/fs/bpf/ccscope";
const STATE_DIR: &str = "/run/ccscope";
const STATE_FILE: &str = "/run/ccscope/ccas.json";
const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const NAME_PREFIX: &str = "cc_";
/// TCP_CA_NAME_MAX is 16 including the terminating NUL.
const NAME_MAX: usize = 15;

/// A failure with the exit code it maps to (2: usage/unknown name, 1: everything else).
struct Failure {
    code: u8,
    msg: String,
}

fn fail<T>(code: u8, msg: impl Into<String>) -> Result<T, Failure> {
    Err(Failure { code, msg: msg.into() })
}

type Res<T> = Result<T, Failure>;

// ------------------------------------------------------------------------------------
// State file

#[derive(Serialize, Deserialize, Default)]
struct State {
    version: u32,
    /// True when ccscope-cca mounted /sys/fs/bpf itself (so it may unmount it later).
    bpffs_mounted_by_ccscope: bool,
    ccas: BTreeMap<String, Entry>,
}

#[derive(Serialize, Deserialize, Clone)]
struct Entry {
    name: String,
    base: String,
    object: String,
    /// Parameters given on the command line, as the integers written to .rodata.
    params: BTreeMap<String, i64>,
    /// Every .rodata parameter's effective value at load time.
    effective: BTreeMap<String, i64>,
    pin: String,
    /// "size:mtime" of the object when loaded, so a rebuilt object is not mistaken
    /// for the loaded one.
    #[serde(default)]
    object_stamp: String,
    map_id: u32,
    link_id: u32,
    loaded_at: u64,
}

fn read_state() -> Res<State> {
    match fs::read_to_string(STATE_FILE) {
        Ok(s) => serde_json::from_str(&s)
            .or_else(|e| fail(1, format!("state file {STATE_FILE} is corrupt ({e}); inspect or remove it"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State { version: 1, ..Default::default() }),
        Err(e) => fail(1, format!("cannot read {STATE_FILE}: {e}")),
    }
}

fn write_state(st: &State) -> Res<()> {
    fs::create_dir_all(STATE_DIR).or_else(|e| fail(1, format!("cannot create {STATE_DIR}: {e}")))?;
    let tmp = format!("{STATE_FILE}.tmp");
    let body = serde_json::to_string_pretty(st).unwrap();
    fs::write(&tmp, body + "\n")
        .and_then(|_| fs::rename(&tmp, STATE_FILE))
        .or_else(|e| fail(1, format!("cannot write {STATE_FILE}: {e}")))
}

/// Serialises concurrent loaders (tests, the lab) on one flock.
struct Lock(#[allow(dead_code)] fs::File);

fn lock_state() -> Res<Lock> {
    fs::create_dir_all(STATE_DIR).or_else(|e| fail(1, format!("cannot create {STATE_DIR}: {e}")))?;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(format!("{STATE_DIR}/ccas.lock"))
        .or_else(|e| fail(1, format!("cannot open lock file: {e}")))?;
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return fail(1, format!("flock: {}", std::io::Error::last_os_error()));
    }
    Ok(Lock(f))
}

// ------------------------------------------------------------------------------------
// Kernel facts

fn available() -> Vec<String> {
    fs::read_to_string(AVAILABLE)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn is_registered(name: &str) -> bool {
    available().iter().any(|n| n == name)
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t0.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_bpffs(path: &str) -> bool {
    let c = CString::new(path).unwrap();
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(c.as_ptr(), &mut sfs) == 0 && sfs.f_type as i64 == BPFFS_MAGIC }
}

/// Makes sure a bpffs is mounted at /sys/fs/bpf, mounting (and recording) one if not.
fn ensure_bpffs(st: &mut State) -> Res<()> {
    if is_bpffs(BPFFS) {
        return Ok(());
    }
    if !Path::new(BPFFS).is_dir() {
        return fail(1, format!("missing bpffs: {BPFFS} does not exist (is sysfs mounted?)"));
    }
    let src = CString::new("bpf").unwrap();
    let dst = CString::new(BPFFS).unwrap();
    let opts = CString::new("mode=0700").unwrap();
    let rc = unsafe {
        libc::mount(src.as_ptr(), dst.as_ptr(), src.as_ptr(), 0, opts.as_ptr().cast())
    };
    if rc != 0 {
        return fail(
            1,
            format!(
                "missing bpffs: nothing mounted at {BPFFS} and mounting one failed: {} \
                 (run as root, or `mount -t bpf bpf {BPFFS}`)",
                std::io::Error::last_os_error()
            ),
        );
    }
    st.bpffs_mounted_by_ccscope = true;
    write_state(st)?;
    eprintln!("ccscope-cca: mounted bpffs at {BPFFS} (recorded in {STATE_FILE})");
    Ok(())
}

fn map_alive(id: u32) -> bool {
    let fd = unsafe { libbpf_rs::libbpf_sys::bpf_map_get_fd_by_id(id) };
    if fd >= 0 {
        unsafe { libc::close(fd) };
        true
    } else {
        false
    }
}

/// Sockets in this network namespace whose congestion control is `name` (via ss).
fn sockets_using(name: &str) -> Option<usize> {
    let out = std::process::Command::new("ss").args(["-tinHa"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.split_whitespace().filter(|w| *w == name).count())
}

// ------------------------------------------------------------------------------------
// Objects and parameters

fn default_obj_dir() -> PathBuf {
    if let Ok(d) = std::env::var("CCSCOPE_CCA_OBJ") {
        return PathBuf::from(d);
    }
    // target/release/ccscope-cca -> lab/ccas/build
    let exe = std::env::current_exe().unwrap_or_default();
    let cand = exe.parent().map(|p| p.join("../../../build")).unwrap_or_default();
    fs::canonicalize(&cand).unwrap_or(cand)
}

fn zoo_bases(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".bpf.o")).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn object_stamp(p: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(p).map(|m| format!("{}:{}.{}", m.size(), m.mtime(), m.mtime_nsec())).unwrap_or_default()
}

fn base_of(name: &str) -> &str {
    name.strip_prefix(NAME_PREFIX).unwrap_or(name)
}

/// Parameter metadata written by build.sh (scale and doc per parameter).
fn param_docs(dir: &Path, base: &str) -> BTreeMap<String, Value> {
    let p = dir.join(format!("{base}.params.json"));
    let mut m = BTreeMap::new();
    if let Ok(s) = fs::read_to_string(p) {
        if let Ok(Value::Array(a)) = serde_json::from_str::<Value>(&s) {
            for v in a {
                if let Some(n) = v.get("name").and_then(Value::as_str) {
                    m.insert(n.to_string(), v.clone());
                }
            }
        }
    }
    m
}

struct RodataVar {
    offset: usize,
    size: usize,
    signed: bool,
}

/// .rodata variables (name -> offset/size) from the opened object's BTF.
fn rodata_vars(btf: &Btf<'_>) -> BTreeMap<String, RodataVar> {
    let mut out = BTreeMap::new();
    let Some(sec) = btf.type_by_name::<DataSec<'_>>(".rodata") else { return out };
    for vsi in sec.iter() {
        let Some(var) = btf.type_by_id::<libbpf_rs::btf::BtfType<'_>>(vsi.ty) else { continue };
        let Some(name) = var.name().and_then(|n| n.to_str()) else { continue };
        // Only scalar integers are parameters (static tables also live in .rodata).
        let Some(int) = var
            .next_type()
            .map(|t| t.skip_mods_and_typedefs())
            .and_then(|t| libbpf_rs::btf::types::Int::try_from(t).ok())
        else {
            continue;
        };
        if vsi.size == 0 || vsi.size > 8 {
            continue;
        }
        let signed = matches!(int.encoding, libbpf_rs::btf::types::IntEncoding::Signed);
        out.insert(name.to_string(), RodataVar { offset: vsi.offset as usize, size: vsi.size, signed });
    }
    out
}

fn read_int(buf: &[u8], v: &RodataVar) -> i64 {
    let mut b = [0u8; 8];
    b[..v.size].copy_from_slice(&buf[v.offset..v.offset + v.size]);
    let u = u64::from_le_bytes(b);
    if v.signed && v.size < 8 && (u >> (v.size * 8 - 1)) & 1 == 1 {
        (u | (!0u64 << (v.size * 8))) as i64
    } else {
        u as i64
    }
}

/// Parses `value` for a parameter: an integer, or a decimal scaled by the param's scale.
fn parse_value(key: &str, value: &str, scale: i64) -> Res<i64> {
    let v = value.trim();
    let parsed = if let Some(h) = v.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if let Ok(i) = v.parse::<i64>() {
        Some(i)
    } else if let Ok(f) = v.parse::<f64>() {
        if scale <= 1 {
            return fail(2, format!("parameter {key} takes an integer, got {value:?}"));
        }
        Some((f * scale as f64).round() as i64)
    } else {
        None
    };
    parsed.map_or_else(|| fail(2, format!("parameter {key}: cannot parse {value:?}")), Ok)
}

// ------------------------------------------------------------------------------------
// libbpf log capture (the verifier log arrives through it)

static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn capture_log(_level: PrintLevel, msg: String) {
    if std::env::var_os("CCSCOPE_CCA_DEBUG").is_some() {
        eprint!("{msg}");
    }
    LOG.lock().unwrap().push(msg);
}

fn log_tail(n: usize) -> String {
    let log = LOG.lock().unwrap();
    let joined = log.concat();
    let lines: Vec<&str> = joined.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

// ------------------------------------------------------------------------------------
// Commands

struct LoadArgs {
    spec: String,
    as_name: Option<String>,
    params: Vec<(String, String)>,
    obj: PathBuf,
    replace: bool,
    json: bool,
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= NAME_MAX
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn cmd_load(a: LoadArgs) -> Res<()> {
    let base = base_of(&a.spec).to_string();
    let obj_path = a.obj.join(format!("{base}.bpf.o"));
    if !obj_path.is_file() {
        let zoo = zoo_bases(&a.obj);
        return fail(
            2,
            format!(
                "unknown CCA {:?}: no {} (zoo: {})",
                a.spec,
                obj_path.display(),
                if zoo.is_empty() { "empty; run lab/ccas/build.sh".to_string() } else { zoo.join(", ") }
            ),
        );
    }
    let name = a.as_name.clone().unwrap_or_else(|| format!("{NAME_PREFIX}{base}"));
    if !valid_name(&name) {
        return fail(2, format!("invalid CCA name {name:?}: 1-{NAME_MAX} chars of [A-Za-z0-9_-]"));
    }

    let _lock = lock_state()?;
    let mut st = read_state()?;
    ensure_bpffs(&mut st)?;

    let docs = param_docs(&a.obj, &base);
    let mut open = ObjectBuilder::default()
        .open_file(&obj_path)
        .or_else(|e| fail(1, format!("cannot open {}: {e}", obj_path.display())))?;

    // Parameters: validated against the object's own BTF, so the object is the truth.
    let btf = Btf::from_bpf_object(unsafe { open.as_libbpf_object().as_ref() })
        .ok()
        .flatten()
        .ok_or(Failure { code: 1, msg: format!("{}: no BTF", obj_path.display()) })?;
    let vars = rodata_vars(&btf);
    let mut given: BTreeMap<String, i64> = BTreeMap::new();
    for (k, v) in &a.params {
        let Some(var) = vars.get(k) else {
            let known: Vec<&String> = vars.keys().collect();
            return fail(2, format!("{base}: unknown parameter {k:?} (known: {known:?})"));
        };
        let scale = docs.get(k).and_then(|d| d.get("scale")).and_then(Value::as_i64).unwrap_or(1);
        let val = parse_value(k, v, scale)?;
        let bits = var.size * 8;
        let ok = if var.signed {
            bits >= 64 || (val >= -(1i64 << (bits - 1)) && val < (1i64 << (bits - 1)))
        } else {
            val >= 0 && (bits >= 64 || val < (1i64 << bits))
        };
        if !ok {
            return fail(2, format!("parameter {k}={val} does not fit its {bits}-bit type"));
        }
        given.insert(k.clone(), val);
    }

    // Idempotency: the same name with the same parameters is a no-op.
    let pin = format!("{PIN_DIR}/{name}");
    if let Some(e) = st.ccas.get(&name).cloned() {
        let pinned = Path::new(&pin).exists();
        let same_params = e.base == base && e.params == given;
        let same_build = e.object_stamp == object_stamp(&obj_path);
        if pinned && same_params && same_build && is_registered(&name) && !a.replace {
            if a.json {
                println!("{}", json!({"name": name, "status": "already-loaded", "map_id": e.map_id}));
            } else {
                println!("{name}: already loaded with the same parameters");
            }
            return Ok(());
        }
        if pinned && !a.replace {
            return fail(
                1,
                if same_params {
                    format!("{name} is loaded from an older build of {}; use --replace to reload it", e.base)
                } else {
                    format!(
                        "{name} is already loaded from {} with params {:?}; requested {} with {:?} \
                         (use --replace to reload it)",
                        e.base, e.params, base, given
                    )
                },
            );
        }
        unload_locked(&mut st, &name, true)?;
    } else if Path::new(&pin).exists() {
        return fail(1, format!("{pin} exists but is not in {STATE_FILE}; refusing to touch it"));
    }
    if is_registered(&name) {
        return fail(
            1,
            format!("a congestion control named {name:?} is already registered (kernel built-in or another loader)"),
        );
    }

    let mut effective = BTreeMap::new();
    for mut m in open.maps_mut() {
        let mname = m.name().to_string_lossy().to_string();
        if mname.ends_with(".rodata") {
            let buf = m
                .initial_value_mut()
                .ok_or(Failure { code: 1, msg: "no .rodata image".into() })?;
            for (k, v) in &given {
                let var = &vars[k];
                let bytes = v.to_le_bytes();
                buf[var.offset..var.offset + var.size].copy_from_slice(&bytes[..var.size]);
            }
            for (k, var) in &vars {
                effective.insert(k.clone(), read_int(buf, var));
            }
        } else if m.map_type() == MapType::StructOps {
            // The registered name lives in the struct_ops image: overwrite it.
            let ops = btf
                .type_by_name::<Struct<'_>>("tcp_congestion_ops")
                .ok_or(Failure { code: 1, msg: "object has no tcp_congestion_ops type".into() })?;
            let off = ops
                .iter()
                .find(|mb| mb.name.and_then(|n| n.to_str()) == Some("name"))
                .map(|mb| match mb.attr {
                    libbpf_rs::btf::types::MemberAttr::Normal { offset } => offset as usize / 8,
                    libbpf_rs::btf::types::MemberAttr::BitField { offset, .. } => offset as usize / 8,
                })
                .ok_or(Failure { code: 1, msg: "tcp_congestion_ops has no name member".into() })?;
            let buf = m
                .initial_value_mut()
                .ok_or(Failure { code: 1, msg: "struct_ops map has no image (libbpf too old?)".into() })?;
            let field = &mut buf[off..off + NAME_MAX + 1];
            field.fill(0);
            field[..name.len()].copy_from_slice(name.as_bytes());
        }
    }

    LOG.lock().unwrap().clear();
    let mut obj = match open.load() {
        Ok(o) => o,
        Err(e) => {
            return fail(
                1,
                format!(
                    "{name}: the kernel rejected {} ({e}). Verifier/libbpf log tail:\n{}",
                    obj_path.display(),
                    log_tail(60)
                ),
            )
        }
    };

    let mut link = None;
    let mut map_id = 0;
    for mut m in obj.maps_mut() {
        if m.map_type() == MapType::StructOps {
            map_id = m.info().map(|i| i.info.id).unwrap_or(0);
            match m.attach_struct_ops() {
                Ok(l) => link = Some(l),
                Err(e) => {
                    return fail(
                        1,
                        format!("{name}: registering the struct_ops failed ({e})\n{}", log_tail(20)),
                    )
                }
            }
        }
    }
    let Some(mut link) = link else { return fail(1, format!("{}: no struct_ops map", obj_path.display())) };
    fs::create_dir_all(PIN_DIR).or_else(|e| fail(1, format!("cannot create {PIN_DIR}: {e}")))?;
    link.pin(&pin).or_else(|e| fail(1, format!("cannot pin link at {pin}: {e}")))?;
    let link_id = link.info().map(|i| i.id).unwrap_or(0);

    st.ccas.insert(
        name.clone(),
        Entry {
            name: name.clone(),
            base: base.clone(),
            object: fs::canonicalize(&obj_path).unwrap_or(obj_path.clone()).display().to_string(),
            params: given,
            effective,
            pin: pin.clone(),
            object_stamp: object_stamp(&obj_path),
            map_id,
            link_id,
            loaded_at: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        },
    );
    write_state(&st)?;
    if !wait_until(Duration::from_secs(2), || is_registered(&name)) {
        return fail(1, format!("{name}: link pinned but the name is not in {AVAILABLE}"));
    }
    if a.json {
        println!("{}", json!({"name": name, "status": "loaded", "map_id": map_id, "pin": pin}));
    } else {
        println!("{name}: loaded ({base}, map {map_id}, pinned at {pin})");
    }
    Ok(())
}

/// Unpins `name` and waits for the kernel to unregister it. Caller holds the lock.
fn unload_locked(st: &mut State, name: &str, quiet: bool) -> Res<()> {
    let entry = st.ccas.get(name).cloned();
    let pin = entry.as_ref().map(|e| e.pin.clone()).unwrap_or_else(|| format!("{PIN_DIR}/{name}"));
    if entry.is_none() {
        let msg = if Path::new(&pin).exists() {
            format!("{pin} exists but {name} is not in {STATE_FILE}; not touching it")
        } else if is_registered(name) {
            format!("{name} is registered but was not loaded by ccscope (kernel built-in or other loader)")
        } else {
            format!("{name} is not loaded")
        };
        return fail(2, msg);
    }
    let e = entry.unwrap();
    if Path::new(&pin).exists() {
        fs::remove_file(&pin).or_else(|err| fail(1, format!("cannot unpin {pin}: {err}")))?;
    } else if !quiet {
        eprintln!("ccscope-cca: {pin} was already gone; dropping the stale record");
    }
    if !wait_until(Duration::from_secs(3), || !is_registered(name)) {
        return fail(1, format!("{name}: unpinned but still listed in {AVAILABLE} (another link holds it?)"));
    }
    st.ccas.remove(name);
    write_state(st)?;
    // The ops stay alive while sockets reference them; tell the caller.
    if e.map_id != 0 && !wait_until(Duration::from_millis(1500), || !map_alive(e.map_id)) {
        let who = match sockets_using(name) {
            Some(n) if n > 0 => format!("{n} socket(s) in this namespace"),
            _ => "by sockets in other namespaces or orphaned connections".to_string(),
        };
        eprintln!(
            "ccscope-cca: warning: {name} is unregistered but still in use ({who}); \
             the kernel keeps its ops (map {}) alive until those sockets close",
            e.map_id
        );
    }
    if !quiet {
        println!("{name}: unloaded");
    }
    Ok(())
}

fn tidy_bpffs(st: &mut State) -> Res<()> {
    if !st.ccas.is_empty() {
        return Ok(());
    }
    let _ = fs::remove_dir(PIN_DIR); // only succeeds when empty
    if st.bpffs_mounted_by_ccscope {
        // The kernel's preloaded iterators (maps.debug, progs.debug) do not count.
        let empty = fs::read_dir(BPFFS)
            .map(|d| d.flatten().all(|e| e.file_name().to_string_lossy().ends_with(".debug")))
            .unwrap_or(false);
        if empty {
            let dst = CString::new(BPFFS).unwrap();
            if unsafe { libc::umount(dst.as_ptr()) } == 0 {
                st.bpffs_mounted_by_ccscope = false;
                write_state(st)?;
            }
        }
    }
    Ok(())
}

fn cmd_unload(names: &[String], all: bool) -> Res<()> {
    let _lock = lock_state()?;
    let mut st = read_state()?;
    let targets: Vec<String> = if all {
        st.ccas.keys().cloned().collect()
    } else {
        names
            .iter()
            .map(|n| {
                if st.ccas.contains_key(n) {
                    n.clone()
                } else {
                    let p = format!("{NAME_PREFIX}{n}");
                    if st.ccas.contains_key(&p) { p } else { n.clone() }
                }
            })
            .collect()
    };
    let mut first_err = None;
    for n in &targets {
        if let Err(e) = unload_locked(&mut st, n, false) {
            eprintln!("ccscope-cca: {}", e.msg);
            first_err.get_or_insert(e);
        }
    }
    tidy_bpffs(&mut st)?;
    match first_err {
        Some(e) => Err(Failure { code: e.code, msg: String::new() }),
        None => Ok(()),
    }
}

fn cmd_list(json_out: bool) -> Res<()> {
    let st = read_state()?;
    let avail = available();
    let mut rows = Vec::new();
    for e in st.ccas.values() {
        let pinned = Path::new(&e.pin).exists();
        let registered = avail.contains(&e.name);
        rows.push(json!({
            "name": e.name, "base": e.base, "params": e.params, "effective": e.effective,
            "map_id": e.map_id, "pin": e.pin, "pinned": pinned, "registered": registered,
            "loaded_at": e.loaded_at,
        }));
    }
    // Pins nobody recorded (should not happen; shown so they can be cleaned up).
    let mut untracked = Vec::new();
    if let Ok(rd) = fs::read_dir(PIN_DIR) {
        for ent in rd.flatten() {
            let n = ent.file_name().to_string_lossy().to_string();
            if !st.ccas.contains_key(&n) {
                untracked.push(n);
            }
        }
    }
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "loaded": rows, "untracked_pins": untracked, "available": avail,
                "bpffs_mounted_by_ccscope": st.bpffs_mounted_by_ccscope,
            }))
            .unwrap()
        );
    } else {
        if rows.is_empty() {
            println!("no zoo CCAs loaded");
        }
        for r in &rows {
            println!(
                "{:<16} {:<10} {} {}",
                r["name"].as_str().unwrap_or(""),
                r["base"].as_str().unwrap_or(""),
                if r["registered"] == true { "registered" } else { "NOT-REGISTERED" },
                if r["params"].as_object().is_some_and(|o| !o.is_empty()) { r["params"].to_string() } else { String::new() }
            );
        }
        for n in untracked {
            println!("{n:<16} (untracked pin in {PIN_DIR})");
        }
    }
    Ok(())
}

/// Lists the built objects and their parameters (defaults read from each object).
fn cmd_zoo(obj: &Path, json_out: bool) -> Res<()> {
    let mut out = Vec::new();
    for base in zoo_bases(obj) {
        let path = obj.join(format!("{base}.bpf.o"));
        let docs = param_docs(obj, &base);
        let mut params = Vec::new();
        if let Ok(mut open) = ObjectBuilder::default().open_file(&path) {
            let btf = Btf::from_bpf_object(unsafe { open.as_libbpf_object().as_ref() }).ok().flatten();
            let vars = btf.as_ref().map(rodata_vars).unwrap_or_default();
            for mut m in open.maps_mut() {
                if m.name().to_string_lossy().ends_with(".rodata") {
                    if let Some(buf) = m.initial_value_mut() {
                        for (k, var) in &vars {
                            let d = docs.get(k);
                            params.push(json!({
                                "name": k, "default": read_int(buf, var),
                                "scale": d.and_then(|d| d.get("scale")).cloned().unwrap_or(json!(1)),
                                "doc": d.and_then(|d| d.get("doc")).cloned().unwrap_or(json!("")),
                            }));
                        }
                    }
                }
            }
        }
        out.push(json!({"base": base, "name": format!("{NAME_PREFIX}{base}"), "object": path, "params": params}));
    }
    if json_out {
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
    } else {
        for z in &out {
            println!("{}", z["name"].as_str().unwrap_or(""));
            for p in z["params"].as_array().into_iter().flatten() {
                println!("    {:<24} {:>10}  /{:<5} {}", p["name"].as_str().unwrap_or(""), p["default"], p["scale"], p["doc"].as_str().unwrap_or(""));
            }
        }
    }
    Ok(())
}

const USAGE: &str = "usage:
  ccscope-cca load NAME [--as NEWNAME] [--param key=value ...] [--obj DIR] [--replace] [--json]
  ccscope-cca unload NAME... | --all
  ccscope-cca list [--json]
  ccscope-cca zoo [--obj DIR] [--json]

NAME is a zoo CCA (cubic or cc_cubic); it registers as cc_<name> unless --as is given.
Values are integers, or decimals for fixed-point parameters (beta=0.5 for a /1024 beta).
Objects come from --obj, $CCSCOPE_CCA_OBJ, or lab/ccas/build next to this binary.";

fn run(args: Vec<String>) -> Res<()> {
    let mut it = args.into_iter();
    let cmd = it.next().unwrap_or_default();
    let rest: Vec<String> = it.collect();
    let mut obj = default_obj_dir();
    let mut json_out = false;
    let mut pos = Vec::new();
    let mut as_name = None;
    let mut params = Vec::new();
    let mut replace = false;
    let mut all = false;
    let mut i = 0;
    let need = |i: usize, flag: &str| -> Res<String> {
        rest.get(i + 1).cloned().map_or_else(|| fail(2, format!("{flag} needs a value\n{USAGE}")), Ok)
    };
    while i < rest.len() {
        match rest[i].as_str() {
            "--as" => {
                as_name = Some(need(i, "--as")?);
                i += 1;
            }
            "--param" | "-p" => {
                let kv = need(i, "--param")?;
                let (k, v) = kv.split_once('=').ok_or(Failure { code: 2, msg: format!("--param wants key=value, got {kv:?}") })?;
                params.push((k.trim().to_string(), v.to_string()));
                i += 1;
            }
            "--obj" => {
                obj = PathBuf::from(need(i, "--obj")?);
                i += 1;
            }
            "--replace" => replace = true,
            "--json" => json_out = true,
            "--all" => all = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            s if s.starts_with('-') => return fail(2, format!("unknown option {s}\n{USAGE}")),
            s => pos.push(s.to_string()),
        }
        i += 1;
    }
    match cmd.as_str() {
        "load" => {
            if pos.len() != 1 {
                return fail(2, format!("load takes one NAME\n{USAGE}"));
            }
            if unsafe { libc::geteuid() } != 0 {
                return fail(1, "loading a CCA needs root (CAP_BPF, CAP_NET_ADMIN)");
            }
            cmd_load(LoadArgs { spec: pos.remove(0), as_name, params, obj, replace, json: json_out })
        }
        "unload" => {
            if pos.is_empty() && !all {
                return fail(2, format!("unload takes NAME... or --all\n{USAGE}"));
            }
            cmd_unload(&pos, all)
        }
        "list" => cmd_list(json_out),
        "zoo" => cmd_zoo(&obj, json_out),
        "--version" | "-V" => {
            println!("ccscope-cca {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        "" | "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => fail(2, format!("unknown command {other:?}\n{USAGE}")),
    }
}

fn main() -> ExitCode {
    libbpf_rs::set_print(Some((PrintLevel::Debug, capture_log)));
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if !f.msg.is_empty() {
                let _ = writeln!(std::io::stderr(), "ccscope-cca: {}", f.msg);
            }
            ExitCode::from(f.code)
        }
    }
}
