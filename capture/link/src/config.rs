//! Command-line parsing and validation. Kept free of system calls so
//! `--check` and the unit tests exercise exactly what a real run uses.

use crate::json::Json;
use std::net::IpAddr;

pub const NS_PER_MS: f64 = 1e6;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    Inf,
    /// bits per second
    Bits(f64),
    /// packets per second, independent of size
    Pps(f64),
}

impl Rate {
    /// Serialization time of a packet of `len` bytes.
    pub fn ser_ns(&self, len: usize) -> u64 {
        match *self {
            Rate::Inf => 0,
            Rate::Bits(b) => ((len as f64 * 8.0) * 1e9 / b).round() as u64,
            Rate::Pps(p) => (1e9 / p).round() as u64,
        }
    }

    pub fn bps(&self) -> Option<f64> {
        if let Rate::Bits(b) = *self { Some(b) } else { None }
    }

    pub fn pps(&self) -> Option<f64> {
        if let Rate::Pps(p) = *self { Some(p) } else { None }
    }

    fn describe(&self) -> String {
        match *self {
            Rate::Inf => "inf".into(),
            Rate::Bits(b) => format!("{}bit", fmt_num(b)),
            Rate::Pps(p) => format!("{}pps", fmt_num(p)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepDur {
    Forever,
    Time(u64),
    Packets(u64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RateStep {
    pub rate: Rate,
    pub dur: StepDur,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RateSpec {
    pub steps: Vec<RateStep>,
}

impl RateSpec {
    pub fn inf() -> RateSpec {
        RateSpec { steps: vec![RateStep { rate: Rate::Inf, dur: StepDur::Forever }] }
    }

    pub fn first(&self) -> Rate {
        self.steps.first().map(|s| s.rate).unwrap_or(Rate::Inf)
    }

    pub fn is_inf(&self) -> bool {
        self.steps.iter().all(|s| s.rate == Rate::Inf)
    }

    pub fn to_json(&self) -> Json {
        let steps: Vec<Json> = self
            .steps
            .iter()
            .map(|s| {
                let (ds, dp) = match s.dur {
                    StepDur::Forever => (None, None),
                    StepDur::Time(ns) => (Some(ns as f64 / 1e9), None),
                    StepDur::Packets(p) => (None, Some(p)),
                };
                Json::obj()
                    .set("rate", s.rate.describe())
                    .set("bps", s.rate.bps())
                    .set("pps", s.rate.pps())
                    .set("duration_s", ds)
                    .set("duration_packets", dp)
            })
            .collect();
        Json::obj().set("spec", self.describe()).set("steps", Json::Arr(steps))
    }

    pub fn describe(&self) -> String {
        self.steps
            .iter()
            .map(|s| match s.dur {
                StepDur::Forever => s.rate.describe(),
                StepDur::Time(ns) => format!("{}:{}ms", s.rate.describe(), fmt_num(ns as f64 / 1e6)),
                StepDur::Packets(p) => format!("{}:{}p", s.rate.describe(), p),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BufferSpec {
    Inf,
    Bytes(u64),
    Packets(u64),
    Bdp(f64),
}

/// A buffer after BDP multiples are resolved against rate and RTT.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BufferLimit {
    Inf,
    Bytes(u64),
    Packets(u64),
}

impl BufferSpec {
    fn describe(&self) -> String {
        match *self {
            BufferSpec::Inf => "inf".into(),
            BufferSpec::Bytes(b) => format!("{}B", b),
            BufferSpec::Packets(p) => format!("{}p", p),
            BufferSpec::Bdp(m) => format!("{}bdp", fmt_num(m)),
        }
    }

    /// `mtu`: a BDP-derived byte buffer never goes below one MTU, or a small
    /// BDP (e.g. 200 kbit/s x 20 ms = 500 B) would drop every full packet.
    pub fn resolve(&self, first_rate: Rate, rtt_ms: f64, mtu: u32) -> Result<BufferLimit, String> {
        match *self {
            BufferSpec::Inf => Ok(BufferLimit::Inf),
            BufferSpec::Bytes(b) => Ok(BufferLimit::Bytes(b)),
            BufferSpec::Packets(p) => Ok(BufferLimit::Packets(p)),
            BufferSpec::Bdp(m) => {
                if rtt_ms <= 0.0 {
                    return Err("a bdp buffer needs a nonzero base RTT (set --delay or --bdp-rtt)".into());
                }
                let rtt_s = rtt_ms / 1e3;
                match first_rate {
                    Rate::Inf => Err("a bdp buffer needs a finite first rate step".into()),
                    // At least one packet/byte so the link is never dead by rounding.
                    Rate::Bits(b) => Ok(BufferLimit::Bytes(((m * b / 8.0 * rtt_s).round() as u64).max(mtu as u64))),
                    Rate::Pps(p) => Ok(BufferLimit::Packets(((m * p * rtt_s).round() as u64).max(1))),
                }
            }
        }
    }
}

impl BufferLimit {
    pub fn to_json(&self) -> Json {
        match *self {
            BufferLimit::Inf => Json::obj().set("bytes", Json::Null).set("packets", Json::Null),
            BufferLimit::Bytes(b) => Json::obj().set("bytes", b).set("packets", Json::Null),
            BufferLimit::Packets(p) => Json::obj().set("bytes", Json::Null).set("packets", p),
        }
    }
}

/// Gilbert–Elliott parameters (netem's gemodel): per-packet transition
/// probabilities good->bad `p` and bad->good `r`, loss in each state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeParams {
    pub p: f64,
    pub r: f64,
    pub bad_loss: f64,
    pub good_loss: f64,
}

impl GeParams {
    /// `P,R[,BAD[,GOOD]]`; BAD defaults to 1, GOOD to 0.
    pub fn parse(s: &str) -> Result<GeParams, String> {
        let v: Vec<&str> = s.split(',').collect();
        if !(2..=4).contains(&v.len()) {
            return Err(format!("expected P,R[,BAD_LOSS[,GOOD_LOSS]], got {:?}", s));
        }
        let mut x = [0.0, 0.0, 1.0, 0.0];
        for (i, part) in v.iter().enumerate() {
            let f = parse_f64("gilbert-elliott parameter", part)?;
            if !(0.0..=1.0).contains(&f) {
                return Err(format!("probabilities must be in [0,1]: {:?}", s));
            }
            x[i] = f;
        }
        if x[1] <= 0.0 && x[0] > 0.0 {
            return Err(format!("r (bad -> good) must be > 0 or the link stays bad forever: {:?}", s));
        }
        Ok(GeParams { p: x[0], r: x[1], bad_loss: x[2], good_loss: x[3] })
    }

    /// Long-run fraction of packets lost.
    pub fn mean_loss(&self) -> f64 {
        if self.p + self.r == 0.0 {
            return self.good_loss;
        }
        (self.r * self.good_loss + self.p * self.bad_loss) / (self.p + self.r)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DirConfig {
    pub delay_ms: f64,
    pub jitter_ms: f64,
    pub loss: f64,
    pub ge_loss: Option<GeParams>,
    pub reorder: f64,
    pub reorder_gap_ms: f64,
    pub rate: RateSpec,
    pub buffer: BufferSpec,
    pub drop_nth: Vec<u64>,
    pub drop_window_over: Option<u64>,
    pub per_flow: bool,
}

impl Default for DirConfig {
    fn default() -> Self {
        DirConfig {
            delay_ms: 0.0,
            jitter_ms: 0.0,
            loss: 0.0,
            ge_loss: None,
            reorder: 0.0,
            reorder_gap_ms: 1.0,
            rate: RateSpec::inf(),
            buffer: BufferSpec::Inf,
            drop_nth: Vec::new(),
            drop_window_over: None,
            per_flow: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    Run(Vec<String>),
    Cleanup,
    Check,
    Help,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub down: DirConfig,
    pub up: DirConfig,
    pub seed: u64,
    pub mtu: u32,
    pub no_sack: bool,
    pub pcap: Option<String>,
    pub stats: Option<String>,
    pub bdp_rtt_ms: Option<f64>,
    pub routes: Vec<String>,
    pub inner_addrs: Vec<String>,
    pub hosts: Option<String>,
    pub no_nat: bool,
    pub quiet: bool,
    pub ready_fd: Option<i32>,
    /// Who the command runs as: None = the default unprivileged user (`ccscope`, else `nobody`).
    pub user: Option<String>,
    /// Run the command as root with every capability (nested shells, the lab's servers).
    pub keep_root: bool,
    /// Do not stop when the process that started the shell exits (the lab's long-lived shell).
    pub detach: bool,
    /// Extra environment variables passed to the command beside the allow-list.
    pub pass_env: Vec<String>,
    pub mode: Mode,
    /// Resolved from `buffer` once all options are known.
    pub down_limit: BufferLimit,
    pub up_limit: BufferLimit,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            down: DirConfig::default(),
            up: DirConfig::default(),
            seed: 1,
            mtu: 1500,
            no_sack: false,
            pcap: None,
            stats: None,
            bdp_rtt_ms: None,
            routes: Vec::new(),
            inner_addrs: Vec::new(),
            hosts: None,
            no_nat: false,
            quiet: false,
            ready_fd: None,
            user: None,
            keep_root: false,
            detach: false,
            pass_env: Vec::new(),
            mode: Mode::Run(Vec::new()),
            down_limit: BufferLimit::Inf,
            up_limit: BufferLimit::Inf,
        }
    }
}

pub const USAGE: &str = "\
usage: ccscope-link [OPTIONS] -- CMD [ARGS...]
       ccscope-link --cleanup
       ccscope-link --check [OPTIONS]
Link options (each also as --down-X / --up-X; plain sets both directions):
  --delay MS  --jitter MS  --loss P  --rate SPEC  --buffer SPEC
  --ge-loss P,R[,BAD[,GOOD]]  --reorder P  --reorder-gap MS
  --drop-nth N[,N...]  --drop-window-over K  --per-flow
Global: --seed N  --bdp-rtt MS  --mtu N  --no-sack  --pcap FILE  --stats FILE
  --route PREFIX  --inner-addr ADDR/PLEN  --hosts FILE  --no-nat  --quiet
  --ready-fd N
Command: --user NAME|UID (default: ccscope, else nobody; no capabilities, a scrubbed
  environment)  --keep-root (run it as root: nested shells, servers)  --pass-env NAME
  --detach (keep running when the parent exits)
Rate SPEC: inf | 200kbit | 1.5mbit | 8000bit | 500pps | RATE:DUR,...,RATE
  (DUR: 10s, 250ms, 1500p). Buffer SPEC: inf | 5000B | 50p | 2bdp
Exit status: CMD's own; 2 a usage error (bad option); 7 the link could not be set up
  (not root, no TUN, a bad --pcap path...), with one 'ccscope-link: error:' line.
";

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 { format!("{}", x as i64) } else { format!("{}", x) }
}

fn parse_f64(what: &str, s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("{}: not a number: {:?}", what, s))?;
    if !v.is_finite() {
        return Err(format!("{}: not a finite number: {:?}", what, s));
    }
    Ok(v)
}

fn parse_u64(what: &str, s: &str) -> Result<u64, String> {
    s.trim().parse::<u64>().map_err(|_| format!("{}: not a non-negative integer: {:?}", what, s))
}

/// Split "1.5mbit" into (1.5, "mbit").
fn split_num_unit(s: &str) -> (&str, &str) {
    let idx = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    s.split_at(idx)
}

pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let t = s.trim().to_ascii_lowercase();
    if t == "inf" {
        return Ok(Rate::Inf);
    }
    let (num, unit) = split_num_unit(&t);
    if num.is_empty() {
        return Err(format!("bad rate {:?} (expected e.g. 200kbit, 1.5mbit, 500pps, inf)", s));
    }
    let v = parse_f64("rate", num)?;
    let r = match unit {
        "bit" => Rate::Bits(v),
        "kbit" => Rate::Bits(v * 1e3),
        "mbit" => Rate::Bits(v * 1e6),
        "gbit" => Rate::Bits(v * 1e9),
        "pps" => Rate::Pps(v),
        "kpps" => Rate::Pps(v * 1e3),
        _ => return Err(format!("bad rate unit in {:?} (use bit, kbit, mbit, gbit, pps)", s)),
    };
    match r {
        Rate::Bits(x) | Rate::Pps(x) if x <= 0.0 || x > 1e12 => {
            Err(format!("rate out of range: {:?}", s))
        }
        _ => Ok(r),
    }
}

fn parse_step_dur(s: &str) -> Result<StepDur, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = split_num_unit(&t);
    if num.is_empty() {
        return Err(format!("bad step duration {:?} (expected 10s, 250ms or 1500p)", s));
    }
    let d = match unit {
        "p" => {
            let n = parse_u64("step packets", num)?;
            StepDur::Packets(n)
        }
        "s" | "ms" | "us" => {
            let v = parse_f64("step duration", num)?;
            let mult = match unit {
                "s" => 1e9,
                "ms" => 1e6,
                _ => 1e3,
            };
            let ns = v * mult;
            if !(0.0..=1e15).contains(&ns) {
                return Err(format!("step duration out of range: {:?}", s));
            }
            StepDur::Time(ns.round() as u64)
        }
        _ => return Err(format!("bad step duration unit in {:?} (use s, ms or p)", s)),
    };
    match d {
        StepDur::Packets(0) | StepDur::Time(0) => Err(format!("step duration must be > 0: {:?}", s)),
        _ => Ok(d),
    }
}

pub fn parse_rate_spec(s: &str) -> Result<RateSpec, String> {
    let parts: Vec<&str> = s.split(',').collect();
    if s.trim().is_empty() {
        return Err("empty rate spec".into());
    }
    let mut steps = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let mut it = p.splitn(2, ':');
        let rate = parse_rate(it.next().unwrap_or(""))?;
        let dur = match it.next() {
            Some(d) => parse_step_dur(d)?,
            None if last => StepDur::Forever,
            None => return Err(format!("rate step {:?} needs a duration (only the last step may omit it)", p)),
        };
        // The final step always lasts forever; a duration there is accepted and ignored.
        let dur = if last { StepDur::Forever } else { dur };
        steps.push(RateStep { rate, dur });
    }
    Ok(RateSpec { steps })
}

pub fn parse_buffer(s: &str) -> Result<BufferSpec, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("inf") {
        return Ok(BufferSpec::Inf);
    }
    let (num, unit) = split_num_unit(t);
    if num.is_empty() {
        return Err(format!("bad buffer {:?} (expected inf, 5000B, 50p or 2bdp)", s));
    }
    match unit {
        "B" | "b" => Ok(BufferSpec::Bytes(parse_u64("buffer bytes", num)?)),
        "kB" | "KB" | "kb" => Ok(BufferSpec::Bytes(parse_u64("buffer kB", num)?.saturating_mul(1000))),
        "MB" => Ok(BufferSpec::Bytes(parse_u64("buffer MB", num)?.saturating_mul(1_000_000))),
        "p" => Ok(BufferSpec::Packets(parse_u64("buffer packets", num)?)),
        "bdp" | "BDP" => {
            let m = parse_f64("buffer bdp multiple", num)?;
            if m <= 0.0 || m > 1e6 {
                return Err(format!("bdp multiple out of range: {:?}", s));
            }
            Ok(BufferSpec::Bdp(m))
        }
        _ => Err(format!("bad buffer unit in {:?} (use B, p or bdp)", s)),
    }
}

fn parse_ms(what: &str, s: &str) -> Result<f64, String> {
    let v = parse_f64(what, s)?;
    if !(0.0..=1e7).contains(&v) {
        return Err(format!("{}: out of range (0..1e7 ms): {}", what, s));
    }
    Ok(v)
}

fn parse_prefix(what: &str, s: &str, host_allowed: bool) -> Result<String, String> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().map_err(|_| format!("{}: bad address {:?}", what, s))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        Some(l) => l.parse::<u32>().map_err(|_| format!("{}: bad prefix length {:?}", what, s))?,
        None if host_allowed => max,
        None => return Err(format!("{}: needs a prefix length, e.g. 198.18.0.0/24: {:?}", what, s)),
    };
    if len > max {
        return Err(format!("{}: prefix length too long: {:?}", what, s));
    }
    Ok(format!("{}/{}", addr, len))
}

/// Options that take a value, and whether they have --down-/--up- forms.
const DIR_VALUE_OPTS: &[&str] = &[
    "delay",
    "jitter",
    "loss",
    "ge-loss",
    "reorder",
    "reorder-gap",
    "rate",
    "buffer",
    "drop-nth",
    "drop-window-over",
];
const DIR_FLAG_OPTS: &[&str] = &["per-flow"];
const VALUE_OPTS: &[&str] =
    &["seed", "bdp-rtt", "mtu", "pcap", "stats", "route", "inner-addr", "hosts", "ready-fd", "user", "pass-env"];
const FLAG_OPTS: &[&str] = &["no-sack", "no-nat", "quiet", "cleanup", "check", "help", "keep-root", "detach"];

fn apply_dir(d: &mut DirConfig, name: &str, val: Option<&str>) -> Result<(), String> {
    let v = val.unwrap_or("");
    let opt = format!("--{}", name);
    match name {
        "delay" => d.delay_ms = parse_ms(&opt, v)?,
        "jitter" => d.jitter_ms = parse_ms(&opt, v)?,
        "loss" => {
            let p = parse_f64(&opt, v)?;
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{}: probability must be in [0,1]: {}", opt, v));
            }
            d.loss = p;
        }
        "ge-loss" => d.ge_loss = Some(GeParams::parse(v).map_err(|e| format!("{}: {}", opt, e))?),
        "reorder" => {
            let p = parse_f64(&opt, v)?;
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{}: probability must be in [0,1]: {}", opt, v));
            }
            d.reorder = p;
        }
        "reorder-gap" => {
            let g = parse_ms(&opt, v)?;
            if g <= 0.0 {
                return Err(format!("{}: must be > 0 ms: {}", opt, v));
            }
            d.reorder_gap_ms = g;
        }
        "rate" => d.rate = parse_rate_spec(v).map_err(|e| format!("{}: {}", opt, e))?,
        "buffer" => d.buffer = parse_buffer(v).map_err(|e| format!("{}: {}", opt, e))?,
        "drop-nth" => {
            let mut ns = Vec::new();
            for p in v.split(',') {
                let n = parse_u64(&opt, p)?;
                if n == 0 {
                    return Err(format!("{}: packet numbers are 1-based: {}", opt, v));
                }
                ns.push(n);
            }
            ns.sort_unstable();
            ns.dedup();
            d.drop_nth = ns;
        }
        "drop-window-over" => d.drop_window_over = Some(parse_u64(&opt, v)?),
        "per-flow" => d.per_flow = true,
        _ => return Err(format!("unknown option --{}", name)),
    }
    Ok(())
}

pub fn parse_args(args: &[String]) -> Result<Config, String> {
    let mut c = Config::default();
    let mut cmd: Vec<String> = Vec::new();
    let mut cleanup = false;
    let mut check = false;
    let mut help = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            cmd.extend(args[i..].iter().cloned());
            break;
        }
        if a == "-h" {
            help = true;
            continue;
        }
        let Some(body) = a.strip_prefix("--") else {
            // First bare word starts the command (convenience; `--` is canonical).
            cmd.extend(args[i - 1..].iter().cloned());
            break;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let (dir, base) = if let Some(b) = name.strip_prefix("down-") {
            (Some(true), b)
        } else if let Some(b) = name.strip_prefix("up-") {
            (Some(false), b)
        } else {
            (None, name)
        };
        let is_dir_val = DIR_VALUE_OPTS.contains(&base);
        let is_dir_flag = DIR_FLAG_OPTS.contains(&base);
        let takes_value = if is_dir_val || is_dir_flag {
            is_dir_val
        } else if dir.is_none() && VALUE_OPTS.contains(&name) {
            true
        } else if dir.is_none() && FLAG_OPTS.contains(&name) {
            false
        } else {
            return Err(format!("unknown option {}", a));
        };
        let val = if takes_value {
            match inline {
                Some(v) => Some(v),
                None => {
                    if i >= args.len() {
                        return Err(format!("option {} needs a value", a));
                    }
                    i += 1;
                    Some(args[i - 1].clone())
                }
            }
        } else {
            if inline.is_some() {
                return Err(format!("option --{} takes no value", name));
            }
            None
        };
        if is_dir_val || is_dir_flag {
            match dir {
                Some(true) => apply_dir(&mut c.down, base, val.as_deref())?,
                Some(false) => apply_dir(&mut c.up, base, val.as_deref())?,
                None => {
                    apply_dir(&mut c.down, base, val.as_deref())?;
                    apply_dir(&mut c.up, base, val.as_deref())?;
                }
            }
            continue;
        }
        let v = val.unwrap_or_default();
        match name {
            "seed" => c.seed = parse_u64("--seed", &v)?,
            "bdp-rtt" => {
                let r = parse_ms("--bdp-rtt", &v)?;
                if r <= 0.0 {
                    return Err("--bdp-rtt must be > 0".into());
                }
                c.bdp_rtt_ms = Some(r)
            }
            "mtu" => {
                let m = parse_u64("--mtu", &v)?;
                if !(68..=65535).contains(&m) {
                    return Err(format!("--mtu must be in 68..65535: {}", v));
                }
                c.mtu = m as u32;
            }
            "pcap" => c.pcap = Some(nonempty("--pcap", v)?),
            "stats" => c.stats = Some(nonempty("--stats", v)?),
            "route" => {
                let r = parse_prefix("--route", &v, false)?;
                if r.contains(':') {
                    return Err(format!("--route {}: IPv6 routes are not supported (the shell link is IPv4-only)", v));
                }
                c.routes.push(r)
            }
            "inner-addr" => c.inner_addrs.push(parse_prefix("--inner-addr", &v, true)?),
            "hosts" => c.hosts = Some(nonempty("--hosts", v)?),
            "ready-fd" => {
                let n = parse_u64("--ready-fd", &v)?;
                if n > i32::MAX as u64 {
                    return Err("--ready-fd out of range".into());
                }
                c.ready_fd = Some(n as i32);
            }
            "user" => c.user = Some(nonempty("--user", v)?),
            "pass-env" => {
                let n = nonempty("--pass-env", v)?;
                if n.contains('=') || n.contains('\0') {
                    return Err(format!("--pass-env takes a variable name: {:?}", n));
                }
                c.pass_env.push(n)
            }
            "keep-root" => c.keep_root = true,
            "detach" => c.detach = true,
            "no-sack" => c.no_sack = true,
            "no-nat" => c.no_nat = true,
            "quiet" => c.quiet = true,
            "cleanup" => cleanup = true,
            "check" => check = true,
            "help" => help = true,
            _ => return Err(format!("unknown option {}", a)),
        }
    }
    if help {
        c.mode = Mode::Help;
        return Ok(c);
    }
    if cleanup && check {
        return Err("--cleanup and --check are exclusive".into());
    }
    if c.keep_root && c.user.is_some() {
        return Err("--keep-root and --user are exclusive".into());
    }
    if (cleanup || check) && !cmd.is_empty() {
        return Err("--cleanup/--check take no command".into());
    }
    let rtt = c.base_rtt_ms();
    c.down_limit = c.down.buffer.resolve(c.down.rate.first(), rtt, c.mtu).map_err(|e| format!("--down-buffer: {}", e))?;
    c.up_limit = c.up.buffer.resolve(c.up.rate.first(), rtt, c.mtu).map_err(|e| format!("--up-buffer: {}", e))?;
    for (n, d) in [("down", &c.down), ("up", &c.up)] {
        if d.drop_window_over.is_some() && rtt <= 0.0 {
            return Err(format!(
                "--{}-drop-window-over needs a nonzero base RTT (set --delay or --bdp-rtt)",
                n
            ));
        }
    }
    c.mode = if cleanup {
        Mode::Cleanup
    } else if check {
        Mode::Check
    } else {
        Mode::Run(cmd)
    };
    Ok(c)
}

