//! The client and its one attempt loop.

pub(crate) mod client;
#[cfg(test)]
mod tests;
