//! Registry credentials, read from the user's container-tool configuration
//! the way docker, podman and skopeo read them.
//!
//! Files, first match wins: `$REGISTRY_AUTH_FILE`, `$XDG_RUNTIME_DIR/containers/auth.json`,
//! `~/.config/containers/auth.json`, `$DOCKER_CONFIG/config.json`,
//! `~/.docker/config.json`. Each holds `{"auths": {"<registry>": {"auth":
//! base64("user:password")}}}` (or `username`/`password`, or an
//! `identitytoken`). Keys may be a bare host (`localhost:5000`) or a URL
//! (`https://index.docker.io/v1/` for Docker Hub). Credential helpers are
//! not run. The registry turns basic credentials into a bearer token when it
//! asks for one (oci-client handles the challenge).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;

/// The credential files, in the order they are consulted.
pub fn files() -> Vec<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = env("HOME");
    let mut files = Vec::new();
    files.extend(env("REGISTRY_AUTH_FILE"));
    files.extend(env("XDG_RUNTIME_DIR").map(|d| d.join("containers/auth.json")));
    files.extend(
        env("XDG_CONFIG_HOME")
            .or_else(|| home.as_ref().map(|h| h.join(".config")))
            .map(|d| d.join("containers/auth.json")),
    );
    files.extend(
        env("DOCKER_CONFIG")
            .or_else(|| home.as_ref().map(|h| h.join(".docker")))
            .map(|d| d.join("config.json")),
    );
    files
}

/// Credentials for `registry` (as in a reference: `docker.io`, `host:port`).
pub fn for_registry(registry: &str) -> RegistryAuth {
    files()
        .iter()
        .find_map(|f| lookup(f, registry))
        .unwrap_or(RegistryAuth::Anonymous)
}

fn lookup(file: &Path, registry: &str) -> Option<RegistryAuth> {
    let text = std::fs::read(file).ok()?;
    let config: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let auths = config.get("auths")?.as_object()?;
    let entry = auths
        .iter()
        .find(|(key, _)| key_matches(key, registry))
        .map(|(_, v)| v)?;
    decode(entry)
}

/// Whether a config key names `registry`: `host`, `https://host`,
/// `https://host/v1/`; Docker Hub's keys stand for `docker.io`.
fn key_matches(key: &str, registry: &str) -> bool {
    let host = key
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    let hub = |h: &str| matches!(h, "docker.io" | "index.docker.io" | "registry-1.docker.io");
    host == registry || (hub(host) && hub(registry))
}

fn decode(entry: &serde_json::Value) -> Option<RegistryAuth> {
    let field = |k: &str| {
        entry
            .get(k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    if let Some(token) = field("identitytoken") {
        return Some(RegistryAuth::Bearer(token.to_owned()));
    }
    if let (Some(user), Some(password)) = (field("username"), field("password")) {
        return Some(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(field("auth")?)
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some(RegistryAuth::Basic(user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(a: Option<RegistryAuth>) -> Option<(String, String)> {
        match a? {
            RegistryAuth::Basic(u, p) => Some((u, p)),
            _ => None,
        }
    }

    #[test]
    fn reads_docker_and_containers_formats() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3:cret");
        std::fs::write(
            &f,
            serde_json::json!({"auths": {
                "localhost:5000": {"auth": auth},
                "https://index.docker.io/v1/": {"username": "bob", "password": "pw"},
                "broken.example": {"auth": "not base64!"},
            }})
            .to_string(),
        )
        .unwrap();
        assert_eq!(
            basic(lookup(&f, "localhost:5000")),
            Some(("alice".into(), "s3:cret".into()))
        );
        assert_eq!(
            basic(lookup(&f, "docker.io")),
            Some(("bob".into(), "pw".into()))
        );
        assert!(lookup(&f, "broken.example").is_none());
        assert!(lookup(&f, "elsewhere:5000").is_none());
        assert!(lookup(&dir.path().join("missing.json"), "localhost:5000").is_none());
    }

    #[test]
    fn keys_match_hosts() {
        assert!(key_matches("https://ghcr.io", "ghcr.io"));
        assert!(key_matches("registry-1.docker.io", "docker.io"));
        assert!(!key_matches("ghcr.io.evil", "ghcr.io"));
    }
}
