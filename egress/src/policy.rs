//! What a box may reach and which secrets it may use there: the allow-list
//! and the secret placeholders.
//!
//! An [`AllowList`] entry is one of
//!
//! - an exact host name, `api.example.com` (ASCII, case-insensitive, a
//!   trailing dot ignored; internationalized names in punycode, `xn--…`);
//! - a wildcard, `*.example.com`: any name strictly below `example.com`, at
//!   any depth (`a.example.com`, `a.b.example.com`), never `example.com`
//!   itself;
//! - an IP address, `10.1.2.3`, `::1` or `[::1]`;
//! - a CIDR block, `10.0.0.0/8` (IPv6 blocks such as `fd00::/8` work too).
//!
//! Entries carry no port and no scheme: every port of an allowed host is
//! allowed. **Invariants:** a name a request uses matches name and wildcard
//! entries only, an IP literal matches address and CIDR entries only; nothing
//! is resolved here, so an allowed *name* that resolves to an internal
//! address (DNS rebinding, or simply a hostile zone) is reached: that is not
//! defended against. A name whose last label is numeric (`127.1`, `0x7f.1`,
//! `010.0.0.1`) is neither a name nor an address here and matches nothing,
//! because the system resolver would read it as an IPv4 address.
//!
//! A [`Secret`]'s value never appears in `Debug`, `Display` or a log line;
//! the box only ever sees its placeholder. Secrets are matched against the
//! host a request names, with the same rules as the allow-list.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

/// Why an allow-list entry or a secret was refused. Each message quotes the
/// offending entry and says how to write it instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("an allow-net entry is empty")]
    Empty,
    #[error("allow-net entry {0:?}: whitespace is not allowed in an entry")]
    Whitespace(String),
    #[error(
        "allow-net entry {0:?}: ports are not part of an entry; write the host alone \
         (every port of an allowed host is allowed)"
    )]
    Port(String),
    #[error("allow-net entry {0:?}: write a host name, not a URL (no scheme such as https://)")]
    Scheme(String),
    #[error(
        "allow-net entry {0:?}: a wildcard is `*.` followed by a domain, as in *.example.com \
         (`*` alone, or a `*` anywhere else, is not allowed)"
    )]
    Wildcard(String),
    #[error(
        "allow-net entry {entry:?}: invalid character {ch:?} (host names are ASCII letters, \
         digits, '-', '_' and '.'; write internationalized names in punycode, xn--…)"
    )]
    Character { entry: String, ch: char },
    #[error("allow-net entry {0:?}: empty label (a leading dot, or two dots in a row)")]
    EmptyLabel(String),
    #[error("allow-net entry {0:?}: a label may not start or end with '-'")]
    Hyphen(String),
    #[error("allow-net entry {0:?}: a label (the part between dots) is longer than 63 characters")]
    LabelTooLong(String),
    #[error("allow-net entry {0:?}: a host name is longer than 253 characters")]
    NameTooLong(String),
    #[error(
        "allow-net entry {0:?}: looks like a numeric IPv4 address but is not a dotted quad; \
         write it as a.b.c.d"
    )]
    NumericName(String),
    #[error("allow-net entry {0:?}: not a valid IPv6 address")]
    Ipv6(String),
    #[error("allow-net entry {entry:?}: bad CIDR block: {why}")]
    Cidr { entry: String, why: String },
    #[error("secret {0:?}: the placeholder is empty")]
    EmptyPlaceholder(String),
    #[error(
        "secret {0:?}: the value contains a line break or NUL, which could forge request \
         headers where it is substituted"
    )]
    UnsafeValue(String),
    #[error("secret {secret:?}: {source}")]
    SecretHost {
        secret: String,
        source: Box<PolicyError>,
    },
}

/// One parsed entry: what it matches, and how it is shown back to the user.
#[derive(Debug, Clone)]
struct Entry {
    /// Normalized: lower case, no trailing dot, IPv6 without brackets.
    shown: String,
    pattern: Pattern,
}

#[derive(Debug, Clone)]
enum Pattern {
    /// An exact name, normalized.
    Name(String),
    /// `*.suffix`, stored as `.suffix` so that a plain `ends_with` requires
    /// at least one label in front.
    Below(String),
    /// An address (a /32 or /128) or a CIDR block, host bits zero.
    Net(IpAddr, u8),
}

