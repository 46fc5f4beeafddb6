//! `BoxStats` end to end on the namespace engine: a box running a known
//! load (a busy loop, a process holding 64 MiB, sleeping processes, files
//! written, a download through its egress proxy) is measured as such,
//! one-shot and streaming, through the client library, `boxctl stats` and
//! the JSONL envelope.

use std::io::{Read, Write};
use std::net::TcpListener;

use boxd_client::tonic::{Code, Status};
use boxd_tests::*;
use serde_json::json;

const MIB: u64 = 1 << 20;

/// Serves `size` bytes to every HTTP request on the host's loopback.
fn serve_bytes(size: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
                );
                let _ = conn.write_all(reply.as_bytes());
                let _ = conn.write_all(&vec![b'x'; size]);
            });
        }
    });
    port
}

/// Starts `script` in the box, detached, and leaves it running.
async fn detached(c: &mut Client, name: &str, script: &str) {
    let exec = ExecStream::start(
        c,
        v1::ExecStart {
            detach: true,
            ..start_req(name, &["sh", "-c", script])
        },
    )
    .await
    .expect("exec start");
    drop(exec);
}

async fn one_sample(c: &mut Client, names: &[&str]) -> Result<Vec<v1::BoxStat>, Status> {
    let mut stream = c
        .box_stats(v1::BoxStatsRequest {
            names: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let sample = stream.message().await?.expect("one sample");
    assert!(stream.message().await?.is_none(), "one-shot: one sample");
    Ok(sample.boxes)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_known_load_is_measured_as_such() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let port = serve_bytes(3 * MIB as usize);
    up(
        &mut c,
        "load",
        v1::BoxSpec {
            memory_mib: Some(512),
            allow_net: vec!["host.boxd.internal".into()],
            ..busybox_spec()
        },
    )
    .await;
    up(&mut c, "idle", busybox_spec()).await;

    let idle = one_sample(&mut c, &["idle"]).await.unwrap();
    assert_eq!(idle.len(), 1);
    assert_eq!(idle[0].name, "idle");
    assert_eq!(idle[0].net_rx_bytes, 0, "{idle:?}");

    sh(
        &mut c,
        "load",
        "head -c 8388608 /dev/zero > /root/eight-mib && sync",
    )
    .await;
    let got = sh(
        &mut c,
        "load",
        &format!("wget -q -O - http://host.boxd.internal:{port}/ | wc -c"),
    )
    .await;
    assert_eq!(got.trim(), (3 * MIB).to_string());
    detached(&mut c, "load", "while :; do :; done").await;
    detached(
        &mut c,
        "load",
        "dd if=/dev/zero bs=64M count=1 2>/dev/null | sleep 3600",
    )
    .await;
    for _ in 0..3 {
        detached(&mut c, "load", "sleep 3600").await;
    }
    // The 64 MiB buffer is filled before dd blocks on the pipe.
    let mut s = one_sample(&mut c, &["load"]).await.unwrap();
    for _ in 0..50 {
        if s[0].memory_bytes >= 64 * MIB {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        s = one_sample(&mut c, &["load"]).await.unwrap();
    }
    let s = &s[0];
    eprintln!("measured: {s:?}");
    assert_eq!(s.name, "load");
    assert!(s.memory_bytes >= 64 * MIB, "dd holds 64 MiB: {s:?}");
    assert!(
        s.memory_bytes < 512 * MIB,
        "no more than the box's limit: {s:?}"
    );
    // Root enforces memory limits here (cgroup v1 is root's alone).
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    assert_eq!(s.memory_limit_bytes, root.then_some(512 * MIB), "{s:?}");
    // The loop's shell, dd, its sleep, three sleeps.
    assert!(s.pids >= 6, "{s:?}");
    assert!(s.disk_bytes.unwrap() >= 8 * MIB, "{s:?}");
    assert!(s.net_rx_bytes >= 3 * MIB, "the download came in: {s:?}");
    assert!(s.net_tx_bytes > 0, "the request went out: {s:?}");

    // CPU time: the loop runs on; a second later the box has used more.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let later = &one_sample(&mut c, &["load"]).await.unwrap()[0];
    assert!(
        later.cpu_usec >= s.cpu_usec + 100_000,
        "a busy loop used CPU: {s:?} then {later:?}"
    );
    assert!(later.cpu_percent > 0.0, "{later:?}");

    // Every running box, when none is named.
    let all = one_sample(&mut c, &[]).await.unwrap();
    let mut names: Vec<_> = all.iter().map(|b| b.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["idle", "load"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_samples_until_the_client_goes_and_outlives_a_stop() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "s1", busybox_spec()).await;
    up(&mut c, "s2", busybox_spec()).await;
    let mut stream = c
        .box_stats(v1::BoxStatsRequest {
            names: vec!["s1".into(), "s2".into()],
            stream: true,
            interval_ms: 100,
        })
        .await
        .unwrap()
        .into_inner();
    for _ in 0..3 {
        let sample = stream.message().await.unwrap().unwrap();
        assert_eq!(sample.boxes.len(), 2, "{sample:?}");
    }
    c.stop_box(v1::StopBoxRequest {
        name: "s2".into(),
        force: true,
    })
    .await
    .unwrap();
    // Samples go on, without the stopped box.
    let mut left = Vec::new();
    for _ in 0..20 {
        let sample = stream.message().await.unwrap().unwrap();
        left = sample.boxes.iter().map(|b| b.name.clone()).collect();
        if left.len() == 1 {
            break;
        }
    }
    assert_eq!(left, ["s1"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_clear_errors() {
    let d = Daemon::start();
    let mut c = d.client().await;
    create(&mut c, "stopped", busybox_spec()).await;
    let e = one_sample(&mut c, &["nope"]).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = one_sample(&mut c, &["stopped"]).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("start it first"), "{e:?}");
    let e = one_sample(&mut c, &["../etc"]).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    // No running box: an empty sample, not an error.
    assert!(one_sample(&mut c, &[]).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn boxctl_and_jsonl_show_stats() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "cli", busybox_spec()).await;

    let out = d
        .boxctl()
        .args(["--json", "stats", "--no-stream", "cli"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["name"], "cli");
    assert!(lines[0]["pids"].as_u64().unwrap() >= 1, "{lines:?}");
    assert!(lines[0]["memoryBytes"].as_u64().unwrap() > 0, "{lines:?}");

    let table = d.boxctl().args(["stats", "--no-stream"]).output().unwrap();
    assert!(table.status.success(), "{table:?}");
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.starts_with("NAME"), "{text}");
    assert!(text.lines().nth(1).unwrap().starts_with("cli "), "{text}");

    let missing = d
        .boxctl()
        .args(["stats", "--no-stream", "nope"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope"));

    let mut j = Jsonl::start(&d.socket);
    let reply = j.call(1, "box.stats", json!({"names": ["cli"]}));
    assert_eq!(reply["result"][0]["name"], "cli", "{reply}");
    assert!(reply["result"][0]["cpuUsec"].is_u64(), "{reply}");
    let bad = j.call(2, "box.stats", json!({"names": "cli"}));
    assert_eq!(bad["error"]["code"], "invalid_params", "{bad}");
    drop(j);
}