fn nonempty(opt: &str, v: String) -> Result<String, String> {
    if v.is_empty() { Err(format!("{} needs a non-empty value", opt)) } else { Ok(v) }
}

impl Config {
    /// RTT used for BDP buffers and the drop-window rule.
    pub fn base_rtt_ms(&self) -> f64 {
        self.bdp_rtt_ms.unwrap_or(self.down.delay_ms + self.up.delay_ms)
    }

    pub fn dir_json(&self, down: bool) -> Json {
        let (d, lim) = if down { (&self.down, self.down_limit) } else { (&self.up, self.up_limit) };
        Json::obj()
            .set("delay_ms", d.delay_ms)
            .set("jitter_ms", d.jitter_ms)
            .set("loss", d.loss)
            .set(
                "ge_loss",
                match d.ge_loss {
                    Some(g) => Json::obj()
                        .set("p", g.p)
                        .set("r", g.r)
                        .set("bad_loss", g.bad_loss)
                        .set("good_loss", g.good_loss)
                        .set("mean_loss", g.mean_loss()),
                    None => Json::Null,
                },
            )
            .set("reorder", d.reorder)
            .set("reorder_gap_ms", d.reorder_gap_ms)
            .set("rate", d.rate.to_json())
            .set("buffer", Json::obj().set("spec", d.buffer.describe()).set("limit", lim.to_json()))
            .set("drop_nth", d.drop_nth.clone())
            .set("drop_window_over", d.drop_window_over)
            .set("per_flow", d.per_flow)
    }

