//! Policies the attempt loop consults: whether to retry, how long to wait, whether the
//! client can afford a retry, whether the cluster gets traffic at all, and when a dead node
//! is checked again. Each is plain data plus small functions, testable without sockets.

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod class_backoff;
pub mod hedge;
pub mod limit;
pub mod load;
pub(crate) mod plan;
pub mod retry;
pub mod schedule;
pub(crate) mod vegas;
pub(crate) mod window;
