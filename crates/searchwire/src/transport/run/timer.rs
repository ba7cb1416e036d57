//! The attempt timer: one tokio [`Sleep`] bounds an attempt, and a finished attempt's
//! timer is kept for the next attempt on the same thread instead of being dropped.
//!
//! Why: a new `Sleep` per attempt costs its creation, a locked insert
//! into the runtime's timer wheel on its first poll and a locked removal when it is
//! dropped — about 300 instructions of a request that the bare HTTP client does not pay,
//! and almost every attempt ends long before its timer. A kept timer is still registered
//! in the wheel at its old instant; resetting it to a later instant (attempt ends only
//! grow: the same timeout from a later start) is one atomic update, with no lock and no
//! wheel operation. The wheel finds the timer at the old instant, sees it was moved on, and
//! re-files it: once per kept timer per timeout period, not once per attempt.
//!
//! What a kept timer can do meanwhile: fire (at the old instant, when it was not reset
//! since) and wake the task that last polled it — a spurious wake-up, which every future
//! tolerates. A kept timer belongs to the runtime that made it; one of another runtime (a
//! thread may run several runtimes in turn) is dropped, never reused.
//!
//! A kept timer whose instant is not later than the new attempt's bound is not
//! reset at all (`Sleep::reset` — the instant to a tick, the driver handle's clone, the
//! atomic update — was ~160 instructions of every attempt). It fires at its old, earlier
//! instant; [`AttemptTimer`]'s poll sees that the instant it fired at is before its
//! target, moves it on to the target and waits again. An attempt is thus never bounded
//! earlier than asked; the re-arming costs once per kept timer per timeout period (the
//! old instant of a kept timer is one timeout after an earlier attempt's start), not once
//! per attempt. A kept timer set later than the target is reset as before.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::{Handle, Id};
use tokio::time::{Instant, Sleep};

/// At most this many finished timers are kept per thread: enough for an attempt in flight
/// per request at the concurrencies the benchmarks run (64), with room. A timer is ~100
/// bytes.
const KEPT_PER_THREAD: usize = 256;

/// This thread's finished timers, all of one runtime.
struct Kept {
    runtime: Option<Id>,
    timers: Vec<Pin<Box<Sleep>>>,
}

thread_local! {
    static KEPT: RefCell<Kept> = const {
        RefCell::new(Kept {
            runtime: None,
            timers: Vec::new(),
        })
    };
}

/// A timer that fires at an instant, handed back to this thread's kept timers when
/// dropped (at the attempt's end, or when the request is cancelled).
pub(super) struct AttemptTimer {
    sleep: Option<Pin<Box<Sleep>>>,
    /// The instant the timer fires at: the sleep's own, or later (a kept sleep left at its
    /// earlier instant, moved on when it fires there).
    target: Instant,
    runtime: Id,
}

impl AttemptTimer {
    /// A timer firing at `at`: a kept one of the current runtime (reset only when it was
    /// set later than `at`), or a new one.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with the time driver enabled, like [`tokio::time::sleep`].
    pub(super) fn at(at: Instant) -> Self {
        let runtime = Handle::current().id();
        let kept = KEPT
            .try_with(|kept| {
                let mut kept = kept.borrow_mut();
                if kept.runtime == Some(runtime) {
                    kept.timers.pop()
                } else {
                    // Another runtime's timers cannot serve this one; let them go.
                    kept.timers.clear();
                    kept.runtime = Some(runtime);
                    None
                }
            })
            .ok()
            .flatten();
        let sleep = match kept {
            Some(mut sleep) => {
                // Set earlier (or at `at`): left as it is, moved on when it fires there.
                if sleep.deadline() > at {
                    sleep.as_mut().reset(at);
                }
                sleep
            }
            None => Box::pin(tokio::time::sleep_until(at)),
        };
        Self {
            sleep: Some(sleep),
            target: at,
            runtime,
        }
    }
}

impl Future for AttemptTimer {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let target = self.target;
        // Only a dropped timer has none.
        let Some(sleep) = self.sleep.as_mut() else {
            return Poll::Ready(());
        };
        std::task::ready!(sleep.as_mut().poll(cx));
        if sleep.deadline() >= target {
            return Poll::Ready(());
        }
        // A kept timer fired at the earlier instant it was left at: on to the target.
        sleep.as_mut().reset(target);
        sleep.as_mut().poll(cx)
    }
}

