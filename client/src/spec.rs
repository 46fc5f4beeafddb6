//! Box specs from command-line words, shared by `boxctl` and
//! `harness-box-exec` so that `--mount`, `--env`, `--secret`, `--publish`
//! and `--image` mean the same in both: each word is parsed here, and
//! [`SpecWords::parse`] is the one place a whole spec is made of them.

use std::collections::HashMap;
use std::path::Path;

use crate::boxes::BoxSpec;
use crate::v1;

/// A box spec as command-line words, before parsing.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpecWords<'a> {
    /// A registry reference or a local layout directory ([`image_arg`]).
    pub image: &'a str,
    pub cpus: Option<u32>,
    pub memory_mib: Option<u32>,
    pub disk_size_gb: Option<u32>,
    /// `HOST:GUEST[:ro]` ([`parse_mount`]).
    pub mounts: &'a [String],
    pub allow_net: &'a [String],
    /// `K=V` ([`parse_env`]).
    pub env: &'a [String],
    pub working_dir: Option<&'a str>,
    /// `NAME:HOSTS[@FILE]` ([`parse_secret`]).
    pub secrets: &'a [String],
    /// `[HOST_IP:]HOST_PORT:BOX_PORT[/tcp]` ([`parse_publish`]).
    pub publish: &'a [String],
    /// `keep-id[:uid=N[,gid=M]]` ([`parse_userns`]).
    pub userns: Option<&'a str>,
}

impl SpecWords<'_> {
    /// The spec these words describe, or the first word that is wrong.
    pub fn parse(&self) -> Result<BoxSpec, SpecError> {
        Ok(BoxSpec::new(image_arg(self.image))
            .cpus(self.cpus)
            .memory_mib(self.memory_mib)
            .disk_size_gb(self.disk_size_gb)
            .mounts(
                self.mounts
                    .iter()
                    .map(|m| parse_mount(m))
                    .collect::<Result<Vec<_>, _>>()?,
            )
            .allow_net(self.allow_net.iter().cloned())
            .envs(parse_env(self.env)?)
            .working_dir(self.working_dir.map(str::to_owned))
            .secrets(
                self.secrets
                    .iter()
                    .map(|s| parse_secret(s))
                    .collect::<Result<Vec<_>, _>>()?,
            )
            .ports(
                self.publish
                    .iter()
                    .map(|p| parse_publish(p))
                    .collect::<Result<Vec<_>, _>>()?,
            )
            .keep_id(self.userns.map(parse_userns).transpose()?))
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("invalid mount {0:?}: use HOST:GUEST[:ro]")]
    Mount(String),
    #[error("mount {path:?}: {reason}")]
    MountPath { path: String, reason: String },
    #[error("invalid environment variable {0:?}: use K=V")]
    Env(String),
    #[error(
        "invalid secret {0:?}: use NAME:HOST[,HOST...] (the value from $NAME) or NAME:HOST[,HOST...]@FILE"
    )]
    Secret(String),
    #[error("secret {name}: {reason}")]
    SecretValue { name: String, reason: String },
    #[error(
        "invalid published port {word:?}: {reason}; use [HOST_IP:]HOST_PORT:BOX_PORT[/tcp] (HOST_PORT 0 or empty: any free port)"
    )]
    Publish { word: String, reason: String },
    #[error("invalid --userns {word:?}: {reason}; use keep-id, or keep-id:uid=N[,gid=M] (1-65535)")]
    Userns { word: String, reason: String },
}

