//! Published ports end to end: a real HTTP server in a box reached from
//! the host through `--publish`, across a restart of boxd, until the box
//! stops; and what must fail, failing clearly.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use boxd_client::{ExecStream, v1};
use boxd_tests::*;
use sha2::{Digest, Sha256};

/// `127.0.0.1:0:8000`: any free host port on loopback, box port 8000.
fn publish(host_ip: &str, host_port: u32, box_port: u32) -> v1::PortMapping {
    v1::PortMapping {
        host_ip: host_ip.into(),
        host_port,
        box_port,
        protocol: String::new(),
    }
}

fn spec_with(ports: Vec<v1::PortMapping>) -> v1::BoxSpec {
    v1::BoxSpec {
        ports,
        ..busybox_spec()
    }
}

/// The one published address of a running box.
fn published(info: &v1::BoxInfo) -> SocketAddr {
    assert_eq!(info.ports.len(), 1, "{:?}", info.ports);
    let p = &info.ports[0];
    assert_ne!(p.host_port, 0, "the actual host port is reported");
    format!("{}:{}", p.host_ip, p.host_port).parse().unwrap()
}

/// An HTTP/1.0 GET from the host: the status line and the body.
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(String, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: box\r\n\r\n")?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no HTTP reply: {} bytes", all.len())))?;
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    let status = head.lines().next().unwrap_or_default().to_owned();
    Ok((status, all[end + 4..].to_vec()))
}

