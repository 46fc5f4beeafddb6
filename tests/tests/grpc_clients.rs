//! gRPC clients nobody here wrote, dialing boxd's Unix socket with no
//! workaround: stock `grpcio` and `grpcurl` (both from PyPI, pinned in
//! `tests/grpc/requirements.txt`) send the socket's path as `:authority`,
//! which the HTTP/2 layer under tonic refuses unless boxd rewrites it
//! (`daemon/src/authority.rs`).

use boxd_tests::*;

#[test]
fn stock_grpcio_is_answered_whatever_authority_it_sends() {
    let d = Daemon::start();
    let out = std::process::Command::new(sdk_python("grpc"))
        .arg(agent::workspace().join("tests/grpc/stock_client.py"))
        .arg(&d.socket)
        .output()
        .expect("run the grpcio client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["Describe"]["ok"], true, "{r}");
    assert_eq!(r["Describe"]["has_protocol"], true, "{r}");
    assert_eq!(r["ListBoxes"]["ok"], true, "{r}");
}

#[test]
fn grpcurl_is_answered_with_no_authority_flag() {
    let d = Daemon::start();
    let python = sdk_python("grpc");
    let grpcurl = python.parent().unwrap().join("grpcurl");
    let out = std::process::Command::new(grpcurl)
        .args(["-plaintext", "-unix", "-import-path"])
        .arg(agent::workspace().join("proto/proto"))
        .args(["-proto", "boxd/v1/boxd.proto"])
        .arg(&d.socket)
        .arg("boxd.v1.Boxd/Describe")
        .output()
        .expect("run grpcurl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["protocol"], "boxd.v1", "{reply}");
}
