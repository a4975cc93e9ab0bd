//! Reordering: with probability p a packet is held back `gap` ns beyond its
//! normal release and leaves the queue's FIFO order, so the packets behind it
//! may overtake it (netem's `reorder` in reverse: the chosen packet is late,
//! not early). The held packet does not delay the ones after it.

use crate::json::Json;
use crate::rng::Rng;

pub struct Reorder {
    p: f64,
    gap_ns: u64,
    rng: Rng,
    pub held: u64,
}

impl Reorder {
    pub fn new(p: f64, gap_ms: f64, rng: Rng) -> Reorder {
        Reorder { p, gap_ns: (gap_ms * 1e6).round() as u64, rng, held: 0 }
    }

    /// Extra delay for the next packet, or None to keep it in order.
    pub fn hold_next(&mut self) -> Option<u64> {
        if self.p > 0.0 && self.rng.next_f64() < self.p {
            self.held += 1;
            Some(self.gap_ns)
        } else {
            None
        }
    }

    pub fn to_json(&self) -> Json {
        Json::obj().set("p", self.p).set("gap_ms", self.gap_ns as f64 / 1e6).set("held", self.held)
    }
}
