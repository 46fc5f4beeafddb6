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
    pub engine: Option<EngineChoice>,
    /// Exit after this many seconds with no client and no running box
    /// (0: never).
    pub idle_exit: Option<u64>,
    /// The most boxes this daemon holds at once; creates beyond it are
    /// refused (0: no limit).
    pub max_boxes: Option<usize>,
    /// The most client connections served at once.
    pub max_connections: Option<usize>,
    /// The most bytes one image may unpack to: a number of bytes, or a
    /// string such as `"32G"` (0: no limit).
    pub max_image_size: Option<Size>,
    /// The BoxLite engine on a BoxLite REST server (`[boxlite]`).
    pub boxlite: Option<BoxliteFile>,
    /// `boxctl mcp`'s policy (read and checked by boxctl, not the daemon).
    #[serde(default, skip_serializing)]
    pub mcp: Option<toml::Table>,
}

/// `[boxlite]`: where a remote BoxLite runtime is and the file with its
/// API key (never the key itself: a configuration file is no place for it).
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BoxliteFile {
    /// `https://HOST`, or plain `http://` to this host only (a loopback
    /// address or `localhost`; `BOXD_BOXLITE_INSECURE_HTTP=1` accepts
    /// another): `engine::boxlite::remote::Remote::new` decides.
    pub url: Option<String>,
    pub api_key_file: Option<PathBuf>,
}

/// Which engine runs boxes: one type from the flag, the environment and
/// the file on (an unknown word is refused where it is read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EngineChoice {
    /// The best engine this host can run.
    Auto,
    /// Linux namespaces under bubblewrap.
    Namespace,
    /// BoxLite microVMs.
    Boxlite,
}

/// A size in the file: a number of bytes, or a string with a binary unit
/// (`"512M"`, `"32G"`, `"32GiB"`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(n) => Ok(Size(n)),
            Raw::Text(s) => parse_size(&s).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// The default `max-image-size`: 32 GiB. Far above any image people run
/// (the Node test image unpacks to 272 MB, large CUDA images to 10-20 GB),
/// far below what fills a disk by surprise: a gzip layer of a few MiB can
/// expand to terabytes.
pub const DEFAULT_MAX_IMAGE_SIZE: u64 = 32 << 30;

/// Parses `1234`, `512K`, `512M`, `32G`, `1T` (binary units; `KiB`/`KB`
/// and lower case too).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| {
        format!("invalid size {text:?}: expected a number of bytes or e.g. 512M, 32G")
    })?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "invalid size {text:?}: the unit must be K, M, G or T"
            ));
        }
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("invalid size {text:?}: too large"))
}

/// A size for people: `32 GiB` when it is a whole number of a binary unit,
/// else bytes.
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
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
    pub engine: EngineChoice,
    pub idle_exit: u64,
    pub max_boxes: usize,
    pub max_connections: usize,
    /// Bytes; 0: no limit.
    pub max_image_size: u64,
    /// A BoxLite REST server to run boxes on (with the BoxLite engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boxlite_url: Option<String>,
    /// The file holding its API key (else `BOXD_BOXLITE_API_KEY`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boxlite_api_key_file: Option<PathBuf>,
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
        assert_eq!(file.engine, Some(EngineChoice::Namespace));
        assert_eq!(file.idle_exit, Some(300));
        assert_eq!(file.home, Some(PathBuf::from("/var/tmp/h")));

        std::fs::write(&f, "idle_exit = 3\n").unwrap();
        assert!(load(Some(&f)).unwrap_err().contains("unknown field"));
        std::fs::write(&f, "engine = \"vm\"\n").unwrap();
        let err = load(Some(&f)).unwrap_err();
        assert!(
            err.contains("unknown variant `vm`, expected one of `auto`, `namespace`, `boxlite`"),
            "{err}"
        );
        std::fs::write(&f, "engine = [\n").unwrap();
        assert!(
            load(Some(&f))
                .unwrap_err()
                .contains("invalid configuration")
        );
        assert!(load(Some(&dir.path().join("missing.toml"))).is_err());
    }

    #[test]
    fn sizes_parse_as_bytes_or_with_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1234"), Ok(1234));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert_eq!(parse_size("32G"), Ok(32 << 30));
        assert_eq!(parse_size("32 GiB"), Ok(32 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(format_size(32 << 30), "32 GiB");
        assert_eq!(format_size(16 << 20), "16 MiB");
        assert_eq!(format_size(1000), "1000 bytes");

        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("config.toml");
        std::fs::write(&f, "max-image-size = \"8G\"\n").unwrap();
        assert_eq!(
            load(Some(&f)).unwrap().0.max_image_size,
            Some(Size(8 << 30))
        );
        std::fs::write(&f, "max-image-size = 4096\n").unwrap();
        assert_eq!(load(Some(&f)).unwrap().0.max_image_size, Some(Size(4096)));
        std::fs::write(&f, "max-image-size = \"lots\"\n").unwrap();
        assert!(load(Some(&f)).unwrap_err().contains("invalid size"));
    }
}
