//! One pending action, as the driver keeps it from `add` until it is finished.

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Permits;
use crate::action::Action;
use crate::tracked::{ItemOutcome, RequestParams};

/// One pending action.
pub(crate) struct Item {
    pub(super) seq: u64,
    pub(super) key: Option<u64>,
    /// The action line (for an [`EncodedAction`](crate::EncodedAction): all its lines).
    /// The source line is `action`'s source, written into each request body after it.
    head: Bytes,
    pub(super) action: Action,
    /// The source is a copy of its own (see [`Item::own_source`]).
    owns_source: bool,
    pub(super) id_assigned: bool,
    /// A request carrying it failed ambiguously: it may have been applied.
    pub(super) ambiguous: bool,
    pub(super) retries: [u32; 3],
    pub(super) attempts: u32,
    /// When the driver received it (the item deadline counts from here).
    pub(super) added: Option<Instant>,
    /// A tracked item's outcome goes here instead of to a sink.
    pub(super) tracker: Option<oneshot::Sender<ItemOutcome>>,
    /// Query parameters of the request that carries it (only equal ones share a request).
    pub(super) params: Option<RequestParams>,
    /// Its share of the back-pressure limits: given back when it is finished
    /// ([`Released`](super::Released)).
    pub(super) permits: Option<Permits>,
}

impl Item {
    pub(crate) fn new(
        seq: u64,
        key: Option<u64>,
        head: Bytes,
        action: Action,
        id_assigned: bool,
        permits: Permits,
        tracker: Option<oneshot::Sender<ItemOutcome>>,
    ) -> Item {
        Item {
            seq,
            key,
            head,
            action,
            owns_source: false,
            id_assigned,
            ambiguous: false,
            retries: [0; 3],
            attempts: 0,
            added: None,
            tracker,
            params: None,
            permits: Some(permits),
        }
    }

    /// The bytes the item adds to a request body: its action line and source line.
    pub(super) fn len(&self) -> usize {
        self.head.len() + self.action.source_line().map_or(0, |s| s.len() + 1)
    }

    /// Appends the item's lines to a request body.
    pub(super) fn write_to(&self, body: &mut BytesMut) {
        body.extend_from_slice(&self.head);
        if let Some(src) = self.action.source_line() {
            body.extend_from_slice(src);
            bytes::BufMut::put_u8(body, b'\n');
        }
    }

    /// Gives the source an allocation of its own before the item waits (for a retry, or
    /// behind an earlier action with its id). The caller's source may be a slice of a
    /// larger buffer (`searchwire ingest` cuts documents out of its read buffer without a
    /// copy): an item that waits must not keep that whole buffer alive, or memory would
    /// grow with the number of waiting items times the buffer size instead of staying
    /// within the pending-bytes bound. Items sent at once (the usual case) are never copied.
    pub(super) fn own_source(&mut self) {
        if self.owns_source {
            return;
        }
        self.owns_source = true;
        if let Some(src) = &self.action.source {
            self.action.source = Some(Bytes::copy_from_slice(src));
        }
    }

    pub(crate) fn params(mut self, params: Option<RequestParams>) -> Item {
        self.params = params;
        self
    }
}
