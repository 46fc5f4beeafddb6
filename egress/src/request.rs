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
    /// Each refusal, for whoever listens ([`Rules::refusals`]).
    refused: tokio::sync::broadcast::Sender<Refusal>,
}

/// A request the proxy refused, or a connection it ended, as an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub host: String,
    pub port: u16,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Why {
    /// The host is not on the allow-list.
    NotAllowed,
    /// The request carries the placeholder of a secret that may not go there.
    Misplaced { secret: String },
    /// The box's TLS named another host than its CONNECT (or none).
    Sni { sent: Option<String> },
    /// What came through an intercepted tunnel was not TLS.
    NotTls,
    /// The upstream's certificate did not verify.
    Upstream { reason: String },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (host, port) = (&self.host, self.port);
        match &self.why {
            Why::NotAllowed => write!(
                f,
                "egress refused: {host}:{port} is not on the box's allow-list (boxctl update --allow-net {host} BOX, then restart it)"
            ),
            Why::Misplaced { secret } => write!(
                f,
                "egress refused: a request to {host}:{port} carried the placeholder of secret {secret}, which may not go there"
            ),
            Why::Sni { sent: Some(sent) } => write!(
                f,
                "egress refused: TLS through CONNECT {host}:{port} named another host ({sent:?})"
            ),
            Why::Sni { sent: None } => write!(
                f,
                "egress refused: TLS through CONNECT {host}:{port} named no host (SNI)"
            ),
            Why::NotTls => write!(f, "egress refused: CONNECT {host}:{port} did not carry TLS"),
            Why::Upstream { reason } => write!(
                f,
                "egress refused: {host}:{port}'s certificate does not verify: {reason}"
            ),
        }
    }
}

/// What to do with an allowed request.
#[derive(Debug)]
pub enum Plan {
    /// `CONNECT host:port`: a byte tunnel, or (`intercept`: a secret
    /// names the host) TLS answered by the box's CA and each request
    /// inside planned by [`Rules::plan_inside`].
    Tunnel {
        host: String,
        port: u16,
        intercept: bool,
    },
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
    /// The head to send: absolute-form (`http://` or, inside an
    /// intercepted tunnel, `https://` and the tunnel's authority; the
    /// client sends it in origin-form), headers rewritten.
    pub head: request::Parts,
    pub body: BodyPlan,
    /// A plain-HTTP request (one per box connection), not one inside a tunnel.
    pub plain: bool,
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

    /// Every refusal from now on (a slow listener misses some: they are
    /// reports, not the decision).
    pub fn refusals(&self) -> tokio::sync::broadcast::Receiver<Refusal> {
        self.refused.subscribe()
    }

    /// Reports a refusal made elsewhere (in TLS, upstream).
    pub fn report(&self, host: &str, port: u16, why: Why) {
        let _ = self.refused.send(Refusal {
            host: host.to_owned(),
            port,
            why,
        });
    }

    /// Whether a `CONNECT` to `host` is intercepted: a secret names it.
    pub fn intercepts(&self, host: &str) -> bool {
        self.secrets.for_host(host).next().is_some()
    }

    /// The secrets' values and placeholders for `host`, to take out of what
    /// it answers.
    pub fn redactor(&self, host: &str) -> crate::redact::Redactor {
        crate::redact::Redactor::new(
            self.secrets
                .for_host(host)
                .map(|s| (s.value.as_str(), s.placeholder.as_str())),
        )
    }

    pub(super) fn box_name(&self) -> &str {
        &self.box_name
    }

    /// The plan for a request head, or the reply that refuses it.
    pub fn plan(&self, head: request::Parts) -> Result<Plan, Reply> {
        if head.method == Method::CONNECT {
            let (host, port) = connect_target(&head.uri)?;
            self.check(&host, port, &head.method)?;
            let intercept = self.intercepts(&host);
            return Ok(Plan::Tunnel {
                host,
                port,
                intercept,
            });
        }
        let target = Target::parse(&head.method, &head.uri)?;
        self.check(&target.host, target.port, &head.method)?;
        self.rewrite(target, head, Inside::No)
            .map(|f| Plan::Forward(Box::new(f)))
    }

    /// The plan for a request the box sent inside the intercepted tunnel
    /// `CONNECT host:port` (allowed already): to that host and port
    /// whatever its `Host` or `:authority` says.
    pub fn plan_inside(
        &self,
        host: &str,
        port: u16,
        head: request::Parts,
    ) -> Result<Forward, Reply> {
        let path = match head.uri.path_and_query().map(|p| p.as_str()) {
            Some(p) if p.starts_with('/') => p.to_owned(),
            Some("*") if head.method == Method::OPTIONS => "*".to_owned(),
            _ => "/".to_owned(),
        };
        let authority = match port {
            443 => host.to_owned(),
            port => format!("{host}:{port}"),
        };
        let target = Target {
            host: host.to_owned(),
            port,
            authority,
            path,
        };
        self.rewrite(target, head, Inside::Yes)
    }

