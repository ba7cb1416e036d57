//! The Redis Cluster backend: the queue sharded over hash-tagged shards, each with the
//! single-server layout (see "Redis Cluster" in the [module documentation](crate::redis)).

mod ids;
mod route;
mod sharded;
mod slots;

pub(in crate::redis) use route::SlotRoute;
pub use sharded::RedisClusterQueue;
pub use slots::key_slot;
