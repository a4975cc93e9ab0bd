//! Defensive IPv4/IPv6 header parsing. Every access is bounds-checked via
//! `get`; any packet that cannot be understood yields None / a fallback
//! key, never a panic (the bytes come from arbitrary Internet hosts).

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PktInfo {
    pub version: u8,
    /// Upper-layer protocol after IPv6 extension headers.
    pub proto: u8,
    /// Addresses; IPv4 uses the first 4 bytes.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    /// True when the transport header was found (first fragment or unfragmented).
    pub has_ports: bool,
    /// Offset of the transport header (= total IP header length incl. extensions).
    pub l4_off: usize,
    /// Effective packet length (min of buffer length and IP length field).
    pub len: usize,
    /// Bytes worth capturing (headers only); always <= buffer length.
    pub cap_len: usize,
}

#[inline]
fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(off)?, *b.get(off + 1)?]))
}

pub fn parse(p: &[u8]) -> Option<PktInfo> {
    let v = p.first()? >> 4;
    match v {
        4 => parse_v4(p),
        6 => parse_v6(p),
        _ => None,
    }
}

fn parse_v4(p: &[u8]) -> Option<PktInfo> {
    let ihl = ((p.first()? & 0x0f) as usize) * 4;
    if ihl < 20 || p.len() < ihl {
        return None;
    }
    let tot = be16(p, 2)? as usize;
    // Trust the smaller of buffer and header so a lying length can't make us over-read.
    let len = if tot >= ihl { tot.min(p.len()) } else { p.len() };
    let frag = be16(p, 6)?;
    let first_frag = frag & 0x1fff == 0;
    let proto = *p.get(9)?;
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src[..4].copy_from_slice(p.get(12..16)?);
    dst[..4].copy_from_slice(p.get(16..20)?);
    let mut info = PktInfo {
        version: 4,
        proto,
        src,
        dst,
        sport: 0,
        dport: 0,
        has_ports: false,
        l4_off: ihl,
        len,
        cap_len: 0,
    };
    fill_l4(p, &mut info, first_frag);
    Some(info)
}

fn parse_v6(p: &[u8]) -> Option<PktInfo> {
    if p.len() < 40 {
        return None;
    }
    let plen = be16(p, 4)? as usize;
    // Jumbograms (plen 0) and short buffers: use what we actually hold.
    let len = if plen == 0 { p.len() } else { (40 + plen).min(p.len()) };
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(p.get(8..24)?);
    dst.copy_from_slice(p.get(24..40)?);
    let mut next = *p.get(6)?;
    let mut off = 40usize;
    let mut first_frag = true;
    // Bounded walk over extension headers so a crafted chain can't loop long.
    for _ in 0..8 {
        match next {
            0 | 43 | 60 => {
                let n = *p.get(off)?;
                let hl = (*p.get(off + 1)? as usize + 1) * 8;
                next = n;
                off += hl;
            }
            44 => {
                let n = *p.get(off)?;
                let fo = be16(p, off + 2)? >> 3;
                first_frag = fo == 0;
                next = n;
                off += 8;
            }
            51 => {
                let n = *p.get(off)?;
                let hl = (*p.get(off + 1)? as usize + 2) * 4;
                next = n;
                off += hl;
            }
            _ => break,
        }
        if off > len {
            return None;
        }
        if !first_frag {
            break;
        }
    }
    let mut info = PktInfo {
        version: 6,
        proto: next,
        src,
        dst,
        sport: 0,
        dport: 0,
        has_ports: false,
        l4_off: off,
        len,
        cap_len: 0,
    };
    fill_l4(p, &mut info, first_frag);
    Some(info)
}

/// Ports and capture length; `info.l4_off <= info.len <= p.len()` on entry.
fn fill_l4(p: &[u8], info: &mut PktInfo, first_frag: bool) {
    let off = info.l4_off;
    let len = info.len;
    let rest = len.saturating_sub(off);
    let cap = if !first_frag {
        len.min(64)
    } else if info.proto == PROTO_TCP {
        if let (Some(sp), Some(dp)) = (be16(p, off), be16(p, off + 2)) {
            if off + 4 <= len {
                info.sport = sp;
                info.dport = dp;
                info.has_ports = true;
            }
        }
        let doff = p.get(off + 12).map(|b| ((b >> 4) as usize) * 4).unwrap_or(20);
        // Bogus data offset (<20): still keep the fixed header.
        let th = if doff < 20 { 20 } else { doff };
        off + th.min(rest)
    } else if info.proto == PROTO_UDP {
        if off + 4 <= len {
            if let (Some(sp), Some(dp)) = (be16(p, off), be16(p, off + 2)) {
                info.sport = sp;
                info.dport = dp;
                info.has_ports = true;
            }
        }
        off + 8.min(rest) + rest.saturating_sub(8).min(64)
    } else {
        len.min(64)
    };
    info.cap_len = cap.min(len).min(p.len());
}

