//! Bounded under overload: the relay takes a write only while it can hold it.
//!
//! Two limits, both checked before anything is queued:
//! - **`max_queue_bytes`**: the queue's size (queued messages and dead letters, estimated:
//!   their count × the mean stored size of what this relay queued; see `Admission`) plus
//!   what requests in flight are about to append must stay at or below it;
//! - **`min_free_disk_bytes`** (embedded queue): the filesystem of the queue directory keeps at
//!   least this much free, so redb's commit never meets a full disk in normal operation.
//!
//! At or above either (the high-water mark), a new write request is answered `429` with
//! `Retry-After` and OpenSearch's own `es_rejected_execution_exception` body — what every
//! shipper (Logstash, Beats, Fluent Bit, Vector, the official clients) already backs off
//! on — and readiness (`/health/retry-queue`) is 503. A request admitted while there was
//! room, whose items would not fit once it has tried the cluster, gets the same 429 for
//! those items, never a `queued` it could not keep. Items the cluster indexed are answered
//! as usual either way.
//!
//! What was rejected: measuring the embedded queue by its file size (redb reuses freed
//! pages but never shrinks the file, so after one large backlog the relay would refuse
//! forever); reading every queued message's size at each check (a scan of the backlog per
//! request). The estimate is refreshed every [`REFRESH`] from the queue's counts, and
//! between refreshes every admitted byte is reserved, so concurrent requests cannot all
//! pass the same last free byte. A write is refused only on a measurement at most
//! [`FRESH_TO_REFUSE`] old (an older one is taken again first): after a fast drain the relay
//! takes writes at once, not one [`REFRESH`] later.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{json, Value};

pub use crate::config::{
    DEFAULT_MAX_QUEUE_SHARE_PERCENT, DEFAULT_MIN_FREE_DISK_CAP, DEFAULT_MIN_FREE_DISK_PERCENT,
    FRESH_TO_REFUSE, LOW_WATER_PERCENT, RECORD_OVERHEAD, REFRESH, RETRY_AFTER,
};

/// The limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Largest estimated queue size in bytes (`None`: no cap).
    pub max_queue_bytes: Option<u64>,
    /// Free bytes the queue directory's filesystem keeps (0: no floor).
    pub min_free_disk_bytes: u64,
    /// The embedded queue's directory (where the free disk is measured); `None` for Redis.
    pub disk_path: Option<PathBuf>,
}

impl AdmissionConfig {
    /// The defaults for an embedded queue in `dir` (see the constants), each replaced by
    /// what is given; `None` means the default. The error says what could not be measured.
    pub fn embedded(
        dir: PathBuf,
        max_queue_bytes: Option<u64>,
        min_free_disk_bytes: Option<u64>,
    ) -> Result<AdmissionConfig, String> {
        let (max, floor) = match (max_queue_bytes, min_free_disk_bytes) {
            (Some(m), Some(f)) => (m, f),
            (m, f) => {
                let d = disk(&dir).ok_or_else(|| {
                    format!(
                        "cannot measure the free disk of {} for the default --max-queue-bytes and \
                         --min-free-disk-bytes: give both",
                        dir.display()
                    )
                })?;
                (
                    m.unwrap_or(d.free / 100 * DEFAULT_MAX_QUEUE_SHARE_PERCENT),
                    f.unwrap_or(
                        (d.total / 100 * DEFAULT_MIN_FREE_DISK_PERCENT)
                            .min(DEFAULT_MIN_FREE_DISK_CAP),
                    ),
                )
            }
        };
        Ok(AdmissionConfig {
            max_queue_bytes: Some(max),
            min_free_disk_bytes: floor,
            disk_path: Some(dir),
        })
    }

    /// A Redis queue: a cap only when given, no disk floor.
    pub fn redis(max_queue_bytes: Option<u64>) -> AdmissionConfig {
        AdmissionConfig {
            max_queue_bytes,
            min_free_disk_bytes: 0,
            disk_path: None,
        }
    }
}

/// A filesystem's size and free space (for unprivileged users), in bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Disk {
    pub total: u64,
    pub free: u64,
}

/// The filesystem holding `path`, or `None` when it cannot be measured. A queue directory
/// the relay has not created yet is measured at its nearest existing ancestor, which is
/// where it will be created (a relative path's is the working directory).
pub(crate) fn disk(path: &std::path::Path) -> Option<Disk> {
    let mut at = path;
    let s = loop {
        match nix::sys::statvfs::statvfs(at) {
            Ok(s) => break s,
            Err(nix::errno::Errno::ENOENT) => match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => at = std::path::Path::new("."),
            },
            Err(_) => return None,
        }
        if at == std::path::Path::new(".") {
            break nix::sys::statvfs::statvfs(at).ok()?;
        }
    };
    // The field types differ between platforms (u32 or u64).
    #[allow(clippy::unnecessary_cast)]
    let (blocks, available, unit) = (
        s.blocks() as u64,
        s.blocks_available() as u64,
        (s.fragment_size() as u64).max(1),
    );
    Some(Disk {
        total: blocks.saturating_mul(unit),
        free: available.saturating_mul(unit),
    })
}

