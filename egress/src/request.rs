//! What the proxy does with one request head from a box, decided without
//! any I/O: [`Rules::plan`] turns a parsed head into a [`Plan`] (a tunnel
//! to open, or the request to send upstream) or a [`Reply`] that refuses
//! it. Pure functions over `http` types, so they can be fuzzed.
//!
//! **Invariants:** a plan names a host only if the allow-list allows it; a
//! forwarded head is in origin-form, its `Host` the target's authority as
//! the box wrote it (RFC 9112 §3.2.2: the box's `Host` is ignored, so a
//! shared front end cannot route a substituted secret to another site),
//! without `Proxy-*` and hop-by-hop fields (and the fields its `Connection`
//! names), ending in `Connection: close`; placeholders are substituted in
//! the target and header values only for secrets whose hosts match the
//! target; a request that could be framed two ways (`Content-Length` and
//! `Transfer-Encoding`) is refused; nothing here logs a header value.

use bytes::Bytes;
use hyper::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::{Method, Uri, request};
use tracing::{debug, info};

use super::policy::{AllowList, Secrets};
use super::reply::Reply;

/// A `Content-Length` body up to this size is read whole to substitute
/// secrets in it; a larger one is streamed unchanged.
pub const BODY_LIMIT: u64 = 16 * 1024 * 1024;

/// Headers never forwarded: those that concern one connection only
/// (besides every `Proxy-*` field), and `Expect`, which the proxy answers
/// itself (hyper sends the `100 Continue` as the body is first read).
/// `Host` and `Content-Length` are written by the proxy. `Trailer` is end
/// to end (RFC 9110 §6.6.2): it goes on, and with it the trailer fields it
/// announces.
const HOP_BY_HOP: [&str; 5] = ["connection", "keep-alive", "te", "upgrade", "expect"];

/// One box's egress rules: its name (for replies and logs), its allow-list
/// and its secrets.
#[derive(Debug, Clone)]
pub struct Rules {
    box_name: String,
    allow: AllowList,
    secrets: Secrets,
    /// Each refused `(host, port)`, for whoever listens ([`Rules::refusals`]).
    refused: tokio::sync::broadcast::Sender<(String, u16)>,
}

/// What to do with an allowed request.
#[derive(Debug)]
pub enum Plan {
    /// `CONNECT host:port`: a byte tunnel.
    Tunnel { host: String, port: u16 },
    /// A plain HTTP request, rewritten for its upstream.
    Forward(Box<Forward>),
}

/// A plain request ready to go upstream.
#[derive(Debug)]
pub struct Forward {
    /// As written (IPv6 in brackets), for the allow-list and the secrets.
    pub host: String,
    pub port: u16,
    /// `host[:port]` as written: the upstream's `Host`.
    pub authority: String,
    /// The head to send: origin-form, headers rewritten.
    pub head: request::Parts,
    pub body: BodyPlan,
}

/// How the request body goes upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyPlan {
    /// As it comes (any length, chunked, or none).
    Stream,
    /// Read whole (this many bytes, at most [`BODY_LIMIT`]) for
    /// [`Rules::substitute_body`], then sent with its new length.
    Substitute(u64),
}

impl Rules {
    pub fn new(box_name: impl Into<String>, allow: AllowList, secrets: Secrets) -> Rules {
        Rules {
            box_name: box_name.into(),
            allow,
            secrets,
            refused: tokio::sync::broadcast::channel(64).0,
        }
    }

    /// The `(host, port)` of every request refused from now on (a slow
    /// listener misses some: they are reports, not the decision).
    pub fn refusals(&self) -> tokio::sync::broadcast::Receiver<(String, u16)> {
        self.refused.subscribe()
    }

    pub(super) fn box_name(&self) -> &str {
        &self.box_name
    }

    /// The plan for a request head, or the reply that refuses it.
    pub fn plan(&self, head: request::Parts) -> Result<Plan, Reply> {
        if head.method == Method::CONNECT {
            let (host, port) = connect_target(&head.uri)?;
            self.check(&host, port, &head.method)?;
            return Ok(Plan::Tunnel { host, port });
        }
        let target = Target::parse(&head.method, &head.uri)?;
        self.check(&target.host, target.port, &head.method)?;
        let framing = Framing::of(&head.headers)?;
        let substitutes = self.secrets.for_host(&target.host).next().is_some();
        let (body, length) = match framing {
            Framing::Length(n) if substitutes && n <= BODY_LIMIT => {
                (BodyPlan::Substitute(n), Some(n))
            }
            Framing::Length(n) => (BodyPlan::Stream, Some(n)),
            Framing::Chunked | Framing::None => (BodyPlan::Stream, None),
        };
        let path = self
            .secrets
            .substitute(&target.host, target.path.as_bytes());
        let uri = Uri::try_from(path.as_ref()).map_err(|_| {
            Reply::bad_request("the request target is not a valid URL once secrets are substituted")
        })?;
        let headers = self.headers(&head.headers, &target, length)?;
        let mut rewritten = head;
        rewritten.uri = uri;
        rewritten.headers = headers;
        Ok(Plan::Forward(Box::new(Forward {
            host: target.host,
            port: target.port,
            authority: target.authority,
            head: rewritten,
            body,
        })))
    }

