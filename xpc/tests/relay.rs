//! The XPC shim's transport-neutral part, on Linux: frames in, the JSONL
//! driver, gRPC to a real boxd, frames out, `transport` first.

use std::time::Duration;

use boxd_tests::{Daemon, busybox};
use harness_box_xpc::relay::Relay;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn frames_in_frames_out_transport_first() {
    let d = Daemon::start();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let (relay, task) = Relay::start(d.socket.clone(), move |frame| {
        let _ = tx.send(frame);
    });
    let mut next = async || -> Value {
        let f = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("a frame within 30 s")
            .expect("relay open");
        assert!(!f.contains(&b'\n'), "one frame per message");
        serde_json::from_slice(&f).expect("a JSON frame")
    };
    let transport = next().await;
    assert_eq!(transport["type"], "transport", "{transport}");
    assert_eq!(transport["servicePid"], d.pid());
    assert_eq!(transport["bridgePid"], std::process::id());

    let send = |v: Value| serde_json::to_vec(&v).unwrap();
    // Requests are dispatched concurrently: wait for each reply in turn.
    let requests = [
        json!({"id": 1, "method": "box.create", "params": {"name": "x", "image": busybox()}}),
        json!({"id": 2, "method": "box.start", "params": {"name": "x"}}),
        json!({"id": 3, "method": "box.exec", "params": {"name": "x", "command": "echo", "args": ["through the relay"]}}),
    ];
    let mut output = String::new();
    for (n, req) in requests.into_iter().enumerate() {
        assert!(relay.send(send(req)).await);
        loop {
            let f = next().await;
            if f["type"] == "output" {
                output.push_str(f["data"].as_str().unwrap_or_default());
            }
            if f.get("id") == Some(&json!(n + 1)) {
                assert!(f.get("error").is_none(), "{f}");
                break;
            }
        }
    }
    loop {
        let f = next().await;
        if f["type"] == "output" {
            output.push_str(f["data"].as_str().unwrap_or_default());
        }
        if f["type"] == "exit" {
            assert_eq!(f["exitCode"], 0);
            break;
        }
    }
    assert_eq!(output, "through the relay\n");
    // Dropping the relay is end of input: the driver ends.
    drop(relay);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the driver ends with its input")
        .unwrap();
}
