//! Deterministic robustness test (a fuzz harness that runs on stable):
//! hundreds of thousands of random and mutated packets go through every
//! piece of code that looks at packet bytes; any panic fails the test.

use crate::config::{parse_rate_spec, BufferLimit, DirConfig};
use crate::emu::{Direction, Verdict};
use crate::packet::testpkt::*;
use crate::packet::{capture_len, parse, FlowKey};
use crate::pcap::{read_all, PcapWriter};
use crate::rng::Rng;

fn seeds() -> Vec<Vec<u8>> {
    let a = [192, 0, 2, 1];
    let b = [198, 51, 100, 7];
    let mut s6 = [0u8; 16];
    s6[0] = 0x20;
    s6[1] = 0x01;
    let mut d6 = s6;
    d6[15] = 9;
    let mut frag6 = vec![6, 0, 0, 0, 0, 0, 0, 1];
    frag6.extend(tcp(443, 1000, 0, 50));
    let mut hop6 = vec![17, 0, 0, 0, 0, 0, 0, 0];
    hop6.extend(udp(443, 5000, 300));
    vec![
        v4(6, a, b, &tcp(40000, 443, 12, 1448)),
        v4(6, a, b, &tcp(40000, 443, 40, 0)),
        v4(17, a, b, &udp(5353, 443, 1200)),
        v4(1, a, b, &[8, 0, 0, 0, 1, 2, 3, 4, 5, 6]),
        v6(6, s6, d6, &tcp(443, 1000, 12, 1200)),
        v6(17, s6, d6, &udp(443, 1000, 1200)),
        v6(44, s6, d6, &frag6),
        v6(0, s6, d6, &hop6),
        v6(58, s6, d6, &[128, 0, 0, 0, 0, 1, 0, 1]),
    ]
}

fn mutate(r: &mut Rng, p: &mut Vec<u8>) {
    match r.below(8) {
        0 => {
            // flip random bytes, biased to the headers
            for _ in 0..=r.below(4) {
                if p.is_empty() {
                    break;
                }
                let lim = if r.below(2) == 0 { p.len().min(80) } else { p.len() };
                let i = r.below(lim as u64) as usize;
                p[i] = r.next_u64() as u8;
            }
        }
        1 => p.truncate(r.below(p.len() as u64 + 1) as usize),
        2 => {
            // nibble-level header fields: version / IHL / data offset
            if !p.is_empty() {
                p[0] = (r.below(16) as u8) << 4 | (r.below(16) as u8);
            }
            if p.len() > 32 {
                p[32] = (r.below(16) as u8) << 4;
            }
        }
        3 => {
            // length fields
            if p.len() > 5 {
                let v = r.next_u64() as u16;
                p[2..4].copy_from_slice(&v.to_be_bytes());
                p[4..6].copy_from_slice(&v.to_be_bytes());
            }
        }
        4 => {
            // protocol / next-header
            if p.len() > 9 {
                let protos = [0u8, 6, 17, 43, 44, 50, 51, 58, 59, 60, 255];
                let v = protos[r.below(protos.len() as u64) as usize];
                p[6] = v;
                p[9] = v;
            }
        }
        5 => {
            let n = r.below(64) as usize;
            for _ in 0..n {
                p.push(r.next_u64() as u8);
            }
        }
        6 => {
            // fragment offset / flags
            if p.len() > 7 {
                p[6] = r.next_u64() as u8;
                p[7] = r.next_u64() as u8;
            }
        }
        _ => {
            // IPv6 ext-header length bytes
            if p.len() > 41 {
                p[41] = r.next_u64() as u8;
            }
        }
    }
}

fn random_packet(r: &mut Rng) -> Vec<u8> {
    let n = r.below(200) as usize;
    let mut v: Vec<u8> = (0..n).map(|_| r.next_u64() as u8).collect();
    if !v.is_empty() && r.below(2) == 0 {
        v[0] = if r.below(2) == 0 { 0x45 } else { 0x60 };
    }
    v
}

fn check_one(p: &[u8]) {
    let c = capture_len(p);
    assert!(c <= p.len());
    if let Some(i) = parse(p) {
        assert!(i.cap_len <= p.len());
        assert!(i.len <= p.len());
    }
    let _ = FlowKey::of(p);
}

#[test]
fn robustness_random_and_mutated_packets() {
    let mut r = Rng::new(0xC0FFEE);
    let seeds = seeds();
    let mut dirs: Vec<Direction> = Vec::new();
    for per_flow in [false, true] {
        let c = DirConfig {
            delay_ms: 5.0,
            jitter_ms: 2.0,
            loss: 0.01,
            rate: parse_rate_spec("1mbit:100ms,500pps:50p,2mbit").unwrap(),
            drop_nth: vec![3, 17],
            drop_window_over: Some(20),
            per_flow,
            ..DirConfig::default()
        };
        dirs.push(Direction::new(&c, BufferLimit::Bytes(30_000), 10.0, 5));
    }
    let mut pcap = PcapWriter::new(Vec::new()).unwrap();
    let mut now = 1_000_000_000u64;
    let mut total = 0u64;
    let mut queued = 0u64;
    const N: usize = 250_000;
    for i in 0..N {
        let p = if i % 3 == 0 {
            random_packet(&mut r)
        } else {
            let mut p = seeds[r.below(seeds.len() as u64) as usize].clone();
            for _ in 0..=r.below(3) {
                mutate(&mut r, &mut p);
            }
            p
        };
        check_one(&p);
        if i % 50 == 0 {
            pcap.record(now, &p);
        }
        now += r.below(200_000);
        for d in dirs.iter_mut() {
            if d.enqueue(now, p.clone()) == Verdict::Queued {
                queued += 1;
            }
            while let Some(s) = d.pop_due(now) {
                d.on_written(&s, now);
            }
        }
        total += 1;
    }
    assert_eq!(total as usize, N);
    assert!(queued > 0);
    for d in dirs.iter_mut() {
        while let Some(s) = d.pop_due(u64::MAX) {
            d.on_written(&s, u64::MAX);
        }
        let j = d.to_json().to_string_compact();
        assert!(j.contains("\"packets_in\":250000"), "{}", j);
    }
    let out = pcap.into_inner().unwrap();
    let recs = read_all(&out).unwrap();
    assert_eq!(recs.len(), N / 50);
    // exhaustive truncation of every seed
    for s in &seeds {
        for n in 0..=s.len() {
            check_one(&s[..n]);
        }
    }
}