    /// A body read whole for [`BodyPlan::Substitute`], with placeholders
    /// replaced; the head's `Content-Length` follows.
    pub fn substitute_body(&self, forward: &mut Forward, body: &[u8]) -> Bytes {
        let body = Bytes::from(self.secrets.substitute(&forward.host, body).into_owned());
        forward
            .head
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        body
    }

    /// The allow-list decision, logged; a refusal says how to fix it.
    fn check(&self, host: &str, port: u16, method: &Method) -> Result<(), Reply> {
        let box_name = &self.box_name;
        let method = method.as_str();
        if self.allow.allows(host) {
            debug!(box_name, host, port, method, "egress allowed");
            return Ok(());
        }
        info!(box_name, host, port, method, "egress refused");
        let _ = self.refused.send((host.to_owned(), port));
        Err(Reply::not_allowed(host, box_name, &self.allow))
    }

    /// The headers sent upstream: `Host` from the target, the box's fields
    /// minus proxy, hop-by-hop and framing ones (values substituted), then
    /// `Content-Length` and `Connection: close`.
    fn headers(
        &self,
        from_box: &HeaderMap,
        target: &Target,
        content_length: Option<u64>,
    ) -> Result<HeaderMap, Reply> {
        // Fields the Connection header names are hop-by-hop too, except
        // the ones that frame the request.
        let named: Vec<String> = from_box
            .get_all(header::CONNECTION)
            .iter()
            .flat_map(|value| value.as_bytes().split(|&b| b == b','))
            .map(|token| String::from_utf8_lossy(token.trim_ascii()).to_ascii_lowercase())
            .filter(|token| {
                !matches!(
                    token.as_str(),
                    "host" | "content-length" | "transfer-encoding"
                )
            })
            .collect();
        let mut out = HeaderMap::with_capacity(from_box.len() + 3);
        let host = HeaderValue::try_from(target.authority.as_str())
            .map_err(|_| Reply::bad_request("the request's host is not a valid Host header"))?;
        out.insert(header::HOST, host);
        for (name, value) in from_box {
            if !forwarded(name, &named) {
                continue;
            }
            let value = self.secrets.substitute(&target.host, value.as_bytes());
            let value = HeaderValue::from_bytes(&value).map_err(|_| {
                Reply::bad_request(format_args!(
                    "the {name} header is not valid once secrets are substituted"
                ))
            })?;
            out.append(name.clone(), value);
        }
        if let Some(n) = content_length {
            out.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        out.insert(header::CONNECTION, HeaderValue::from_static("close"));
        Ok(out)
    }
}

/// Whether a field of the box's goes upstream (`named`: the tokens of its
/// `Connection` header).
fn forwarded(name: &HeaderName, named: &[String]) -> bool {
    let name = name.as_str();
    !(HOP_BY_HOP.contains(&name)
        || name.starts_with("proxy-")
        || name == "host"
        || name == "content-length"
        || named.iter().any(|n| n == name))
}

/// `CONNECT host:port`'s target.
fn connect_target(uri: &Uri) -> Result<(String, u16), Reply> {
    let authority = match (uri.scheme(), uri.authority(), uri.path_and_query()) {
        (None, Some(authority), None) => Some(authority.as_str()),
        _ => None,
    };
    authority
        .and_then(|a| split_authority(a, None))
        .map(|(host, port)| (host.to_owned(), port))
        .ok_or_else(|| {
            Reply::bad_request(format_args!(
                "CONNECT needs host:port, as in CONNECT example.com:443 (got {:?})",
                uri.to_string()
            ))
        })
}

/// Where a plain request goes, from its absolute-form target.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    authority: String,
    /// Origin-form: path and query, never empty, no fragment.
    path: String,
}