/// podman's `--userns` words that fit a box: `keep-id` (mounted
/// directories' owners become box user `uid`:`gid`, by default the ids of
/// whoever runs this, and that user is the box's default user), with
/// `:uid=N[,gid=M]` to choose (gid defaults to uid when only uid is given).
pub fn parse_userns(word: &str) -> Result<v1::KeepId, SpecError> {
    let bad = |reason: &str| SpecError::Userns {
        word: word.to_owned(),
        reason: reason.to_owned(),
    };
    let (mode, options) = word.split_once(':').unwrap_or((word, ""));
    if mode != "keep-id" {
        return Err(bad(
            "boxd knows keep-id only (a box always has a user namespace of its own)",
        ));
    }
    let (mut uid, mut gid) = (None, None);
    for option in options.split(',').filter(|o| !o.is_empty()) {
        let (key, value) = option
            .split_once('=')
            .ok_or_else(|| bad("an option is KEY=VALUE"))?;
        let n: u32 = value
            .parse()
            .ok()
            .filter(|n| (1..65_536).contains(n))
            .ok_or_else(|| bad("ids are 1-65535 (box root owns mounts without keep-id)"))?;
        match key {
            "uid" => uid = Some(n),
            "gid" => gid = Some(n),
            _ => return Err(bad("the options are uid and gid")),
        }
    }
    let (uid, gid) = match (uid, gid) {
        (Some(u), g) => (u, g.unwrap_or(u)),
        (None, g) => {
            // SAFETY: getuid/getgid cannot fail.
            let (me, my_gid) = unsafe { (libc::getuid(), libc::getgid()) };
            if me == 0 || me >= 65_536 {
                return Err(bad(&format!(
                    "keep-id alone keeps your uid ({me}), which is not a box user's; give uid=N"
                )));
            }
            (me, g.unwrap_or(if my_gid == 0 { me } else { my_gid }))
        }
    };
    if gid >= 65_536 {
        return Err(bad("ids are 1-65535"));
    }
    Ok(v1::KeepId { uid, gid })
}

/// A local OCI layout is an existing directory given as an absolute path or
/// one starting with `.`; it is sent as an absolute path. Anything else is a
/// registry reference.
pub fn image_arg(image: &str) -> String {
    let p = Path::new(image);
    if (p.is_absolute() || image.starts_with('.'))
        && p.is_dir()
        && let Ok(abs) = p.canonicalize()
    {
        return abs.to_string_lossy().into_owned();
    }
    image.to_owned()
}

/// `HOST:GUEST[:ro|:rw]`; the host side may be relative to the current directory.
pub fn parse_mount(s: &str) -> Result<v1::Mount, SpecError> {
    let parts: Vec<&str> = s.split(':').collect();
    let (host, guest, read_only) = match parts.as_slice() {
        [h, g] => (*h, *g, false),
        [h, g, "ro"] => (*h, *g, true),
        [h, g, "rw"] => (*h, *g, false),
        _ => return Err(SpecError::Mount(s.to_owned())),
    };
    if host.is_empty() || guest.is_empty() {
        return Err(SpecError::Mount(s.to_owned()));
    }
    let host = std::path::absolute(host).map_err(|e| SpecError::MountPath {
        path: host.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(v1::Mount {
        host_path: host.to_string_lossy().into_owned(),
        guest_path: guest.to_owned(),
        read_only,
    })
}

/// `--publish [HOST_IP:]HOST_PORT:BOX_PORT[/PROTO]`, or `BOX_PORT[/PROTO]`
/// alone (any free host port), as docker's `-p`. An IPv6 host address goes
/// in brackets (`[::1]:8080:80`); an empty or 0 host port means any free
/// port. The host address (default 127.0.0.1), the protocol (only TCP is
/// relayed) and the ranges are checked again by boxd.
pub fn parse_publish(word: &str) -> Result<v1::PortMapping, SpecError> {
    let bad = |reason: &str| SpecError::Publish {
        word: word.to_owned(),
        reason: reason.to_owned(),
    };
    let (rest, protocol) = match word.rsplit_once('/') {
        Some((r, p)) if !p.is_empty() => (r, p.to_ascii_lowercase()),
        Some(_) => return Err(bad("the protocol after '/' is empty")),
        None => (word, String::new()),
    };
    let (host_ip, ports) = match rest.strip_prefix('[') {
        Some(v6) => {
            let (ip, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address opened with '[' is not closed"))?;
            let ports = after
                .strip_prefix(':')
                .ok_or_else(|| bad("a host port must follow the host address"))?;
            (ip.to_owned(), ports)
        }
        None => match rest.matches(':').count() {
            0 | 1 => (String::new(), rest),
            2 => {
                let (ip, ports) = rest.split_once(':').expect("two colons");
                if ip.is_empty() {
                    return Err(bad("the host address before ':' is empty"));
                }
                (ip.to_owned(), ports)
            }
            _ => return Err(bad("too many ':' (put an IPv6 address in brackets)")),
        },
    };
    let number = |what: &str, s: &str| -> Result<u16, SpecError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(&format!("{what} {s:?} is not a number")));
        }
        s.parse::<u16>()
            .map_err(|_| bad(&format!("{what} {s} is out of range (at most 65535)")))
    };
    let (host_port, box_port) = match ports.split_once(':') {
        Some(("", b)) => (0, number("box port", b)?),
        Some((h, b)) => (number("host port", h)?, number("box port", b)?),
        None => (0, number("box port", ports)?),
    };
    if box_port == 0 {
        return Err(bad("the box port must be 1 to 65535"));
    }
    Ok(v1::PortMapping {
        host_ip,
        host_port: host_port.into(),
        box_port: box_port.into(),
        protocol,
    })
}

