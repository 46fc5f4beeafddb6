//! Network policy on the namespace engine: a box with an allow-list has no
//! route out and reaches exactly its listed hosts through boxd's egress
//! proxy; secrets stay in the daemon.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use boxd_tests::*;

/// A tiny HTTP server on `addr` that records each request it gets and
/// answers `hello` (never echoing what it received).
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(addr: &str) -> Server {
        let listener = TcpListener::bind((addr, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut conn = conn;
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Read the head (and a small body, if any arrives with it).
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    log.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&buf).into_owned());
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                    );
                });
            }
        });
        Server { port, seen }
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// This host's address on its default route (not loopback).
fn host_address() -> String {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    // No packet is sent: connect only picks the route.
    s.connect("10.255.255.254:9").unwrap();
    s.local_addr().unwrap().ip().to_string()
}

fn allow(hosts: &[&str]) -> v1::BoxSpec {
    v1::BoxSpec {
        allow_net: hosts.iter().map(|h| h.to_string()).collect(),
        ..busybox_spec()
    }
}

/// A raw request to the box's proxy, through busybox nc, and its answer
/// (the request is expanded by the box's shell: `$VAR` works).
async fn via_proxy(c: &mut Client, name: &str, request: &str) -> String {
    let script = format!("printf \"{request}\" | nc 127.0.0.1 3128");
    run(c, name, &["sh", "-c", &script]).await.stdout_str()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_reaches_its_listed_hosts_and_nothing_else() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let describe = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(describe.network_filtering, "the namespace engine filters");
    assert!(describe.capabilities.iter().any(|c| c == "net.allowlist"));

    let local = Server::start("127.0.0.1");
    let outside = Server::start("0.0.0.0");
    let ip = host_address();
    up(&mut c, "net", allow(&["host.boxd.internal"])).await;

    // The listed host (the host's loopback, named by a hosts entry the box
    // sees) answers, through the proxy the box's environment names.
    let hosts = sh(&mut c, "net", "cat /etc/hosts").await;
    assert!(hosts.contains("host.boxd.internal"), "{hosts}");
    let url = format!("http://host.boxd.internal:{}/listed", local.port);
    assert_eq!(
        sh(&mut c, "net", &format!("wget -q -O - {url}")).await,
        "hello"
    );
    assert!(
        local
            .requests()
            .iter()
            .any(|r| r.starts_with("GET /listed "))
    );

    // Unlisted hosts are refused by the proxy, with the reason.
    let refused = via_proxy(
        &mut c,
        "net",
        &format!(
            "GET http://{ip}:{}/unlisted HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n",
            outside.port
        ),
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        refused.contains(&format!("{ip} is not in the allow-net list of box net")),
        "{refused}"
    );
    let tunnel = via_proxy(
        &mut c,
        "net",
        "CONNECT example.com:443 HTTP/1.1\\r\\n\\r\\n",
    )
    .await;
    assert!(tunnel.starts_with("HTTP/1.1 403"), "{tunnel}");
    // Each refusal is seen on the host too: a box event with the box, the
    // host and the port (HTTPS included, which the box only sees as a
    // failed CONNECT).
    let mut refusals = Vec::new();
    for _ in 0..100 {
        let mut s = c
            .watch_boxes(v1::WatchBoxesRequest {
                since_ms: 1,
                // Now: the kept events, then the stream ends.
                until_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64,
                initial: false,
            })
            .await
            .unwrap()
            .into_inner();
        refusals.clear();
        while let Some(e) = s.message().await.unwrap() {
            if e.name == "net" && e.message.starts_with("egress refused") {
                refusals.push(e.message);
            }
        }
        if refusals.iter().any(|m| m.contains("example.com:443"))
            && refusals
                .iter()
                .any(|m| m.contains(&format!("{ip}:{}", outside.port)))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        refusals.iter().any(|m| m.contains("example.com:443")),
        "{refusals:?}"
    );
    println!("refusal events: {refusals:#?}");
    let out = run(
        &mut c,
        "net",
        &[
            "wget",
            "-q",
            "-O",
            "-",
            &format!("http://{ip}:{}/x", outside.port),
        ],
    )
    .await;
    assert_ne!(out.exit.code, Some(0), "{out:?}");
    assert!(outside.requests().is_empty(), "{:?}", outside.requests());

    // Raw TCP, a request around the proxy, DNS: nothing leaves.
    // Control: the host reaches the same server directly.
    let mut conn = TcpStream::connect((ip.as_str(), outside.port)).unwrap();
    conn.write_all(b"GET /control HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert!(reply.ends_with("hello"));
    let raw = run(
        &mut c,
        "net",
        &[
            "sh",
            "-c",
            &format!("echo hi | nc -w 3 {ip} {}", outside.port),
        ],
    )
    .await;
    assert_ne!(raw.exit.code, Some(0), "raw TCP left the box: {raw:?}");
    let direct = run(
        &mut c,
        "net",
        &["wget", "-Y", "off", "-T", "3", "-q", "-O", "-", &url],
    )
    .await;
    assert_ne!(direct.exit.code, Some(0), "{direct:?}");
    let resolver = std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("nameserver ")
                .map(str::trim)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "1.1.1.1".into());
    let dns = run(&mut c, "net", &["nslookup", "example.com", &resolver]).await;
    assert_ne!(dns.exit.code, Some(0), "DNS left the box: {dns:?}");
    let control = std::process::Command::new("getent")
        .args(["hosts", "localhost"])
        .output()
        .unwrap();
    assert!(control.status.success());
    assert_eq!(
        outside.requests().len(),
        1,
        "only the host's control request: {:?}",
        outside.requests()
    );

    // Wildcards, and the list is checked at create.
    let bad = c
        .create_box(v1::CreateBoxRequest {
            name: "bad-net".into(),
            spec: Some(allow(&["https://example.com"])),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(bad.message().contains("allow-net"), "{}", bad.message());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_goes_only_to_its_hosts_and_never_into_the_box() {
    let d = Daemon::start();
    let server = Server::start("127.0.0.1");
    let value = format!("boxd-test-secret-{}", rand::random::<u64>());
    // Through harness-box-exec, with the value in its environment.
    let script = format!(
        "wget -q -O - --header \"Authorization: Bearer $API_TOKEN\" http://host.boxd.internal:{}/with-secret",
        server.port
    );
    let out = d
        .proxy()
        .env("API_TOKEN", &value)
        .args(["--box", "secretive", "--image"])
        .arg(busybox())
        .args([
            "--allow-net",
            "host.boxd.internal",
            "--allow-net",
            "localhost",
            "--secret",
            "API_TOKEN:host.boxd.internal",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = server.requests();
    assert!(
        got.iter()
            .any(|r| r.contains(&format!("Authorization: Bearer {value}"))),
        "the listed host got the value: {got:?}"
    );

    let mut c = d.client().await;
    // The box holds the placeholder.
    let env = sh(&mut c, "secretive", "echo $API_TOKEN").await;
    assert_eq!(env.trim(), "BOXD_SECRET_PLACEHOLDER_API_TOKEN");
    // Another allowed host is not one of the secret's: a request that
    // carries the placeholder there is refused, naming the secret.
    let answer = via_proxy(
        &mut c,
        "secretive",
        &format!(
            "GET http://localhost:{}/other HTTP/1.1\\r\\nHost: localhost\\r\\nAuthorization: Bearer $API_TOKEN\\r\\n\\r\\n",
            server.port
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(
        answer.contains("placeholder of secret API_TOKEN, which goes only to host.boxd.internal"),
        "{answer}"
    );
    assert!(!answer.contains(&value), "{answer}");
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.starts_with("GET /other ")),
        "never sent"
    );

    // Nowhere in the box: not in any process's environment or command
    // line, not in any file. The search gets the value in two halves, so
    // that its own environment and command line do not hold it whole.
    let (a, b) = value.split_at(value.len() / 2);
    let search = "printf '%s%s\\n' \"$A\" \"$B\" > /tmp/pattern; \
         cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c -F -f /tmp/pattern; \
         find / -xdev -type f ! -path /tmp/pattern 2>/dev/null | xargs grep -l -F -f /tmp/pattern 2>/dev/null | wc -l; \
         rm /tmp/pattern";
    let mut start = start_req("secretive", &["sh", "-c", search]);
    start.env = std::collections::HashMap::from([("A".into(), a.into()), ("B".into(), b.into())]);
    let found = collect(ExecStream::start(&mut c, start).await.unwrap()).await;
    let counts: Vec<String> = found
        .stdout_str()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(counts, ["0", "0"], "{found:?}");
    // Control: the same search finds a value that is there.
    let mut start = start_req("secretive", &["sh", "-c", search]);
    start.env = std::collections::HashMap::from([
        ("A".into(), "BOXD_SECRET_PLACEHOLDER".into()),
        ("B".into(), "_API_TOKEN".into()),
    ]);
    let found = collect(ExecStream::start(&mut c, start).await.unwrap()).await;
    assert_ne!(
        found.stdout_str().split_whitespace().next(),
        Some("0"),
        "{found:?}"
    );

    // Not in any reply, nor in the daemon's log.
    let inspect = d
        .boxctl()
        .args(["inspect", "secretive", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        text.contains("API_TOKEN") && !text.contains(&value),
        "{text}"
    );
    let log = std::fs::read_to_string(d.home.join("logs/boxd.log")).unwrap_or_default();
    assert!(!log.contains(&value));
}

#[tokio::test(flavor = "multi_thread")]
async fn npm_install_through_a_box_that_may_reach_only_the_registry() {
    let image = boxd_tests::agent::node_image();
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut mounts = Vec::new();
    let mut env = std::collections::HashMap::new();
    if let Ok(ca) = std::env::var("NODE_EXTRA_CA_CERTS") {
        mounts.push(v1::Mount {
            host_path: ca,
            guest_path: "/etc/ssl/host-extra-ca.crt".into(),
            read_only: true,
        });
        env.insert(
            "NODE_EXTRA_CA_CERTS".to_owned(),
            "/etc/ssl/host-extra-ca.crt".to_owned(),
        );
    }
    let spec = |hosts: &[&str]| v1::BoxSpec {
        image: image.to_string_lossy().into_owned(),
        allow_net: hosts.iter().map(|h| h.to_string()).collect(),
        mounts: mounts.clone(),
        env: env.clone(),
        ..Default::default()
    };
    up(&mut c, "npm-ok", spec(&["registry.npmjs.org"])).await;
    let install = "cd /tmp && npm install --no-audit --no-fund --fetch-retries=0 is-number@7.0.0 2>&1 && node -e 'console.log(require(\"is-number\")(5))'";
    let out = run(&mut c, "npm-ok", &["sh", "-c", install]).await;
    assert_eq!(out.exit.code, Some(0), "{}", out.stdout_str());
    assert!(
        out.stdout_str().trim_end().ends_with("true"),
        "{}",
        out.stdout_str()
    );

    // Control: the same install from a box that may reach another host only.
    up(&mut c, "npm-no", spec(&["example.com"])).await;
    let out = run(&mut c, "npm-no", &["sh", "-c", install]).await;
    assert_ne!(out.exit.code, Some(0), "{}", out.stdout_str());
    assert!(out.stdout_str().contains("403"), "{}", out.stdout_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_jsonl_envelope_carries_allow_net_and_secrets() {
    let d = Daemon::start();
    let server = Server::start("127.0.0.1");
    let value = format!("jsonl-secret-{}", rand::random::<u64>());
    let mut j = Jsonl::start(&d.socket);
    let reply = j.call(
        1,
        "box.create",
        serde_json::json!({
            "name": "enveloped",
            "image": busybox(),
            "allowNet": ["host.boxd.internal"],
            "secrets": [{"name": "TOKEN", "hosts": ["host.boxd.internal"], "value": value}],
        }),
    );
    assert_eq!(reply["result"]["created"], true, "{reply}");
    j.call(2, "box.start", serde_json::json!({"name": "enveloped"}));
    let script = format!(
        "wget -q -O /dev/null --header \"X-Token: $TOKEN\" http://host.boxd.internal:{}/jsonl",
        server.port
    );
    let exec = j.call(
        3,
        "box.exec",
        serde_json::json!({"name": "enveloped", "command": "sh", "args": ["-c", script]}),
    );
    let exit = j.exit_of(exec["result"]["execId"].as_str().unwrap());
    assert_eq!(exit["exitCode"], 0, "{exit}");
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.contains(&format!("X-Token: {value}"))),
        "{:?}",
        server.requests()
    );
    // A value is write-only: what boxd says of the box holds no value.
    let mut c = d.client().await;
    let info = c
        .inspect_box(v1::InspectBoxRequest {
            name: "enveloped".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let secrets = info.spec.unwrap().secrets;
    assert_eq!(secrets.len(), 1);
    assert_eq!(secrets[0].name, "TOKEN");
    assert!(secrets[0].value.is_empty());
    // Exactly one source for a value.
    let bad = j.call(
        4,
        "box.create",
        serde_json::json!({"name": "bad", "image": busybox(), "allowNet": ["example.com"],
            "secrets": [{"name": "T", "hosts": ["example.com"]}]}),
    );
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("exactly one of value"),
        "{bad}"
    );
}

/// A test CA and a certificate from it for the fake API (`host.boxd.internal`
/// and this host's address), as PEM files in `dir`: `ca.pem`, `cert.pem`,
/// `key.pem`.
fn test_ca(dir: &std::path::Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "boxd test CA");
    let ca = params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["host.boxd.internal".to_owned(), host_address()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    for (name, text) in [
        ("ca.pem", ca.pem()),
        ("cert.pem", cert.pem()),
        ("key.pem", key.serialize_pem()),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `tests/https/fake-api.mjs` on the host's loopback: its port and process.
fn fake_api(dir: &std::path::Path) -> (u16, std::process::Child) {
    use std::io::BufRead;
    let script = boxd_tests::agent::workspace().join("tests/https/fake-api.mjs");
    let mut child = std::process::Command::new("node")
        .arg(script)
        .args([
            dir.join("key.pem"),
            dir.join("cert.pem"),
            dir.join("log.jsonl"),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node on the host");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .unwrap()
        .parse()
        .unwrap();
    (port, child)
}

/// A test CA, the fake API with a certificate from it, and a daemon that
/// trusts it as its host trust (as a corporate CA is): the CA's directory,
/// the API's port and process, the daemon.
fn fake_api_and_daemon() -> (tempfile::TempDir, u16, std::process::Child, Daemon) {
    let ca_dir = tempfile::tempdir().unwrap();
    test_ca(ca_dir.path());
    let (port, api) = fake_api(ca_dir.path());
    let d = Daemon::with_env(
        "namespace",
        vec![(
            "SSL_CERT_FILE".into(),
            ca_dir.path().join("ca.pem").to_string_lossy().into_owned(),
        )],
    );
    (ca_dir, port, api, d)
}

/// Every readable byte of the memory of each process in another pid
/// namespace than this one (boxes'), searched for `needle`: the pids that
/// hold it.
fn processes_holding(needle: &[u8]) -> Vec<i32> {
    use std::os::unix::fs::FileExt;
    let ours = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let mut holding = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        match std::fs::read_link(format!("/proc/{pid}/ns/pid")) {
            Ok(ns) if ns != ours => {}
            _ => continue,
        }
        let (Ok(maps), Ok(mem)) = (
            std::fs::read_to_string(format!("/proc/{pid}/maps")),
            std::fs::File::open(format!("/proc/{pid}/mem")),
        ) else {
            continue;
        };
        for line in maps.lines() {
            let mut parts = line.split_whitespace();
            let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
                continue;
            };
            if !perms.starts_with('r') || line.ends_with("[vvar]") {
                continue;
            }
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            );
            let mut buf = vec![0; (b - a).min(256 << 20) as usize];
            if let Ok(n) = mem.read_at(&mut buf, a)
                && buf[..n].windows(needle.len()).any(|w| w == needle)
            {
                holding.push(pid);
                break;
            }
        }
    }
    holding
}

#[tokio::test(flavor = "multi_thread")]
async fn https_to_a_secret_s_host_carries_the_value_and_the_box_never_sees_it() {
    let image = boxd_tests::agent::node_image();
    let sdk = boxd_tests::agent::npm_dir("https", &["@anthropic-ai/sdk"]);
    let (ca_dir, port, mut api, d) = fake_api_and_daemon();
    let mut c = d.client().await;
    let value = format!("sk-ant-test-{}", rand::random::<u64>());
    let mount = |host: &std::path::Path, guest: &str| v1::Mount {
        host_path: host.to_string_lossy().into_owned(),
        guest_path: guest.into(),
        read_only: true,
    };
    let spec = v1::BoxSpec {
        image: image.to_string_lossy().into_owned(),
        allow_net: vec!["host.boxd.internal".into(), host_address()],
        secrets: vec![v1::Secret {
            name: "API_KEY".into(),
            hosts: vec!["host.boxd.internal".into()],
            placeholder: String::new(),
            value: value.clone(),
        }],
        mounts: vec![
            mount(&sdk, "/opt/https"),
            mount(ca_dir.path(), "/opt/testca"),
        ],
        ..Default::default()
    };
    up(&mut c, "agent-https", spec).await;
    let script = format!(
        "node /opt/https/box-client.mjs {port} /opt/testca/ca.pem 100 {} 2>&1",
        host_address()
    );
    let out = run(&mut c, "agent-https", &["sh", "-c", &script]).await;
    let text = out.stdout_str();
    assert_eq!(out.exit.code, Some(0), "{text}");
    let got: serde_json::Value = serde_json::from_str(text.trim()).expect(&text);
    let placeholder = "BOXD_SECRET_PLACEHOLDER_API_KEY";
    assert_eq!(got["key"], placeholder, "the box holds the placeholder");
    // fetch and https: the upstream's echo of the key comes back as the placeholder.
    for client in ["fetch", "https"] {
        assert_eq!(got[client]["status"], 401, "{got}");
        assert_eq!(
            got[client]["body"],
            format!("invalid key: Bearer {placeholder}"),
            "{got}"
        );
    }
    assert_eq!(got["fetch"]["echo"], format!("Bearer {placeholder}"));
    // The first event of a stream came when it was sent, not with the last.
    assert_eq!(got["sse"]["first"], "data: one\n\n", "{got}");
    let (first, end) = (
        got["sse"]["firstAt"].as_u64().unwrap(),
        got["sse"]["endAt"].as_u64().unwrap(),
    );
    assert!(
        first + 500 < end,
        "first event at {first} ms, end at {end} ms"
    );
    // The official SDK, plain and streamed.
    assert_eq!(got["sdk"], "hello from the fake API", "{got}");
    assert_eq!(got["sdkStream"], "hello from the fake API", "{got}");
    // Pinned to the real CA, to an intercepted host: fails, by its chain.
    let pinned = got["pinned"]["error"].as_str().unwrap_or_default();
    assert!(
        [
            "SELF_SIGNED_CERT_IN_CHAIN",
            "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
            "UNABLE_TO_GET_ISSUER_CERT_LOCALLY"
        ]
        .contains(&pinned),
        "{got}"
    );
    // A host no secret names is a blind tunnel: the server's own certificate.
    assert_eq!(got["blind"]["status"], 401, "{got}");
    assert_eq!(got["blind"]["issuer"], "boxd test CA", "{got}");

    // What the upstream saw: the value, for the secret's host only, and
    // an uncompressed answer asked for.
    let log = std::fs::read_to_string(ca_dir.path().join("log.jsonl")).unwrap();
    let entries: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(entries.len() >= 105, "{}", entries.len());
    let with_value = entries
        .iter()
        .filter(|e| e["auth"].as_str().unwrap().contains(&value))
        .count();
    assert_eq!(
        with_value,
        entries.len() - 2,
        "all but /sse and the blind one: {log}"
    );
    assert!(
        entries
            .iter()
            .filter(|e| e["auth"].as_str().unwrap().contains(&value))
            .all(|e| e["encoding"] == "identity")
    );

    // Nowhere in the box: no process's environment or memory, no file of
    // its upper layer, after 100 requests.
    let (a, b) = value.split_at(value.len() / 2);
    let search = "printf '%s%s\\n' \"$A\" \"$B\" > /tmp/pattern; \
         cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c -F -f /tmp/pattern; \
         rm /tmp/pattern";
    let mut start = start_req("agent-https", &["sh", "-c", search]);
    start.env = std::collections::HashMap::from([("A".into(), a.into()), ("B".into(), b.into())]);
    let found = collect(ExecStream::start(&mut c, start).await.unwrap()).await;
    assert_eq!(found.stdout_str().trim(), "0", "{found:?}");
    if nix::unistd::geteuid().is_root() {
        // A box process that made requests stays alive; its memory is read.
        let mut hold = start_req(
            "agent-https",
            &[
                "sh",
                "-c",
                &format!("node /opt/https/box-client.mjs {port} /opt/testca/ca.pem 5 >/dev/null"),
            ],
        );
        hold.detach = true;
        hold.env = std::collections::HashMap::from([("HOLD_FILE".into(), "/tmp/ready".into())]);
        drop(ExecStream::start(&mut c, hold).await.unwrap());
        sh(
            &mut c,
            "agent-https",
            "while [ ! -e /tmp/ready ]; do sleep 0.1; done",
        )
        .await;
        let holding = processes_holding(value.as_bytes());
        assert!(
            holding.is_empty(),
            "box processes {holding:?} hold the value"
        );
        // Control: the placeholder is found in the same memory.
        assert!(!processes_holding(placeholder.as_bytes()).is_empty());
    }
    let mut files = vec![d.home.clone()];
    let mut hits = Vec::new();
    while let Some(path) = files.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else if meta.is_file()
            && path.components().any(|c| c.as_os_str() == "upper")
            && std::fs::read(&path)
                .is_ok_and(|bytes| bytes.windows(value.len()).any(|w| w == value.as_bytes()))
        {
            hits.push(path);
        }
    }
    assert!(hits.is_empty(), "in the box's files: {hits:?}");
    // And the box trusts its CA beside the image's roots.
    let bundle = sh(&mut c, "agent-https", "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt /etc/boxd/ca-bundle.pem /etc/boxd/ca.pem").await;
    let counts: Vec<&str> = bundle.lines().collect();
    assert_eq!(counts.len(), 3, "{bundle}");
    assert!(counts[2].ends_with(":1"), "{bundle}");
    assert_eq!(
        counts[0].rsplit(':').next(),
        counts[1].rsplit(':').next(),
        "{bundle}"
    );
    // inspect and doctor say which hosts are intercepted.
    let inspect = d
        .boxctl()
        .args(["inspect", "agent-https", "--json"])
        .output()
        .unwrap();
    let inspect: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let inspect = if inspect.is_array() {
        inspect[0].clone()
    } else {
        inspect
    };
    assert_eq!(
        inspect["interceptedHosts"],
        serde_json::json!(["host.boxd.internal"]),
        "{inspect}"
    );
    let doctor = d.boxctl().args(["doctor"]).output().unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        doctor.contains("agent-https: host.boxd.internal"),
        "{doctor}"
    );
    assert!(!doctor.contains(&value) && !inspect.to_string().contains(&value));
    let _ = api.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn harness_box_exec_runs_an_acp_agent_whose_model_calls_carry_the_value() {
    let image = boxd_tests::agent::node_image();
    let sdk =
        boxd_tests::agent::npm_dir("https", &["@anthropic-ai/sdk", "@agentclientprotocol/sdk"]);
    let acp = boxd_tests::agent::acp_dir();
    let (ca_dir, port, mut api, d) = fake_api_and_daemon();
    let value = format!("sk-ant-acp-{}", rand::random::<u64>());
    let project = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("node")
        .arg(acp.join("editor-client.mjs"))
        .arg("--cwd")
        .arg(project.path())
        .args(["--prompt", "hello"])
        .arg("--")
        .arg(bin("harness-box-exec"))
        .args(["--box", "tiny-agent", "--image"])
        .arg(&image)
        .arg("--mount")
        .arg(format!("{}:/workspace", project.path().display()))
        .arg("--mount")
        .arg(format!("{}:/opt/https:ro", sdk.display()))
        .args([
            "--allow-net",
            "host.boxd.internal",
            "--secret",
            "ANTHROPIC_API_KEY:host.boxd.internal",
            "--env",
            &format!("ANTHROPIC_BASE_URL=https://host.boxd.internal:{port}"),
            "--",
            "node",
            "/opt/https/tiny-agent.mjs",
        ])
        .env("ANTHROPIC_API_KEY", &value)
        .env("BOXD_SOCKET", &d.socket)
        .env("BOXD_HOME", &d.home)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no result ({e}): {stderr}"));
    assert_eq!(result["stopReason"], "end_turn", "{result} {stderr}");
    assert!(
        result["text"]
            .as_str()
            .unwrap_or_default()
            .contains("hello from the fake API"),
        "{result} {stderr}"
    );
    let log = std::fs::read_to_string(ca_dir.path().join("log.jsonl")).unwrap();
    assert!(
        log.contains(&value),
        "the model call carried the value: {log}"
    );
    assert!(!stderr.contains(&value) && !result.to_string().contains(&value));
    let _ = api.kill();
}