/// The live state of the limits (see the module doc).
#[derive(Debug)]
pub(crate) struct Admission {
    pub config: AdmissionConfig,
    /// The estimate at the last refresh.
    pub(crate) measured: AtomicU64,
    /// Bytes reserved by appends since the last refresh began.
    pub(crate) reserved: AtomicU64,
    /// Free disk at the last refresh (`u64::MAX`: not measured).
    pub(crate) free_disk: AtomicU64,
    /// Stored bytes and messages this relay appended (for the mean message size).
    pub(crate) appended_bytes: AtomicU64,
    pub(crate) appended_messages: AtomicU64,
    /// At or above the high-water mark at the last check.
    pub(crate) over: AtomicBool,
    /// When the last measurement began (`None`: none yet). Held while measuring: one
    /// measurement at a time, since each gives back the reservations its count includes.
    pub(crate) measuring: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Admission {
    pub fn new(config: AdmissionConfig) -> Admission {
        Admission {
            config,
            measured: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            free_disk: AtomicU64::new(u64::MAX),
            appended_bytes: AtomicU64::new(0),
            appended_messages: AtomicU64::new(0),
            over: AtomicBool::new(false),
            measuring: tokio::sync::Mutex::new(None),
        }
    }

    /// The queue's estimated size now.
    pub fn queue_bytes(&self) -> u64 {
        self.measured
            .load(Ordering::Relaxed)
            .saturating_add(self.reserved.load(Ordering::Relaxed))
    }

    pub(crate) fn free_disk_now(&self) -> u64 {
        self.free_disk
            .load(Ordering::Relaxed)
            .saturating_sub(self.reserved.load(Ordering::Relaxed))
    }

    /// Why the relay is at its high-water mark, if it is. Once there, it stays until the
    /// queue is back under the low-water mark ([`LOW_WATER_PERCENT`] of the cap, the floor
    /// plus a tenth), so readiness does not flap with every delivered batch.
    pub fn overloaded(&self) -> Option<String> {
        let q = self.queue_bytes();
        let free = self.free_disk_now();
        let floor = self.config.min_free_disk_bytes;
        let was = self.over.load(Ordering::Relaxed);
        let cap_hit = self.config.max_queue_bytes.is_some_and(|m| {
            if was {
                q >= m / 100 * LOW_WATER_PERCENT
            } else {
                q >= m
            }
        });
        let floor_hit = floor > 0 && free <= if was { floor + floor / 10 } else { floor };
        if (cap_hit || floor_hit) != was {
            self.set_over(cap_hit || floor_hit);
        }
        if cap_hit {
            return Some(format!(
                "the relay's queue holds about {q} bytes, at its limit of {} (--max-queue-bytes)",
                self.config.max_queue_bytes.unwrap_or(0)
            ));
        }
        if floor_hit {
            return Some(format!(
                "the disk of the relay's queue has {free} bytes free, at its floor of {floor} (--min-free-disk-bytes)"
            ));
        }
        None
    }

    /// Reserves room for `bytes` more in the queue; `Err` (nothing reserved) says why there
    /// is none. Give the reservation back with [`Admission::release`] if the append fails.
    pub fn reserve(&self, bytes: u64) -> Result<(), String> {
        let before = self.reserved.fetch_add(bytes, Ordering::Relaxed);
        let q = self.measured.load(Ordering::Relaxed) + before + bytes;
        let over_cap = self.config.max_queue_bytes.is_some_and(|m| q > m);
        let free = self
            .free_disk
            .load(Ordering::Relaxed)
            .saturating_sub(before + bytes);
        let under_floor =
            self.config.min_free_disk_bytes > 0 && free < self.config.min_free_disk_bytes;
        if over_cap || under_floor {
            self.reserved.fetch_sub(bytes, Ordering::Relaxed);
            // The high-water mark: what no longer fits stops the next requests too.
            self.set_over(true);
            return Err(if over_cap {
                format!(
                    "the relay's queue holds about {} bytes and {bytes} more would pass its limit of {} (--max-queue-bytes)",
                    q - bytes,
                    self.config.max_queue_bytes.unwrap_or(0)
                )
            } else {
                format!(
                    "{bytes} more bytes in the relay's queue would leave its disk under the floor of {} free (--min-free-disk-bytes)",
                    self.config.min_free_disk_bytes
                )
            });
        }
        Ok(())
    }

    /// Gives back a reservation whose append failed.
    pub fn release(&self, bytes: u64) {
        self.reserved.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Records an append of `messages` messages of `bytes` stored bytes.
    pub fn appended(&self, messages: u64, bytes: u64) {
        self.appended_messages
            .fetch_add(messages, Ordering::Relaxed);
        self.appended_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The mean stored size of a message (`None` before anything was appended or sampled).
    pub(crate) fn mean(&self) -> Option<u64> {
        let n = self.appended_messages.load(Ordering::Relaxed);
        (n > 0).then(|| self.appended_bytes.load(Ordering::Relaxed) / n)
    }

    pub(crate) fn set_over(&self, over: bool) {
        self.over.store(over, Ordering::Relaxed);
        metrics::gauge!("searchwire_relay_overloaded").set(if over { 1.0 } else { 0.0 });
    }

    /// The fields health shows.
    pub fn health(&self) -> Value {
        let free = self.free_disk.load(Ordering::Relaxed);
        json!({
            "queue_bytes": self.queue_bytes(),
            "max_queue_bytes": self.config.max_queue_bytes,
            "free_disk_bytes": (free != u64::MAX).then_some(free),
            "min_free_disk_bytes": self.config.min_free_disk_bytes,
            "overloaded": self.overloaded().is_some(),
        })
    }
}

/// What a stored message of this size costs.
pub(crate) fn stored_bytes(payload: usize, index: usize, error: usize) -> u64 {
    (payload + index + error) as u64 + RECORD_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(max: Option<u64>, floor: u64, free: u64) -> Admission {
        let a = Admission::new(AdmissionConfig {
            max_queue_bytes: max,
            min_free_disk_bytes: floor,
            disk_path: None,
        });
        a.free_disk.store(free, Ordering::Relaxed);
        a
    }

    #[test]
    fn a_queue_directory_not_created_yet_is_measured_where_it_will_be() {
        let dir = tempfile::tempdir().unwrap();
        let there = disk(dir.path()).expect("an existing directory");
        let later = disk(&dir.path().join("not/yet/queue")).expect("its nearest ancestor");
        assert_eq!(later.total, there.total);
        assert!(
            disk(std::path::Path::new("relay-queue")).is_some(),
            "relative: the working directory"
        );
    }

    #[test]
    fn reservations_stop_at_the_cap_and_are_given_back() {
        let a = admission(Some(1000), 0, u64::MAX);
        assert!(a.reserve(600).is_ok());
        assert!(a.overloaded().is_none());
        let e = a.reserve(500).expect_err("1100 > 1000");
        assert!(e.contains("--max-queue-bytes"), "{e}");
        assert_eq!(a.queue_bytes(), 600, "a refused reservation takes nothing");
        assert!(a.reserve(400).is_ok(), "exactly at the cap fits");
        assert!(
            a.overloaded().is_some(),
            "at the cap is the high-water mark"
        );
        a.release(400);
        assert!(a.overloaded().is_none());
    }

    #[test]
    fn the_disk_floor_counts_reserved_bytes() {
        let a = admission(None, 100, 1000);
        assert!(a.reserve(800).is_ok());
        let e = a.reserve(200).expect_err("free 0 < floor 100");
        assert!(e.contains("--min-free-disk-bytes"), "{e}");
        assert!(a.reserve(100).is_ok(), "leaves exactly the floor");
        assert!(a.overloaded().is_some());
    }

    #[test]
    fn no_limits_take_everything() {
        let a = admission(None, 0, u64::MAX);
        assert!(a.reserve(u64::MAX / 2).is_ok());
        assert!(a.overloaded().is_none());
    }

    #[test]
    fn defaults_come_from_the_disk() {
        let dir = std::env::temp_dir();
        let c = AdmissionConfig::embedded(dir.clone(), None, None).unwrap_or_default();
        let d = disk(&dir).map_or(0, |d| d.free);
        let max = c.max_queue_bytes.unwrap_or(0);
        assert!(max > 0 && max <= d / 100 * DEFAULT_MAX_QUEUE_SHARE_PERCENT + (1 << 20));
        assert!(c.min_free_disk_bytes <= DEFAULT_MIN_FREE_DISK_CAP);
        let given = AdmissionConfig::embedded(dir, Some(7), Some(3)).unwrap_or_default();
        assert_eq!(
            (given.max_queue_bytes, given.min_free_disk_bytes),
            (Some(7), 3)
        );
    }
}