/// `K=V` words; the value may contain `=` or be empty.
pub fn parse_env(vars: &[String]) -> Result<HashMap<String, String>, SpecError> {
    vars.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(SpecError::Env(kv.clone())),
        })
        .collect()
}

/// `NAME:HOST[,HOST...]`, the value read from this process's environment
/// variable `NAME`, or `NAME:HOST[,HOST...]@FILE`, the value read from the
/// file (one trailing newline dropped). The value is read here, on the
/// client, and handed to boxd, which keeps it out of the box.
pub fn parse_secret(s: &str) -> Result<v1::Secret, SpecError> {
    parse_secret_with(s, |name| std::env::var(name).ok())
}

fn parse_secret_with(
    s: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<v1::Secret, SpecError> {
    let bad = || SpecError::Secret(s.to_owned());
    let (name, rest) = s.split_once(':').ok_or_else(bad)?;
    let (hosts, file) = match rest.rsplit_once('@') {
        Some((h, f)) => (h, Some(f)),
        None => (rest, None),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect();
    if name.is_empty() || hosts.is_empty() || file == Some("") {
        return Err(bad());
    }
    let value_err = |reason: String| SpecError::SecretValue {
        name: name.to_owned(),
        reason,
    };
    let value = match file {
        Some(f) => {
            let mut v = std::fs::read_to_string(f).map_err(|e| value_err(format!("{f}: {e}")))?;
            if v.ends_with('\n') {
                v.pop();
                if v.ends_with('\r') {
                    v.pop();
                }
            }
            v
        }
        None => env(name).ok_or_else(|| {
            value_err(format!(
                "${name} is not set in this environment (or give the value in a file: {name}:HOSTS@FILE)"
            ))
        })?,
    };
    if value.is_empty() {
        return Err(value_err("the value is empty".into()));
    }
    Ok(v1::Secret {
        name: name.to_owned(),
        hosts,
        placeholder: String::new(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_parse() {
        let env = |n: &str| (n == "API_KEY").then(|| "k-123".to_owned());
        let s = parse_secret_with("API_KEY:api.example.com,*.example.org", env).unwrap();
        assert_eq!(s.name, "API_KEY");
        assert_eq!(s.hosts, ["api.example.com", "*.example.org"]);
        assert_eq!(s.value, "k-123");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("key");
        std::fs::write(&f, "from-file\n").unwrap();
        let s = parse_secret_with(&format!("TOKEN:h.example@{}", f.display()), env).unwrap();
        assert_eq!(s.value, "from-file");
        for bad in ["NOCOLON", ":h", "N:", "N:h@"] {
            assert_eq!(
                parse_secret_with(bad, env),
                Err(SpecError::Secret(bad.into())),
                "{bad}"
            );
        }
        let missing = parse_secret_with("OTHER:h", env).unwrap_err().to_string();
        assert!(missing.contains("$OTHER is not set"), "{missing}");
    }

    #[test]
    fn mounts_parse() {
        let m = parse_mount("/a:/b:ro").unwrap();
        assert_eq!(
            (m.host_path.as_str(), m.guest_path.as_str(), m.read_only),
            ("/a", "/b", true)
        );
        assert!(!parse_mount("/a:/b").unwrap().read_only);
        for bad in ["/a", "/a:/b:rx", ":/b", "/a:", "a:b:c:d"] {
            assert!(parse_mount(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn userns_words_parse() {
        let k = |w: &str| parse_userns(w).map(|k| (k.uid, k.gid));
        assert_eq!(k("keep-id:uid=1000,gid=1001"), Ok((1000, 1001)));
        assert_eq!(k("keep-id:uid=200"), Ok((200, 200)));
        assert_eq!(k("keep-id:gid=5,uid=7"), Ok((7, 5)));
        // SAFETY: getuid cannot fail.
        if unsafe { libc::getuid() } == 0 {
            assert!(k("keep-id").unwrap_err().to_string().contains("give uid=N"));
        }
        for (bad, why) in [
            ("host", "keep-id only"),
            ("keep-id:uid=0", "1-65535"),
            ("keep-id:uid=70000", "1-65535"),
            ("keep-id:uid=x", "1-65535"),
            ("keep-id:size=3", "uid and gid"),
            ("keep-id:uid", "KEY=VALUE"),
        ] {
            let e = parse_userns(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn published_ports_parse() {
        let p = |w: &str| {
            let m = parse_publish(w).unwrap();
            (m.host_ip, m.host_port, m.box_port, m.protocol)
        };
        assert_eq!(p("8080:80"), ("".into(), 8080, 80, "".into()));
        assert_eq!(
            p("127.0.0.1:0:8000"),
            ("127.0.0.1".into(), 0, 8000, "".into())
        );
        assert_eq!(
            p("0.0.0.0:8080:80/tcp"),
            ("0.0.0.0".into(), 8080, 80, "tcp".into())
        );
        assert_eq!(
            p("[::1]:8080:80/TCP"),
            ("::1".into(), 8080, 80, "tcp".into())
        );
        assert_eq!(p("[::]::80"), ("::".into(), 0, 80, "".into()));
        assert_eq!(p("8000"), ("".into(), 0, 8000, "".into()));
        // The protocol is boxd's to refuse (with the reason).
        assert_eq!(p("80/udp").3, "udp");
        for (bad, why) in [
            ("70000:80", "out of range"),
            ("80:70000", "out of range"),
            ("abc", "not a number"),
            ("", "not a number"),
            ("8080:", "not a number"),
            ("-1:80", "not a number"),
            ("8080:0", "1 to 65535"),
            ("1:2:3:4", "too many ':'"),
            (":8080:80", "host address"),
            ("[::1:8080:80", "not closed"),
            ("[::1]8080:80", "must follow"),
            ("8080:80/", "protocol"),
        ] {
            let e = parse_publish(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(e.contains("HOST_PORT:BOX_PORT"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn env_parses() {
        let e = parse_env(&["A=1".into(), "B=x=y".into(), "C=".into()]).unwrap();
        assert_eq!(e["B"], "x=y");
        assert_eq!(e["C"], "");
        assert!(parse_env(&["=v".into()]).is_err());
        assert!(parse_env(&["novalue".into()]).is_err());
    }

    #[test]
    fn words_make_a_whole_spec() {
        let words = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (mounts, env, publish) = (words(&["/a:/b:ro"]), words(&["K=V"]), words(&["8080:80"]));
        let allow = words(&["example.com"]);
        let spec = SpecWords {
            image: "alpine:3.20",
            cpus: Some(1),
            mounts: &mounts,
            env: &env,
            allow_net: &allow,
            working_dir: Some("/w"),
            publish: &publish,
            ..Default::default()
        }
        .parse()
        .unwrap()
        .build();
        assert_eq!(spec.image, "alpine:3.20");
        assert_eq!(spec.cpus, Some(1));
        assert!(spec.mounts[0].read_only);
        assert_eq!(spec.env["K"], "V");
        assert_eq!(spec.allow_net, ["example.com"]);
        assert_eq!(spec.working_dir, "/w");
        assert_eq!(spec.ports[0].host_port, 8080);
        let bad = words(&["nonsense"]);
        let e = SpecWords {
            image: "x",
            mounts: &bad,
            ..Default::default()
        }
        .parse()
        .unwrap_err();
        assert_eq!(e, SpecError::Mount("nonsense".into()));
    }

    #[test]
    fn registry_refs_stay_as_they_are() {
        assert_eq!(image_arg("alpine:3.20"), "alpine:3.20");
        assert_eq!(image_arg("./does-not-exist"), "./does-not-exist");
    }
}
