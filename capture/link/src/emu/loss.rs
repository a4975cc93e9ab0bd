//! Loss models: one small trait, one file per model. A direction runs its
//! models in order (random loss, then bursty loss); any of them may drop.
//! Each model owns its random stream, seeded from the direction's seed, so
//! adding a model never shifts the draws of another.

mod bernoulli;
mod gilbert_elliott;

pub use bernoulli::Bernoulli;
pub use gilbert_elliott::GilbertElliott;

use crate::json::Json;

pub trait LossModel {
    /// Decide the fate of the next packet: true = drop it.
    fn drop_next(&mut self) -> bool;
    /// Parameters and counters for the stats file.
    fn to_json(&self) -> Json;
}