/// Starts busybox httpd on `port` in the box as a detached exec, serving
/// `/www`, and waits until it answers through `addr`.
async fn serve_http(c: &mut boxd_client::Client, name: &str, port: u16, addr: SocketAddr) {
    let port = port.to_string();
    let mut req = start_req(name, &["httpd", "-f", "-p", &port, "-h", "/www"]);
    req.detach = true;
    drop(ExecStream::start(c, req).await.expect("start httpd"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match get(addr, "/index.html") {
            Ok((status, _)) if status.contains("200") => return,
            other => assert!(
                Instant::now() < deadline,
                "httpd never answered through {addr}: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether anything accepts connections at `addr`.
fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_published_port_serves_http_from_the_host() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let info = up(
        &mut c,
        "web",
        spec_with(vec![publish("127.0.0.1", 0, 8000)]),
    )
    .await;
    let addr = published(&info);
    assert_eq!(addr.ip().to_string(), "127.0.0.1", "the default address");
    // 32 MiB of random bytes and a small page, written in the box.
    sh(
        &mut c,
        "web",
        "mkdir -p /www && echo 'hello from the box' > /www/index.html \
         && dd if=/dev/urandom of=/www/big bs=1M count=32 2>/dev/null",
    )
    .await;
    let in_box = sh(&mut c, "web", "sha256sum /www/big").await;
    serve_http(&mut c, "web", 8000, addr).await;

    let (status, body) = get(addr, "/index.html").unwrap();
    assert!(status.contains("200"), "{status}");
    assert_eq!(body, b"hello from the box\n");

    // Large: byte-exact.
    let (status, big) = get(addr, "/big").unwrap();
    assert!(status.contains("200"), "{status}");
    assert_eq!(big.len(), 32 << 20);
    assert_eq!(
        hex::encode(Sha256::digest(&big)),
        in_box.split_whitespace().next().unwrap()
    );

    // The box's network I/O counts what its ports moved: the 32 MiB out
    // (and the requests in).
    let stat = c
        .box_stats(v1::BoxStatsRequest {
            names: vec!["web".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap()
        .boxes
        .remove(0);
    println!(
        "stats after 32 MiB through the port: rx {} tx {}",
        stat.net_rx_bytes, stat.net_tx_bytes
    );
    assert!(stat.net_tx_bytes >= 32 << 20, "{stat:?}");
    assert!(stat.net_rx_bytes > 0, "{stat:?}");

    // Concurrent connections, each answered whole.
    let clients: Vec<_> = (0..16)
        .map(|i| {
            std::thread::spawn(move || {
                let path = if i % 4 == 0 { "/big" } else { "/index.html" };
                let (status, body) = get(addr, path).unwrap();
                assert!(status.contains("200"), "{status}");
                body.len()
            })
        })
        .collect();
    for (i, t) in clients.into_iter().enumerate() {
        let want = if i % 4 == 0 { 32 << 20 } else { 19 };
        assert_eq!(t.join().unwrap(), want, "connection {i}");
    }

    // boxctl port (docker's format), ls and inspect.
    let out = d.boxctl().args(["port", "web"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("8000/tcp -> {addr}\n")
    );
    let out = d
        .boxctl()
        .args(["port", "web", "8000/tcp"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("8000/tcp -> {addr}\n")
    );
    let out = d.boxctl().args(["port", "web", "9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("publishes no port 9/tcp"));
    let out = d.boxctl().args(["--json", "port", "web"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["boxPort"], 8000);
    assert_eq!(v[0]["hostPort"], addr.port());
    let ls = d.boxctl().arg("ls").output().unwrap();
    let ls = String::from_utf8_lossy(&ls.stdout);
    assert!(ls.lines().next().unwrap().contains("PORTS"), "{ls}");
    assert!(ls.contains(&format!("{addr}->8000/tcp")), "{ls}");
    let out = d
        .boxctl()
        .args(["inspect", "web", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ports"][0]["hostPort"], addr.port());
    assert_eq!(v["spec"]["ports"][0]["hostPort"], 0, "as asked");

    // Asking again with other ports reuses the box and says so.
    let again = create(&mut c, "web", spec_with(vec![publish("", 9000, 80)])).await;
    assert!(!again.created);
    assert!(
        again.warnings.iter().any(|w| w.contains("ports differs")),
        "{:?}",
        again.warnings
    );

    // Stopping the box frees the host port at once.
    d.boxctl().args(["stop", "web"]).output().unwrap();
    assert!(!listening(addr), "the host port closed with the box");
    std::net::TcpListener::bind(addr).expect("the host port is free again");
    assert!(inspect(&mut c, "web").await.ports.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn published_ports_keep_serving_across_daemon_restarts() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let info = up(&mut c, "keep", spec_with(vec![publish("", 0, 8000)])).await;
    let addr = published(&info);
    sh(
        &mut c,
        "keep",
        "mkdir -p /www && echo kept > /www/index.html",
    )
    .await;
    serve_http(&mut c, "keep", 8000, addr).await;

    // A crash: the supervisor holds the listener, nothing notices.
    d.kill();
    assert_eq!(get(addr, "/index.html").unwrap().1, b"kept\n");
    d.restart();
    let mut c = d.client().await;
    assert_eq!(published(&inspect(&mut c, "keep").await), addr);
    assert_eq!(get(addr, "/index.html").unwrap().1, b"kept\n");

    // An orderly restart (SIGTERM) leaves the box and its ports too.
    d.restart();
    let mut c = d.client().await;
    assert_eq!(published(&inspect(&mut c, "keep").await), addr);
    assert_eq!(get(addr, "/index.html").unwrap().1, b"kept\n");
    let out = d.boxctl().args(["port", "keep"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("8000/tcp -> {addr}\n")
    );

    // Stopped through the new daemon: closed.
    c.stop_box(v1::StopBoxRequest {
        name: "keep".into(),
        force: false,
    })
    .await
    .unwrap();
    assert!(!listening(addr));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_taken_host_port_fails_the_start_clearly() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let describe = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(describe.capabilities.iter().any(|c| c == "net.publish"));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    create(
        &mut c,
        "clash",
        spec_with(vec![publish("", 0, 81), publish("", port.into(), 80)]),
    )
    .await;
    let err = c
        .start_box(v1::StartBoxRequest {
            name: "clash".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), boxd_client::tonic::Code::FailedPrecondition);
    assert!(
        err.message()
            .contains(&format!("host address 127.0.0.1:{port} is already in use"))
            && err.message().contains("box port 80"),
        "{}",
        err.message()
    );
    // Nothing half-started: the box is as it was, with no supervisor.
    let info = inspect(&mut c, "clash").await;
    assert_eq!(info.state, v1::BoxState::Created as i32);
    assert!(info.ports.is_empty());
    assert!(
        !d.home
            .join("boxes")
            .join(&info.id)
            .join("supervisor.sock")
            .exists()
    );
    // Freed, the start works.
    drop(taken);
    let info = start(&mut c, "clash").await;
    assert_eq!(info.ports.len(), 2);
    assert!(info.ports.iter().any(|p| p.host_port == u32::from(port)));
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_publish_words_are_clear_errors() {
    let d = Daemon::start();
    let image = busybox();
    for (word, why) in [
        (&["-p", "70000:80"][..], "host port 70000 is out of range"),
        (&["-p", "abc"], "\"abc\" is not a number"),
        (&["-p", "80/udp"], "only TCP is relayed"),
        (
            &["-p", "8080:80", "-p", "8080:81"],
            "both take host port 8080",
        ),
        (&["-p", "999.0.0.1:80:80"], "not an IPv4 or IPv6 address"),
        (&["-p", "1:2:3:4"], "too many ':'"),
    ] {
        let out = d
            .boxctl()
            .args(["create", "hostile", "--image"])
            .arg(&image)
            .args(word)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(2 | 125)),
            "{word:?}: {out:?}"
        );
        assert!(err.contains(why), "{word:?}: {err}");
    }
    // The wire itself, as another client could send it.
    let mut c = d.client().await;
    for (port, why) in [
        (publish("", 70000, 80), "not in 0-65535"),
        (publish("", 80, 0), "not in 1-65535"),
        (publish("", 80, 1 << 20), "not in 1-65535"),
        (
            v1::PortMapping {
                protocol: "sctp".into(),
                ..publish("", 0, 80)
            },
            "only TCP is relayed",
        ),
        (publish("localhost", 0, 80), "not an IPv4 or IPv6 address"),
    ] {
        let err = c
            .create_box(v1::CreateBoxRequest {
                name: "hostile".into(),
                spec: Some(spec_with(vec![port])),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), boxd_client::tonic::Code::InvalidArgument);
        assert!(err.message().contains(why), "{}", err.message());
    }
    assert!(list(&mut c).await.is_empty(), "nothing was created");
    // A wildcard address is allowed, with a warning.
    let r = create(&mut c, "wide", spec_with(vec![publish("0.0.0.0", 0, 80)])).await;
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("other machines can reach")),
        "{:?}",
        r.warnings
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn publishing_is_inbound_only() {
    let d = Daemon::start();
    let mut c = d.client().await;
    // No allow-net: no way out, published port or not.
    let info = up(
        &mut c,
        "sealed",
        spec_with(vec![publish("0.0.0.0", 0, 8000)]),
    )
    .await;
    let port = info.ports[0].host_port;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    sh(
        &mut c,
        "sealed",
        "mkdir -p /www && echo in > /www/index.html",
    )
    .await;
    serve_http(&mut c, "sealed", 8000, addr).await;
    // Control: the host reaches the box.
    assert_eq!(get(addr, "/index.html").unwrap().1, b"in\n");
    // The box does not reach the host's listener: 127.0.0.1 is its own
    // loopback, and it has no other interface, so no route anywhere.
    let out = run(
        &mut c,
        "sealed",
        &[
            "sh",
            "-c",
            &format!(
                "echo x | nc -w 3 127.0.0.1 {port}; echo \"loopback=$?\"; \
                 echo x | nc -w 3 192.0.2.1 {port}; echo \"out=$?\"; \
                 tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
            ),
        ],
    )
    .await;
    let text = out.stdout_str();
    assert!(text.contains("loopback=1"), "{text} {out:?}");
    assert!(text.contains("out=1"), "{text} {out:?}");
    assert_eq!(text.lines().last(), Some("lo"), "{text}");
}

async fn inspect(c: &mut boxd_client::Client, name: &str) -> v1::BoxInfo {
    c.inspect_box(v1::InspectBoxRequest { name: name.into() })
        .await
        .expect("inspect")
        .into_inner()
}
