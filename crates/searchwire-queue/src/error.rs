//! One error type with a small kind enum, like the transport's.

use std::fmt;

/// What went wrong, coarsely: enough to decide what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The embedded database failed (I/O, a full disk, a file another process holds).
    Storage,
    /// Redis failed or could not be reached.
    Redis,
    /// A stored record could not be decoded (a damaged file or a foreign key in Redis).
    Corrupt,
    /// The caller's input was rejected (an empty payload, an invalid name or URL).
    InvalidInput,
    /// The queue was closed (its writer stopped).
    Closed,
}

/// A queue error: a kind, a message a person can act on, and the underlying cause.
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error {
            kind,
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    pub(crate) fn corrupt(what: impl fmt::Display) -> Self {
        Error::new(
            ErrorKind::Corrupt,
            format!("corrupt queue record: {what} (the store was damaged or written by another program)"),
        )
    }

    pub(crate) fn closed() -> Self {
        Error::new(
            ErrorKind::Closed,
            "the queue is closed (its writer stopped)",
        )
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source.as_ref().map(|s| s.to_string()))
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}

/// The queue's result type.
pub type Result<T> = std::result::Result<T, Error>;
