//! The embedded backend: a redb database in a data directory, written by one writer thread
//! that group-commits.
//!
//! # Group commit
//!
//! Every operation that writes (append, lease, ack, reschedule, dead-letter, release, replay,
//! purge) is a job sent to one writer thread. The writer takes the first job, then every job
//! that is already waiting (up to [`EmbeddedConfig::max_group`]), runs them all in **one**
//! write transaction, commits it with `Durability::Immediate` (one `fdatasync`), and only then
//! answers each caller. While it syncs, new jobs pile up and form the next group, so under
//! load the number of syncs per second stays roughly constant and each one carries more
//! messages: durability does not cost one sync per document. If one job of a group fails
//! (a damaged record), the group is rolled back and its jobs are re-run one per transaction,
//! so one bad job cannot fail its neighbours.
//!
//! # Storage
//!
//! The file holds segments (the records each commit creates, written once), a done bitmap
//! per segment, one row per lease call, the dead letters and counters (`tables.rs`, on-disk
//! format 3). The delivery order, id → slot, the payload hashes and the counts live in
//! memory (`state/`) and are rebuilt from the segment headers when the queue is opened.
//!
//! # Durability
//!
//! - **`kill -9` of the process:** every operation whose future returned `Ok` is in the file;
//!   nothing else is (redb commits are atomic: a group is all there or not at all). On the
//!   next open redb repairs the file if the kill interrupted a commit.
//! - **Power loss / kernel crash:** the same, as far as the storage honours `fdatasync`: a
//!   commit returns only after redb's `Durability::Immediate` commit has synced the data and
//!   the header that points at it. A disk or controller that acknowledges writes it has only
//!   cached can lose the last commits; that is outside what software can promise.
//!
//! One process owns a data directory at a time (redb locks the file); to share a queue between
//! processes or machines, use the Redis backend.

mod state;
mod tables;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use redb::{Database, Durability};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, ErrorKind, Result};
use crate::message::{
    Appended, DeadLetter, Lease, Message, MessageId, NewMessage, Replayed, Rescheduled, Selection,
    Stats,
};
use crate::{record, QueueOptions, Timestamp};
use state::{State, Txn};

/// The file inside the data directory.
pub const DB_FILE: &str = "queue.redb";

/// Default [`EmbeddedConfig::max_group`]: jobs per commit. Large enough that a sync is
/// amortized over thousands of messages, small enough that one transaction stays a few MB.
pub const DEFAULT_MAX_GROUP: usize = 1024;

/// Configuration of the embedded backend.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// The data directory (created if missing); the database is `DIR/queue.redb`.
    pub dir: PathBuf,
    /// Jobs (calls) grouped into one transaction at most. Default [`DEFAULT_MAX_GROUP`].
    pub max_group: usize,
    /// Lease timeout, consumer name, clock.
    pub options: QueueOptions,
}

impl EmbeddedConfig {
    /// Defaults for a queue in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        EmbeddedConfig {
            dir: dir.into(),
            max_group: DEFAULT_MAX_GROUP,
            options: QueueOptions::default(),
        }
    }
}

pub(crate) fn storage(e: impl Into<redb::Error>) -> Error {
    let e: redb::Error = e.into();
    Error::with_source(ErrorKind::Storage, "embedded queue storage failed", e)
}

/// A job for the writer: runs inside a shared transaction, answers after the commit.
trait Job: Send {
    /// Runs the job; `false` when it failed (its error is kept for `finish`).
    fn run(&mut self, t: &mut Txn<'_, '_>) -> bool;
    /// Answers the caller: the job's own result if the commit succeeded, else the commit error.
    fn finish(self: Box<Self>, commit: &Result<()>);
}

struct Task<T, F> {
    f: F,
    out: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T: Send, F: FnMut(&mut Txn<'_, '_>) -> Result<T> + Send> Job for Task<T, F> {
    fn run(&mut self, t: &mut Txn<'_, '_>) -> bool {
        let r = (self.f)(t);
        let ok = r.is_ok();
        self.out = Some(r);
        ok
    }

    fn finish(self: Box<Self>, commit: &Result<()>) {
        let r = match (commit, self.out) {
            (Ok(()), Some(r)) => r,
            (Ok(()), None) => Err(Error::closed()),
            (Err(e), _) => Err(Error::new(e.kind(), e.to_string())),
        };
        let _ = self.reply.send(r);
    }
}

struct Inner {
    tx: Mutex<Option<mpsc::UnboundedSender<Box<dyn Job>>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    db: Mutex<Option<Arc<Database>>>,
    /// The in-memory indexes; the writer holds the lock from a group's first job to its
    /// commit, so a reader sees only committed state.
    state: Arc<Mutex<State>>,
    commits: Arc<AtomicU64>,
    dir: PathBuf,
}

/// The embedded queue. Cheap to clone (clones share the writer).
#[derive(Clone)]
pub struct EmbeddedQueue {
    inner: Arc<Inner>,
    options: Arc<QueueOptions>,
}

impl std::fmt::Debug for EmbeddedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedQueue")
            .field("dir", &self.inner.dir)
            .field("consumer", &self.options.consumer)
            .finish()
    }
}