impl Drop for AttemptTimer {
    fn drop(&mut self) {
        let Some(sleep) = self.sleep.take() else {
            return;
        };
        // During the thread's teardown the kept timers are gone; this one is dropped.
        let _ = KEPT.try_with(|kept| {
            let mut kept = kept.borrow_mut();
            if kept.runtime == Some(self.runtime) && kept.timers.len() < KEPT_PER_THREAD {
                kept.timers.push(sleep);
            }
        });
    }
}

/// How many finished timers this thread keeps (tests).
#[cfg(test)]
pub(super) fn kept_on_this_thread() -> usize {
    KEPT.with(|kept| kept.borrow().timers.len())
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use super::*;

    /// Polls `timer` once (registering it in the wheel), expecting it pending.
    async fn poll_once(timer: &mut AttemptTimer) {
        poll_fn(|cx| {
            assert!(Pin::new(&mut *timer).poll(cx).is_pending());
            Poll::Ready(())
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_timer_is_kept_and_serves_the_next_attempt() {
        let start = Instant::now();
        let mut first = AttemptTimer::at(start + Duration::from_secs(30));
        poll_once(&mut first).await;
        let before = kept_on_this_thread();
        drop(first);
        assert_eq!(kept_on_this_thread(), before + 1);
        let second = AttemptTimer::at(start + Duration::from_secs(40));
        assert_eq!(kept_on_this_thread(), before, "the kept timer was taken");
        second.await;
        assert_eq!(Instant::now() - start, Duration::from_secs(40));
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_fires_at_its_new_instant_earlier_or_later() {
        let start = Instant::now();
        // Registered at +30 s, then kept: moved on to +45 s it fires then, not at +30 s.
        let mut timer = AttemptTimer::at(start + Duration::from_secs(30));
        poll_once(&mut timer).await;
        drop(timer);
        AttemptTimer::at(start + Duration::from_secs(45)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(45));
        // Registered at +75 s, then kept: moved back to +50 s it fires then, not at +75 s.
        let mut timer = AttemptTimer::at(start + Duration::from_secs(75));
        poll_once(&mut timer).await;
        drop(timer);
        AttemptTimer::at(start + Duration::from_secs(50)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(50));
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_set_earlier_is_left_there_and_moved_on_when_it_fires() {
        let start = Instant::now();
        let mut first = AttemptTimer::at(start + Duration::from_secs(30));
        poll_once(&mut first).await;
        drop(first);
        let mut timer = AttemptTimer::at(start + Duration::from_secs(45));
        // Not reset: still at its old instant, and waiting.
        let left_at = timer.sleep.as_ref().map(|s| s.deadline());
        assert_eq!(left_at, Some(start + Duration::from_secs(30)));
        poll_once(&mut timer).await;
        // It fires at +30 s, is moved on, and fires at +45 s.
        timer.await;
        assert_eq!(Instant::now() - start, Duration::from_secs(45));
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_that_fired_unobserved_still_serves() {
        let start = Instant::now();
        let mut timer = AttemptTimer::at(start + Duration::from_secs(1));
        poll_once(&mut timer).await;
        drop(timer);
        // The kept timer fires while nobody waits on it.
        tokio::time::sleep(Duration::from_secs(5)).await;
        AttemptTimer::at(start + Duration::from_secs(8)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(8));
    }

    #[test]
    fn a_timer_of_another_runtime_is_never_reused() {
        let paused = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime")
        };
        let first = paused();
        first.block_on(async {
            let mut timer = AttemptTimer::at(Instant::now() + Duration::from_secs(30));
            poll_once(&mut timer).await;
        });
        assert_eq!(kept_on_this_thread(), 1);
        drop(first);
        // A timer of the dropped runtime would panic when polled ("runtime shutting
        // down") or never fire; this runtime gets a timer of its own.
        paused().block_on(async {
            let start = Instant::now();
            AttemptTimer::at(start + Duration::from_secs(2)).await;
            assert_eq!(Instant::now() - start, Duration::from_secs(2));
        });
        assert_eq!(kept_on_this_thread(), 1);
    }
}
