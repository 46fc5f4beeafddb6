//! Published ports. BoxLite's network backend listens on the host: boxd's
//! mappings go to it as [`PortSpec`]s, and what it reports bound is kept
//! per running box (by record id) for `published`, taken when the box
//! starts or when `list` finds it running (after a restart of boxd).

use ::boxlite::BoxInfo;
use ::boxlite::runtime::options::PortSpec;

use super::BoxliteEngine;
use crate::model::{BoxRecord, PortMapping};

/// A published port as BoxLite takes it: TCP, host port `None` for any
/// free one, the host address always given (BoxLite's default is every
/// interface, boxd's 127.0.0.1).
pub fn port_spec(p: &PortMapping) -> PortSpec {
    PortSpec {
        host_port: (p.host_port != 0).then_some(p.host_port),
        guest_port: p.box_port,
        protocol: ::boxlite::PortProtocol::Tcp,
        host_ip: Some(p.host_ip.to_string()),
    }
}

/// What a running box publishes: BoxLite's concrete bindings when it knows
/// them, else what was asked (`asked`).
fn published_ports(info: &BoxInfo, asked: &[PortMapping]) -> Vec<PortMapping> {
    let Some(bound) = info
        .network
        .as_ref()
        .and_then(|n| n.published_ports.as_ref())
    else {
        return asked.to_vec();
    };
    bound
        .iter()
        .filter(|p| p.protocol == ::boxlite::PortProtocol::Tcp)
        .filter_map(|p| {
            Some(PortMapping {
                host_ip: p.host_ip.parse().ok()?,
                host_port: p.host_port,
                box_port: p.guest_port,
            })
        })
        .collect()
}

impl BoxliteEngine {
    /// Records what a box publishes now, from BoxLite's own report.
    pub(super) fn remember_ports(&self, record: &BoxRecord, info: Option<&BoxInfo>) {
        let mut table = self.published.lock().expect("published ports");
        match info {
            Some(info) if info.status.is_active() => {
                table.insert(record.id.clone(), published_ports(info, &record.spec.ports));
            }
            _ => {
                table.remove(&record.id);
            }
        }
    }

    /// Records what the boxes BoxLite lists publish.
    pub(super) fn remember_listed(&self, all: &[BoxInfo]) {
        let mut table = self.published.lock().expect("published ports");
        for i in all {
            let Some(id) = i.name.clone() else {
                continue;
            };
            // Boxes found running again (after a restart of boxd)
            // publish what BoxLite says they do.
            match (i.status.is_active(), &i.network) {
                (true, Some(n)) if n.published_ports.is_some() => {
                    table.insert(id, published_ports(i, &[]));
                }
                (false, _) => {
                    table.remove(&id);
                }
                _ => {}
            }
        }
    }

    /// What a box publishes, as last recorded.
    pub(super) fn recorded_ports(&self, record: &BoxRecord) -> Vec<PortMapping> {
        self.published
            .lock()
            .expect("published ports")
            .get(&record.id)
            .cloned()
            .unwrap_or_default()
    }
}
