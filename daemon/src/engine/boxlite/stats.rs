//! A running VM's usage as boxd's [`Stats`], from what BoxLite measures
//! of it (`metrics()`, which boots a box that is not running: the engine
//! asks only running boxes).

use crate::engine::Stats;
use crate::model::BoxSpec;

/// boxd's stats from what BoxLite measures of a VM: its CPU use as a
/// percentage (no time), its memory, its network bytes; the VM's memory
/// size is its limit (BoxLite's default, 1 GiB, when the spec sets none).
pub(super) fn vm_stats(
    cpu_percent: Option<f32>,
    memory_bytes: Option<u64>,
    received: Option<u64>,
    sent: Option<u64>,
    spec: &BoxSpec,
) -> Stats {
    Stats {
        cpu_usec: None,
        cpu_percent: Some(f64::from(cpu_percent.unwrap_or(0.0))),
        memory_bytes: memory_bytes.unwrap_or(0),
        memory_limit_bytes: Some(u64::from(spec.memory_mib.unwrap_or(1024)) << 20),
        pids: 0,
        net_rx_bytes: received.unwrap_or(0),
        net_tx_bytes: sent.unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_metrics_map_to_stats() {
        let s = vm_stats(
            Some(150.5),
            Some(300 << 20),
            Some(7),
            Some(9),
            &BoxSpec::default(),
        );
        assert_eq!(s.cpu_usec, None, "BoxLite reports a percentage, not time");
        assert_eq!(s.cpu_percent, Some(150.5));
        assert_eq!(s.memory_bytes, 300 << 20);
        assert_eq!(s.memory_limit_bytes, Some(1 << 30));
        assert_eq!((s.net_rx_bytes, s.net_tx_bytes), (7, 9));
        let sized = BoxSpec {
            memory_mib: Some(256),
            ..BoxSpec::default()
        };
        let s = vm_stats(None, None, None, None, &sized);
        assert_eq!(s.memory_limit_bytes, Some(256 << 20));
        assert_eq!((s.cpu_percent, s.memory_bytes), (Some(0.0), 0));
    }
}