impl Target {
    fn parse(method: &Method, uri: &Uri) -> Result<Target, Reply> {
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(match uri.authority() {
                None => Reply::bad_request(format_args!(
                    "{method} {uri} names no host: send the full URL through this proxy \
                     (http://host/path), or CONNECT host:443 for https"
                )),
                Some(_) => Reply::bad_request(format_args!(
                    "{:?} is not a URL; a proxied request names http://host/path",
                    uri.to_string()
                )),
            });
        };
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(Reply::bad_request(format_args!(
                "{scheme}:// is not proxied: plain http:// requests go through as they are, \
                 https through CONNECT"
            )));
        }
        let authority = authority.as_str();
        if authority.contains('@') {
            return Err(Reply::bad_request(
                "user names and passwords in the URL are not supported",
            ));
        }
        let (host, port) = split_authority(authority, Some(80)).ok_or_else(|| {
            Reply::bad_request(format_args!("bad host or port in {:?}", uri.to_string()))
        })?;
        let path = match (uri.path(), uri.query()) {
            ("", None) => "/".to_owned(),
            ("", Some(query)) => format!("/?{query}"),
            (path, None) => path.to_owned(),
            (path, Some(query)) => format!("{path}?{query}"),
        };
        Ok(Target {
            host: host.to_owned(),
            port,
            authority: authority.to_owned(),
            path,
        })
    }
}

/// `host:port` or `[v6]:port` into host (brackets kept) and port; the port
/// may be left out only when there is a default. Port 0 is refused.
pub(super) fn split_authority(authority: &str, default: Option<u16>) -> Option<(&str, u16)> {
    let split = match authority.strip_prefix('[') {
        Some(inner) => inner.find(']').map(|i| i + 2)?,
        None => authority.find(':').unwrap_or(authority.len()),
    };
    let (host, port) = authority.split_at(split);
    if host.is_empty() {
        return None;
    }
    let port = match port.strip_prefix(':') {
        None if port.is_empty() => default?,
        None => return None,
        Some(digits) => {
            if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            digits.parse().ok().filter(|&p| p != 0)?
        }
    };
    Some((host, port))
}

/// How the request body is delimited (RFC 9112 §6). hyper has refused
/// conflicting lengths and codings that do not end in chunked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
}

