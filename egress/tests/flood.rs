//! A box that opens 10,000 intercepted connections and leaves them idle:
//! the proxy serves its limit, answers every one past it with a `503`
//! naming the limit, keeps serving the ones it holds, and after they
//! close holds no descriptor more than before. In its own test binary so
//! that the descriptor count is this test's alone.

mod support;

use std::time::Duration;

use boxd_egress::MAX_CONNECTIONS;
use futures::future::join_all;
use http_body_util::BodyExt;
use tokio::io::AsyncReadExt;

use support::*;

const CONNECTIONS: usize = 10_000;

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The soft limit on descriptors: the test needs one per connection it
/// holds, and the proxy (in this process) one per connection it serves.
fn descriptor_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_intercepted_connections_get_the_limit_and_a_503_each() {
    // Every connection the test holds, and the proxy's side of those it
    // serves, plus slack for the runtime and the upstream.
    let needed = CONNECTIONS.min(MAX_CONNECTIONS * 2) + MAX_CONNECTIONS + 200;
    assert!(
        descriptor_limit() >= needed,
        "this test needs {needed} open files (ulimit -n)"
    );
    let up = upstream().await;
    let p = proxy(&up.root, &[HOST]).await;
    let target = format!("{HOST}:{}", up.port);
    let before = open_descriptors();

    // The limit's worth of intercepted connections, handshaken and idle.
    let mut held = Vec::new();
    for batch in 0..MAX_CONNECTIONS.div_ceil(32) {
        let n = 32.min(MAX_CONNECTIONS - batch * 32);
        let opened = join_all((0..n).map(|_| async {
            let (head, tcp) = try_connect(p.addr, &target).await;
            assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
            tls(tcp, &p.ca, HOST, &[b"h2"]).await.expect("the box's CA")
        }))
        .await;
        held.extend(opened);
    }

    // Every one past it: a 503 that says why, and nothing else (in
    // batches of 100: the refusals of the last batch may still be
    // draining, and at most MAX_CONNECTIONS are answered at once).
    let mut refused = 0;
    for batch in (MAX_CONNECTIONS..CONNECTIONS)
        .collect::<Vec<_>>()
        .chunks(100)
    {
        let answers = join_all(batch.iter().map(|_| async {
            let (head, mut s) = try_connect(p.addr, &target).await;
            let mut body = Vec::new();
            tokio::time::timeout(WAIT, s.read_to_end(&mut body))
                .await
                .expect("closed after the answer")
                .unwrap();
            (head, String::from_utf8_lossy(&body).into_owned())
        }))
        .await;
        for (head, body) in answers {
            assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
            assert!(
                body.contains(&format!(
                    "box devbox has {MAX_CONNECTIONS} connections open through its egress proxy"
                )),
                "{body}"
            );
            assert!(!body.contains(VALUE) && !head.contains(VALUE));
            refused += 1;
        }
    }
    assert_eq!(refused, CONNECTIONS - MAX_CONNECTIONS);

    // The held connections still carry requests, the value still only
    // upstream.
    let last = held.pop().unwrap();
    let (response, _conn) = get(last, "/echo", true).await;
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, format!("invalid key: Bearer {TOKEN}"));
    assert_eq!(
        up.seen.lock().unwrap().len(),
        1,
        "only that request went upstream"
    );

    // Closed, they free their slots and their descriptors.
    drop(held);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (head, tcp) = try_connect(p.addr, &target).await;
        if head.starts_with("HTTP/1.1 200 ") {
            let tls = tls(tcp, &p.ca, HOST, &[b"http/1.1"]).await.unwrap();
            let (response, _conn) = get(tls, "/echo", false).await;
            assert_eq!(response.status(), 200);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no slot came back: {head}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        // The upstream connections the two requests left in the pool,
        // and the server's side of them, may stay.
        let now = open_descriptors();
        if now <= before + 8 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{now} descriptors open, {before} before the flood"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
