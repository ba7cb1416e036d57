//! The queue on a Redis Cluster: N shards, each a [`RedisQueue`] with today's layout under
//! the hash tag `{STREAM:K}` (so each shard's keys share one slot and its scripts and
//! transactions run as on one server), on its own link to the primary of that slot.

use futures_util::future::join_all;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::ids::{global, local_after, shard_of, split};
use super::route::{Primaries, SlotRoute};
use super::slots::key_slot;
use crate::error::{Error, ErrorKind, Result};
use crate::message::{
    Appended, DeadLetter, Lease, Message, MessageId, NewMessage, PayloadHash, Replayed,
    Rescheduled, Selection, Stats,
};
use crate::redis::group::Group;
use crate::redis::link::Link;
use crate::redis::{RedisConfig, RedisQueue, MAX_LEASE};
use crate::{QueueOptions, Timestamp};

/// The group commit of one primary: each waiting message with its shard.
type PrimaryGroup = Group<(usize, NewMessage)>;

/// The Redis queue sharded over a Redis Cluster (see "Redis Cluster" in the
/// [module documentation](crate::redis)). Cheap to clone (clones share the links).
#[derive(Clone)]
pub struct RedisClusterQueue {
    shards: Arc<Vec<RedisQueue>>,
    /// The connections to the primaries, shared by the shards each serves.
    primaries: Primaries,
    /// Where the next lease round starts (round robin over the shards).
    next: Arc<AtomicUsize>,
    /// Group commit per primary (by address): the appends waiting for the shards it serves.
    groups: Arc<Mutex<HashMap<String, Arc<PrimaryGroup>>>>,
    /// Append rounds sent (each one call per shard it carries).
    rounds: Arc<AtomicU64>,
    /// [`RedisConfig::group_commit`] and [`RedisConfig::chunk`].
    group_commit: bool,
    chunk: usize,
    options: QueueOptions,
}

impl std::fmt::Debug for RedisClusterQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterQueue")
            .field("shards", &self.shards.len())
            .field("primaries", &self.primaries())
            .finish()
    }
}

/// The first error of `results`, or their values.
fn all_ok<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    results.into_iter().collect()
}

/// Ids grouped by shard (as each shard's own ids).
/// An id whose shard the queue does not have was never handed out by it: like an unknown
/// id, it matches nothing.
fn by_shard(ids: &[MessageId], shards: usize) -> Vec<Vec<MessageId>> {
    let mut out = vec![Vec::new(); shards];
    for &id in ids {
        let (shard, local) = split(id);
        if let Some(v) = out.get_mut(shard) {
            v.push(local);
        }
    }
    out
}

fn to_global_message(shard: usize, mut m: Message) -> Message {
    m.id = global(shard, m.id);
    m
}

/// Records the shard count in shard 0 (`{S:0}:shards`) the first time, and refuses another
/// count later: a process with another count would look for a payload on another shard
/// (de-duplication would miss it) and miss whole shards when leasing.
async fn check_shard_count(shard0: &RedisQueue, stream: &str, shards: usize) -> Result<()> {
    let key = format!("{{{stream}:0}}:shards");
    let mut set = redis::cmd("SET");
    set.arg(&key).arg(shards).arg("NX").arg("GET");
    let recorded: Option<usize> = shard0.run("recording the shard count", &set).await?;
    match recorded {
        Some(n) if n != shards => Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "the queue {} on this Redis Cluster has {n} shards, not {shards}: give \
                 --redis-shards {n} (every process sharing a queue must use the same count)",
                searchwire::echo(stream)
            ),
        )),
        _ => Ok(()),
    }
}

