//! The tools for files in a box, and copies between a box and the host
//! paths the user allowed.

use base64::Engine as _;
use boxd_client::{Client, v1};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Answer, Boxes, DEFAULT_READ, MAX_READ, Output, output, refused, status};

#[derive(Debug, Deserialize, JsonSchema)]
struct ReadFile {
    #[serde(rename = "box")]
    box_name: String,
    /// Absolute path in the box.
    path: String,
    /// Bytes to skip first.
    #[serde(default)]
    offset: u64,
    /// Bytes to return at most (default 1 MiB, at most 16 MiB).
    max_bytes: Option<usize>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct FileContent {
    content: Output,
    /// The file's whole size.
    size: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct WriteFile {
    #[serde(rename = "box")]
    box_name: String,
    /// Absolute path in the box; its directory must exist. An existing
    /// file is replaced.
    path: String,
    content: String,
    /// `utf8` (default) or `base64`.
    encoding: Option<String>,
    /// Octal mode, default `644`.
    mode: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Written {
    bytes: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Copy {
    #[serde(rename = "box")]
    box_name: String,
    /// Absolute host path (only beneath what the user allowed).
    host_path: String,
    /// Absolute path in the box.
    box_path: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Copied {
    /// Bytes of the archive that crossed.
    archive_bytes: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct BoxPath {
    #[serde(rename = "box")]
    box_name: String,
    /// Absolute path in the box.
    path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Remove {
    #[serde(rename = "box")]
    box_name: String,
    /// Absolute path in the box.
    path: String,
    /// Remove a directory with everything in it.
    #[serde(default)]
    recursive: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Entry {
    name: String,
    /// `file`, `directory`, `symlink`, or another kind.
    kind: String,
    size: u64,
    /// Octal permission bits, e.g. `644`.
    mode: String,
    /// Unix seconds.
    modified: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Listing {
    entries: Vec<Entry>,
    /// Whether more entries were there than listed (at most 10000).
    truncated: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
struct PathDone {
    path: String,
}

/// The most entries `list_files` returns.
const MAX_ENTRIES: usize = 10_000;

/// Lists `$1` (or states `$1` alone when `$2` is `one`), a line per entry:
/// `KIND|SIZE|MODE|MTIME|NAME`, with the tools every image with a shell
/// has (busybox and GNU `stat` take the same format).
const STAT_SCRIPT: &str = r#"
fmt='%F|%s|%a|%Y|%n'
if [ "$2" = one ]; then exec stat -c "$fmt" -- "$1"; fi
cd -- "$1" || exit 2
for f in * .[!.]* ..?*; do
  if [ -e "$f" ] || [ -L "$f" ]; then stat -c "$fmt" -- "$f"; fi
done
"#;

fn entry(line: &str) -> Option<Entry> {
    let mut parts = line.splitn(5, '|');
    let kind = match parts.next()? {
        "regular file" | "regular empty file" => "file",
        "directory" => "directory",
        "symbolic link" => "symlink",
        other => other,
    };
    Some(Entry {
        kind: kind.to_owned(),
        size: parts.next()?.parse().ok()?,
        mode: parts.next()?.to_owned(),
        modified: parts.next()?.parse().ok()?,
        name: parts.next()?.to_owned(),
    })
}

impl Boxes {
    /// Runs `sh -c SCRIPT sh ARGS…` in the box as box root; its stdout, or
    /// its stderr as the error.
    async fn shell(&self, box_name: &str, script: &str, args: &[&str]) -> Result<String, String> {
        let mut client = self.client().await?;
        self.usable(&mut client, box_name).await?;
        let mut argv = vec!["-c".to_owned(), script.to_owned(), "sh".to_owned()];
        argv.extend(args.iter().map(|a| a.to_string()));
        let start = v1::ExecStart {
            box_name: box_name.to_owned(),
            command: "sh".into(),
            args: argv,
            timeout_ms: 60_000,
            user: "0".into(),
            ..Default::default()
        };
        let r = self.run_to_end(start, None, MAX_READ).await?;
        match r.exit_code {
            Some(0) => Ok(r.stdout.text),
            _ if r.exit_code == Some(127) => Err(format!(
                "the box has no shell to do this with ({})",
                r.error.unwrap_or_default()
            )),
            _ => Err(r.stderr.text.trim().to_owned()),
        }
    }
}

fn absolute(path: &str) -> Result<(), String> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(format!("{path}: give an absolute path in the box"))
    }
}

#[tool_router(router = file_tools, vis = "pub(super)")]
impl Boxes {
    #[tool(
        description = "Read a file in a box (a range of it: offset and max_bytes). Returns text, or base64 when it is not UTF-8, and the file's size."
    )]
    async fn read_file(&self, Parameters(req): Parameters<ReadFile>) -> Answer<FileContent> {
        let limit = req.max_bytes.unwrap_or(DEFAULT_READ).min(MAX_READ);
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let tar = copy_out_bytes(&mut client, &req.box_name, &req.path, req.offset, limit).await?;
        let (bytes, size) = tar;
        let truncated = req.offset + (bytes.len() as u64) < size;
        Ok(Json(FileContent {
            content: output(bytes, size, truncated),
            size,
        }))
    }

    #[tool(
        description = "Write a file in a box (replacing one that is there), from text or base64. Its directory must exist."
    )]
    async fn write_file(&self, Parameters(req): Parameters<WriteFile>) -> Answer<Written> {
        let data = match req.encoding.as_deref().unwrap_or("utf8") {
            "utf8" => req.content.into_bytes(),
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(req.content.as_bytes())
                .map_err(|e| format!("content is not base64: {e}"))?,
            other => return Err(format!("encoding {other:?}: use utf8 or base64")),
        };
        let mode = u32::from_str_radix(req.mode.as_deref().unwrap_or("644"), 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or("mode: an octal number such as 644")?;
        let path = std::path::Path::new(&req.path);
        let Some(file) = path.file_name().filter(|_| !req.path.ends_with('/')) else {
            return Err(format!("{}: not a file path", req.path));
        };
        if !path.is_absolute() {
            return Err(format!("{}: give an absolute path in the box", req.path));
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mtime(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        );
        let mut archive = tar::Builder::new(Vec::new());
        archive
            .append_data(&mut header, file, data.as_slice())
            .map_err(|e| e.to_string())?;
        let archive = archive.into_inner().map_err(|e| e.to_string())?;
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        boxd_client::copy::copy_in(
            &mut client,
            &req.box_name,
            boxd_client::copy::Source::Tar(Box::new(std::io::Cursor::new(archive))),
            // The file's own path, never its directory: unpacked at a
            // directory that does not exist, the one entry would become
            // that directory's name (docker cp's rule).
            &req.path,
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(Json(Written {
            bytes: data.len() as u64,
        }))
    }

    #[tool(
        description = "Copy a host file or directory into a box (as docker cp). The host path must be beneath a directory the user allowed."
    )]
    async fn copy_to_box(&self, Parameters(req): Parameters<Copy>) -> Answer<Copied> {
        let host = self.policy.host_path(&req.host_path).map_err(refused)?;
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let n = boxd_client::copy::copy_in(
            &mut client,
            &req.box_name,
            boxd_client::copy::Source::Beneath {
                root: host.root,
                rel: host.rel,
                contents: host.contents,
            },
            &req.box_path,
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(Json(Copied { archive_bytes: n }))
    }

    #[tool(
        description = "Copy a file or directory out of a box to the host (as docker cp). The host path must be beneath a directory the user allowed."
    )]
    async fn copy_from_box(&self, Parameters(req): Parameters<Copy>) -> Answer<Copied> {
        let host = self.policy.host_path(&req.host_path).map_err(refused)?;
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let n = boxd_client::copy::copy_out(
            &mut client,
            &req.box_name,
            &req.box_path,
            false,
            boxd_client::copy::Dest::Beneath {
                root: host.root,
                rel: host.rel,
            },
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(Json(Copied { archive_bytes: n }))
    }

    #[tool(
        description = "List a directory in a box: each entry's name, kind (file, directory, symlink), size, mode and modification time."
    )]
    async fn list_files(&self, Parameters(req): Parameters<BoxPath>) -> Answer<Listing> {
        absolute(&req.path)?;
        let text = self
            .shell(&req.box_name, STAT_SCRIPT, &[&req.path, "all"])
            .await?;
        let mut entries: Vec<Entry> = text.lines().filter_map(entry).collect();
        let truncated = entries.len() > MAX_ENTRIES;
        entries.truncate(MAX_ENTRIES);
        Ok(Json(Listing { entries, truncated }))
    }

    #[tool(description = "What a path in a box is: kind, size, mode and modification time.")]
    async fn stat_path(&self, Parameters(req): Parameters<BoxPath>) -> Answer<Entry> {
        absolute(&req.path)?;
        let text = self
            .shell(&req.box_name, STAT_SCRIPT, &[&req.path, "one"])
            .await?;
        text.lines()
            .find_map(entry)
            .map(Json)
            .ok_or_else(|| format!("{}: cannot tell what it is", req.path))
    }

    #[tool(description = "Make a directory in a box, with its parents.")]
    async fn make_dir(&self, Parameters(req): Parameters<BoxPath>) -> Answer<PathDone> {
        absolute(&req.path)?;
        self.shell(&req.box_name, r#"mkdir -p -- "$1""#, &[&req.path])
            .await?;
        Ok(Json(PathDone { path: req.path }))
    }

    #[tool(
        description = "Remove a file, a symlink or an empty directory in a box; with recursive, a directory with everything in it."
    )]
    async fn remove_path(&self, Parameters(req): Parameters<Remove>) -> Answer<PathDone> {
        absolute(&req.path)?;
        let script = if req.recursive {
            r#"[ -e "$1" ] || [ -L "$1" ] || { echo "$1: No such file or directory" >&2; exit 1; }; rm -rf -- "$1""#
        } else {
            r#"if [ -d "$1" ] && [ ! -L "$1" ]; then rmdir -- "$1"; else rm -- "$1"; fi"#
        };
        self.shell(&req.box_name, script, &[&req.path]).await?;
        Ok(Json(PathDone { path: req.path }))
    }
}

/// The bytes `offset..offset+limit` of the regular file `path` in the box,
/// and its size, from the copy-out archive of that one file, read as it
/// streams through a pipe: once the range is read the pipe closes, and the
/// copy (whose writes then fail) ends without the rest.
async fn copy_out_bytes(
    client: &mut Client,
    box_name: &str,
    path: &str,
    offset: u64,
    limit: usize,
) -> Result<(Vec<u8>, u64), String> {
    let (reader, writer) = std::io::pipe().map_err(|e| e.to_string())?;
    let read = tokio::task::spawn_blocking(move || -> Result<(Vec<u8>, u64), String> {
        use std::io::Read;
        let mut archive = tar::Archive::new(reader);
        let mut entries = archive.entries().map_err(|e| e.to_string())?;
        let mut entry = match entries.next() {
            Some(e) => e.map_err(|e| e.to_string())?,
            None => return Err("no such file".into()),
        };
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err("not a regular file (list a directory with list_files)".into());
        }
        let size = entry.size();
        std::io::copy(&mut entry.by_ref().take(offset), &mut std::io::sink())
            .map_err(|e| e.to_string())?;
        let mut bytes = Vec::new();
        entry
            .take(limit as u64)
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        Ok((bytes, size))
    });
    let copied = boxd_client::copy::copy_out(
        client,
        box_name,
        path,
        true,
        boxd_client::copy::Dest::Tar(Box::new(writer)),
        None,
    )
    .await;
    let read = read.await.map_err(|e| e.to_string())?;
    match (copied, read) {
        // boxd's refusal (no such file, say) says more than a short tar.
        (Err(boxd_client::copy::CopyError::Status(s)), _) => Err(status(s)),
        (_, read) => read,
    }
}
