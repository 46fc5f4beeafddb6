//! Any request a box sends inside an intercepted tunnel (TLS answered by
//! its CA, `CONNECT api.example:443`), against any secrets, and any
//! answer's chunks: hyper's parse (the proxy's own server settings), the
//! proxy's plan and its redaction never panic, and keep the proxy's
//! promises: the request goes to the tunnel's host and port only (an
//! `https://` URL with its authority, whatever `Host` says), with no
//! `Proxy-*` or hop-by-hop field; a secret's value is never added for a
//! host not its own, and another host's placeholder is refused (403);
//! what comes back never holds a value, however it is chunked.
#![no_main]

use boxd_egress::{BodyPlan, Rules, Secret, Secrets, AllowList};
use boxd_egress::fuzzing;
use boxd_egress::redact::Redactor;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const HOST: &str = "api.example";
const ENTRIES: [&str; 4] = ["api.example", "*.example", "other.test", "127.0.0.1"];
const PLACEHOLDERS: [&str; 3] = ["$TOKEN", "$T", "{{key}}"];
const FIELDS: [&str; 12] = [
    "Host", "Proxy-Authorization", "Connection", "Keep-Alive", "TE", "Upgrade",
    "Content-Length", "Transfer-Encoding", "Authorization", "X-Hop", "Accept-Encoding", "X-Any",
];

thread_local! {
    static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
}

fn value(i: usize) -> String {
    format!("[[v{i}]]")
}

fn pick<'a>(u: &mut Unstructured, from: &[&'a str]) -> Result<String> {
    Ok(if u.ratio(1, 8)? { u.arbitrary::<String>()? } else { u.choose(from)?.to_string() })
}

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

fn count(haystack: &[u8], needle: &str) -> usize {
    haystack.windows(needle.len()).filter(|w| *w == needle.as_bytes()).count()
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let run = |u: &mut Unstructured| -> Result<()> {
        let secrets: Vec<Secret> = (0..u.int_in_range(1..=3)?)
            .map(|i| {
                Ok(Secret {
                    name: format!("s{i}"),
                    hosts: vec![pick(u, &ENTRIES)?],
                    placeholder: pick(u, &PLACEHOLDERS)?,
                    value: value(i),
                })
            })
            .collect::<Result<_>>()?;
        let Ok(policy) = Secrets::new(secrets.clone()) else { return Ok(()) };
        let port: u16 = if u.ratio(3, 4)? { 443 } else { u.int_in_range(1..=65535)? };
        // The request inside the tunnel: mostly well-formed, sometimes any bytes.
        let input = if u.ratio(1, 4)? {
            u.arbitrary::<Vec<u8>>()?
        } else {
            let method = pick(u, &["GET", "POST", "PUT", "OPTIONS", "CONNECT"])?;
            let target = pick(u, &["/", "/v1/messages?x=$TOKEN", "*", "https://evil.test/x", "http://api.example/"])?;
            let mut out = format!("{method} {target}{} HTTP/1.1\r\n", text(u)?).into_bytes();
            for _ in 0..u.int_in_range(0..=8)? {
                let name = pick(u, &FIELDS)?;
                let v = match u.int_in_range(0..=3)? {
                    0 => pick(u, &["close", "upgrade, X-Hop", "chunked", "5", "websocket"])?,
                    _ => text(u)?,
                };
                out.extend_from_slice(format!("{name}: {v}\r\n").as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(text(u)?.as_bytes());
            out
        };
        let Some((head, body)) = RT.with(|rt| rt.block_on(fuzzing::parse(&input))) else { return Ok(()) };
        let rules = Rules::new("fuzz", AllowList::parse(&[HOST.to_owned()]).unwrap(), policy.clone());
        let mut forward = match rules.plan_inside(HOST, port, head) {
            Err(reply) => {
                assert!(matches!(reply.status(), 400 | 403), "{reply:?}");
                return Ok(());
            }
            Ok(f) => f,
        };
        let authority = if port == 443 { HOST.to_owned() } else { format!("{HOST}:{port}") };
        assert_eq!(forward.head.uri.scheme_str(), Some("https"));
        assert_eq!(forward.head.uri.authority().map(|a| a.as_str()), Some(authority.as_str()));
        assert_eq!((forward.host.as_str(), forward.port), (HOST, port));
        for name in forward.head.headers.keys() {
            let name = name.as_str();
            assert!(!name.starts_with("proxy-") && !["keep-alive", "te", "host"].contains(&name), "{name}");
        }
        let body = match forward.body {
            BodyPlan::Substitute(_) => match rules.substitute_body(&mut forward, &body) {
                Ok(b) => b,
                Err(reply) => {
                    assert_eq!(reply.status(), 403);
                    return Ok(());
                }
            },
            BodyPlan::Stream => body,
        };
        let mut sent = forward.head.uri.to_string().into_bytes();
        for v in forward.head.headers.values() {
            sent.extend_from_slice(v.as_bytes());
        }
        sent.extend_from_slice(&body);
        let theirs: Vec<&str> = policy.for_host(HOST).map(|s| s.name.as_str()).collect();
        for (i, secret) in secrets.iter().enumerate() {
            if !theirs.contains(&secret.name.as_str()) {
                let v = value(i);
                assert!(count(&sent, &v) <= count(&input, &v), "{v} added for {HOST}");
            }
        }
        // The answer, chunked anyhow: no value comes back.
        let answer = text(u)?.into_bytes();
        let redactor = Redactor::new(secrets.iter().map(|s| (s.value.as_str(), s.placeholder.as_str())));
        let mut cuts: Vec<usize> = (0..u.int_in_range(0..=4)?)
            .map(|_| u.int_in_range(0..=answer.len()))
            .collect::<Result<_>>()?;
        cuts.sort();
        let out = RT.with(|rt| rt.block_on(fuzzing::redact(&redactor, &answer, &cuts)));
        for s in &secrets {
            // A placeholder may itself spell a value; only values the
            // answer did not get by replacement are checked.
            if !secrets.iter().any(|o| o.placeholder.contains(&s.value)) {
                assert_eq!(count(&out, &s.value), 0, "{} came back", s.value);
            }
        }
        Ok(())
    };
    let _ = run(&mut u);
});
