//! Paused-time tests of the attempt loop and the resilience policies through a client.

mod attempts;
mod compression;
mod errors;
mod hedge;
mod limit;
mod resilience;
mod selection;
mod sizes;
