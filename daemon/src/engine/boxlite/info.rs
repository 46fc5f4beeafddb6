//! What the BoxLite engine says of itself (`Describe`): name, version,
//! isolation, capabilities, and notes on how its boxes behave, including
//! why boxes cannot start where microVMs cannot boot.

use super::Verdict;
use crate::engine::{EngineInfo, Isolation};

/// The engine's description on a host with this preflight verdict.
pub(super) fn engine_info(verdict: &Verdict) -> EngineInfo {
    local_or_remote(Some(verdict), None)
}

/// The engine's description on a BoxLite REST server at `url`: what the
/// REST runtime of `boxlite` 0.10.8 cannot do is left out of the
/// capabilities and said in the notes.
pub(super) fn remote_info(url: &str) -> EngineInfo {
    local_or_remote(None, Some(url))
}

fn local_or_remote(verdict: Option<&Verdict>, url: Option<&str>) -> EngineInfo {
    let mut notes = vec![
        format!("boxes run in BoxLite {} microVMs (a guest kernel per box)", ::boxlite::VERSION),
        "stdout and stderr are decoded as UTF-8 on their way out of the VM (invalid bytes become U+FFFD): binary output is not byte-exact".into(),
        "allow-net is enforced on the host: an empty list means no network at all, entries (host names, *.wildcards, IPv4 addresses or CIDRs) are the only destinations reachable; DNS itself is not filtered".into(),
        "boxes are detached VMs: they keep running if boxd dies, and boxd finds them again when it restarts".into(),
        "stop always shuts the guest down gracefully (up to 10 s) before killing it; force makes no difference".into(),
        "an image given as a local OCI layout is read again on every start: keep it in place for the life of the box".into(),
    ];
    if let Some(verdict) = verdict.filter(|v| !v.can_boot) {
        notes.push(format!(
            "microVMs cannot boot on this host ({}); boxes can be created but not started",
            verdict.reason
        ));
    }
    if let Some(url) = url {
        notes.push(format!(
            "boxes run on the BoxLite server at {url}, not on this host; boxd keeps their names, the server their VMs"
        ));
        notes.push(super::remote::LIMITS.into());
    }
    EngineInfo {
        name: "boxlite",
        version: ::boxlite::VERSION.to_owned(),
        isolation: Isolation::MicroVm,
        capabilities: match url {
            None => crate::engine::capabilities(&[
                "image.pull",
                "box.snapshot",
                "box.clone",
                "box.archive",
            ]),
            Some(_) => super::remote::capabilities(),
        },
        notes,
        network_filtering: true,
        create_warning: None,
        boxes_outlive_daemon: true,
        execs_outlive_daemon: false,
        host: url.map(|u| format!("remote: {u}")),
    }
}