impl EmbeddedQueue {
    /// Opens (or creates) the queue in `config.dir`. Blocks while redb opens the file (a
    /// repair after a crash reads the whole file), migrates an older format, and rebuilds
    /// the in-memory indexes from the segment headers (under a microsecond per queued
    /// message); call it from `spawn_blocking` if that matters.
    pub fn open(config: EmbeddedConfig) -> Result<Self> {
        config.options.validate()?;
        if config.max_group == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "max_group must be at least 1",
            ));
        }
        std::fs::create_dir_all(&config.dir).map_err(|e| {
            Error::with_source(
                ErrorKind::Storage,
                format!("cannot create the queue directory {}", config.dir.display()),
                e,
            )
        })?;
        let path = config.dir.join(DB_FILE);
        let db = Database::create(&path).map_err(|e| open_error(&path, e))?;
        let db = Arc::new(db);
        {
            // Create every table so readers never meet a missing one.
            let txn = db.begin_write().map_err(storage)?;
            tables::prepare(&txn, &path)?;
            txn.commit().map_err(storage)?;
        }
        let state = Arc::new(Mutex::new(State::load(&db.begin_read().map_err(storage)?)?));
        let (tx, rx) = mpsc::unbounded_channel();
        let commits = Arc::new(AtomicU64::new(0));
        let writer = {
            let db = Arc::clone(&db);
            let commits = Arc::clone(&commits);
            let state = Arc::clone(&state);
            let max_group = config.max_group;
            std::thread::Builder::new()
                .name("searchwire-queue-writer".into())
                .spawn(move || writer_loop(&db, &state, rx, max_group, &commits))
                .map_err(|e| {
                    Error::with_source(
                        ErrorKind::Storage,
                        "cannot start the queue writer thread",
                        e,
                    )
                })?
        };
        Ok(EmbeddedQueue {
            inner: Arc::new(Inner {
                tx: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(writer)),
                db: Mutex::new(Some(db)),
                state,
                commits,
                dir: config.dir,
            }),
            options: Arc::new(config.options),
        })
    }

    /// The options it was opened with.
    pub fn options(&self) -> &QueueOptions {
        &self.options
    }

    /// A handle on the same queue for another consumer (its own leases to release).
    pub fn with_consumer(&self, consumer: impl Into<String>) -> Result<Self> {
        let options = (*self.options).clone().consumer(consumer);
        options.validate()?;
        Ok(EmbeddedQueue {
            inner: Arc::clone(&self.inner),
            options: Arc::new(options),
        })
    }

    /// Transactions committed (each one `fdatasync`) since it was opened: for benchmarks and
    /// the durability-cost table.
    pub fn commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    /// Stops the writer after the jobs already sent, and closes the file once no read is in
    /// flight. Later calls on any clone fail with [`ErrorKind::Closed`].
    pub async fn close(&self) -> Result<()> {
        drop(lock(&self.inner.tx).take());
        let writer = lock(&self.inner.writer).take();
        lock(&self.inner.db).take();
        if let Some(w) = writer {
            tokio::task::spawn_blocking(move || w.join())
                .await
                .map_err(|_| Error::closed())?
                .map_err(|_| Error::new(ErrorKind::Storage, "the queue writer thread panicked"))?;
        }
        Ok(())
    }

    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut Txn<'_, '_>) -> Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Task {
            f,
            out: None,
            reply,
        });
        {
            let tx = lock(&self.inner.tx);
            let tx = tx.as_ref().ok_or_else(Error::closed)?;
            tx.send(job).map_err(|_| Error::closed())?;
        }
        rx.await.map_err(|_| Error::closed())?
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadTransaction) -> Result<T> + Send + 'static,
    {
        let db = lock(&self.inner.db).clone().ok_or_else(Error::closed)?;
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(storage)?;
            f(&txn)
        })
        .await
        .map_err(|_| Error::new(ErrorKind::Storage, "a queue read panicked"))?
    }

    fn now(&self) -> Timestamp {
        self.options.clock.now()
    }

    /// See [`Queue::append`](crate::Queue::append).
    pub async fn append(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>> {
        crate::check_batch(&batch)?;
        let now = self.now();
        self.write(move |t| t.append(&batch, now)).await
    }

    /// See [`Queue::lease`](crate::Queue::lease).
    pub async fn lease(&self, max: usize) -> Result<Vec<Lease>> {
        let now = self.now();
        let timeout = self.options.lease_timeout;
        let consumer = self.options.consumer.clone();
        self.write(move |t| t.lease(max, now, timeout, &consumer))
            .await
    }

    /// See [`Queue::ack`](crate::Queue::ack).
    pub async fn ack(&self, ids: &[MessageId]) -> Result<u64> {
        let ids = ids.to_vec();
        self.write(move |t| t.ack(&ids)).await
    }

    /// See [`Queue::reschedule`](crate::Queue::reschedule).
    pub async fn reschedule(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
    ) -> Result<Rescheduled> {
        self.put_back(lease, retry_at, error, true).await
    }

    /// See [`Queue::defer`](crate::Queue::defer).
    pub async fn defer(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
    ) -> Result<Rescheduled> {
        self.put_back(lease, retry_at, error, false).await
    }

    /// A reschedule (`counted`) or a deferral.
    async fn put_back(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
        counted: bool,
    ) -> Result<Rescheduled> {
        let (id, token, error, now) = (lease.id(), lease.token, error.to_owned(), self.now());
        self.write(move |t| t.reschedule(id, token, retry_at, &error, now, counted))
            .await
    }

    /// See [`Queue::dead_letter`](crate::Queue::dead_letter).
    pub async fn dead_letter(&self, lease: &Lease, reason: &str) -> Result<bool> {
        let (id, token, reason, now) = (lease.id(), lease.token, reason.to_owned(), self.now());
        self.write(move |t| t.dead_letter(id, token, &reason, now))
            .await
    }

    /// See [`Queue::release`](crate::Queue::release).
    pub async fn release(&self) -> Result<u64> {
        let consumer = self.options.consumer.clone();
        self.write(move |t| t.release(&consumer)).await
    }

    /// See [`Queue::replay`](crate::Queue::replay).
    pub async fn replay(&self, selection: &Selection) -> Result<Replayed> {
        let (sel, now) = (selection.clone(), self.now());
        self.write(move |t| t.replay(&sel, now)).await
    }

    /// See [`Queue::purge`](crate::Queue::purge).
    pub async fn purge(&self, selection: &Selection) -> Result<u64> {
        let sel = selection.clone();
        self.write(move |t| t.purge(&sel)).await
    }

    /// See [`Queue::stats`](crate::Queue::stats).
    pub async fn stats(&self) -> Result<Stats> {
        let now = self.now();
        let state = self.state()?;
        // The writer holds the lock through a commit: wait for it off the runtime.
        tokio::task::spawn_blocking(move || lock(&state).stats(now))
            .await
            .map_err(|_| Error::new(ErrorKind::Storage, "a queue read panicked"))
    }

    /// See [`Queue::list`](crate::Queue::list).
    pub async fn list(&self, after: Option<MessageId>, limit: usize) -> Result<Vec<Message>> {
        let db = lock(&self.inner.db).clone().ok_or_else(Error::closed)?;
        let state = self.state()?;
        tokio::task::spawn_blocking(move || {
            // Where the page's messages are, and a snapshot of the file taken under the same
            // lock: both show the same commit.
            let (at, txn) = {
                let st = lock(&state);
                let start = after.map_or(0, |a| a.0.saturating_add(1));
                let at: Vec<(u64, u32)> = st
                    .by_id
                    .range(start..)
                    .take(limit)
                    .map(|(_, l)| (l.seg, l.slot))
                    .collect();
                (at, db.begin_read().map_err(storage)?)
            };
            let bodies = txn.open_table(tables::BODIES).map_err(storage)?;
            let mut out = Vec::with_capacity(at.len());
            let mut body: Option<(u64, redb::AccessGuard<'_, &[u8]>)> = None;
            for (seg, slot) in at {
                if body.as_ref().is_none_or(|(s, _)| *s != seg) {
                    let b = bodies.get(seg).map_err(storage)?.ok_or_else(|| {
                        Error::corrupt(format!("segment {seg} has live messages but no body"))
                    })?;
                    body = Some((seg, b));
                }
                if let Some((_, b)) = &body {
                    out.push(record::decode(tables::body_slot(seg, b.value(), slot)?)?);
                }
            }
            Ok(out)
        })
        .await
        .map_err(|_| Error::new(ErrorKind::Storage, "a queue read panicked"))?
    }

    /// See [`Queue::dead_letters`](crate::Queue::dead_letters).
    pub async fn dead_letters(
        &self,
        after: Option<MessageId>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>> {
        self.read(move |txn| {
            let t = txn.open_table(tables::DEAD).map_err(storage)?;
            let start = after.map_or(0, |a| a.0.saturating_add(1));
            let mut out = Vec::new();
            for r in t.range(start..).map_err(storage)?.take(limit) {
                out.push(record::decode_dead(r.map_err(storage)?.1.value())?);
            }
            Ok(out)
        })
        .await
    }

    /// The state, unless the queue is closed.
    fn state(&self) -> Result<Arc<Mutex<State>>> {
        if lock(&self.inner.db).is_none() {
            return Err(Error::closed());
        }
        Ok(Arc::clone(&self.inner.state))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn open_error(path: &Path, e: redb::DatabaseError) -> Error {
    match e {
        redb::DatabaseError::DatabaseAlreadyOpen => Error::new(
            ErrorKind::Storage,
            format!(
                "the queue {} is open in another process: an embedded queue has one owner at a \
                 time (stop it first, or use the Redis backend to share a queue)",
                path.display()
            ),
        ),
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::WouldBlock =>
        {
            Error::new(
                ErrorKind::Storage,
                format!(
                    "the queue {} is locked by another process: an embedded queue has one owner \
                     at a time (stop it first, or use the Redis backend to share a queue)",
                    path.display()
                ),
            )
        }
        e => Error::with_source(
            ErrorKind::Storage,
            format!("cannot open the queue {}", path.display()),
            e,
        ),
    }
}

fn writer_loop(
    db: &Database,
    state: &Mutex<State>,
    mut rx: mpsc::UnboundedReceiver<Box<dyn Job>>,
    max_group: usize,
    commits: &AtomicU64,
) {
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = vec![first];
        while jobs.len() < max_group {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        run_group(db, state, jobs, commits);
    }
}

/// Runs `jobs` in one transaction; if one fails, re-runs each alone.
fn run_group(
    db: &Database,
    state: &Mutex<State>,
    mut jobs: Vec<Box<dyn Job>>,
    commits: &AtomicU64,
) {
    let all_ok = match run_in_txn(db, state, &mut jobs, commits) {
        Ok(ok) => ok,
        Err(e) => {
            let e = Err(e);
            for j in jobs {
                j.finish(&e);
            }
            return;
        }
    };
    if all_ok {
        for j in jobs {
            j.finish(&Ok(()));
        }
        return;
    }
    for mut j in jobs {
        let r = run_in_txn(db, state, std::slice::from_mut(&mut j), commits).map(|_| ());
        j.finish(&r);
    }
}

/// Runs `jobs` in one write transaction: commits if all succeeded (`Ok(true)`), rolls back
/// if one failed (`Ok(false)`). Whatever did not commit is undone in memory too: the state
/// is rebuilt from the file.
fn run_in_txn(
    db: &Database,
    state: &Mutex<State>,
    jobs: &mut [Box<dyn Job>],
    commits: &AtomicU64,
) -> Result<bool> {
    let mut st = lock(state);
    let r = try_txn(db, &mut st, jobs);
    match &r {
        Ok(true) => {
            commits.fetch_add(1, Ordering::Relaxed);
        }
        _ => {
            let reloaded = db
                .begin_read()
                .map_err(storage)
                .and_then(|txn| State::load(&txn));
            match reloaded {
                Ok(fresh) => *st = fresh,
                Err(e) => {
                    // Memory may hold what the file does not: refuse to go on with it.
                    *st = State::broken(e.to_string());
                    return Err(e);
                }
            }
        }
    }
    r
}

fn try_txn(db: &Database, st: &mut State, jobs: &mut [Box<dyn Job>]) -> Result<bool> {
    st.check()?;
    let mut txn = db.begin_write().map_err(storage)?;
    txn.set_durability(Durability::Immediate);
    let mut all_ok = true;
    {
        let mut t = Txn::open(&txn, st)?;
        for j in jobs.iter_mut() {
            all_ok &= j.run(&mut t);
        }
        if all_ok {
            t.close()?;
        }
    }
    if !all_ok {
        txn.abort().map_err(storage)?;
        return Ok(false);
    }
    txn.commit().map_err(storage)?;
    Ok(true)
}
