//! Choosing dead letters by what an operator knows about them: the index they were for, the
//! kind of error that killed them, how long ago. The CLI (`searchwire queue dead-letters`)
//! and the relay's admin endpoint use the same filter, so a selection means the same on both.
//!
//! The filter runs over pages of [`Queue::dead_letters`]: both backends keep dead letters
//! by id and nothing else, and a dead-letter set is small next to a backlog (every one of
//! them is a write the cluster refused for good), so a scan is the honest cost.

use std::time::Duration;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::message::{DeadLetter, MessageId, Selection};
use crate::Queue;

/// Dead letters read per page while filtering.
const PAGE: usize = 500;

/// Which dead letters: every condition given must hold (an empty filter takes all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// The target index: exact, or a prefix when it ends in `*` (`logs-*`).
    pub index: Option<String>,
    /// The error type, as [`error_type`] names it (`mapper_parsing_exception`,
    /// `deadline_exceeded`, `lease_expired`, ...).
    pub error_type: Option<String>,
    /// Dead for at least this long.
    pub older_than: Option<Duration>,
    /// Dead for at most this long.
    pub newer_than: Option<Duration>,
    /// Only these ids (empty: any id).
    pub ids: Vec<MessageId>,
}

impl DeadLetterFilter {
    /// Whether `d` passes, judged at `now`.
    pub fn matches(&self, d: &DeadLetter, now: Timestamp) -> bool {
        if !self.ids.is_empty() && !self.ids.contains(&d.message.id) {
            return false;
        }
        if let Some(want) = &self.index {
            let index = d.message.index.as_deref().unwrap_or("");
            let ok = match want.strip_suffix('*') {
                Some(prefix) => index.starts_with(prefix),
                None => index == want,
            };
            if !ok {
                return false;
            }
        }
        if let Some(t) = &self.error_type {
            if error_type(&d.reason) != *t {
                return false;
            }
        }
        let age = now.saturating_duration_since(d.dead_at);
        if self.older_than.is_some_and(|o| age < o) {
            return false;
        }
        if self.newer_than.is_some_and(|n| age > n) {
            return false;
        }
        true
    }

    /// Whether it takes every dead letter (no condition).
    pub fn is_empty(&self) -> bool {
        *self == DeadLetterFilter::default()
    }
}

/// The type of the error in a dead letter's reason, for filtering and display:
/// - the cluster's error object (`400: {"type":"mapper_parsing_exception",...}`): its
///   `type`;
/// - a reason that starts with one word and a colon (`deadline_exceeded: ...`): that word;
/// - an expired lease ([`LEASE_EXPIRED`](crate::LEASE_EXPIRED)): `lease_expired`;
/// - anything else: `other`.
pub fn error_type(reason: &str) -> String {
    if reason.starts_with(crate::LEASE_EXPIRED) {
        return "lease_expired".to_owned();
    }
    if let Some(t) = json_type(reason) {
        return t;
    }
    if let Some((word, _)) = reason.split_once(':') {
        if !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            && !word.bytes().all(|b| b.is_ascii_digit())
        {
            return word.to_owned();
        }
    }
    "other".to_owned()
}

/// The `type` of the outermost JSON object in `s` (the error object after `400: `), found
/// by a scan that skips nested objects and arrays (`caused_by` has its own `type`).
fn json_type(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut i = s.find('{')?;
    let mut depth = 0usize;
    // The last string read at depth 1 and whether it was a key (followed by ':').
    let mut key: Option<(usize, usize)> = None;
    let mut after_colon_of_type = false;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let text = s.get(start..j.min(b.len()))?;
                if depth == 1 {
                    if after_colon_of_type {
                        return (!text.is_empty() && !text.contains('\\')).then(|| text.to_owned());
                    }
                    key = Some((start, j));
                }
                i = j + 1;
                continue;
            }
            b':' if depth == 1 => {
                after_colon_of_type = key.is_some_and(|(a, z)| &s[a..z] == "type");
                key = None;
            }
            b'{' | b'[' => {
                depth += 1;
                after_colon_of_type = false;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return None;
                }
            }
            b',' => after_colon_of_type = false,
            _ => {}
        }
        i += 1;
    }
    None
}

impl Queue {
    /// Dead letters passing `filter`, by id after `after`, at most `limit`.
    pub async fn find_dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<MessageId>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>> {
        let now = self.options().clock.now();
        let mut out = Vec::new();
        let mut cursor = after;
        while out.len() < limit {
            let page = self.dead_letters(cursor, PAGE).await?;
            let Some(last) = page.last() else { break };
            cursor = Some(last.message.id);
            let full = page.len() == PAGE;
            out.extend(
                page.into_iter()
                    .filter(|d| filter.matches(d, now))
                    .take(limit - out.len()),
            );
            if !full {
                break;
            }
        }
        Ok(out)
    }

