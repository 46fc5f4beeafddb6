//! The words docker users type, parsed: sizes (`512m`), CPU counts
//! (`0.5`), `-e VAR` and `--env-file`, generated box names, and the
//! "did you mean" of a mistyped name.

use std::collections::HashMap;
use std::path::Path;

/// A size as docker's `--memory` takes it (`512m`, `1g`, `1.5g`, `2048k`,
/// `1073741824` bytes), in MiB rounded up.
pub fn memory_mib(word: &str) -> Result<u32, String> {
    let w = word.trim().to_ascii_lowercase();
    // `512mb` is `512m`, `100b` is 100 bytes.
    let w = w.strip_suffix('b').unwrap_or(&w).to_owned();
    let (num, unit) = match w.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&w[..i], &w[i..]),
        None => (w.as_str(), ""),
    };
    let bytes_per: f64 = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        "t" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "invalid size {word:?}: use a number with b, k, m or g (512m, 2g)"
            ));
        }
    };
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n > 0.0)
        .ok_or_else(|| {
            format!("invalid size {word:?}: use a number with b, k, m or g (512m, 2g)")
        })?;
    let mib = (n * bytes_per / (1024.0 * 1024.0)).ceil();
    if mib > f64::from(u32::MAX) {
        return Err(format!("size {word:?} is too large"));
    }
    Ok(mib.max(1.0) as u32)
}

/// `--cpus` as docker takes it (`2`, `0.5`, `1.5`). boxd limits whole
/// CPUs: a fraction is rounded up, and the second value says so.
pub fn cpus(word: &str) -> Result<(u32, Option<String>), String> {
    let n: f64 = word
        .trim()
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n > 0.0 && *n <= 1024.0)
        .ok_or_else(|| format!("invalid --cpus {word:?}: use a number of CPUs such as 2 or 0.5"))?;
    let whole = n.ceil() as u32;
    let note = (f64::from(whole) != n)
        .then(|| format!("boxd limits whole CPUs: --cpus {word} gives the box {whole}"));
    Ok((whole, note))
}

/// `-e` words as docker reads them: `K=V`, or `K` alone for this
/// environment's value (left out when it has none).
pub fn env_words(words: &[String], host: impl Fn(&str) -> Option<String>) -> Vec<String> {
    words
        .iter()
        .filter_map(|w| {
            if w.contains('=') {
                Some(w.clone())
            } else {
                host(w).map(|v| format!("{w}={v}"))
            }
        })
        .collect()
}

