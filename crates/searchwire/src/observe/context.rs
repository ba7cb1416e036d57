//! The context every span and retry log of a request carries (reference 004 ch. 5): a
//! retry id unique across processes and the name of the cluster the client talks to.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;

/// The id of one logical request and all its attempts and retries: a UUID v7 (48 bits of
/// Unix milliseconds, 74 random bits), so ids from different processes and clients never
/// collide and sort by creation time.
///
/// The random bits come from the thread's `fastrand` generator, which is seeded from the
/// operating system per thread — never from the client's own generator, whose seed a test
/// may fix ([`ClientBuilder::seed`](crate::ClientBuilder::seed)) — and making one costs no
/// system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RetryId(uuid::Uuid);

impl RetryId {
    /// A new id for a request starting at `now` (the client's wall clock).
    pub(crate) fn new(now: SystemTime) -> RetryId {
        let millis = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut random = [0u8; 10];
        fastrand::fill(&mut random);
        RetryId(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid())
    }
}

impl fmt::Display for RetryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

/// The cluster's name, once a health answer (`GET /` or `_cluster/health`) told it.
/// Displays as the name, or as nothing while it is unknown.
#[derive(Default)]
pub(crate) struct ClusterName(ArcSwapOption<String>);

impl ClusterName {
    /// Records the name a node reported (kept when unchanged; the last report wins).
    pub(crate) fn learn(&self, name: &str) {
        if name.is_empty() || self.0.load().as_deref().is_some_and(|n| n == name) {
            return;
        }
        self.0.store(Some(Arc::new(name.to_owned())));
    }

    /// The name, when known.
    pub(crate) fn get(&self) -> Option<Arc<String>> {
        self.0.load_full()
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0.load() {
            Some(n) => f.write_str(n),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClusterName").field(&self.get()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One fixed instant: ids made in the same millisecond differ by their random bits alone.
    fn at() -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn retry_ids_are_version_7_uuids_and_distinct() {
        let a = RetryId::new(at());
        let b = RetryId::new(at());
        assert_ne!(a, b);
        let parsed = uuid::Uuid::parse_str(&a.to_string()).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(parsed, a.0);
        // The timestamp is the client's wall clock.
        let (secs, _) = parsed.get_timestamp().unwrap().to_unix();
        assert_eq!(secs, 1_700_000_000);
    }

    #[test]
    fn ids_made_on_many_threads_never_collide() {
        let ids: Vec<RetryId> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..10_000).map(|_| RetryId::new(at())).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
    }

    #[test]
    fn the_cluster_name_is_empty_until_learned_and_the_last_report_wins() {
        let c = ClusterName::default();
        assert_eq!(c.to_string(), "");
        assert!(c.get().is_none());
        c.learn("");
        assert!(c.get().is_none(), "an empty name teaches nothing");
        c.learn("logs-prod");
        assert_eq!(c.to_string(), "logs-prod");
        c.learn("logs-prod-2");
        assert_eq!(c.get().as_deref().map(String::as_str), Some("logs-prod-2"));
    }
}
