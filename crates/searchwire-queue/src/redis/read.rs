//! The reading side and dead-letter housekeeping: stats, listing, purge.

use super::RedisQueue;
use crate::error::Result;
use crate::message::{DeadLetter, Message, MessageId, Selection, Stats};
use crate::record;

impl RedisQueue {
    /// See [`Queue::stats`](crate::Queue::stats).
    pub async fn stats(&self) -> Result<Stats> {
        let now = self.now();
        let mut inv = self.invocation(&self.scripts.stats);
        inv.arg(now.as_millis());
        let v: (u64, u64, u64, Option<Vec<u8>>, u64) = self.run("reading stats", &inv).await?;
        let oldest = match v.3 {
            Some(rec) => Some(now.saturating_duration_since(record::decode(&rec)?.enqueued_at)),
            None => None,
        };
        Ok(Stats {
            backlog: v.0,
            due: v.1,
            leased: v.2,
            oldest_age: oldest,
            dead_letters: v.4,
        })
    }

    async fn list_raw(
        &self,
        which: &str,
        after: Option<MessageId>,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut inv = self.invocation(&self.scripts.list);
        inv.arg(which).arg(after.map_or(0, |a| a.0)).arg(limit);
        let v: Vec<Option<Vec<u8>>> = self.run("listing", &inv).await?;
        Ok(v.into_iter().flatten().collect())
    }

    /// See [`Queue::list`](crate::Queue::list).
    pub async fn list(&self, after: Option<MessageId>, limit: usize) -> Result<Vec<Message>> {
        self.list_raw("queued", after, limit)
            .await?
            .iter()
            .map(|r| record::decode(r))
            .collect()
    }

    /// See [`Queue::dead_letters`](crate::Queue::dead_letters).
    pub async fn dead_letters(
        &self,
        after: Option<MessageId>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>> {
        self.list_raw("dead", after, limit)
            .await?
            .iter()
            .map(|r| record::decode_dead(r))
            .collect()
    }

    /// See [`Queue::purge`](crate::Queue::purge).
    pub async fn purge(&self, selection: &Selection) -> Result<u64> {
        let mut inv = self.invocation(&self.scripts.purge);
        match selection {
            Selection::All => {
                inv.arg("*");
            }
            Selection::Ids(ids) if ids.is_empty() => return Ok(0),
            Selection::Ids(ids) => {
                for id in ids {
                    inv.arg(id.0);
                }
            }
        }
        self.run("purging dead letters", &inv).await
    }
}