    pub fn to_json(&self) -> Json {
        let cmd = match &self.mode {
            Mode::Run(c) => Json::from(c.clone()),
            _ => Json::Null,
        };
        Json::obj()
            .set("down", self.dir_json(true))
            .set("up", self.dir_json(false))
            .set("seed", self.seed)
            .set("base_rtt_ms", self.base_rtt_ms())
            .set("bdp_rtt_ms", self.bdp_rtt_ms)
            .set("mtu", self.mtu)
            .set("no_sack", self.no_sack)
            .set("pcap", self.pcap.clone())
            .set("stats", self.stats.clone())
            .set("routes", self.routes.clone())
            .set("inner_addrs", self.inner_addrs.clone())
            .set("hosts", self.hosts.clone())
            .set("nat", !self.no_nat)
            .set("quiet", self.quiet)
            .set("ready_fd", self.ready_fd)
            .set("user", if self.keep_root { Some("root".to_string()) } else { self.user.clone() })
            .set("keep_root", self.keep_root)
            .set("detach", self.detach)
            .set("pass_env", self.pass_env.clone())
            .set("command", cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("inf").unwrap(), Rate::Inf);
        assert_eq!(parse_rate("200kbit").unwrap(), Rate::Bits(200_000.0));
        assert_eq!(parse_rate("1.5mbit").unwrap(), Rate::Bits(1_500_000.0));
        assert_eq!(parse_rate("8000bit").unwrap(), Rate::Bits(8000.0));
        assert_eq!(parse_rate("500pps").unwrap(), Rate::Pps(500.0));
        assert_eq!(parse_rate("1GBIT").unwrap(), Rate::Bits(1e9));
        for bad in ["", "kbit", "200", "200kbps", "-5kbit", "0pps", "nanbit", "1e3kbit", "1..2kbit"] {
            assert!(parse_rate(bad).is_err(), "{:?} should fail", bad);
        }
        assert_eq!(Rate::Bits(8000.0).ser_ns(1000), 1_000_000_000);
        assert_eq!(Rate::Pps(500.0).ser_ns(1), 2_000_000);
        assert_eq!(Rate::Inf.ser_ns(1500), 0);
    }

