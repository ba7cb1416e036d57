//! Time: durations as people write them, and (see `transport`) the one wall-clock read.

pub mod duration;