/// The hosts a box may reach (see the module docs for the entry syntax).
#[derive(Debug, Clone, Default)]
pub struct AllowList {
    entries: Vec<Entry>,
}

impl AllowList {
    /// Parses every entry; the first bad one is the error.
    pub fn parse(entries: &[String]) -> Result<AllowList, PolicyError> {
        let entries = entries
            .iter()
            .map(|e| parse_entry(e))
            .collect::<Result<_, _>>()?;
        Ok(AllowList { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a request may go to `host`: a name, or an IP literal (IPv6
    /// possibly in brackets), as the request wrote it. A host that is
    /// neither a valid name nor an address is never allowed.
    pub fn allows(&self, host: &str) -> bool {
        match Host::parse(host) {
            Some(Host::Ip(ip)) => self.entries.iter().any(|e| match e.pattern {
                Pattern::Net(net, prefix) => in_net(ip, net, prefix),
                _ => false,
            }),
            Some(Host::Name(name)) => self.entries.iter().any(|e| match &e.pattern {
                Pattern::Name(n) => *n == name,
                Pattern::Below(suffix) => name.ends_with(suffix.as_str()),
                Pattern::Net(..) => false,
            }),
            None => false,
        }
    }
}

/// The entries, normalized, separated by `, ` (`(none)` when empty): the
/// form the refusal message shows.
impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("(none)");
        }
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(&e.shown)?;
        }
        Ok(())
    }
}

/// What a request names, normalized for matching.
enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Host {
    fn parse(host: &str) -> Option<Host> {
        if let Some(inner) = host.strip_prefix('[') {
            let inner = inner.strip_suffix(']')?;
            let ip = inner.parse::<std::net::Ipv6Addr>().ok()?;
            return Some(Host::Ip(ip.to_canonical()));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(Host::Ip(ip.to_canonical()));
        }
        normalize_name(host).ok().map(Host::Name)
    }
}

fn parse_entry(raw: &str) -> Result<Entry, PolicyError> {
    let owned = || raw.to_owned();
    if raw.is_empty() {
        return Err(PolicyError::Empty);
    }
    if raw.chars().any(char::is_whitespace) {
        return Err(PolicyError::Whitespace(owned()));
    }
    if raw.contains("://") {
        return Err(PolicyError::Scheme(owned()));
    }
    if let Some(inner) = raw.strip_prefix('[') {
        let Some((addr, after)) = inner.split_once(']') else {
            return Err(PolicyError::Ipv6(owned()));
        };
        if !after.is_empty() {
            return Err(if after.starts_with(':') {
                PolicyError::Port(owned())
            } else {
                PolicyError::Ipv6(owned())
            });
        }
        let ip: std::net::Ipv6Addr = addr.parse().map_err(|_| PolicyError::Ipv6(owned()))?;
        return Ok(net_entry(IpAddr::V6(ip).to_canonical(), None));
    }
    if let Some((addr, prefix)) = raw.split_once('/') {
        return parse_cidr(raw, addr, prefix);
    }
    if let Ok(ip) = raw.parse::<IpAddr>() {
        return Ok(net_entry(ip.to_canonical(), None));
    }
    let colons = raw.matches(':').count();
    if colons > 1 {
        return Err(PolicyError::Ipv6(owned()));
    }
    if let Some((_, port)) = raw.split_once(':')
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(PolicyError::Port(owned()));
    }
    if let Some(suffix) = raw.strip_prefix("*.") {
        if suffix.is_empty() || suffix.contains('*') {
            return Err(PolicyError::Wildcard(owned()));
        }
        let suffix = validate_name(raw, suffix)?;
        return Ok(Entry {
            shown: format!("*.{suffix}"),
            pattern: Pattern::Below(format!(".{suffix}")),
        });
    }
    if raw.contains('*') {
        return Err(PolicyError::Wildcard(owned()));
    }
    let name = validate_name(raw, raw)?;
    Ok(Entry {
        shown: name.clone(),
        pattern: Pattern::Name(name),
    })
}

