//! Gilbert–Elliott bursty loss: a two-state Markov chain stepped once per
//! packet. In the good state a packet is lost with probability `good_loss`,
//! in the bad state with `bad_loss`; `p` is P(good -> bad) and `r` is
//! P(bad -> good) per packet (netem's `loss gemodel p r 1-h 1-k`). Mean burst
//! length is 1/r packets; the long-run loss rate is
//! (r·good_loss + p·bad_loss) / (p + r).

use super::LossModel;
use crate::config::GeParams;
use crate::json::Json;
use crate::rng::Rng;

pub struct GilbertElliott {
    ge: GeParams,
    bad: bool,
    rng: Rng,
    drops: u64,
    bursts: u64,
}

impl GilbertElliott {
    pub fn new(ge: GeParams, rng: Rng) -> GilbertElliott {
        GilbertElliott { ge, bad: false, rng, drops: 0, bursts: 0 }
    }
}

impl LossModel for GilbertElliott {
    fn drop_next(&mut self) -> bool {
        // Transition first, then the packet meets the state it finds.
        let u = self.rng.next_f64();
        if self.bad {
            if u < self.ge.r {
                self.bad = false;
            }
        } else if u < self.ge.p {
            self.bad = true;
            self.bursts += 1;
        }
        let loss = if self.bad { self.ge.bad_loss } else { self.ge.good_loss };
        let d = loss > 0.0 && self.rng.next_f64() < loss;
        self.drops += d as u64;
        d
    }

    fn to_json(&self) -> Json {
        Json::obj()
            .set("model", "gilbert-elliott")
            .set("p", self.ge.p)
            .set("r", self.ge.r)
            .set("bad_loss", self.ge.bad_loss)
            .set("good_loss", self.ge.good_loss)
            .set("bad_periods", self.bursts)
            .set("drops", self.drops)
    }
}
