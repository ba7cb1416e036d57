//! The client and its one attempt loop.

mod build;
pub(crate) mod client;
pub(crate) mod compress;
mod failure;
mod limited;
mod run;
#[cfg(test)]
mod tests;