fn parse_cidr(raw: &str, addr: &str, prefix: &str) -> Result<Entry, PolicyError> {
    let bad = |why: &str| PolicyError::Cidr {
        entry: raw.to_owned(),
        why: why.to_owned(),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| bad("the part before '/' must be an IP address, as in 10.0.0.0/8"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix: u8 = if !prefix.is_empty() && prefix.bytes().all(|b| b.is_ascii_digit()) {
        prefix.parse().unwrap_or(u8::MAX)
    } else {
        return Err(bad("the prefix after '/' must be a number"));
    };
    if prefix > max {
        return Err(bad(&format!("the prefix must be at most {max}")));
    }
    let masked = mask(ip, prefix);
    if masked != ip {
        return Err(bad(&format!(
            "host bits are set; did you mean {masked}/{prefix}?"
        )));
    }
    Ok(net_entry(ip, Some(prefix)))
}

fn net_entry(ip: IpAddr, prefix: Option<u8>) -> Entry {
    let full = if ip.is_ipv4() { 32 } else { 128 };
    Entry {
        shown: match prefix {
            Some(p) => format!("{ip}/{p}"),
            None => ip.to_string(),
        },
        pattern: Pattern::Net(ip, prefix.unwrap_or(full)),
    }
}

/// `ip` with every bit past `prefix` cleared.
fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((v4.to_bits() & m).into())
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((v6.to_bits() & m).into())
        }
    }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    ip.is_ipv4() == net.is_ipv4() && mask(ip, prefix) == net
}

/// A host name, checked and normalized (lower case, trailing dot dropped);
/// errors quote `entry`, the whole entry the name came from.
fn validate_name(entry: &str, name: &str) -> Result<String, PolicyError> {
    let owned = || entry.to_owned();
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.len() > 253 {
        return Err(PolicyError::NameTooLong(owned()));
    }
    if let Some(ch) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(PolicyError::Character { entry: owned(), ch });
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(PolicyError::EmptyLabel(owned()));
        }
        if label.len() > 63 {
            return Err(PolicyError::LabelTooLong(owned()));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(PolicyError::Hyphen(owned()));
        }
    }
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    // inet_aton (behind getaddrinfo) reads each part with strtoul base 0:
    // decimal, octal or 0x-hex. Such a last label makes the name an address.
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || last
            .strip_prefix("0x")
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    if numeric {
        return Err(PolicyError::NumericName(owned()));
    }
    Ok(name.to_ascii_lowercase())
}

/// A name from a request, normalized, or why it is not a name.
fn normalize_name(name: &str) -> Result<String, PolicyError> {
    validate_name(name, name)
}

/// A credential the box refers to by placeholder; the proxy puts the value in
/// place of the placeholder in requests to the secret's hosts only.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Secret {
    /// What the user calls it (shown in errors and logs).
    pub name: String,
    /// Where the value may go: allow-list entries (wildcards and addresses too).
    pub hosts: Vec<String>,
    /// The text the box holds instead of the value.
    pub placeholder: String,
    /// The credential. Never printed.
    pub value: String,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("placeholder", &self.placeholder)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// A box's secrets, each with its hosts parsed.
///
/// **Invariants:** placeholders are non-empty; values hold no CR, LF or NUL
/// (so a substitution can never add a header or a request line); when two
/// placeholders could match at one place the longer wins, and between equal
/// placeholders the secret listed first; substituted values are never
/// scanned again.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    secrets: Vec<(Secret, AllowList)>,
}

