//! Engine choice and the BoxLite engine on a host that cannot boot
//! microVMs. The scenarios that need a VM are the `microvm::` half of
//! `tests/daemon.rs`.

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
    let reply = create(&mut c, "a", busybox_spec()).await;
    assert!(
        reply
            .warnings
            .iter()
            .any(|w| w.contains("microVMs cannot boot here")),
        "{:?}",
        reply.warnings
    );
    // Once per daemon start: not again on the next create (Describe's
    // notes keep it).
    let again = create(&mut c, "a", busybox_spec()).await;
    assert!(
        !again
            .warnings
            .iter()
            .any(|w| w.contains("microVMs cannot boot here")),
        "{:?}",
        again.warnings
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forced_boxlite_creates_lists_and_refuses_to_start_with_the_reason() {
    let (can_boot, _) = verdict();
    if can_boot {
        eprintln!(
            "SKIPPED: VMs boot here; the microvm:: scenarios of tests/daemon.rs cover this host"
        );
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

    let created = create(&mut c, "vm", busybox_spec()).await;
    assert!(created.created);
    let again = create(&mut c, "vm", busybox_spec()).await;
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
