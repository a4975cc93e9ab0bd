//! Which addresses the client may connect to: the compiled twin of `ccscope.targets`'
//! `address_refusal` and `TargetPolicy.refusal`, with the same reasons. The tables are CPython
//! 3.11's `ipaddress` registries (what the Python policy consults); tests/capture/
//! test_tcp_get.py compares the two over every table's edges and a random sample, so a change
//! to either side that makes them disagree fails there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Clone, Copy, Debug)]
pub struct Net {
    addr: u128, // IPv4 in the low 32 bits
    len: u8,
    v6: bool,
}

impl Net {
    pub fn parse(s: &str) -> Option<Net> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = a.parse().ok()?;
        let max = if ip.is_ipv6() { 128 } else { 32 };
        let len: u8 = match l {
            Some(l) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => l.parse().ok()?,
            Some(_) => return None,
            None => max,
        };
        if len > max {
            return None;
        }
        // like ipaddress.ip_network(..., strict=False): host bits are dropped
        Some(Net::of(ip, len))
    }

    fn of(ip: IpAddr, len: u8) -> Net {
        let (v, v6, max) = bits(ip);
        let mask = if len == 0 {
            0
        } else {
            (!0u128) << (max - len) as u32
        } & width_mask(max);
        Net {
            addr: v & mask,
            len,
            v6,
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (v, v6, max) = bits(ip);
        if v6 != self.v6 {
            return false;
        }
        let mask = if self.len == 0 {
            0
        } else {
            (!0u128) << (max - self.len) as u32
        } & width_mask(max);
        v & mask == self.addr
    }
}

fn width_mask(max: u8) -> u128 {
    if max == 128 {
        !0
    } else {
        (1u128 << max) - 1
    }
}

fn bits(ip: IpAddr) -> (u128, bool, u8) {
    match ip {
        IpAddr::V4(a) => (u32::from(a) as u128, false, 32),
        IpAddr::V6(a) => (u128::from(a), true, 128),
    }
}

fn net(s: &str) -> Net {
    Net::parse(s).expect("a valid table entry")
}

fn within(ip: IpAddr, nets: &[&str]) -> bool {
    nets.iter().any(|n| net(n).contains(ip))
}

const V4_PRIVATE: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/29",
    "192.0.0.170/31",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "240.0.0.0/4",
    "255.255.255.255/32",
];
const V4_SHARED: &str = "100.64.0.0/10"; // carrier-grade NAT: neither private nor global
const V6_PRIVATE: &[&str] = &[
    "::1/128",
    "::/128",
    "::ffff:0:0/96",
    "100::/64",
    "2001::/23",
    "2001:2::/48",
    "2001:db8::/32",
    "2001:10::/28",
    "fc00::/7",
    "fe80::/10",
];
const V6_RESERVED: &[&str] = &[
    "::/8", "100::/8", "200::/7", "400::/6", "800::/5", "1000::/4", "4000::/3", "6000::/3",
    "8000::/3", "a000::/3", "c000::/3", "e000::/4", "f000::/5", "f800::/6", "fe00::/9",
];

fn mapped(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    if s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff {
        Some(Ipv4Addr::new(
            (s[6] >> 8) as u8,
            s[6] as u8,
            (s[7] >> 8) as u8,
            s[7] as u8,
        ))
    } else {
        None
    }
}

/// The IPv4 address a routable IPv6 form carries (mapped, 6to4, NAT64).
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = mapped(a) {
        return Some(v4);
    }
    let s = a.segments();
    let ip = IpAddr::V6(a);
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    if within(ip, &["64:ff9b::/96"]) {
        return Some(Ipv4Addr::from(u128::from(a) as u32));
    }
    None
}

/// Why an address is not a public one, or None if it is (targets.address_refusal).
pub fn address_refusal(ip: IpAddr) -> Option<String> {
    if let IpAddr::V6(a) = ip {
        if within(ip, &["2001::/32"]) {
            return Some("Teredo (an IPv4 tunnel)".into());
        }
        if within(ip, &["64:ff9b:1::/48"]) {
            return Some("local-use NAT64".into());
        }
        if within(ip, &["fec0::/10"]) {
            return Some("site-local".into());
        }
        if within(ip, &["::ffff:0:0:0/96"]) {
            return Some("IPv4-translated".into());
        }
        if within(ip, &["::/96"]) && u128::from(a) > 1 {
            return Some("IPv4-compatible IPv6 (deprecated)".into());
        }
        if let Some(v4) = embedded_v4(a) {
            let why = address_refusal(IpAddr::V4(v4));
            if mapped(a).is_some() {
                return why;
            }
            return why.map(|w| format!("embeds {v4} ({w})"));
        }
    }
    let (loopback, link_local, multicast, unspecified, reserved, private, global) = match ip {
        IpAddr::V4(a) => {
            let private = within(ip, V4_PRIVATE);
            (
                a.is_loopback(),
                within(ip, &["169.254.0.0/16"]),
                within(ip, &["224.0.0.0/4"]),
                a.is_unspecified(),
                within(ip, &["240.0.0.0/4"]),
                private,
                !within(ip, &[V4_SHARED]) && !private,
            )
        }
        IpAddr::V6(a) => {
            let private = within(ip, V6_PRIVATE);
            (
                a.is_loopback(),
                within(ip, &["fe80::/10"]),
                within(ip, &["ff00::/8"]),
                a.is_unspecified(),
                within(ip, V6_RESERVED),
                private,
                !private,
            )
        }
    };
    let checks = [
        (loopback, "loopback"),
        (link_local, "link-local"),
        (multicast, "multicast"),
        (unspecified, "unspecified"),
        (reserved, "reserved"),
        (private, "private"),
        (!global, "not globally routable"),
    ];
    checks
        .iter()
        .find(|(bad, _)| *bad)
        .map(|(_, why)| why.to_string())
}

/// Where the client may connect: public addresses, plus the networks in `allowed`.
pub struct Policy {
    pub allowed: Vec<Net>,
    pub lab: bool,
}

impl Policy {
    /// Why this policy refuses `ip`, or None (TargetPolicy.refusal).
    pub fn refusal(&self, ip: IpAddr) -> Option<String> {
        let ip = match ip {
            IpAddr::V6(a) => mapped(a).map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        if self.allowed.iter().any(|n| n.contains(ip)) {
            return None;
        }
        let why = address_refusal(ip)?;
        let place = if self.lab {
            "the lab's own prefixes"
        } else {
            "lab mode (the lab's own prefixes)"
        };
        Some(format!(
            "{why}; only public addresses and {place} are measured"
        ))
    }
}
