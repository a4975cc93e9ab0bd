//! Independent random loss: every packet is dropped with probability p.

use super::LossModel;
use crate::json::Json;
use crate::rng::Rng;

pub struct Bernoulli {
    p: f64,
    rng: Rng,
    drops: u64,
}

impl Bernoulli {
    pub fn new(p: f64, rng: Rng) -> Bernoulli {
        Bernoulli { p, rng, drops: 0 }
    }
}

impl LossModel for Bernoulli {
    fn drop_next(&mut self) -> bool {
        let d = self.rng.next_f64() < self.p;
        self.drops += d as u64;
        d
    }

    fn to_json(&self) -> Json {
        Json::obj().set("model", "bernoulli").set("p", self.p).set("drops", self.drops)
    }
}