    #[test]
    fn schedules() {
        let s = parse_rate_spec("500pps:1500p,334pps:1500p,500pps").unwrap();
        assert_eq!(s.steps.len(), 3);
        assert_eq!(s.steps[0], RateStep { rate: Rate::Pps(500.0), dur: StepDur::Packets(1500) });
        assert_eq!(s.steps[2].dur, StepDur::Forever);
        let s = parse_rate_spec("200kbit:10s,100kbit:250ms,200kbit").unwrap();
        assert_eq!(s.steps[0].dur, StepDur::Time(10_000_000_000));
        assert_eq!(s.steps[1].dur, StepDur::Time(250_000_000));
        assert_eq!(s.describe(), "200000bit:10000ms,100000bit:250ms,200000bit");
        assert!(parse_rate_spec("200kbit,100kbit").is_err());
        assert!(parse_rate_spec("200kbit:0s,1kbit").is_err());
        assert!(parse_rate_spec("200kbit:5x,1kbit").is_err());
        assert!(parse_rate_spec("").is_err());
        assert!(parse_rate_spec(",").is_err());
        // last-step duration is accepted and ignored
        assert_eq!(parse_rate_spec("1mbit:5s").unwrap().steps[0].dur, StepDur::Forever);
    }

    #[test]
    fn buffers() {
        assert_eq!(parse_buffer("inf").unwrap(), BufferSpec::Inf);
        assert_eq!(parse_buffer("5000B").unwrap(), BufferSpec::Bytes(5000));
        assert_eq!(parse_buffer("50p").unwrap(), BufferSpec::Packets(50));
        assert_eq!(parse_buffer("2bdp").unwrap(), BufferSpec::Bdp(2.0));
        assert!(parse_buffer("5x").is_err());
        assert!(parse_buffer("-1p").is_err());
        // 1 Mbit/s * 40 ms = 5000 bytes
        assert_eq!(
            BufferSpec::Bdp(2.0).resolve(Rate::Bits(1e6), 40.0, 1500).unwrap(),
            BufferLimit::Bytes(10_000)
        );
        // clamped to one MTU
        assert_eq!(
            BufferSpec::Bdp(2.0).resolve(Rate::Bits(200e3), 20.0, 1500).unwrap(),
            BufferLimit::Bytes(1500)
        );
        assert_eq!(
            BufferSpec::Bdp(2.0).resolve(Rate::Bits(200e3), 20.0, 100).unwrap(),
            BufferLimit::Bytes(1000)
        );
        assert_eq!(
            BufferSpec::Bdp(1.0).resolve(Rate::Pps(500.0), 100.0, 1500).unwrap(),
            BufferLimit::Packets(50)
        );
        assert!(BufferSpec::Bdp(1.0).resolve(Rate::Inf, 100.0, 1500).is_err());
        assert!(BufferSpec::Bdp(1.0).resolve(Rate::Bits(1e6), 0.0, 1500).is_err());
    }