    /// `head` for `target`: placeholders substituted (or the request
    /// refused when it carries one that may not go there), headers
    /// rewritten, the body's plan.
    fn rewrite(
        &self,
        target: Target,
        head: request::Parts,
        inside: Inside,
    ) -> Result<Forward, Reply> {
        let framing = Framing::of(&head.headers)?;
        let substitutes = self.intercepts(&target.host);
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
        self.placed(&target, &path)?;
        let scheme = match inside {
            Inside::No => "http",
            Inside::Yes => "https",
        };
        let mut uri = Vec::with_capacity(scheme.len() + 3 + target.authority.len() + path.len());
        uri.extend_from_slice(scheme.as_bytes());
        uri.extend_from_slice(b"://");
        uri.extend_from_slice(target.authority.as_bytes());
        if path.as_ref() != b"*" {
            uri.extend_from_slice(&path);
        }
        let uri = Uri::try_from(uri).map_err(|_| {
            Reply::bad_request("the request target is not a valid URL once secrets are substituted")
        })?;
        let headers = self.headers(&head.headers, &target, length, inside)?;
        let mut rewritten = head;
        rewritten.uri = uri;
        rewritten.headers = headers;
        rewritten.version = hyper::http::Version::HTTP_11;
        Ok(Forward {
            host: target.host,
            port: target.port,
            authority: target.authority,
            head: rewritten,
            body,
            plain: inside == Inside::No,
        })
    }

    /// Refuses `bytes` (already substituted for `target`'s own secrets)
    /// when they hold another secret's placeholder.
    fn placed(&self, target: &Target, bytes: &[u8]) -> Result<(), Reply> {
        match self.secrets.misplaced(&target.host, bytes) {
            None => Ok(()),
            Some(secret) => {
                info!(
                    box_name = self.box_name,
                    host = target.host,
                    secret = secret.name,
                    "egress refused: a placeholder for another host"
                );
                self.report(
                    &target.host,
                    target.port,
                    Why::Misplaced {
                        secret: secret.name.clone(),
                    },
                );
                Err(Reply::misplaced(&secret.name, &secret.hosts, &target.host))
            }
        }
    }

    /// A body read whole for [`BodyPlan::Substitute`], with placeholders
    /// replaced; the head's `Content-Length` follows. A body that holds
    /// another host's secret's placeholder is refused.
    pub fn substitute_body(&self, forward: &mut Forward, body: &[u8]) -> Result<Bytes, Reply> {
        let body = Bytes::from(self.secrets.substitute(&forward.host, body).into_owned());
        let target = Target {
            host: forward.host.clone(),
            port: forward.port,
            authority: String::new(),
            path: String::new(),
        };
        self.placed(&target, &body)?;
        forward
            .head
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        Ok(body)
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
        self.report(host, port, Why::NotAllowed);
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
        inside: Inside,
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
        if inside == Inside::No {
            // Inside a tunnel the client writes it from the URL (HTTP/1)
            // or sends `:authority` (HTTP/2).
            let host = HeaderValue::try_from(target.authority.as_str())
                .map_err(|_| Reply::bad_request("the request's host is not a valid Host header"))?;
            out.insert(header::HOST, host);
        }
        for (name, value) in from_box {
            if !forwarded(name, &named) {
                continue;
            }
            let value = self.secrets.substitute(&target.host, value.as_bytes());
            self.placed(target, &value)?;
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
        if self.intercepts(&target.host) {
            // What comes back is searched for the values: not compressed.
            out.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        match inside {
            // One request per box connection (see `proxy`).
            Inside::No => {
                out.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            // An HTTP/1 upgrade (a WebSocket) goes on as one.
            Inside::Yes if named.iter().any(|n| n == "upgrade") => {
                if let Some(upgrade) = from_box.get(header::UPGRADE) {
                    out.insert(header::UPGRADE, upgrade.clone());
                    out.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
                }
            }
            // Kept alive, pooled: hyper's client frames it.
            Inside::Yes => {}
        }
        Ok(out)
    }
}

/// Whether a request came through an intercepted tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inside {
    No,
    Yes,
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
            Ok(Plan::Tunnel {
                host,
                port,
                intercept,
            }) => {
                assert_eq!((host.as_str(), port), ("api.example", 443));
                assert!(intercept, "a secret names it");
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
        assert_eq!(
            f.head.uri,
            format!("http://api.example:8080/v1?k={VALUE}").as_str()
        );
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
            ("accept-encoding", "identity"),
            ("connection", "close"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()));
        assert_eq!(fields, want);
        let mut f = f;
        let body = rules
            .substitute_body(&mut f, format!("t={TOKEN}").as_bytes())
            .unwrap();
        assert_eq!(body, format!("t={VALUE}"));
        assert_eq!(f.head.headers[header::CONTENT_LENGTH], "14");
    }

    #[test]
    fn other_hosts_keep_the_placeholder_and_large_bodies_stream() {
        let rules = rules(&["*.example"]);
        // The placeholder may not go to another host: refused, named.
        for (uri, headers) in [
            (format!("http://other.example?q={TOKEN}"), &[][..]),
            (
                "http://other.example/".to_owned(),
                &[("authorization", TOKEN)][..],
            ),
        ] {
            let reply = rules.plan(head("PUT", &uri, headers)).unwrap_err();
            assert_eq!(reply.status(), 403);
            assert!(format!("{reply:?}").contains("secret api"), "{reply:?}");
        }
        let f = forward(rules.plan(head(
            "PUT",
            "http://other.example?q=1",
            &[("authorization", "x"), ("content-length", "3")],
        )));
        assert_eq!(f.head.uri, "http://other.example/?q=1");
        assert_eq!(f.body, BodyPlan::Stream, "no secret for it: streamed");
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