    /// One dead letter by id, if there is one.
    pub async fn dead_letter_by_id(&self, id: MessageId) -> Result<Option<DeadLetter>> {
        let after = id.0.checked_sub(1).map(MessageId);
        Ok(self
            .dead_letters(after, 1)
            .await?
            .into_iter()
            .find(|d| d.message.id == id))
    }

    /// The ids of every dead letter passing `filter`, as a [`Selection`] for
    /// [`Queue::replay`] or [`Queue::purge`] (`Selection::All` for an empty filter).
    pub async fn select_dead_letters(&self, filter: &DeadLetterFilter) -> Result<Selection> {
        if filter.is_empty() {
            return Ok(Selection::All);
        }
        let ids = self
            .find_dead_letters(filter, None, usize::MAX)
            .await?
            .into_iter()
            .map(|d| d.message.id)
            .collect();
        Ok(Selection::Ids(ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::PayloadHash;

    fn dead(id: u64, index: &str, reason: &str, dead_at: u64) -> DeadLetter {
        DeadLetter {
            message: Message {
                id: MessageId(id),
                payload: b"x".to_vec(),
                priority: 0,
                retry_at: Timestamp::EPOCH,
                attempts: 3,
                max_retries: 3,
                payload_hash: PayloadHash::of(b"x"),
                enqueued_at: Timestamp::EPOCH,
                index: Some(index.into()),
                last_error: None,
                pending_shutdown: false,
            },
            reason: reason.into(),
            dead_at: Timestamp::from_millis(dead_at),
        }
    }

    #[test]
    fn error_types_are_named_from_the_reason() {
        assert_eq!(
            error_type(r#"400: {"type":"mapper_parsing_exception","reason":"failed"}"#),
            "mapper_parsing_exception"
        );
        assert_eq!(
            error_type(r#"400: {"type" : "strict_dynamic_mapping_exception"}"#),
            "strict_dynamic_mapping_exception"
        );
        // The outer type, not the cause's (keys come sorted: caused_by first).
        assert_eq!(
            error_type(
                r#"400: {"caused_by":{"reason":"x \"y\"","type":"illegal_argument_exception"},"reason":"failed","type":"mapper_parsing_exception"}"#
            ),
            "mapper_parsing_exception"
        );
        assert_eq!(error_type(r#"400: {"reason":{"type":"inner"}}"#), "other");
        assert_eq!(
            error_type("deadline_exceeded: still undeliverable 24h"),
            "deadline_exceeded"
        );
        assert_eq!(error_type(&crate::lease_expired_reason(3)), "lease_expired");
        assert_eq!(
            error_type("the queued payload is not one bulk item"),
            "other"
        );
        assert_eq!(error_type("503: "), "other");
    }

    #[test]
    fn every_condition_must_hold() {
        let now = Timestamp::from_millis(100_000);
        let d = dead(
            7,
            "logs-a",
            r#"400: {"type":"mapper_parsing_exception"}"#,
            40_000,
        );
        let all = DeadLetterFilter::default();
        assert!(all.is_empty() && all.matches(&d, now));
        let f = |f: DeadLetterFilter| f.matches(&d, now);
        assert!(f(DeadLetterFilter {
            index: Some("logs-*".into()),
            ..Default::default()
        }));
        assert!(f(DeadLetterFilter {
            index: Some("logs-a".into()),
            ..Default::default()
        }));
        assert!(!f(DeadLetterFilter {
            index: Some("logs".into()),
            ..Default::default()
        }));
        assert!(!f(DeadLetterFilter {
            index: Some("metrics-*".into()),
            ..Default::default()
        }));
        assert!(f(DeadLetterFilter {
            error_type: Some("mapper_parsing_exception".into()),
            ..Default::default()
        }));
        assert!(!f(DeadLetterFilter {
            error_type: Some("deadline_exceeded".into()),
            ..Default::default()
        }));
        // Dead for 60 s.
        assert!(f(DeadLetterFilter {
            older_than: Some(Duration::from_secs(60)),
            ..Default::default()
        }));
        assert!(!f(DeadLetterFilter {
            older_than: Some(Duration::from_secs(61)),
            ..Default::default()
        }));
        assert!(f(DeadLetterFilter {
            newer_than: Some(Duration::from_secs(60)),
            ..Default::default()
        }));
        assert!(!f(DeadLetterFilter {
            newer_than: Some(Duration::from_secs(59)),
            ..Default::default()
        }));
        assert!(!f(DeadLetterFilter {
            ids: vec![MessageId(8)],
            ..Default::default()
        }));
        assert!(!f(DeadLetterFilter {
            index: Some("logs-*".into()),
            error_type: Some("other".into()),
            ..Default::default()
        }));
    }
}