    #[test]
    fn directional_options() {
        let c = parse_args(&args("--delay 10 --up-delay 5 --rate 1mbit --down-buffer 20p -- ping -c 1")).unwrap();
        assert_eq!(c.down.delay_ms, 10.0);
        assert_eq!(c.up.delay_ms, 5.0);
        assert_eq!(c.down.rate.first(), Rate::Bits(1e6));
        assert_eq!(c.up.rate.first(), Rate::Bits(1e6));
        assert_eq!(c.down_limit, BufferLimit::Packets(20));
        assert_eq!(c.up_limit, BufferLimit::Inf);
        assert_eq!(c.mode, Mode::Run(args("ping -c 1")));
        assert_eq!(c.base_rtt_ms(), 15.0);

        let c = parse_args(&args("--rate=500pps --buffer 2bdp --delay 50 --check")).unwrap();
        assert_eq!(c.mode, Mode::Check);
        assert_eq!(c.down_limit, BufferLimit::Packets(100));
        let c = parse_args(&args("--rate 1mbit --buffer 1bdp --bdp-rtt 80 --delay 1")).unwrap();
        assert_eq!(c.down_limit, BufferLimit::Bytes(10_000));

        let c = parse_args(&args("--drop-nth 5,3,3 --down-per-flow --mtu 100 --seed 9 --no-sack")).unwrap();
        assert_eq!(c.down.drop_nth, vec![3, 5]);
        assert!(c.down.per_flow && !c.up.per_flow);
        assert_eq!(c.mtu, 100);
        assert_eq!(c.seed, 9);
        assert!(c.no_sack);
        assert_eq!(c.mode, Mode::Run(vec![]));

        let c = parse_args(&args("--route 198.18.0.0/24 --inner-addr 198.18.0.1/32 --inner-addr 198.18.0.2 x")).unwrap();
        assert_eq!(c.routes, vec!["198.18.0.0/24"]);
        assert_eq!(c.inner_addrs, vec!["198.18.0.1/32", "198.18.0.2/32"]);
        assert_eq!(c.mode, Mode::Run(vec!["x".into()]));
    }

