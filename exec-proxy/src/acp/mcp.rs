//! The MCP servers an editor passes in a session's `mcpServers`, decided
//! for an agent that runs in a box:
//!
//! - **stdio** servers are started by the agent, so in the box: a command
//!   (or argument) that is a host path inside a mount is given its box path;
//!   a command that does not exist in the box is left out, with a warning on
//!   stderr; it is never run on the host;
//! - **http** and **sse** servers are reached from the box: one on the host's
//!   loopback (`localhost`, `127.0.0.0/8`, `::1`) is named
//!   `host.boxd.internal` when the box may reach that name
//!   (`--allow-net host.boxd.internal`), and left out with a warning when it
//!   may not; any other URL is kept and meets the box's network policy;
//! - servers over ACP itself (`type: "acp"`) and unknown kinds are left out
//!   with a warning: their tools would run in the client, on the host.

use std::collections::HashMap;

use boxd_client::{Client, ExecEvent, ExecStream, v1};
use serde_json::Value;

use super::mounts::Mounts;

/// The name a box reaches its host by.
pub const HOST_ALIAS: &str = "host.boxd.internal";

/// What the checks need of the box.
pub struct BoxView<'a> {
    pub client: &'a mut Client,
    pub box_name: &'a str,
    pub env: &'a HashMap<String, String>,
    pub mounts: &'a Mounts,
    /// The box's `allow_net` entries.
    pub allow_net: &'a [String],
}

/// Decides `params.mcpServers` in place; returns one warning per server
/// left out or changed.
pub async fn decide(params: &mut Value, view: &mut BoxView<'_>) -> Vec<String> {
    let Some(servers) = params.get_mut("mcpServers").and_then(Value::as_array_mut) else {
        return Vec::new();
    };
    let mut warnings = Vec::new();
    let mut kept = Vec::with_capacity(servers.len());
    for mut server in std::mem::take(servers) {
        let name = server
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("(unnamed)")
            .to_owned();
        let kind = server
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let keep = match kind.as_deref() {
            None | Some("stdio") => stdio(&mut server, &name, view, &mut warnings).await,
            Some("http" | "sse") => remote(&mut server, &name, view, &mut warnings),
            Some(other) => {
                warnings.push(format!(
                    "MCP server {name:?} ({other}) left out: its tools would run in the client, on the host, not in box {}",
                    view.box_name
                ));
                false
            }
        };
        if keep {
            kept.push(server);
        }
    }
    *servers = kept;
    warnings
}

async fn stdio(
    server: &mut Value,
    name: &str,
    view: &mut BoxView<'_>,
    warnings: &mut Vec<String>,
) -> bool {
    let Some(command) = server
        .get("command")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        warnings.push(format!("MCP server {name:?} left out: it names no command"));
        return false;
    };
    let in_box = if command.starts_with('/') {
        view.mounts.host_to_box(&command).unwrap_or(command.clone())
    } else {
        command.clone()
    };
    if !exists_in_box(view, &in_box).await {
        warnings.push(format!(
            "MCP server {name:?} left out: {command} does not exist in box {} (install it there, e.g. with --provision, or mount it)",
            view.box_name
        ));
        return false;
    }
    if in_box != command {
        warnings.push(format!(
            "MCP server {name:?}: {command} runs in the box as {in_box}"
        ));
        server["command"] = Value::String(in_box);
    }
    if let Some(args) = server.get_mut("args").and_then(Value::as_array_mut) {
        for a in args {
            if let Some(s) = a.as_str().filter(|s| s.starts_with('/'))
                && let Some(mapped) = view.mounts.host_to_box(s)
            {
                *a = Value::String(mapped);
            }
        }
    }
    true
}

/// `command -v` in the box: a name on the box's `PATH` or an executable path.
async fn exists_in_box(view: &mut BoxView<'_>, command: &str) -> bool {
    let Ok(mut exec) = ExecStream::start(
        view.client,
        v1::ExecStart {
            box_name: view.box_name.to_owned(),
            command: "sh".into(),
            args: vec![
                "-c".into(),
                r#"command -v -- "$1" >/dev/null 2>&1"#.into(),
                "sh".into(),
                command.to_owned(),
            ],
            env: view.env.clone(),
            timeout_ms: 10_000,
            ..Default::default()
        },
    )
    .await
    else {
        return false;
    };
    loop {
        match exec.next().await {
            Ok(Some(ExecEvent::Exit(exit))) => return exit.code == Some(0),
            Ok(Some(_)) => {}
            _ => return false,
        }
    }
}

fn remote(server: &mut Value, name: &str, view: &BoxView<'_>, warnings: &mut Vec<String>) -> bool {
    let Some(url) = server.get("url").and_then(Value::as_str) else {
        warnings.push(format!("MCP server {name:?} left out: it has no url"));
        return false;
    };
    let Ok(mut parsed) = url::Url::parse(url) else {
        warnings.push(format!(
            "MCP server {name:?} left out: {url:?} is not a URL"
        ));
        return false;
    };
    if !is_loopback(&parsed) {
        return true;
    }
    let allowed = view
        .allow_net
        .iter()
        .any(|h| h == HOST_ALIAS || h == "*.boxd.internal");
    if !allowed {
        warnings.push(format!(
            "MCP server {name:?} left out: {url} is on the host's loopback, which box {} reaches only as {HOST_ALIAS} with --allow-net {HOST_ALIAS}",
            view.box_name
        ));
        return false;
    }
    if parsed.set_host(Some(HOST_ALIAS)).is_err() {
        return false;
    }
    warnings.push(format!(
        "MCP server {name:?}: {url} is reached from the box as {parsed}"
    ));
    server["url"] = Value::String(parsed.into());
    true
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_told_apart() {
        for (u, lo) in [
            ("http://localhost:3000/mcp", true),
            ("http://127.0.0.2/mcp", true),
            ("http://[::1]:8/x", true),
            ("http://api.localhost/x", true),
            ("https://mcp.example.com/x", false),
            ("http://10.0.0.1/x", false),
        ] {
            assert_eq!(is_loopback(&url::Url::parse(u).unwrap()), lo, "{u}");
        }
    }
}
