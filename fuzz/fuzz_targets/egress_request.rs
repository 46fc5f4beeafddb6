//! Any request a box sends its egress proxy, against any allow-list and
//! secrets: hyper's parse (with the proxy's own server settings) and the
//! proxy's plan never panic, and what they decide keeps the proxy's
//! promises: a host not on the list never gets a connection target; a
//! forwarded head is in origin-form, carries no `Proxy-*` or hop-by-hop
//! field, exactly `Connection: close` and a `Host` equal to its target;
//! a secret's value is never added to a request for a host not its own.
#![no_main]

use boxd_egress::{AllowList, BodyPlan, Plan, Rules, Secret, Secrets, fuzzing};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

/// Allow-list and secret entries.
const ENTRIES: [&str; 8] = [
    "api.example",
    "*.example",
    "127.0.0.1",
    "10.0.0.0/8",
    "::1",
    "host.boxd.internal",
    "example.com",
    "*.com",
];
/// Hosts requests name: on those lists, near them, or neither.
const HOSTS: [&str; 10] = [
    "api.example",
    "API.Example.",
    "a.b.example",
    "example",
    "127.0.0.1",
    "10.1.2.3",
    "[::1]",
    "example.com.evil.org",
    "host.boxd.internal",
    "evil.org",
];
const FIELDS: [&str; 16] = [
    "Host",
    "Proxy-Authorization",
    "Proxy-Connection",
    "Proxy-Foo",
    "Connection",
    "Keep-Alive",
    "TE",
    "Upgrade",
    "Expect",
    "Content-Length",
    "Transfer-Encoding",
    "Trailer",
    "Authorization",
    "X-Hop",
    "Cookie",
    "X-Any",
];
const PLACEHOLDERS: [&str; 3] = ["$TOKEN", "$T", "{{key}}"];

thread_local! {
    static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
}

fn pick<'a>(u: &mut Unstructured, from: &[&'a str]) -> Result<String> {
    Ok(if u.ratio(1, 8)? {
        u.arbitrary::<String>()?
    } else {
        u.choose(from)?.to_string()
    })
}

/// Values that cannot arise from one another by substitution or by
/// text around them: `[[v0]]`, `[[v1]]`, ...
fn value(i: usize) -> String {
    format!("[[v{i}]]")
}

fn secrets(u: &mut Unstructured) -> Result<Vec<Secret>> {
    (0..u.int_in_range(0..=3)?)
        .map(|i| {
            Ok(Secret {
                name: format!("s{i}"),
                hosts: (0..u.int_in_range(1..=2)?)
                    .map(|_| pick(u, &ENTRIES))
                    .collect::<Result<_>>()?,
                placeholder: pick(u, &PLACEHOLDERS)?,
                value: value(i),
            })
        })
        .collect()
}

/// Text that often holds a placeholder.
fn text(u: &mut Unstructured) -> Result<String> {
    let mut s = String::new();
    for _ in 0..u.int_in_range(0..=3)? {
        match u.int_in_range(0..=3)? {
            0 => s.push_str(u.choose(&PLACEHOLDERS)?),
            1 => s.push_str(&value(u.int_in_range(0..=3)?)),
            _ => s.push_str(&u.arbitrary::<String>()?),
        }
    }
    Ok(s)
}