impl RedisClusterQueue {
    /// Connects every shard (resolving each one's primary), creates their streams and
    /// consumer groups if missing, and loads the scripts. Needs [`RedisConfig::cluster`].
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        let Some(cluster) = config.cluster.clone() else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "no Redis Cluster configured: set RedisConfig::cluster (--redis-cluster)",
            ));
        };
        let (info, _) = RedisQueue::check(&config)?;
        let seeds = cluster.parsed()?;
        if config.stream.contains(['{', '}']) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "invalid stream name {} for a Redis Cluster: braces are the queue's hash \
                     tags; choose a name without {{ or }}",
                    searchwire::echo(&config.stream)
                ),
            ));
        }
        if info.redis.db != 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a Redis Cluster has only database 0: remove the /DB from the URL",
            ));
        }
        let primaries = Primaries::default();
        let opened = join_all((0..cluster.shards).map(|k| {
            let mut shard = config.clone();
            shard.cluster = None;
            shard.stream = format!("{{{}:{k}}}", config.stream);
            let route = SlotRoute::new(
                seeds.clone(),
                key_slot(shard.stream.as_bytes()),
                primaries.clone(),
            );
            let info = info.clone();
            async move {
                let link = Link::cluster(info, route).await?;
                RedisQueue::open(shard, link).await
            }
        }))
        .await;
        let shards = all_ok(opened)?;
        check_shard_count(&shards[0], &config.stream, shards.len()).await?;
        Ok(RedisClusterQueue {
            shards: Arc::new(shards),
            primaries,
            next: Arc::new(AtomicUsize::new(0)),
            groups: Arc::default(),
            rounds: Arc::default(),
            group_commit: config.group_commit,
            chunk: config.chunk.clamp(1, MAX_LEASE),
            options: config.options,
        })
    }

    /// The options it was opened with.
    pub fn options(&self) -> &QueueOptions {
        &self.options
    }

    /// A handle on the same queue for another consumer (its own leases to release), sharing
    /// the links.
    pub fn with_consumer(&self, consumer: impl Into<String>) -> Result<Self> {
        let consumer = consumer.into();
        let shards = self
            .shards
            .iter()
            .map(|s| s.with_consumer(consumer.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(RedisClusterQueue {
            options: self.options.clone().consumer(consumer),
            shards: Arc::new(shards),
            primaries: self.primaries.clone(),
            next: self.next.clone(),
            groups: self.groups.clone(),
            rounds: self.rounds.clone(),
            group_commit: self.group_commit,
            chunk: self.chunk,
        })
    }

    /// How many shards the queue has.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The shard that holds the message `id` (kept in the id's low 8 bits).
    pub fn shard_of_id(id: MessageId) -> usize {
        split(id).0
    }

    /// The shard a payload is stored in.
    pub fn shard_of_payload(&self, payload: &[u8]) -> usize {
        shard_of(&PayloadHash::of(payload), self.shards.len())
    }

    /// Per shard, the address (`host:port`) of the primary its commands go to now.
    pub fn primaries(&self) -> Vec<String> {
        self.shards.iter().map(RedisQueue::primary).collect()
    }

    /// How many connections the queue holds to Cluster primaries: one per primary, shared
    /// by the shards it serves (see `cluster/route.rs`), so fewer than the shards when a
    /// primary serves several.
    pub fn primary_connections(&self) -> usize {
        self.primaries.count()
    }

    /// How many append calls the shards have sent (see [`RedisQueue::append_calls`]).
    pub fn append_calls(&self) -> u64 {
        self.shards.iter().map(RedisQueue::append_calls).sum()
    }

    /// How many append rounds the queue (with its clones) has sent: a round is what one
    /// primary's group commit sends at once, one call for each shard it carries (see
    /// [`Self::append`]), so concurrent appends make fewer rounds than calls.
    pub fn append_rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    fn shard(&self, id: MessageId) -> Result<(&RedisQueue, MessageId)> {
        let (k, local) = split(id);
        match self.shards.get(k) {
            Some(s) => Ok((s, local)),
            None => Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "message id {} names shard {k}, but the queue has {} shards: it comes \
                     from a queue with another shard count",
                    id.0,
                    self.shards.len()
                ),
            )),
        }
    }

    /// `lease` as its shard knows it.
    fn local_lease(&self, lease: &Lease) -> Result<(&RedisQueue, Lease)> {
        let (shard, local) = self.shard(lease.message.id)?;
        let mut l = lease.clone();
        l.message.id = local;
        Ok((shard, l))
    }

    /// See [`Queue::append`](crate::Queue::append). The batch is split by shard (a
    /// payload's shard comes from its hash), the shards' parts by the primary that serves
    /// them, and each primary's part goes through that primary's group commit (with
    /// [`RedisConfig::group_commit`]): the first caller to find no append in flight to that
    /// primary sends, for every shard it serves, what is waiting for that shard, all at
    /// once on the primary's one connection, so the primary runs them together (calls that
    /// fit in one read in one pass, with one sync of its log; see `redis/group.rs` for what
    /// each caller sees). Each
    /// shard's part keeps its shard's durability ([`RedisConfig::min_replicas`] applies
    /// per shard). If one part fails the call fails: the parts that succeeded are stored,
    /// and the caller's resend finds them queued ([`Appended::Duplicate`]).
    pub async fn append(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>> {
        crate::check_batch(&batch)?;
        let n = self.shards.len();
        let serving = self.primaries();
        // Per primary: the batch's positions and its messages with their shards.
        type Part = (Vec<usize>, Vec<(usize, NewMessage)>);
        let mut parts: Vec<(String, Part)> = Vec::new();
        let total = batch.len();
        for (i, m) in batch.into_iter().enumerate() {
            let k = shard_of(&PayloadHash::of(&m.payload), n);
            let at = match parts.iter().position(|(addr, _)| *addr == serving[k]) {
                Some(at) => at,
                None => {
                    parts.push((serving[k].clone(), Default::default()));
                    parts.len() - 1
                }
            };
            parts[at].1 .0.push(i);
            parts[at].1 .1.push((k, m));
        }
        let mut positions = Vec::with_capacity(parts.len());
        let mut calls = Vec::with_capacity(parts.len());
        for (addr, (at, part)) in parts {
            positions.push(at);
            let serves = serving.iter().filter(|a| **a == addr).count();
            let max = self.chunk * serves;
            let group = self.group_commit.then(|| self.group(&addr));
            calls.push(async move {
                match group {
                    Some(group) if part.len() < max => {
                        group
                            .submit(part, max, |round| {
                                let queue = self.clone();
                                async move { queue.append_round(round).await }
                            })
                            .await
                    }
                    _ => self.append_round(part).await,
                }
            });
        }
        let answers = all_ok(join_all(calls).await)?;
        let mut out = vec![Appended::New(MessageId(0)); total];
        for (at, answer) in positions.into_iter().zip(answers) {
            for (i, a) in at.into_iter().zip(answer) {
                out[i] = a;
            }
        }
        Ok(out)
    }

    /// The group commit of the primary at `addr`.
    fn group(&self, addr: &str) -> Arc<PrimaryGroup> {
        let mut groups = match self.groups.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        groups.entry(addr.to_owned()).or_default().clone()
    }

    /// Appends `messages` (each with its shard): one call per shard, all sent at once.
    /// Answers, with the queue's ids, in the order of `messages`.
    async fn append_round(&self, messages: Vec<(usize, NewMessage)>) -> Result<Vec<Appended>> {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        let total = messages.len();
        let mut parts: Vec<(Vec<usize>, Vec<NewMessage>)> =
            vec![(Vec::new(), Vec::new()); self.shards.len()];
        for (i, (k, m)) in messages.into_iter().enumerate() {
            parts[k].0.push(i);
            parts[k].1.push(m);
        }
        let mut positions = Vec::new();
        let mut calls = Vec::new();
        for (k, (at, part)) in parts.into_iter().enumerate() {
            if part.is_empty() {
                continue;
            }
            positions.push((k, at));
            calls.push(self.shards[k].append_call(part));
        }
        let answers = all_ok(join_all(calls).await)?;
        let mut out = vec![Appended::New(MessageId(0)); total];
        for ((k, at), answer) in positions.into_iter().zip(answers) {
            for (i, a) in at.into_iter().zip(answer) {
                out[i] = match a {
                    Appended::New(id) => Appended::New(global(k, id)),
                    Appended::Duplicate(id) => Appended::Duplicate(global(k, id)),
                };
            }
        }
        Ok(out)
    }

    /// See [`Queue::lease`](crate::Queue::lease). At most [`MAX_LEASE`] per call, from as
    /// few primaries as can fill it:
    ///
    /// 1. Each call starts one shard further (round robin over the shards) and asks the
    ///    shards that the starting shard's primary serves, concurrently, for an equal share
    ///    of `max` (the shards from the starting one on get the remainder). Their calls
    ///    leave together on that primary's one connection, so the primary reads, runs and
    ///    syncs them in one pass, and the acks of what they hand out go to it alone.
    /// 2. If that left some of `max` missing, every other shard is asked, concurrently, for
    ///    an equal share of what is missing;
    /// 3. then the shards that filled their share (or had none), one at a time, for what
    ///    is still missing.
    ///
    /// Fair per shard over calls: a primary serving `g` of the `n` shards is the first
    /// primary of `g` calls in `n`, and each of its shards then gets `max / g`, so every
    /// shard with enough waiting hands out `max` per `n` calls. Each shard's leases are in
    /// its delivery order; across shards there is no order. A shard that fails is skipped
    /// for this call (logged) when others answered: its failover does not stop the others;
    /// the error is returned only when nothing was leased.
    pub async fn lease(&self, max: usize) -> Result<Vec<Lease>> {
        let max = max.min(MAX_LEASE);
        if max == 0 {
            return Ok(Vec::new());
        }
        let n = self.shards.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let order: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
        let first_primary = self.shards[start].primary();
        let (first, others): (Vec<usize>, Vec<usize>) = order
            .iter()
            .partition(|&&k| self.shards[k].primary() == first_primary);
        let mut out = Vec::with_capacity(max);
        let mut failure = None;
        // Per shard: whether it may hold more than it handed out.
        let mut more = vec![true; n];
        for group in [first, others] {
            let missing = max - out.len();
            if missing == 0 || group.is_empty() {
                break;
            }
            let g = group.len();
            let share = |i: usize| missing / g + usize::from(i < missing % g);
            let asked = join_all(group.iter().enumerate().filter_map(|(i, &k)| {
                let want = share(i);
                (want > 0).then_some(async move { (k, want, self.shards[k].lease(want).await) })
            }))
            .await;
            for (k, want, got) in asked {
                match got {
                    Ok(leases) => {
                        more[k] = leases.len() >= want;
                        out.extend(leases.into_iter().map(|l| (k, l)));
                    }
                    Err(e) => {
                        more[k] = false;
                        failure = Some(e);
                    }
                }
            }
        }
        for &k in &order {
            let missing = max - out.len();
            if missing == 0 {
                break;
            }
            if !more[k] {
                continue;
            }
            match self.shards[k].lease(missing).await {
                Ok(leases) => out.extend(leases.into_iter().map(|l| (k, l))),
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            if out.is_empty() {
                return Err(e);
            }
            tracing::warn!(error = %e, "redis: a shard of the queue failed to lease; leasing from the others");
        }
        Ok(out
            .into_iter()
            .map(|(k, mut l)| {
                l.message.id = global(k, l.message.id);
                l
            })
            .collect())
    }

    /// See [`Queue::ack`](crate::Queue::ack).
    pub async fn ack(&self, ids: &[MessageId]) -> Result<u64> {
        let groups = by_shard(ids, self.shards.len());
        let calls = groups
            .iter()
            .enumerate()
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(k, ids)| self.shards[k].ack(ids));
        Ok(all_ok(join_all(calls).await)?.into_iter().sum())
    }

    /// See [`Queue::reschedule`](crate::Queue::reschedule).
    pub async fn reschedule(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
    ) -> Result<Rescheduled> {
        let (shard, local) = self.local_lease(lease)?;
        shard.reschedule(&local, retry_at, error).await
    }

    /// See [`Queue::defer`](crate::Queue::defer).
    pub async fn defer(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
    ) -> Result<Rescheduled> {
        let (shard, local) = self.local_lease(lease)?;
        shard.defer(&local, retry_at, error).await
    }

    /// See [`Queue::dead_letter`](crate::Queue::dead_letter).
    pub async fn dead_letter(&self, lease: &Lease, reason: &str) -> Result<bool> {
        let (shard, local) = self.local_lease(lease)?;
        shard.dead_letter(&local, reason).await
    }

    /// See [`Queue::release`](crate::Queue::release): every shard.
    pub async fn release(&self) -> Result<u64> {
        let calls = self.shards.iter().map(RedisQueue::release);
        Ok(all_ok(join_all(calls).await)?.into_iter().sum())
    }

    /// See [`Queue::stats`](crate::Queue::stats): the shards' counts summed, the oldest of
    /// their oldest.
    pub async fn stats(&self) -> Result<Stats> {
        let calls = self.shards.iter().map(RedisQueue::stats);
        let mut total = Stats {
            backlog: 0,
            due: 0,
            leased: 0,
            oldest_age: None,
            dead_letters: 0,
        };
        for s in all_ok(join_all(calls).await)? {
            total.backlog += s.backlog;
            total.due += s.due;
            total.leased += s.leased;
            total.dead_letters += s.dead_letters;
            total.oldest_age = total.oldest_age.max(s.oldest_age);
        }
        Ok(total)
    }

    /// See [`Queue::list`](crate::Queue::list): by the queue's id (so, per shard, by
    /// arrival); each shard is asked for `limit` after `after`, the answers merged.
    pub async fn list(&self, after: Option<MessageId>, limit: usize) -> Result<Vec<Message>> {
        let calls = (0..self.shards.len())
            .map(|k| async move { (k, self.shards[k].list(local_after(after, k), limit).await) });
        let mut out = Vec::new();
        for (k, got) in join_all(calls).await {
            out.extend(got?.into_iter().map(|m| to_global_message(k, m)));
        }
        out.sort_by_key(|m| m.id);
        out.truncate(limit);
        Ok(out)
    }

    /// See [`Queue::dead_letters`](crate::Queue::dead_letters): by id, as [`Self::list`].
    pub async fn dead_letters(
        &self,
        after: Option<MessageId>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>> {
        let calls = (0..self.shards.len()).map(|k| async move {
            (
                k,
                self.shards[k]
                    .dead_letters(local_after(after, k), limit)
                    .await,
            )
        });
        let mut out = Vec::new();
        for (k, got) in join_all(calls).await {
            out.extend(got?.into_iter().map(|mut d| {
                d.message = to_global_message(k, d.message);
                d
            }));
        }
        out.sort_by_key(|d| d.message.id);
        out.truncate(limit);
        Ok(out)
    }

    /// The selection as each shard's: all of every shard's, or the ids grouped by shard.
    fn selections(&self, selection: &Selection) -> Vec<Selection> {
        match selection {
            Selection::All => vec![Selection::All; self.shards.len()],
            Selection::Ids(ids) => by_shard(ids, self.shards.len())
                .into_iter()
                .map(Selection::Ids)
                .collect(),
        }
    }

    /// See [`Queue::replay`](crate::Queue::replay): per shard (a payload's copies share its
    /// shard, so the duplicate check is exact), summed.
    pub async fn replay(&self, selection: &Selection) -> Result<Replayed> {
        let selections = self.selections(selection);
        let calls = selections
            .iter()
            .enumerate()
            .map(|(k, s)| self.shards[k].replay(s));
        let mut total = Replayed {
            replayed: 0,
            duplicates: 0,
        };
        for r in all_ok(join_all(calls).await)? {
            total.replayed += r.replayed;
            total.duplicates += r.duplicates;
        }
        Ok(total)
    }

    /// See [`Queue::purge`](crate::Queue::purge).
    pub async fn purge(&self, selection: &Selection) -> Result<u64> {
        let selections = self.selections(selection);
        let calls = selections
            .iter()
            .enumerate()
            .map(|(k, s)| self.shards[k].purge(s));
        Ok(all_ok(join_all(calls).await)?.into_iter().sum())
    }
}