impl Framing {
    /// Refuses what could be read two ways: both framings, or differing
    /// lengths.
    fn of(headers: &HeaderMap) -> Result<Framing, Reply> {
        if headers.contains_key(header::TRANSFER_ENCODING) {
            if headers.contains_key(header::CONTENT_LENGTH) {
                return Err(Reply::bad_request(
                    "a request may not carry both Content-Length and Transfer-Encoding",
                ));
            }
            return Ok(Framing::Chunked);
        }
        let mut length = None;
        for value in headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        {
            let digits = value.trim_ascii();
            let n =
                (!digits.is_empty() && digits.len() <= 18 && digits.iter().all(u8::is_ascii_digit))
                    .then(|| std::str::from_utf8(digits).ok()?.parse::<u64>().ok())
                    .flatten();
            match (n, length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => return Err(Reply::bad_request("bad or conflicting Content-Length")),
            }
        }
        Ok(length.map_or(Framing::None, Framing::Length))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Secret;
    use hyper::http::Request;

    const TOKEN: &str = "$API_TOKEN";
    const VALUE: &str = "s3cr3t-value";

    fn rules(allow: &[&str]) -> Rules {
        let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
        let secrets = Secrets::new(vec![Secret {
            name: "api".into(),
            hosts: vec!["api.example".into()],
            placeholder: TOKEN.into(),
            value: VALUE.into(),
        }])
        .unwrap();
        Rules::new("devbox", AllowList::parse(&allow).unwrap(), secrets)
    }

    fn head(method: &str, uri: &str, headers: &[(&str, &str)]) -> request::Parts {
        let mut req = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(()).unwrap().into_parts().0
    }

    fn forward(plan: Result<Plan, Reply>) -> Forward {
        match plan {
            Ok(Plan::Forward(f)) => *f,
            other => panic!("not a forward: {other:?}"),
        }
    }

    #[test]
    fn split_authority_takes_host_and_port() {
        assert_eq!(
            split_authority("example.com:443", None),
            Some(("example.com", 443))
        );
        assert_eq!(split_authority("[::1]:8080", None), Some(("[::1]", 8080)));
        assert_eq!(
            split_authority("example.com", Some(80)),
            Some(("example.com", 80))
        );
        for bad in [
            "example.com",
            ":443",
            "[::1",
            "h:0",
            "h:+80",
            "h:123456",
            "h:",
        ] {
            assert_eq!(split_authority(bad, None), None, "{bad}");
        }
    }

    #[test]
    fn an_unlisted_host_gets_no_plan() {
        let rules = rules(&["api.example"]);
        for (method, uri) in [
            ("GET", "http://other.example/"),
            ("CONNECT", "other.example:443"),
            ("GET", "http://api.example.evil/"),
        ] {
            let reply = rules.plan(head(method, uri, &[])).unwrap_err();
            assert_eq!(reply.status(), 403, "{method} {uri}");
            assert!(reply.is_refusal());
        }
        match rules.plan(head("CONNECT", "api.example:443", &[])) {
            Ok(Plan::Tunnel { host, port }) => {
                assert_eq!((host.as_str(), port), ("api.example", 443))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_forwarded_head_is_rewritten_and_substituted() {
        let rules = rules(&["api.example"]);
        let plan = rules.plan(head(
            "POST",
            &format!("http://api.example:8080/v1?k={TOKEN}"),
            &[
                ("host", "evil.example"),
                ("authorization", &format!("Bearer {TOKEN}")),
                ("proxy-authorization", "Basic x"),
                ("proxy-anything", "1"),
                ("connection", "keep-alive, X-Hop"),
                ("x-hop", "1"),
                ("te", "trailers"),
                ("expect", "100-continue"),
                ("content-length", "10"),
            ],
        ));
        let f = forward(plan);
        assert_eq!((f.host.as_str(), f.port), ("api.example", 8080));
        assert_eq!(f.head.uri, format!("/v1?k={VALUE}").as_str());
        assert_eq!(f.body, BodyPlan::Substitute(10));
        let fields: Vec<(String, String)> = f
            .head
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        let want = [
            ("host", "api.example:8080"),
            ("authorization", &format!("Bearer {VALUE}")),
            ("content-length", "10"),
            ("connection", "close"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()));
        assert_eq!(fields, want);
        let mut f = f;
        let body = rules.substitute_body(&mut f, format!("t={TOKEN}").as_bytes());
        assert_eq!(body, format!("t={VALUE}"));
        assert_eq!(f.head.headers[header::CONTENT_LENGTH], "14");
    }

    #[test]
    fn other_hosts_keep_the_placeholder_and_large_bodies_stream() {
        let rules = rules(&["*.example"]);
        let f = forward(rules.plan(head(
            "PUT",
            &format!("http://other.example?q={TOKEN}"),
            &[("authorization", TOKEN), ("content-length", "3")],
        )));
        assert_eq!(f.head.uri, format!("/?q={TOKEN}").as_str());
        assert_eq!(f.head.headers["authorization"], TOKEN);
        assert_eq!(f.body, BodyPlan::Stream);
        let big = (BODY_LIMIT + 1).to_string();
        let f = forward(rules.plan(head(
            "PUT",
            "http://api.example/",
            &[("content-length", &big)],
        )));
        assert_eq!(f.body, BodyPlan::Stream);
        assert_eq!(f.head.headers[header::CONTENT_LENGTH], big.as_str());
        let f = forward(rules.plan(head(
            "POST",
            "http://api.example/",
            &[("transfer-encoding", "chunked")],
        )));
        assert_eq!(f.body, BodyPlan::Stream);
        assert_eq!(f.head.headers[header::TRANSFER_ENCODING], "chunked");
    }

    #[test]
    fn bad_targets_and_framings_are_refused() {
        let rules = rules(&["api.example"]);
        for (method, uri, headers, says) in [
            ("GET", "/x", &[][..], "names no host"),
            ("GET", "ftp://api.example/", &[], "ftp:// is not proxied"),
            ("GET", "api.example", &[], "is not a URL"),
            ("GET", "http://u:p@api.example/", &[], "user names"),
            ("GET", "http://api.example:0/", &[], "bad host or port"),
            ("CONNECT", "api.example", &[], "CONNECT needs host:port"),
            (
                "POST",
                "http://api.example/",
                &[("content-length", "1"), ("transfer-encoding", "chunked")],
                "both Content-Length and Transfer-Encoding",
            ),
            (
                "POST",
                "http://api.example/",
                &[("content-length", "1, 2")],
                "conflicting Content-Length",
            ),
        ] {
            let reply = rules.plan(head(method, uri, headers)).unwrap_err();
            assert_eq!(reply.status(), 400, "{method} {uri}");
            assert!(format!("{reply:?}").contains(says), "{says}: {reply:?}");
        }
    }
}
