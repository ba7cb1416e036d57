//! SIGTERM and SIGINT for the commands that stop cleanly on them (`relay`, `ingest`).
//!
//! tokio registers a signal when its stream is created, not when the stream is first
//! polled: the streams are made at the start of the command, so that from then on these
//! signals start the clean stop instead of their default action (ending the process).

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::output;

/// Both streams, or none when they could not be registered.
pub(crate) struct Signals(Option<(Signal, Signal)>);

impl Signals {
    /// Registers SIGTERM and SIGINT now.
    pub(crate) fn install() -> Self {
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Signals(Some((term, int))),
            _ => {
                output::error_message(
                    "cannot install the signal handlers: SIGTERM and SIGINT end the process at once (nothing acknowledged is lost)",
                );
                Signals(None)
            }
        }
    }

    /// The next SIGTERM or SIGINT (never, without handlers).
    pub(crate) async fn recv(&mut self) {
        match &mut self.0 {
            Some((term, int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}
