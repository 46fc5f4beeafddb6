//! `BoxStats`: samples of what running boxes use.
//!
//! CPU use is a rate: engines that count CPU time (the namespace engine)
//! are sampled twice, and the percentage is the time used over the time
//! between the samples (100 = one core); engines that report a percentage
//! (BoxLite) are passed through. Disk use costs a walk of the box's files,
//! so a stream measures it at most every [`DISK_EVERY`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use boxd_proto::tonic::Status;
use boxd_proto::v1;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{Service, Stream2};
use crate::error::{Error, Result};
use crate::model::BoxRecord;
use crate::registry::Registry;
use crate::validate;

/// Between samples when a stream asks for no interval.
const DEFAULT_INTERVAL: Duration = Duration::from_millis(1000);
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// A one-shot sample's CPU percentage is measured over this.
const ONE_SHOT_WINDOW: Duration = Duration::from_millis(250);
/// A stream measures a box's disk use at most this often.
const DISK_EVERY: Duration = Duration::from_secs(10);

impl Service {
    pub(super) async fn serve_stats(
        &self,
        req: v1::BoxStatsRequest,
    ) -> Result<Stream2<v1::BoxStatsResponse>, Status> {
        let names = req
            .names
            .iter()
            .map(|n| validate::box_name(n))
            .collect::<Result<Vec<_>>>()?;
        let interval = match req.interval_ms {
            0 => DEFAULT_INTERVAL,
            ms => Duration::from_millis(ms.into()).max(MIN_INTERVAL),
        };
        let mut sampler = Sampler {
            registry: self.registry.clone(),
            names,
            last: HashMap::new(),
            disk: HashMap::new(),
        };
        // Named boxes that do not exist or do not run are errors now; later,
        // a box that stopped is left out of the samples.
        sampler.sample(true).await?;
        tokio::time::sleep(interval.min(ONE_SHOT_WINDOW)).await;
        let first = sampler.sample(false).await?;
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(Ok(first));
        if req.stream {
            let shutdown = self.shutdown.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tx.closed() => return,
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(interval) => {}
                    }
                    let sample = sampler.sample(false).await.map_err(Status::from);
                    if tx.send(sample).await.is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

/// Samples boxes, remembering each box's last CPU time and disk use.
struct Sampler {
    registry: Arc<Registry>,
    names: Vec<crate::model::BoxName>,
    /// Box id → when its CPU time was read, and that time.
    last: HashMap<String, (Instant, u64)>,
    /// Box id → when its disk use was measured, and that use.
    disk: HashMap<String, (Instant, Option<u64>)>,
}

impl Sampler {
    /// The boxes to sample: the named ones (which must run when `strict`),
    /// or every running one.
    async fn boxes(&self, strict: bool) -> Result<Vec<BoxRecord>> {
        if self.names.is_empty() {
            let all = self.registry.list().await;
            return Ok(all
                .into_iter()
                .filter(|r| r.state == crate::model::State::Running)
                .collect());
        }
        let mut out = Vec::with_capacity(self.names.len());
        for name in &self.names {
            match self.registry.running(name).await {
                Ok(r) => out.push(r),
                Err(e) if strict => return Err(e),
                Err(_) => {}
            }
        }
        Ok(out)
    }

    async fn sample(&mut self, strict: bool) -> Result<v1::BoxStatsResponse> {
        let engine = self.registry.engine().clone();
        let mut boxes = Vec::new();
        for record in self.boxes(strict).await? {
            let stats = match engine.stats(&record).await {
                Ok(s) => s,
                // It stopped since it was listed.
                Err(Error::FailedPrecondition(_) | Error::NotFound(_)) if !strict => continue,
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            let cpu_percent = match (stats.cpu_percent, stats.cpu_usec) {
                (Some(p), _) => p,
                (None, Some(used)) => {
                    let before = self.last.insert(record.id.clone(), (now, used));
                    before.map_or(0.0, |(at, was)| percent(used.saturating_sub(was), now - at))
                }
                (None, None) => 0.0,
            };
            let disk_bytes = match self.disk.get(&record.id) {
                Some((at, bytes)) if now - *at < DISK_EVERY => *bytes,
                _ => {
                    let bytes = engine.disk_usage(&record).await;
                    self.disk.insert(record.id.clone(), (now, bytes));
                    bytes
                }
            };
            boxes.push(v1::BoxStat {
                id: record.id,
                name: record.name,
                cpu_usec: stats.cpu_usec.unwrap_or(0),
                cpu_percent,
                memory_bytes: stats.memory_bytes,
                memory_limit_bytes: stats.memory_limit_bytes,
                pids: stats.pids,
                disk_bytes,
                net_rx_bytes: stats.net_rx_bytes,
                net_tx_bytes: stats.net_tx_bytes,
                at_ms: crate::model::now_ms(),
            });
        }
        Ok(v1::BoxStatsResponse { boxes })
    }
}

/// CPU time `used` (µs) over `elapsed` wall time, as a percentage of one
/// core.
fn percent(used_usec: u64, elapsed: Duration) -> f64 {
    let wall = elapsed.as_micros() as f64;
    if wall <= 0.0 {
        return 0.0;
    }
    (used_usec as f64 / wall * 1000.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_is_of_one_core() {
        assert_eq!(percent(500_000, Duration::from_secs(1)), 50.0);
        assert_eq!(percent(2_000_000, Duration::from_secs(1)), 200.0);
        assert_eq!(percent(1, Duration::ZERO), 0.0);
        assert_eq!(percent(0, Duration::from_millis(250)), 0.0);
    }
}