/// A request: mostly well-formed around the fields that matter,
/// sometimes any bytes.
fn request(u: &mut Unstructured) -> Result<Vec<u8>> {
    if u.ratio(1, 4)? {
        return Ok(u.arbitrary::<Vec<u8>>()?);
    }
    let method = pick(u, &["GET", "POST", "PUT", "CONNECT", "HEAD", "OPTIONS"])?;
    let host = pick(u, &HOSTS)?;
    let port = match u.int_in_range(0..=3)? {
        0 => String::new(),
        1 => ":80".into(),
        2 => format!(":{}", u.arbitrary::<u16>()?),
        _ => format!(":{}", u.arbitrary::<String>()?),
    };
    let target = if method == "CONNECT" && u.ratio(3, 4)? {
        format!("{host}{port}")
    } else {
        let scheme = pick(u, &["http://", "HTTP://", "https://", "ftp://", "", "/"])?;
        format!("{scheme}{host}{port}/{}", text(u)?)
    };
    let version = pick(u, &["HTTP/1.1", "HTTP/1.0"])?;
    let mut out = format!("{method} {target} {version}\r\n").into_bytes();
    for _ in 0..u.int_in_range(0..=8)? {
        let name = pick(u, &FIELDS)?;
        let value = match u.int_in_range(0..=4)? {
            0 => pick(u, &["close", "keep-alive, X-Hop", "chunked", "100-continue", "5"])?,
            _ => text(u)?,
        };
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(text(u)?.as_bytes());
    Ok(out)
}

fn count(haystack: &[u8], needle: &str) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(entries) = (0..u.int_in_range(0..=4).unwrap_or(0))
        .map(|_| pick(&mut u, &ENTRIES))
        .collect::<Result<Vec<String>>>()
    else {
        return;
    };
    let (Ok(secrets), Ok(input)) = (secrets(&mut u), request(&mut u)) else {
        return;
    };
    let (Ok(allow), Ok(policy)) = (AllowList::parse(&entries), Secrets::new(secrets.clone()))
    else {
        return;
    };
    let Some((head, body)) = RT.with(|rt| rt.block_on(fuzzing::parse(&input))) else {
        return;
    };
    // The fields the box's Connection header names are hop-by-hop too.
    let named: Vec<String> = head
        .headers
        .get_all("connection")
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|t| String::from_utf8_lossy(t.trim_ascii()).to_ascii_lowercase())
        .filter(|t| !["host", "content-length", "transfer-encoding"].contains(&t.as_str()))
        .collect();
    let rules = Rules::new("fuzz", allow.clone(), policy.clone());
    let mut forward = match rules.plan(head) {
        Err(reply) => {
            assert!(matches!(reply.status(), 400 | 403), "{reply:?}");
            return;
        }
        Ok(Plan::Tunnel { host, port }) => {
            assert!(allow.allows(&host), "a tunnel to unlisted {host}");
            assert_ne!(port, 0);
            return;
        }
        Ok(Plan::Forward(forward)) => forward,
    };
    assert!(allow.allows(&forward.host), "a request to unlisted {}", forward.host);
    let body = match forward.body {
        BodyPlan::Substitute(n) => {
            assert!(n <= boxd_egress::BODY_LIMIT);
            rules.substitute_body(&mut forward, &body)
        }
        BodyPlan::Stream => body,
    };
    let head = &forward.head;
    assert!(
        head.uri.scheme().is_none()
            && head.uri.authority().is_none()
            && head.uri.path().starts_with('/'),
        "not origin-form: {}",
        head.uri
    );
    for name in head.headers.keys() {
        let name = name.as_str();
        assert!(
            !name.starts_with("proxy-")
                && !["keep-alive", "te", "upgrade", "expect"].contains(&name)
                && (name == "connection" || !named.iter().any(|n| n == name)),
            "{name} forwarded"
        );
    }
    let connection: Vec<_> = head.headers.get_all("connection").iter().collect();
    assert_eq!(connection, ["close"]);
    let host: Vec<_> = head.headers.get_all("host").iter().collect();
    assert_eq!(host, [forward.authority.as_str()]);
    let port = forward.authority.strip_prefix(forward.host.as_str());
    let port = port.map(|p| if p.is_empty() { Some(80) } else { p.strip_prefix(':')?.parse().ok() });
    assert_eq!(port, Some(Some(forward.port)), "{} is not {}:{}", forward.authority, forward.host, forward.port);
    // Everything that goes upstream, against what the box sent.
    let mut sent = head.uri.to_string().into_bytes();
    for value in head.headers.values() {
        sent.extend_from_slice(value.as_bytes());
    }
    sent.extend_from_slice(&body);
    let theirs: Vec<&str> = policy.for_host(&forward.host).map(|s| s.name.as_str()).collect();
    for (i, secret) in secrets.iter().enumerate() {
        if !theirs.contains(&secret.name.as_str()) {
            let v = value(i);
            assert!(
                count(&sent, &v) <= count(&input, &v),
                "{v} added to a request for {}",
                forward.host
            );
        }
    }
});
