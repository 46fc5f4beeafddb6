//! ACP's `fs/read_text_file` and `fs/write_text_file`, served by the
//! proxy: inside a mount on the host, by descriptor beneath the mount's
//! directory (held open since the proxy started); anywhere else in the
//! box, through boxd.
//!
//! Invariants: no path the agent names reaches the editor, since the box
//! can rename the components of any path inside a mount between a check
//! and the editor's own open of it (a nested mount's root swapped for a
//! symlink leads anywhere); on the host a file is read or written only
//! beneath its mount's descriptor, with no symlink and no `..` on the way
//! or at the end, and only a regular file (a path that would leave is
//! served in the box, where it means what the box makes it mean); a write
//! into a read-only mount is refused; what is served in the box is read
//! and written by boxd in the box (`CopyOut`, an exec), never on the host.

use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use boxd_fs::roots::Root;

use boxd_client::{Client, ExecEvent, ExecStream, v1};
use serde_json::{Value, json};

use super::jsonrpc::code;
use super::mounts::{Mounts, OnHost};
use super::terminals::CallError;

/// The largest file served from the box (16 MiB).
pub const MAX_FILE: usize = 16 << 20;

/// Where a file request goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Served on the host beneath a mount's directory, at `rel`.
    Host { root: Arc<Root>, rel: PathBuf },
    /// Served in the box, at the path the agent gave.
    InBox,
    /// Refused with this error.
    Refused(i64, String),
}

/// Decides where `fs/read_text_file` (`write: false`) or
/// `fs/write_text_file` goes.
pub fn route(params: &Value, mounts: &Mounts, write: bool) -> Route {
    let Some(path) = params.get("path").and_then(Value::as_str) else {
        return Route::Refused(code::INVALID_PARAMS, "path (a string) is required".into());
    };
    if !path.starts_with('/') {
        return Route::Refused(
            code::INVALID_PARAMS,
            format!("path {path:?} is not absolute"),
        );
    }
    let Some(mapped) = mounts.box_to_host(path) else {
        return Route::InBox;
    };
    if write && mapped.mount.read_only {
        return Route::Refused(
            code::INTERNAL_ERROR,
            format!(
                "{path} is on a read-only mount ({} → {})",
                mapped.mount.host.display(),
                mapped.mount.guest.display()
            ),
        );
    }
    match (Mounts::resolve_on_host(&mapped), mapped.root) {
        (OnHost::File | OnHost::Missing, Some(root)) => Route::Host {
            root: root.clone(),
            rel: mapped.rel.clone(),
        },
        _ => Route::InBox,
    }
}

/// `fs/read_text_file` inside a mount: the regular file beneath the
/// mount's descriptor, as text, from `line` for `limit` lines.
pub async fn read_on_host(
    root: Arc<Root>,
    rel: PathBuf,
    params: &Value,
) -> Result<Value, CallError> {
    let bytes = tokio::task::spawn_blocking(move || root.read(&rel, MAX_FILE as u64))
        .await
        .map_err(|e| (code::INTERNAL_ERROR, e.to_string()))?
        .map_err(host_failed)?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(json!({"content": lines(&text, params)}))
}

/// `fs/write_text_file` inside a mount: the regular file written beneath
/// the mount's descriptor (missing directories made the same way).
pub async fn write_on_host(
    root: Arc<Root>,
    rel: PathBuf,
    params: &Value,
) -> Result<Value, CallError> {
    let Some(content) = params.get("content").and_then(Value::as_str) else {
        return Err((
            code::INVALID_PARAMS,
            "content (a string) is required".into(),
        ));
    };
    let data = content.as_bytes().to_vec();
    tokio::task::spawn_blocking(move || {
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            root.make_dirs(parent)?;
        }
        root.write(&rel, &data)
    })
    .await
    .map_err(|e| (code::INTERNAL_ERROR, e.to_string()))?
    .map_err(host_failed)?;
    Ok(json!({}))
}

fn host_failed(f: boxd_fs::archive::Failure) -> CallError {
    (code::INTERNAL_ERROR, f.message)
}

/// `fs/read_text_file` in the box: the file boxd copies out of it (a
/// symlink followed as the box resolves it), as text, from `line` (1-based)
/// for `limit` lines.
pub async fn read_in_box(
    client: &mut Client,
    box_name: &str,
    params: &Value,
) -> Result<Value, CallError> {
    let path = params
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut stream = client
        .copy_out(v1::CopyOutRequest {
            box_name: box_name.to_owned(),
            path: path.to_owned(),
            follow_symlinks: true,
        })
        .await
        .map_err(|s| failed(path, &s))?
        .into_inner();
    // A tar of one file: its header, its bytes, padding and the end.
    let bound = MAX_FILE + 64 * 1024;
    let mut tar = Vec::new();
    while let Some(chunk) = stream.message().await.map_err(|s| failed(path, &s))? {
        tar.extend_from_slice(&chunk.data);
        if tar.len() > bound {
            return Err(too_large(path));
        }
    }
    let content = only_file(&tar, path)?;
    let text = String::from_utf8_lossy(&content);
    Ok(json!({"content": lines(&text, params)}))
}

