//! Classic pcap writer (nanosecond magic, LINKTYPE_RAW), headers only.
//! Buffered in memory; the event loop calls `flush` on a timer so a crash
//! loses at most ~100 ms of records.

use crate::packet::capture_len;
use std::io::{self, Write};

pub const MAGIC_NS: u32 = 0xa1b2_3c4d;
pub const LINKTYPE_RAW: u32 = 101;
pub const SNAPLEN: u32 = 65535;

pub struct PcapWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    last_ts: u64,
    records: u64,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NS.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&h)?;
        out.flush()?;
        Ok(PcapWriter { out, buf: Vec::with_capacity(1 << 16), last_ts: 0, records: 0 })
    }

    /// `ts_ns`: realtime nanoseconds. Timestamps are clamped to be
    /// non-decreasing so the file is in time order even if two reads race.
    pub fn record(&mut self, ts_ns: u64, pkt: &[u8]) {
        let ts = ts_ns.max(self.last_ts);
        self.last_ts = ts;
        let cap = capture_len(pkt).min(SNAPLEN as usize);
        let sec = (ts / 1_000_000_000) as u32;
        let nsec = (ts % 1_000_000_000) as u32;
        self.buf.extend_from_slice(&sec.to_le_bytes());
        self.buf.extend_from_slice(&nsec.to_le_bytes());
        self.buf.extend_from_slice(&(cap as u32).to_le_bytes());
        self.buf.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&pkt[..cap]);
        self.records += 1;
    }

    pub fn pending_bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn records(&self) -> u64 {
        self.records
    }

    pub fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let r = self.out.write_all(&self.buf);
            // Drop the buffer even on error: a full disk must not grow memory forever.
            self.buf.clear();
            r?;
        }
        self.out.flush()
    }

    pub fn into_inner(mut self) -> io::Result<W> {
        self.flush()?;
        Ok(self.out)
    }
}

/// Minimal reader used by tests: returns (ts_ns, caplen, origlen, data).
pub fn read_all(b: &[u8]) -> Option<Vec<(u64, u32, u32, Vec<u8>)>> {
    let u32le = |o: usize| -> Option<u32> { Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?)) };
    if u32le(0)? != MAGIC_NS || u32le(20)? != LINKTYPE_RAW {
        return None;
    }
    let mut off = 24;
    let mut v = Vec::new();
    while off < b.len() {
        let sec = u32le(off)? as u64;
        let nsec = u32le(off + 4)? as u64;
        let cap = u32le(off + 8)?;
        let orig = u32le(off + 12)?;
        let data = b.get(off + 16..off + 16 + cap as usize)?.to_vec();
        v.push((sec * 1_000_000_000 + nsec, cap, orig, data));
        off += 16 + cap as usize;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::testpkt::*;

    #[test]
    fn header_and_records() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let p1 = v4(6, [1, 2, 3, 4], [5, 6, 7, 8], &tcp(1, 2, 12, 1000));
        let p2 = v4(17, [1, 2, 3, 4], [5, 6, 7, 8], &udp(1, 2, 500));
        w.record(1_700_000_000_123_456_789, &p1);
        w.record(1_700_000_000_000_000_000, &p2); // earlier: clamped
        w.record(1_700_000_001_000_000_001, b"\x99junk");
        let out = w.into_inner().unwrap();
        assert_eq!(&out[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(u16::from_le_bytes([out[4], out[5]]), 2);
        assert_eq!(u16::from_le_bytes([out[6], out[7]]), 4);
        assert_eq!(u32::from_le_bytes(out[20..24].try_into().unwrap()), 101);
        let recs = read_all(&out).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].0, 1_700_000_000_123_456_789);
        assert_eq!(recs[0].1, 52);
        assert_eq!(recs[0].2 as usize, p1.len());
        assert_eq!(&recs[0].3[..], &p1[..52]);
        assert_eq!(recs[1].0, recs[0].0);
        assert_eq!(recs[1].1, 20 + 8 + 64);
        assert_eq!(recs[2].1, 5);
        assert_eq!(out.len(), 24 + 3 * 16 + 52 + 92 + 5);
    }
}
