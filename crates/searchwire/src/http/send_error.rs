//! What the HTTP layer reports when a request got no response.

use crate::classify::OutcomeKind;
use crate::message::error::BoxError;

/// Why sending failed without a response: the kind (connect or reset) and the cause.
pub(crate) struct SendError {
    pub kind: OutcomeKind,
    pub source: BoxError,
}
