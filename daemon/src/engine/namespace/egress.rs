//! The box's side of its egress proxy ([`crate::egress`]).
//!
//! A box with a non-empty allow-net still gets a network namespace of its
//! own with only loopback: nothing routes out, DNS included. The daemon
//! opens a listening socket on `127.0.0.1:3128` *inside* that namespace
//! (the box's zygote does it as it starts, [`super::finish`], since joining a
//! namespace needs a single-threaded process) and serves the proxy on it
//! from the host side, where the proxy resolves names and connects.
//! Every exec gets `HTTP_PROXY`/`HTTPS_PROXY` (both cases) pointing there,
//! `NO_PROXY` for the box's own loopback, `NODE_USE_ENV_PROXY=1` (Node's
//! `fetch` reads the proxy variables only then) and each secret's
//! placeholder in `$NAME`. The box's `/etc/hosts` names the host as
//! [`HOST_ALIAS`], which the proxy maps to the host's loopback.
//!
//! A box with secrets has a CA of its own ([`box_ca`], in its state
//! directory, never in its root or in an archive): the proxy answers TLS
//! to the secrets' hosts with it, and the box trusts it (the bundle files
//! written at each start, `boot::install_trust`, and the variables of
//! [`boxd_egress::trust::env`]).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::model::BoxSpec;

/// Where the proxy listens inside every box (squid's port).
pub const PROXY_PORT: u16 = 3128;
/// The host, as boxes name it.
pub const HOST_ALIAS: &str = "host.boxd.internal";

/// The environment every exec of a box with egress gets, before the
/// box's and the exec's own variables (which may override it).
pub fn exec_env(spec: &BoxSpec) -> Vec<(String, String)> {
    if spec.allow_net.is_empty() {
        return Vec::new();
    }
    let proxy = format!("http://127.0.0.1:{PROXY_PORT}");
    let no_proxy = "localhost,127.0.0.1,::1".to_owned();
    let mut env: Vec<(String, String)> = [
        ("HTTP_PROXY", &proxy),
        ("HTTPS_PROXY", &proxy),
        ("http_proxy", &proxy),
        ("https_proxy", &proxy),
        ("NO_PROXY", &no_proxy),
        ("no_proxy", &no_proxy),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.clone()))
    .collect();
    env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    if !spec.secrets.is_empty() {
        env.extend(
            boxd_egress::trust::env()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
    }
    for s in &spec.secrets {
        env.push((s.name.clone(), s.placeholder.clone()));
    }
    env
}

/// The CA of a box with secrets (its certificate, PEM), made in the box's
/// directory the first time it is needed (at create; at the first start
/// of a clone, an import or a box made before boxes had CAs); `None` for
/// a box without secrets.
pub fn box_ca(record: &crate::model::BoxRecord) -> Result<Option<String>> {
    use boxd_egress::ca::{BoxCa, KEY_FILE};
    if record.spec.secrets.is_empty() {
        return Ok(None);
    }
    let ca = if record.dir.join(KEY_FILE).exists() {
        BoxCa::load(&record.dir, &record.id)
    } else {
        BoxCa::create(&record.dir, &record.id)
    }
    .map_err(|e| Error::Engine(format!("the box's certificate authority: {e}")))?;
    Ok(Some(ca.cert_pem().to_owned()))
}

/// Writes the box's `/etc/hosts` (bound over the image's, read-only) into
/// the box directory and returns its path.
pub fn hosts_file(box_dir: &Path) -> Result<PathBuf> {
    let path = box_dir.join("hosts");
    let text = format!(
        "# Written by boxd. This box reaches the network only through its egress\n\
         # proxy (http://127.0.0.1:{PROXY_PORT}); {HOST_ALIAS} is the host.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         127.0.0.1\t{HOST_ALIAS}\n"
    );
    // Readable by every id of the box (boxd's umask makes its files private).
    std::fs::write(&path, text)
        .and_then(|()| {
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        })
        .map_err(|e| Error::io(format!("write {}", path.display()), e))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_without_network_get_no_proxy_variables() {
        assert!(exec_env(&BoxSpec::default()).is_empty());
        let spec = BoxSpec {
            allow_net: vec!["example.com".into()],
            secrets: vec![crate::egress::Secret {
                name: "API_KEY".into(),
                hosts: vec!["example.com".into()],
                placeholder: "PH".into(),
                value: "v".into(),
            }],
            ..Default::default()
        };
        let env = exec_env(&spec);
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("HTTPS_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("no_proxy"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(get("API_KEY"), Some("PH"));
        assert!(!env.iter().any(|(_, v)| v == "v"), "never the value");
    }
}
