//! The `[mcp]` section of boxd's configuration file (the daemon's
//! `config.toml`, which the daemon leaves to boxctl), merged with the flags
//! of `boxctl mcp`: lists add up, a flag's number wins over the file's, a
//! permission given in either holds.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// What `[mcp]` may say; unknown keys are errors, as everywhere in the file.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Section {
    #[serde(default)]
    pub allow_mount: Vec<PathBuf>,
    #[serde(default)]
    pub allow_net: Vec<String>,
    #[serde(default)]
    pub allow_image: Vec<String>,
    #[serde(default)]
    pub allow_publish: bool,
    pub max_boxes: Option<usize>,
    /// As the flag: `"512m"`, `"2g"`.
    pub max_memory: Option<String>,
    pub max_cpus: Option<u32>,
    #[serde(default)]
    pub any_box: bool,
}

#[derive(Debug, Deserialize)]
struct File {
    #[serde(default)]
    mcp: Section,
}

/// The section of the file `explicit` names (or `BOXD_CONFIG`), else of the
/// default file if there is one; a named file that is missing, or a
/// malformed section, is an error.
pub fn load(explicit: Option<&Path>) -> Result<Section, String> {
    let named = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("BOXD_CONFIG").map(PathBuf::from));
    let path = match named {
        Some(p) => p,
        None => match directories::BaseDirs::new()
            .map(|d| d.config_dir().join("boxd").join("config.toml"))
        {
            Some(p) if p.is_file() => p,
            _ => return Ok(Section::default()),
        },
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the configuration {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("invalid configuration {}: {e}", path.display()))
}

fn parse(text: &str) -> Result<Section, String> {
    toml::from_str::<File>(text)
        .map(|f| f.mcp)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_beside_the_daemon_s_keys() {
        let s = parse(
            r#"
engine = "namespace"
idle-exit = 300
[mcp]
allow-mount = ["/home/me/proj"]
allow-net = ["registry.npmjs.org"]
max-boxes = 3
max-memory = "2g"
"#,
        )
        .unwrap();
        assert_eq!(s.allow_mount, vec![PathBuf::from("/home/me/proj")]);
        assert_eq!(s.allow_net, vec!["registry.npmjs.org".to_owned()]);
        assert_eq!(s.max_boxes, Some(3));
        assert_eq!(s.max_memory.as_deref(), Some("2g"));
        assert!(!s.any_box);
        assert_eq!(parse("engine = \"auto\"\n").unwrap(), Section::default());
    }

    #[test]
    fn a_typo_in_the_section_is_an_error() {
        let e = parse("[mcp]\nallow-mounts = [\"/x\"]\n").unwrap_err();
        assert!(e.contains("allow-mounts"), "{e}");
    }
}
