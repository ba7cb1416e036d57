//! Small synchronisation helpers shared by every layer: a lock that survives poisoning and
//! a flag that is cleared however a background task ends.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the state we
/// guard is always left consistent between statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Runs a closure when dropped, unless disarmed: clears a "task running" flag however the
/// task ends — returning, panicking, or dropped with its runtime — so a later caller can
/// start the task again instead of believing it still runs.
pub(crate) struct ClearOnDrop<F: FnMut()>(Option<F>);

impl<F: FnMut()> ClearOnDrop<F> {
    pub(crate) fn new(f: F) -> ClearOnDrop<F> {
        ClearOnDrop(Some(f))
    }

    /// The flag was already handed over (cleared under a lock by the task itself).
    pub(crate) fn disarm(&mut self) {
        self.0 = None;
    }
}

impl<F: FnMut()> Drop for ClearOnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = &mut self.0 {
            f();
        }
    }
}
