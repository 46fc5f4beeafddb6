//! What every engine's box archive shares: a tar whose first entry is
//! `boxd-box.json`, a manifest naming the format, the engine that wrote it,
//! the box's spec without any secret's value, and the image's digest. The
//! rest is the engine's own (see `namespace/archive/`, `boxlite/snapshots.rs`).

use std::io::Read;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::model::BoxSpec;

/// The archive format this boxd writes and reads.
pub const FORMAT: u32 = 1;
/// The first entry of every archive.
pub const MANIFEST: &str = "boxd-box.json";
/// The most bytes a manifest may have.
const MAX_MANIFEST: u64 = 1 << 20;

/// An archive that cannot be used, and why.
pub fn bad(what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("not a usable box archive: {what}"))
}

/// `spec` with every secret's value emptied: a value never leaves boxd.
pub fn secret_free(spec: &BoxSpec) -> BoxSpec {
    let mut spec = spec.clone();
    for s in &mut spec.secrets {
        s.value.clear();
    }
    spec
}

/// The fields every manifest has.
#[derive(Deserialize)]
struct Head {
    format: u32,
    engine: String,
}

/// Reads the manifest (the archive's first entry, at most 1 MiB) and
/// checks that it is of this format and was written by `engine`.
pub fn manifest<R: Read, T: serde::de::DeserializeOwned>(
    entries: &mut tar::Entries<'_, R>,
    engine: &str,
) -> Result<T> {
    let mut first = entries
        .next()
        .ok_or_else(|| bad("it is empty"))?
        .map_err(bad)?;
    if first.path_bytes().as_ref() != MANIFEST.as_bytes() {
        return Err(bad(format!("its first entry is not {MANIFEST}")));
    }
    if first.size() > MAX_MANIFEST {
        return Err(bad(format!("{MANIFEST} is larger than 1 MiB")));
    }
    let mut text = Vec::new();
    (&mut first)
        .take(MAX_MANIFEST)
        .read_to_end(&mut text)
        .map_err(bad)?;
    let head: Head = serde_json::from_slice(&text).map_err(|e| bad(format!("{MANIFEST}: {e}")))?;
    if head.format != FORMAT {
        return Err(bad(format!(
            "format {} (this boxd reads format {FORMAT})",
            head.format
        )));
    }
    if head.engine != engine {
        return Err(Error::FailedPrecondition(format!(
            "the archive holds a box of the {} engine; this boxd runs the {engine} engine",
            head.engine
        )));
    }
    serde_json::from_slice(&text).map_err(|e| bad(format!("{MANIFEST}: {e}")))
}