/// Header-only capture length for any byte string (parsed or not).
pub fn capture_len(p: &[u8]) -> usize {
    match parse(p) {
        Some(i) => i.cap_len,
        None => p.len().min(64),
    }
}

/// Direction-independent 5-tuple: both directions of a connection map to
/// the same key (endpoints are sorted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct FlowKey {
    pub version: u8,
    pub proto: u8,
    pub a: [u8; 16],
    pub pa: u16,
    pub b: [u8; 16],
    pub pb: u16,
}

impl FlowKey {
    pub fn from_info(i: &PktInfo) -> FlowKey {
        // Ports only for TCP/UDP; other protocols key on addresses+proto.
        let ports = i.has_ports && (i.proto == PROTO_TCP || i.proto == PROTO_UDP);
        let (sp, dp) = if ports { (i.sport, i.dport) } else { (0, 0) };
        let s = (i.src, sp);
        let d = (i.dst, dp);
        let (x, y) = if s <= d { (s, d) } else { (d, s) };
        FlowKey { version: i.version, proto: i.proto, a: x.0, pa: x.1, b: y.0, pb: y.1 }
    }

    /// Unparseable packets all share the zero key.
    pub fn of(p: &[u8]) -> FlowKey {
        parse(p).map(|i| FlowKey::from_info(&i)).unwrap_or_default()
    }
}

#[cfg(test)]
pub mod testpkt {
    //! Packet builders shared by unit tests and the robustness test.

    pub fn v4(proto: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8]) -> Vec<u8> {
        let tot = 20 + l4.len();
        let mut p = vec![0x45, 0, (tot >> 8) as u8, tot as u8, 0, 1, 0x40, 0, 64, proto, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(l4);
        p
    }

    pub fn v6(next: u8, src: [u8; 16], dst: [u8; 16], rest: &[u8]) -> Vec<u8> {
        let plen = rest.len();
        let mut p = vec![0x60, 0, 0, 0, (plen >> 8) as u8, plen as u8, next, 64];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(rest);
        p
    }

    pub fn tcp(sport: u16, dport: u16, opts: usize, payload: usize) -> Vec<u8> {
        let hl = 20 + opts;
        let mut t = vec![0u8; hl + payload];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[12] = ((hl / 4) as u8) << 4;
        t[13] = 0x10;
        t
    }

    pub fn udp(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
        let l = 8 + payload;
        let mut u = vec![0u8; l];
        u[0..2].copy_from_slice(&sport.to_be_bytes());
        u[2..4].copy_from_slice(&dport.to_be_bytes());
        u[4..6].copy_from_slice(&(l as u16).to_be_bytes());
        u
    }
}