/// An `--env-file`: one `K=V` or `K` per line; blank lines and `#`
/// comments skipped (docker's format: no quotes are removed).
pub fn env_file(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read env file {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .map(|l| l.trim_start())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

/// All `-e` and `--env-file` words of a command, resolved, files first
/// (docker's order: `-e` wins).
pub fn env(files: &[std::path::PathBuf], words: &[String]) -> Result<Vec<String>, String> {
    let mut all = Vec::new();
    for f in files {
        all.extend(env_file(f)?);
    }
    all.extend(words.iter().cloned());
    Ok(env_words(&all, |k| std::env::var(k).ok()))
}

const ADJECTIVES: &[&str] = &[
    "brave", "calm", "eager", "fancy", "gentle", "happy", "jolly", "keen", "lucid", "merry",
    "nimble", "proud", "quiet", "rapid", "sharp", "swift", "tidy", "vivid", "witty", "zesty",
];
const NOUNS: &[&str] = &[
    "babbage", "curie", "darwin", "euler", "fermat", "gauss", "hopper", "kepler", "lovelace",
    "meitner", "newton", "noether", "pascal", "ritchie", "shannon", "tesla", "turing", "wozniak",
];

/// A name for a box the user did not name, as docker makes one
/// (`quiet_turing`), with a short suffix so that two rarely meet.
/// docker's `--since`/`--until` words, as Unix ms: a duration back from
/// `now_ms` (`10m`, `1h30m`, `2days`), an RFC 3339 time
/// (`2026-12-02T13:40:00Z`, fractions and no zone allowed: UTC), or Unix
/// seconds (`1764683000`, `1764683000.5`).
pub fn since_ms(word: &str, now_ms: i64) -> Result<i64, String> {
    let word = word.trim();
    if let Ok(secs) = word.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Ok((secs * 1000.0) as i64);
    }
    if let Ok(d) = humantime::parse_duration(word) {
        return Ok(now_ms.saturating_sub(d.as_millis().min(i64::MAX as u128) as i64));
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(word) {
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        return Ok(ms);
    }
    Err(format!(
        "{word:?} is not a time: give a duration back from now (10m, 1h30m), an RFC 3339 time (2026-12-02T13:40:00Z) or Unix seconds"
    ))
}

/// A Unix ms time as RFC 3339 UTC with milliseconds, as docker prints it.
pub fn rfc3339_ms(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

pub fn generated_name() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    format!(
        "{}_{}_{:04x}",
        ADJECTIVES[rng.random_range(0..ADJECTIVES.len())],
        NOUNS[rng.random_range(0..NOUNS.len())],
        rng.random::<u16>()
    )
}

/// The known name closest to `wanted`, when one is close enough to be a
/// typo of it.
pub fn did_you_mean<'a>(wanted: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::osa_distance(wanted, k), k))
        .filter(|(d, k)| *d <= 2.max(wanted.len() / 3) && *d < k.len().max(wanted.len()))
        .min()
        .map(|(_, k)| k)
}

/// `K=V` words as a map (for lookups in tests and `--env-file` checks).
#[allow(dead_code)]
pub fn env_map(words: &[String]) -> HashMap<String, String> {
    words
        .iter()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_words_are_docker_s() {
        let now = 1_764_683_000_000;
        assert_eq!(since_ms("10m", now), Ok(now - 600_000));
        assert_eq!(since_ms("1h 30m", now), Ok(now - 5_400_000));
        assert_eq!(since_ms("1764683000", now), Ok(1_764_683_000_000));
        assert_eq!(since_ms("1764683000.5", now), Ok(1_764_683_000_500));
        assert_eq!(since_ms("2025-12-02T13:43:20Z", now), Ok(1_764_683_000_000));
        assert_eq!(
            since_ms("2025-12-02T13:43:20.250Z", now),
            Ok(1_764_683_000_250)
        );
        for bad in ["", "yesterday", "-5", "10 parsecs"] {
            assert!(
                since_ms(bad, now).unwrap_err().contains("not a time"),
                "{bad}"
            );
        }
        assert_eq!(rfc3339_ms(1_764_683_000_250), "2025-12-02T13:43:20.250Z");
    }

    #[test]
    fn memory_sizes_read_as_docker_reads_them() {
        assert_eq!(memory_mib("512m"), Ok(512));
        assert_eq!(memory_mib("512M"), Ok(512));
        assert_eq!(memory_mib("512mb"), Ok(512));
        assert_eq!(memory_mib("1g"), Ok(1024));
        assert_eq!(memory_mib("1.5g"), Ok(1536));
        assert_eq!(memory_mib("2048k"), Ok(2));
        assert_eq!(memory_mib("1073741824"), Ok(1024));
        assert_eq!(memory_mib("100"), Ok(1), "rounded up");
        for bad in [
            "",
            "m",
            "-1m",
            "0",
            "1x",
            "1.2.3m",
            "nan",
            "inf",
            "99999999t",
        ] {
            assert!(memory_mib(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cpus_round_up_and_say_so() {
        assert_eq!(cpus("2"), Ok((2, None)));
        let (n, note) = cpus("0.5").unwrap();
        assert_eq!(n, 1);
        assert!(note.unwrap().contains("whole CPUs"));
        for bad in ["0", "-1", "x", "", "nan", "1e9"] {
            assert!(cpus(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn env_words_take_host_values_and_skip_unset_ones() {
        let host = |k: &str| (k == "HOSTVAR").then(|| "from-host".to_owned());
        let words: Vec<String> = ["A=1", "HOSTVAR", "UNSET", "B=x=y"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            env_words(&words, host),
            ["A=1", "HOSTVAR=from-host", "B=x=y"]
        );
    }

    #[test]
    fn env_files_skip_comments_and_blank_lines() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("env");
        std::fs::write(&f, "# comment\n\nA=1\n  B=two words\nC=\"quoted\"\n").unwrap();
        let m = env_map(&env(std::slice::from_ref(&f), &["A=override".into()]).unwrap());
        assert_eq!(m["A"], "override");
        assert_eq!(m["B"], "two words");
        assert_eq!(m["C"], "\"quoted\"");
        assert!(
            env(&[dir.path().join("missing")], &[])
                .unwrap_err()
                .contains("cannot read")
        );
    }

    #[test]
    fn generated_names_are_valid_box_names() {
        for _ in 0..100 {
            let n = generated_name();
            assert!(n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        }
    }

    #[test]
    fn typos_find_their_box() {
        let known = ["web", "precious", "database"];
        assert_eq!(did_you_mean("preciuos", known), Some("precious"));
        assert_eq!(did_you_mean("databse", known), Some("database"));
        assert_eq!(did_you_mean("zzzzzzzz", known), None);
        assert_eq!(
            did_you_mean("x", ["y"]),
            None,
            "one letter is no typo of another"
        );
    }
}