/// The one regular file of a `CopyOut` archive.
fn only_file(tar: &[u8], path: &str) -> Result<Vec<u8>, CallError> {
    let mut archive = tar::Archive::new(tar);
    let mut entries = archive
        .entries()
        .map_err(|e| (code::INTERNAL_ERROR, format!("{path}: {e}")))?;
    let mut entry = match entries.next() {
        Some(Ok(e)) => e,
        Some(Err(e)) => return Err((code::INTERNAL_ERROR, format!("{path}: {e}"))),
        None => return Err((code::INTERNAL_ERROR, format!("{path}: nothing was copied"))),
    };
    if !entry.header().entry_type().is_file() {
        return Err((
            code::INTERNAL_ERROR,
            format!("{path} is not a regular file"),
        ));
    }
    if entry.size() > MAX_FILE as u64 {
        return Err(too_large(path));
    }
    let mut bytes = Vec::new();
    entry
        .by_ref()
        .take(MAX_FILE as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| (code::INTERNAL_ERROR, format!("{path}: {e}")))?;
    Ok(bytes)
}

/// `line` (1-based) and `limit` applied to a file's text.
fn lines(text: &str, params: &Value) -> String {
    let line = params.get("line").and_then(Value::as_u64);
    let limit = params.get("limit").and_then(Value::as_u64);
    if line.is_none() && limit.is_none() {
        return text.to_owned();
    }
    let skip = line.unwrap_or(1).saturating_sub(1) as usize;
    let take = limit.map_or(usize::MAX, |l| l as usize);
    // Each line keeps its newline, as the file has it.
    text.split_inclusive('\n').skip(skip).take(take).collect()
}

/// `fs/write_text_file` in the box: `cat` into the path as the box
/// resolves it (missing directories made first), by an exec of box root.
pub async fn write_in_box(
    client: &mut Client,
    box_name: &str,
    env: &HashMap<String, String>,
    params: &Value,
) -> Result<Value, CallError> {
    let path = params
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(content) = params.get("content").and_then(Value::as_str) else {
        return Err((
            code::INVALID_PARAMS,
            "content (a string) is required".into(),
        ));
    };
    let script = r#"d=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1""#;
    let mut exec = ExecStream::start(
        client,
        v1::ExecStart {
            box_name: box_name.to_owned(),
            command: "sh".into(),
            args: vec!["-c".into(), script.into(), "sh".into(), path.to_owned()],
            env: env.clone(),
            stdin: true,
            timeout_ms: 60_000,
            ..Default::default()
        },
    )
    .await
    .map_err(|s| failed(path, &s))?;
    let input = exec.input();
    let data = content.as_bytes().to_vec();
    let feed = tokio::spawn(async move {
        let _ = input.stdin(data).await;
        let _ = input.close_stdin().await;
    });
    let mut errors = Vec::new();
    let exit = loop {
        match exec.next().await.map_err(|s| failed(path, &s))? {
            Some(ExecEvent::Stdout(b) | ExecEvent::Stderr(b)) => {
                if errors.len() < 4096 {
                    errors.extend_from_slice(&b);
                }
            }
            Some(ExecEvent::Exit(exit)) => break exit,
            None => {
                return Err((
                    code::INTERNAL_ERROR,
                    format!("{path}: the write did not finish"),
                ));
            }
        }
    };
    feed.abort();
    if exit.code == Some(0) {
        return Ok(json!({}));
    }
    let why = String::from_utf8_lossy(&errors).trim().to_owned();
    let why = if why.is_empty() {
        exit.error.clone()
    } else {
        why
    };
    Err((
        code::INTERNAL_ERROR,
        format!("writing {path} in the box failed: {why}"),
    ))
}

fn failed(path: &str, s: &boxd_client::tonic::Status) -> CallError {
    let why = boxd_client::status_message(s);
    let message = if why.contains(path) {
        why
    } else {
        format!("{path}: {why}")
    };
    (code::INTERNAL_ERROR, message)
}

fn too_large(path: &str) -> CallError {
    (
        code::INTERNAL_ERROR,
        format!("{path} is larger than {} MiB", MAX_FILE >> 20),
    )
}

#[cfg(test)]
mod tests {
    use super::super::mounts::Mount;
    use super::*;