#[cfg(test)]
mod tests {
    use super::testpkt::*;
    use super::*;

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];

    fn a6(last: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = last;
        a
    }

    #[test]
    fn ipv4_tcp() {
        let p = v4(6, A, B, &tcp(1234, 80, 12, 1000));
        let i = parse(&p).unwrap();
        assert_eq!((i.version, i.proto, i.sport, i.dport, i.has_ports), (4, 6, 1234, 80, true));
        assert_eq!(i.l4_off, 20);
        assert_eq!(i.cap_len, 20 + 32);
        assert_eq!(i.len, p.len());
    }

    #[test]
    fn ipv4_udp_caplen() {
        let p = v4(17, A, B, &udp(5000, 443, 1200));
        assert_eq!(capture_len(&p), 20 + 8 + 64);
        let p = v4(17, A, B, &udp(5000, 443, 10));
        assert_eq!(capture_len(&p), 20 + 8 + 10);
        let i = parse(&p).unwrap();
        assert_eq!((i.sport, i.dport), (5000, 443));
    }

    #[test]
    fn ipv4_options_and_other_proto() {
        let mut p = v4(1, A, B, &[8, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(capture_len(&p), p.len());
        // IHL 6 with 4 bytes of options
        p = v4(6, A, B, &[0, 0, 0, 0]);
        p.splice(20..20, [1, 1, 1, 0]);
        p[0] = 0x46;
        p.extend(tcp(1, 2, 0, 100));
        let tot = p.len() as u16;
        p[2..4].copy_from_slice(&tot.to_be_bytes());
        let i = parse(&p).unwrap();
        assert_eq!(i.l4_off, 24);
        let big = v4(47, A, B, &[0u8; 500]);
        assert_eq!(capture_len(&big), 64);
    }

    #[test]
    fn bogus_headers() {
        // IHL < 5
        let mut p = v4(6, A, B, &tcp(1, 2, 0, 10));
        p[0] = 0x44;
        assert!(parse(&p).is_none());
        assert_eq!(capture_len(&p), p.len().min(64));
        // IHL beyond buffer
        p[0] = 0x4f;
        let short = &p[..30];
        assert!(parse(short).is_none());
        // TCP data offset < 5 and > remaining
        let mut p = v4(6, A, B, &tcp(1, 2, 0, 10));
        p[20 + 12] = 0x10;
        assert_eq!(parse(&p).unwrap().cap_len, 40);
        p[20 + 12] = 0xf0;
        let i = parse(&p).unwrap();
        assert_eq!(i.cap_len, p.len());
        // total length field larger than buffer / smaller than header
        let mut p = v4(6, A, B, &tcp(1, 2, 0, 10));
        p[2] = 0xff;
        assert_eq!(parse(&p).unwrap().len, p.len());
        p[2] = 0;
        p[3] = 4;
        assert_eq!(parse(&p).unwrap().len, p.len());
        // non-IP
        assert!(parse(&[]).is_none());
        assert!(parse(&[0x55, 1, 2]).is_none());
        assert_eq!(capture_len(&[]), 0);
    }

    #[test]
    fn truncated_everywhere() {
        let full = v4(6, A, B, &tcp(1, 2, 20, 100));
        for n in 0..full.len() {
            let _ = parse(&full[..n]);
            assert!(capture_len(&full[..n]) <= n);
        }
        let full = v6(17, a6(1), a6(2), &udp(1, 2, 100));
        for n in 0..full.len() {
            let _ = parse(&full[..n]);
            assert!(capture_len(&full[..n]) <= n);
        }
    }

    #[test]
    fn fragments() {
        // non-first fragment: no ports, but still a keyed flow on addresses
        let mut p = v4(6, A, B, &tcp(1234, 80, 0, 100));
        p[6] = 0x00;
        p[7] = 0x10;
        let i = parse(&p).unwrap();
        assert!(!i.has_ports);
        assert_eq!(i.cap_len, 64);
        assert_eq!(FlowKey::of(&p).pa, 0);
        // first fragment with MF keeps ports
        let mut p = v4(17, A, B, &udp(53, 53, 100));
        p[6] = 0x20;
        p[7] = 0;
        assert!(parse(&p).unwrap().has_ports);
        // IPv6 fragment header, offset 0 then nonzero
        let mut rest = vec![17, 0, 0, 0, 0, 0, 0, 1];
        rest.extend(udp(7, 8, 20));
        let p = v6(44, a6(1), a6(2), &rest);
        let i = parse(&p).unwrap();
        assert_eq!((i.proto, i.sport, i.dport, i.l4_off), (17, 7, 8, 48));
        let mut rest2 = rest.clone();
        rest2[3] = 0x08; // offset 1
        let i = parse(&v6(44, a6(1), a6(2), &rest2)).unwrap();
        assert!(!i.has_ports);
    }

    #[test]
    fn ipv6_ext_headers() {
        // hop-by-hop (8 bytes) + dest opts (16 bytes) + tcp
        let mut rest = vec![60, 0, 0, 0, 0, 0, 0, 0];
        rest.extend([6, 1]);
        rest.extend([0u8; 14]);
        rest.extend(tcp(443, 50000, 12, 500));
        let p = v6(0, a6(1), a6(2), &rest);
        let i = parse(&p).unwrap();
        assert_eq!((i.proto, i.l4_off, i.sport), (6, 64, 443));
        assert_eq!(i.cap_len, 64 + 32);
        // ext header claiming to run past the end
        let p = v6(0, a6(1), a6(2), &[6, 200, 0, 0, 0, 0, 0, 0]);
        assert!(parse(&p).is_none());
        // plain v6 udp
        let p = v6(17, a6(1), a6(2), &udp(1, 2, 500));
        assert_eq!(capture_len(&p), 40 + 8 + 64);
    }

    #[test]
    fn flow_keys_symmetric() {
        let up = v4(6, A, B, &tcp(40000, 80, 0, 0));
        let down = v4(6, B, A, &tcp(80, 40000, 0, 0));
        assert_eq!(FlowKey::of(&up), FlowKey::of(&down));
        let other = v4(6, A, B, &tcp(40001, 80, 0, 0));
        assert_ne!(FlowKey::of(&up), FlowKey::of(&other));
        let udp_same_ports = v4(17, A, B, &udp(40000, 80, 0));
        assert_ne!(FlowKey::of(&up), FlowKey::of(&udp_same_ports));
        // ICMP keys on addresses+proto only
        let i1 = v4(1, A, B, &[8, 0, 1, 2, 3, 4, 5, 6]);
        let i2 = v4(1, B, A, &[0, 0, 9, 9, 9, 9, 9, 9]);
        assert_eq!(FlowKey::of(&i1), FlowKey::of(&i2));
        assert_eq!(FlowKey::of(&i1).pa, 0);
        assert_eq!(FlowKey::of(b"garbage"), FlowKey::default());
        let u6 = v6(17, a6(1), a6(2), &udp(1, 2, 0));
        let d6 = v6(17, a6(2), a6(1), &udp(2, 1, 0));
        assert_eq!(FlowKey::of(&u6), FlowKey::of(&d6));
    }
}
