//! What each box's own files take on disk, remembered: measuring walks
//! every file of the box (a million files take seconds), and listing boxes
//! must not wait for that, nor make every client pay it again.
//!
//! Invariants: a caller waits at most [`WAIT`] for a measurement (a small
//! box is measured in that time; a larger one answers with what was last
//! measured, or nothing the first time); one measurement per box runs at
//! a time; a value is kept for twenty times what measuring it took, and
//! at most [`FRESH`] (a small box is measured at every call, a box of a
//! million files every 10 s); a box's entry goes when it is forgotten.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a measurement stays good.
pub const FRESH: Duration = Duration::from_secs(10);
/// How long a caller waits for one under way.
pub const WAIT: Duration = Duration::from_millis(5);

#[derive(Default)]
struct Entry {
    bytes: Option<u64>,
    /// When it was measured, and until when that stays good.
    at: Option<Instant>,
    good_for: Duration,
    /// Told when the measurement under way is done.
    running: Option<tokio::sync::watch::Receiver<Option<u64>>>,
}

#[derive(Clone, Default)]
pub struct DiskCache {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

impl DiskCache {
    /// The bytes of box `id`: what was measured within [`FRESH`], else
    /// what `measure` finds within [`WAIT`], else what was measured last.
    pub async fn get<F>(&self, id: &str, measure: F) -> Option<u64>
    where
        F: Future<Output = Option<u64>> + Send + 'static,
    {
        let mut rx = {
            let mut all = self.entries.lock().expect("disk cache");
            let e = all.entry(id.to_owned()).or_default();
            if e.at.is_some_and(|at| at.elapsed() < e.good_for) {
                return e.bytes;
            }
            match &e.running {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    e.running = Some(rx.clone());
                    let entries = self.entries.clone();
                    let id = id.to_owned();
                    tokio::spawn(async move {
                        let begin = Instant::now();
                        let bytes = measure.await;
                        let mut all = entries.lock().expect("disk cache");
                        if let Some(e) = all.get_mut(&id) {
                            e.bytes = bytes.or(e.bytes);
                            e.at = Some(Instant::now());
                            e.good_for = (begin.elapsed() * 20).min(FRESH);
                            e.running = None;
                        }
                        let _ = tx.send(bytes);
                    });
                    rx
                }
            }
        };
        if let Ok(Ok(_)) = tokio::time::timeout(WAIT, rx.changed()).await
            && let Some(b) = *rx.borrow()
        {
            return Some(b);
        }
        self.entries
            .lock()
            .expect("disk cache")
            .get(id)
            .and_then(|e| e.bytes)
    }

    /// Measured again on the next [`DiskCache::get`] (its files changed
    /// wholesale: a restore, say).
    pub fn stale(&self, id: &str) {
        if let Some(e) = self.entries.lock().expect("disk cache").get_mut(id) {
            e.at = None;
        }
    }

    pub fn forget(&self, id: &str) {
        self.entries.lock().expect("disk cache").remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slow_measurement_never_holds_a_caller_and_is_kept() {
        let cache = DiskCache::default();
        assert_eq!(
            cache.get("a", async { Some(7) }).await,
            Some(7),
            "fast: waited for"
        );
        // A quick measurement is made again at the next call.
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(cache.get("a", async { Some(8) }).await, Some(8));
        // One that took a while is kept for a while.
        let slowish = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Some(3)
        };
        assert_eq!(cache.get("c", slowish).await, None, "not waited for");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            cache.get("c", async { panic!("measured again") }).await,
            Some(3)
        );
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let slow = async move {
            let _ = wait.await;
            Some(9)
        };
        // Not waited for beyond WAIT: nothing known yet.
        assert_eq!(cache.get("b", slow).await, None);
        go.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(cache.get("b", async { None }).await, Some(9));
        cache.forget("b");
        assert_eq!(cache.get("b", async { Some(1) }).await, Some(1));
    }
}