    #[test]
    fn requests_are_served_on_the_host_only_beneath_a_mount() {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("proj");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(proj.join("a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("/etc", proj.join("etc")).unwrap();
        let ro = dir.path().join("ro");
        std::fs::create_dir_all(&ro).unwrap();
        let m = Mounts::new(vec![
            Mount {
                host: proj.clone(),
                guest: "/workspace".into(),
                read_only: false,
            },
            Mount {
                host: ro.clone(),
                guest: "/ro".into(),
                read_only: true,
            },
        ]);
        let p = |path: &str| json!({"sessionId": "s", "path": path, "content": "x"});
        let on_host = |r: Route| match r {
            Route::Host { root, rel } => (root.path().to_path_buf(), rel),
            other => panic!("{other:?}"),
        };
        let proj_real = proj.canonicalize().unwrap();
        assert_eq!(
            on_host(route(&p("/workspace/a.txt"), &m, false)),
            (proj_real.clone(), PathBuf::from("a.txt"))
        );
        assert_eq!(
            on_host(route(&p("/workspace/new.txt"), &m, true)),
            (proj_real, PathBuf::from("new.txt"))
        );
        assert_eq!(route(&p("/etc/passwd"), &m, false), Route::InBox);
        assert_eq!(route(&p("/workspace/etc/passwd"), &m, false), Route::InBox);
        assert_eq!(
            route(&p("/workspace/../etc/passwd"), &m, true),
            Route::InBox
        );
        assert_eq!(on_host(route(&p("/ro/x"), &m, false)).1, PathBuf::from("x"));
        assert!(
            matches!(route(&p("/ro/x"), &m, true), Route::Refused(_, msg) if msg.contains("read-only"))
        );
        assert!(matches!(
            route(&p("rel"), &m, true),
            Route::Refused(code::INVALID_PARAMS, _)
        ));
        assert!(matches!(
            route(&json!({}), &m, true),
            Route::Refused(code::INVALID_PARAMS, _)
        ));
    }

    /// A nested mount whose root the box swapped for a symlink (through
    /// the outer mount) after the proxy started, or before it.
    #[test]
    fn a_nested_mount_s_swapped_root_leads_nowhere() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("key"), "host secret").unwrap();
        let proj = dir.path().join("proj");
        std::fs::create_dir_all(proj.join("sub")).unwrap();
        std::fs::write(proj.join("sub/key"), "mine").unwrap();
        let mounts = || {
            Mounts::new(vec![
                Mount {
                    host: proj.clone(),
                    guest: "/proj".into(),
                    read_only: false,
                },
                Mount {
                    host: proj.join("sub"),
                    guest: "/sub".into(),
                    read_only: false,
                },
            ])
        };
        let m = mounts();
        std::fs::rename(proj.join("sub"), proj.join("moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), proj.join("sub")).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let p = json!({"path": "/sub/key", "content": "pwned"});
        let Route::Host { root, rel } = route(&p, &m, false) else {
            panic!("served on the host beneath the held root")
        };
        let read = rt
            .block_on(read_on_host(root.clone(), rel.clone(), &p))
            .unwrap();
        assert_eq!(
            read["content"], "mine",
            "the box's /sub, not the symlink's target"
        );
        rt.block_on(write_on_host(root, rel, &p)).unwrap();
        assert_eq!(
            std::fs::read(outside.path().join("key")).unwrap(),
            b"host secret"
        );
        assert_eq!(std::fs::read(proj.join("moved/key")).unwrap(), b"pwned");
        // Swapped before the proxy started: the inner root is opened
        // beneath the outer one, so the symlink is refused, and the inner
        // mount's paths are served in the box.
        let late = mounts();
        assert_eq!(route(&p, &late, false), Route::InBox);
        assert_eq!(route(&p, &late, true), Route::InBox);
    }

    #[test]
    fn line_and_limit_pick_lines() {
        let t = "1\n2\n3\n4";
        assert_eq!(lines(t, &json!({})), t);
        assert_eq!(lines(t, &json!({"line": 2, "limit": 2})), "2\n3\n");
        assert_eq!(lines(t, &json!({"line": 3})), "3\n4");
        assert_eq!(lines(t, &json!({"limit": 1})), "1\n");
        assert_eq!(lines(t, &json!({"line": 9})), "");
    }

    #[test]
    fn only_a_regular_file_is_read_from_an_archive() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, "f", &b"hello"[..]).unwrap();
        let tar = b.into_inner().unwrap();
        assert_eq!(only_file(&tar, "/f").unwrap(), b"hello");
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        b.append_data(&mut h, "d", &b""[..]).unwrap();
        let tar = b.into_inner().unwrap();
        assert!(
            only_file(&tar, "/d")
                .unwrap_err()
                .1
                .contains("not a regular file")
        );
        assert!(only_file(&[], "/x").is_err());
    }
}