impl Secrets {
    pub fn new(secrets: Vec<Secret>) -> Result<Secrets, PolicyError> {
        let secrets = secrets
            .into_iter()
            .map(|s| {
                if s.placeholder.is_empty() {
                    return Err(PolicyError::EmptyPlaceholder(s.name.clone()));
                }
                if s.value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
                    return Err(PolicyError::UnsafeValue(s.name.clone()));
                }
                let hosts = AllowList::parse(&s.hosts).map_err(|e| PolicyError::SecretHost {
                    secret: s.name.clone(),
                    source: Box::new(e),
                })?;
                Ok((s, hosts))
            })
            .collect::<Result<_, _>>()?;
        Ok(Secrets { secrets })
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The secrets whose hosts match `host`, in the order they were given.
    pub fn for_host<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a Secret> + 'a {
        self.secrets
            .iter()
            .filter(move |(_, hosts)| hosts.allows(host))
            .map(|(s, _)| s)
    }

    /// A secret whose hosts do not match `host` and whose placeholder is in
    /// `bytes`.
    pub fn misplaced(&self, host: &str, bytes: &[u8]) -> Option<&Secret> {
        self.secrets
            .iter()
            .filter(|(_, hosts)| !hosts.allows(host))
            .map(|(s, _)| s)
            .find(|s| {
                let p = s.placeholder.as_bytes();
                bytes.len() >= p.len() && bytes.windows(p.len()).any(|w| w == p)
            })
    }

    /// `bytes` with every placeholder of a secret matching `host` replaced by
    /// its value; borrowed when nothing changed.
    pub fn substitute<'b>(&self, host: &str, bytes: &'b [u8]) -> Cow<'b, [u8]> {
        let mut matching: Vec<&Secret> = self.for_host(host).collect();
        if matching.is_empty() {
            return Cow::Borrowed(bytes);
        }
        // Longest first; the sort is stable, so the first listed wins a tie.
        matching.sort_by_key(|s| std::cmp::Reverse(s.placeholder.len()));
        let mut first = [false; 256];
        for s in &matching {
            first[usize::from(s.placeholder.as_bytes()[0])] = true;
        }
        let mut out: Option<Vec<u8>> = None;
        let (mut i, mut copied) = (0, 0);
        while i < bytes.len() {
            let hit = first[usize::from(bytes[i])]
                .then(|| {
                    matching
                        .iter()
                        .find(|s| bytes[i..].starts_with(s.placeholder.as_bytes()))
                })
                .flatten();
            match hit {
                Some(s) => {
                    let out = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
                    out.extend_from_slice(&bytes[copied..i]);
                    out.extend_from_slice(s.value.as_bytes());
                    i += s.placeholder.len();
                    copied = i;
                }
                None => i += 1,
            }
        }
        match out {
            Some(mut out) => {
                out.extend_from_slice(&bytes[copied..]);
                Cow::Owned(out)
            }
            None => Cow::Borrowed(bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        AllowList::parse(&entries).unwrap()
    }

    fn err(entry: &str) -> PolicyError {
        AllowList::parse(&[entry.to_owned()]).unwrap_err()
    }

    #[test]
    fn exact_names_ignore_case_and_trailing_dot() {
        let l = list(&["Api.Example.COM."]);
        for host in ["api.example.com", "API.example.com", "api.example.com."] {
            assert!(l.allows(host), "{host}");
        }
        for host in [
            "example.com",
            "x.api.example.com",
            "api.example.co",
            "api.example.com..",
        ] {
            assert!(!l.allows(host), "{host}");
        }
        assert_eq!(l.to_string(), "api.example.com");
    }

    #[test]
    fn wildcards_match_subdomains_at_any_depth_but_not_the_suffix() {
        let l = list(&["*.example.com"]);
        assert!(l.allows("a.example.com"));
        assert!(l.allows("a.b.c.EXAMPLE.com."));
        assert!(!l.allows("example.com"));
        assert!(!l.allows("badexample.com"));
        assert!(!l.allows("example.com.evil.org"));
        assert!(!l.allows(".example.com"));
    }

    #[test]
    fn names_and_addresses_never_match_each_other() {
        let l = list(&["localhost", "10.0.0.0/8"]);
        assert!(!l.allows("127.0.0.1"));
        assert!(l.allows("10.200.3.4"));
        assert!(!l.allows("10.example"));
        let l = list(&["127.0.0.1"]);
        assert!(!l.allows("localhost"));
    }

    #[test]
    fn ip_literals_and_cidrs() {
        let l = list(&["192.168.1.1", "10.0.0.0/8", "::1", "[fd00::5]", "fc00::/7"]);
        assert!(l.allows("192.168.1.1"));
        assert!(!l.allows("192.168.1.2"));
        assert!(l.allows("10.255.255.255"));
        assert!(!l.allows("11.0.0.0"));
        assert!(l.allows("::1"));
        assert!(l.allows("[::1]"));
        assert!(l.allows("[FD00::5]"));
        assert!(l.allows("fd12::1"));
        assert!(!l.allows("fe80::1"));
        // An IPv4-mapped IPv6 address reaches the IPv4 address.
        assert!(l.allows("[::ffff:10.1.2.3]"));
        assert_eq!(
            l.to_string(),
            "192.168.1.1, 10.0.0.0/8, ::1, fd00::5, fc00::/7"
        );
        let all = list(&["0.0.0.0/0"]);
        assert!(all.allows("1.2.3.4"));
        assert!(!all.allows("::1"));
        assert!(!all.allows("example.com"));
    }

    #[test]
    fn odd_hosts_are_refused() {
        let l = list(&["*.example.com", "0.0.0.0/0", "::/0"]);
        for host in [
            "",
            "[::1",
            "::1]",
            "[1.2.3.4]",
            "fe80::1%eth0",
            "a..example.com",
            "a b.example.com",
            "a.example.com:443",
            "ex\u{e4}mple.example.com",
            // Numeric forms getaddrinfo would read as addresses.
            "127.1",
            "0x7f000001",
            "010.0.0.1",
            "1.0x7f",
        ] {
            assert!(!l.allows(host), "{host:?}");
        }
        assert!(l.allows("10.0.0.1"));
        assert!(l.allows("[::1]"));
    }

    #[test]
    fn hostile_entries_are_refused_with_a_reason() {
        assert_eq!(err(""), PolicyError::Empty);
        assert!(matches!(err(" example.com"), PolicyError::Whitespace(_)));
        assert!(matches!(err("exa\tmple.com"), PolicyError::Whitespace(_)));
        assert!(matches!(err("example.com:443"), PolicyError::Port(_)));
        assert!(matches!(err("1.2.3.4:80"), PolicyError::Port(_)));
        assert!(matches!(err("[::1]:443"), PolicyError::Port(_)));
        assert!(matches!(err("https://example.com"), PolicyError::Scheme(_)));
        assert!(matches!(err("http://example.com/"), PolicyError::Scheme(_)));
        for w in [
            "*",
            "*.",
            "**.example.com",
            "*.*.example.com",
            "a.*.com",
            "*example.com",
            "example.*",
        ] {
            assert!(matches!(err(w), PolicyError::Wildcard(_)), "{w}");
        }
        assert!(matches!(
            err("exa$mple.com"),
            PolicyError::Character { ch: '$', .. }
        ));
        assert!(matches!(
            err("b\u{fc}cher.de"),
            PolicyError::Character { .. }
        ));
        assert!(matches!(err("example.com/x"), PolicyError::Cidr { .. }));
        assert!(matches!(err("a..b"), PolicyError::EmptyLabel(_)));
        assert!(matches!(err(".example.com"), PolicyError::EmptyLabel(_)));
        assert!(matches!(err("."), PolicyError::EmptyLabel(_)));
        assert!(matches!(err("-a.com"), PolicyError::Hyphen(_)));
        assert!(matches!(err("127.1"), PolicyError::NumericName(_)));
        assert!(matches!(err("0x7f.0x1"), PolicyError::NumericName(_)));
        assert!(matches!(err("*.10"), PolicyError::NumericName(_)));
        assert!(matches!(err("::g"), PolicyError::Ipv6(_)));
        assert!(matches!(err("[example.com]"), PolicyError::Ipv6(_)));
        assert!(matches!(
            err("host:abc"),
            PolicyError::Character { ch: ':', .. }
        ));
    }

    #[test]
    fn length_limits() {
        let label63 = "a".repeat(63);
        assert!(AllowList::parse(&[format!("{label63}.com")]).is_ok());
        assert!(matches!(
            err(&format!("a{label63}.com")),
            PolicyError::LabelTooLong(_)
        ));
        // 4 labels of 63 + 3 dots = 255 > 253.
        let long = [label63.as_str(); 4].join(".");
        assert!(matches!(err(&long), PolicyError::NameTooLong(_)));
        let fits = format!("{}.{}", [label63.as_str(); 3].join("."), "a".repeat(61));
        assert_eq!(fits.len(), 253);
        assert!(AllowList::parse(std::slice::from_ref(&fits)).is_ok());
        assert!(AllowList::parse(&[format!("{fits}.")]).is_ok());
        assert!(!list(&["example.com"]).allows(&long));
    }

    #[test]
    fn cidr_prefixes() {
        for (entry, why) in [
            ("10.0.0.0/33", "at most 32"),
            ("10.0.0.0/", "must be a number"),
            ("10.0.0.0/-1", "must be a number"),
            ("10.0.0.0/8/8", "must be a number"),
            ("10.0.0.0/999999999999", "at most 32"),
            ("fd00::/129", "at most 128"),
            ("10.0.0.1/8", "did you mean 10.0.0.0/8?"),
        ] {
            match err(entry) {
                PolicyError::Cidr { why: w, .. } => assert!(w.contains(why), "{entry}: {w}"),
                other => panic!("{entry}: {other:?}"),
            }
        }
        let l = list(&["10.1.2.3/32"]);
        assert!(l.allows("10.1.2.3"));
        assert!(!l.allows("10.1.2.4"));
    }

    #[test]
    fn messages_name_the_entry_and_the_fix() {
        let m = err("example.com:443").to_string();
        assert!(
            m.contains("\"example.com:443\"") && m.contains("ports are not part"),
            "{m}"
        );
        assert_eq!(list(&[]).to_string(), "(none)");
    }

    fn secret(name: &str, hosts: &[&str], placeholder: &str, value: &str) -> Secret {
        Secret {
            name: name.into(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            placeholder: placeholder.into(),
            value: value.into(),
        }
    }

    #[test]
    fn secret_debug_never_shows_the_value() {
        let s = secret("gh", &["api.github.com"], "$GH", "ghp_supersecret");
        let shown = format!("{s:?} {:?}", Secrets::new(vec![s.clone()]).unwrap());
        assert!(!shown.contains("supersecret"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("$GH"),
            "{shown}"
        );
    }

    #[test]
    fn secrets_are_checked() {
        let bad = |s| Secrets::new(vec![s]).unwrap_err();
        assert_eq!(
            bad(secret("a", &["x.com"], "", "v")),
            PolicyError::EmptyPlaceholder("a".into())
        );
        assert!(matches!(
            bad(secret("a", &["x.com"], "P", "v\r\nX-Evil: 1")),
            PolicyError::UnsafeValue(_)
        ));
        assert!(matches!(
            bad(secret("a", &["x.com"], "P", "v\0")),
            PolicyError::UnsafeValue(_)
        ));
        let e = bad(secret("a", &["x.com:443"], "P", "v"));
        assert!(matches!(&e, PolicyError::SecretHost { secret, .. } if secret == "a"));
        assert!(e.to_string().contains("ports are not part"), "{e}");
    }

    #[test]
    fn secrets_match_their_hosts_only() {
        let s = Secrets::new(vec![
            secret("gh", &["*.github.com", "github.com"], "$GH", "ghp_1"),
            secret("local", &["10.0.0.0/8"], "$LOCAL", "l0"),
        ])
        .unwrap();
        let names = |h| s.for_host(h).map(|s| s.name.as_str()).collect::<Vec<_>>();
        assert_eq!(names("api.github.com"), ["gh"]);
        assert_eq!(names("GitHub.com."), ["gh"]);
        assert_eq!(names("10.9.9.9"), ["local"]);
        assert!(names("evil.com").is_empty());
        let body = b"token=$GH&other=$LOCAL";
        assert_eq!(
            &*s.substitute("api.github.com", body),
            b"token=ghp_1&other=$LOCAL"
        );
        assert!(matches!(s.substitute("evil.com", body), Cow::Borrowed(_)));
        assert!(matches!(
            s.substitute("github.com", b"nothing here"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn substitution_replaces_every_occurrence_once() {
        let s = Secrets::new(vec![
            secret("short", &["h.com"], "$TOK", "A"),
            secret("long", &["h.com"], "$TOKEN", "B$TOK"),
            secret("dup", &["h.com"], "$TOKEN", "never"),
        ])
        .unwrap();
        // Longest placeholder wins; the first of equal ones wins; a value is
        // not rescanned (B$TOK stays).
        assert_eq!(
            &*s.substitute("h.com", b"$TOKEN $TOK$TOK $TO $TOKEN"),
            b"B$TOK AA $TO B$TOK"
        );
        assert_eq!(&*s.substitute("h.com", b"$TOK"), b"A");
        assert_eq!(&*s.substitute("h.com", b""), b"");
    }
}
