//! Engine choice and the BoxLite engine, end to end. What only a host that
//! can boot microVMs can check is `#[ignore]`d with the reason (run it there
//! with `cargo test -- --ignored`); everything else runs everywhere.

use std::process::Command;

use boxd_client::tonic::Code;
use boxd_tests::*;

/// `boxd doctor`'s engine verdict: (can microVMs boot here, why).
fn verdict() -> (bool, String) {
    let out = Command::new(bin("boxd"))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let engine = checks
        .iter()
        .find(|c| c["name"] == "engine")
        .expect("an engine line")
        .clone();
    (
        engine["status"] == "ok",
        engine["detail"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_says_which_engine_and_why() {
    let (can_boot, why) = verdict();
    let d = Daemon::with_engine("auto");
    let mut c = d.client().await;
    let info = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    if can_boot {
        assert_eq!(
            (info.engine.as_str(), info.isolation.as_str()),
            ("boxlite", "microvm"),
            "{why}"
        );
        return;
    }
    assert_eq!(
        (info.engine.as_str(), info.isolation.as_str()),
        ("namespace", "namespace")
    );
    assert!(
        info.notes[0].contains("microVMs cannot boot here"),
        "{:?}",
        info.notes
    );
    let reply = c
        .create_box(v1::CreateBoxRequest {
            name: "a".into(),
            spec: Some(busybox_spec()),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        reply
            .warnings
            .iter()
            .any(|w| w.contains("microVMs cannot boot here")),
        "{:?}",
        reply.warnings
    );
    // A reused box is warned the same way.
    let again = c
        .create_box(v1::CreateBoxRequest {
            name: "a".into(),
            spec: Some(busybox_spec()),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        again
            .warnings
            .iter()
            .any(|w| w.contains("microVMs cannot boot here"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forced_boxlite_creates_lists_and_refuses_to_start_with_the_reason() {
    let (can_boot, _) = verdict();
    if can_boot {
        eprintln!("SKIPPED: VMs boot here; `microvm_lifecycle` covers this host");
        return;
    }
    let d = Daemon::with_engine("boxlite");
    let mut c = d.client().await;
    let info = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (info.engine.as_str(), info.isolation.as_str()),
        ("boxlite", "microvm")
    );
    assert!(
        !info.capabilities.iter().any(|c| c == "output.binary"),
        "BoxLite output is text"
    );

    let created = c
        .create_box(v1::CreateBoxRequest {
            name: "vm".into(),
            spec: Some(busybox_spec()),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(created.created);
    let again = c
        .create_box(v1::CreateBoxRequest {
            name: "vm".into(),
            spec: Some(busybox_spec()),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.created, "get-or-create by name");
    let list = c
        .list_boxes(v1::ListBoxesRequest {})
        .await
        .unwrap()
        .into_inner()
        .boxes;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].isolation, "microvm");

    let err = c
        .start_box(v1::StartBoxRequest { name: "vm".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("cannot boot microVMs here"),
        "{}",
        err.message()
    );
    let state = c
        .inspect_box(v1::InspectBoxRequest { name: "vm".into() })
        .await
        .unwrap()
        .into_inner()
        .state;
    assert_eq!(
        state,
        v1::BoxState::Created as i32,
        "a refused start leaves the box as it was"
    );

    let err = ExecStream::start(&mut c, start_req("vm", &["true"]))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::FailedPrecondition);

    c.remove_box(v1::RemoveBoxRequest {
        name: "vm".into(),
        force: false,
    })
    .await
    .unwrap();
    assert!(
        c.list_boxes(v1::ListBoxesRequest {})
            .await
            .unwrap()
            .into_inner()
            .boxes
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a host that can boot BoxLite microVMs (run with --ignored there)"]
async fn microvm_lifecycle() {
    let d = Daemon::with_engine("boxlite");
    let mut c = d.client().await;
    let info = up(&mut c, "vm", busybox_spec()).await;
    assert_eq!(info.isolation, "microvm");
    let out = run(
        &mut c,
        "vm",
        &["sh", "-c", "echo out; echo err >&2; exit 3"],
    )
    .await;
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice(), out.exit.code),
        (&b"out\n"[..], &b"err\n"[..], Some(3))
    );
    assert_eq!(sh(&mut c, "vm", "uname -s").await, "Linux\n");
    sh(&mut c, "vm", "echo kept > /root/note").await;
    c.stop_box(v1::StopBoxRequest {
        name: "vm".into(),
        force: false,
    })
    .await
    .unwrap();
    c.start_box(v1::StartBoxRequest { name: "vm".into() })
        .await
        .unwrap();
    assert_eq!(sh(&mut c, "vm", "cat /root/note").await, "kept\n");
    c.remove_box(v1::RemoveBoxRequest {
        name: "vm".into(),
        force: true,
    })
    .await
    .unwrap();
}
