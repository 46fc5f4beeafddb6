//! Settings: flags, then environment (`BOXD_*`), then the configuration
//! file, then defaults. The file is TOML at `$XDG_CONFIG_HOME/boxd/config.toml`
//! (`~/Library/Application Support/boxd/config.toml` on macOS), or the one
//! `--config` / `BOXD_CONFIG` names; a missing default file is no error, a
//! named one that is missing or malformed is. `boxd --print-config` shows
//! the merged result.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What the file may say. Unknown keys are errors, so a typo is not
/// silently ignored.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct File {
    pub socket: Option<PathBuf>,
    pub home: Option<PathBuf>,
    /// `auto`, `namespace` or `boxlite`.
    pub engine: Option<String>,
    /// Exit after this many seconds with no client and no running box
    /// (0: never).
    pub idle_exit: Option<u64>,
    /// The most boxes this daemon holds at once; creates beyond it are
    /// refused (0: no limit).
    pub max_boxes: Option<usize>,
}

/// The default `max-boxes`: generous for people, a wall for a runaway
/// script (each namespace box is a full copy of its image).
pub const DEFAULT_MAX_BOXES: usize = 1000;

/// The merged settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Settings {
    pub socket: PathBuf,
    pub home: PathBuf,
    pub engine: String,
    pub idle_exit: u64,
    pub max_boxes: usize,
    /// Where the file was read from, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_file: Option<PathBuf>,
}

/// The default file's path.
pub fn default_path() -> Option<PathBuf> {
    directories::BaseDirs::new().map(|d| d.config_dir().join("boxd").join("config.toml"))
}

/// Reads the file `explicit` names, else the default one if it exists.
pub fn load(explicit: Option<&Path>) -> Result<(File, Option<PathBuf>), String> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match default_path() {
            Some(p) if p.is_file() => p,
            _ => return Ok((File::default(), None)),
        },
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the configuration {}: {e}", path.display()))?;
    let file: File = toml::from_str(&text)
        .map_err(|e| format!("invalid configuration {}: {e}", path.display()))?;
    if let Some(engine) = &file.engine
        && !matches!(engine.as_str(), "auto" | "namespace" | "boxlite")
    {
        return Err(format!(
            "invalid configuration {}: engine must be auto, namespace or boxlite, not {engine:?}",
            path.display()
        ));
    }
    Ok((file, Some(path)))
}

impl Settings {
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("settings serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_known_keys_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("config.toml");
        std::fs::write(
            &f,
            "engine = \"namespace\"\nidle-exit = 300\nhome = \"/var/tmp/h\"\n",
        )
        .unwrap();
        let (file, from) = load(Some(&f)).unwrap();
        assert_eq!(from.as_deref(), Some(f.as_path()));
        assert_eq!(file.engine.as_deref(), Some("namespace"));
        assert_eq!(file.idle_exit, Some(300));
        assert_eq!(file.home, Some(PathBuf::from("/var/tmp/h")));

        std::fs::write(&f, "idle_exit = 3\n").unwrap();
        assert!(load(Some(&f)).unwrap_err().contains("unknown field"));
        std::fs::write(&f, "engine = \"vm\"\n").unwrap();
        assert!(load(Some(&f)).unwrap_err().contains("engine must be"));
        std::fs::write(&f, "engine = [\n").unwrap();
        assert!(
            load(Some(&f))
                .unwrap_err()
                .contains("invalid configuration")
        );
        assert!(load(Some(&dir.path().join("missing.toml"))).is_err());
    }
}