    #[test]
    fn loss_models_and_reorder_options() {
        let c = parse_args(&args("--down-ge-loss 0.01,0.25 --reorder 0.02 --up-reorder-gap 5 --check")).unwrap();
        let g = c.down.ge_loss.unwrap();
        assert_eq!((g.p, g.r, g.bad_loss, g.good_loss), (0.01, 0.25, 1.0, 0.0));
        assert!((g.mean_loss() - 0.01 / 0.26).abs() < 1e-12);
        assert!(c.up.ge_loss.is_none());
        assert_eq!((c.down.reorder, c.up.reorder), (0.02, 0.02));
        assert_eq!((c.down.reorder_gap_ms, c.up.reorder_gap_ms), (1.0, 5.0));
        let g = GeParams::parse("0.1,0.5,0.8,0.001").unwrap();
        assert_eq!((g.bad_loss, g.good_loss), (0.8, 0.001));
        let j = c.to_json().to_string_compact();
        assert!(j.contains(r#""reorder":0.02"#), "{}", j);
    }

    #[test]
    fn rejects_bad_options() {
        for bad in [
            "--delay",
            "--delay abc",
            "--delay -1",
            "--loss 1.5",
            "--mtu 67",
            "--mtu 70000",
            "--bogus",
            "--down-mtu 100",
            "--quiet=1",
            "--drop-nth 0",
            "--drop-nth 1,,2",
            "--route 10.0.0.0",
            "--route 10.0.0.0/33",
            "--route foo/8",
            "--buffer 1bdp --rate 1mbit",
            "--drop-window-over 5",
            "--cleanup --check",
            "--check -- ls",
            "--pcap=",
            "--route fd00::/64",
            "--ge-loss 0.1",
            "--ge-loss 0.1,0.2,0.3,0.4,0.5",
            "--ge-loss 0.1,0",
            "--ge-loss 1.5,0.2",
            "--reorder 2",
            "--reorder-gap 0",
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{:?} should fail", bad);
        }
    }

    #[test]
    fn check_json_is_normalized() {
        let c = parse_args(&args("--rate 500pps:1500p,334pps:1500p,500pps --buffer 50p --check")).unwrap();
        let j = c.to_json().to_string_compact();
        assert!(j.contains(r#""spec":"500pps:1500p,334pps:1500p,500pps""#), "{}", j);
        assert!(j.contains(r#""limit":{"bytes":null,"packets":50}"#), "{}", j);
    }
}
