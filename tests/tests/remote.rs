//! The BoxLite engine on a remote runtime: boxd with `--boxlite-url`
//! against a real `boxlite serve` (BoxLite 0.10.8's REST server, from the
//! Rust package registry) on loopback with an API key. No VM boots here,
//! so boxes are created, listed, inspected, reused and removed on the
//! server (two daemons on one server keep their own names), an image comes to the server from a registry on loopback when
//! a box starts, their start fails at the VM boot and says so, and the exec,
//! files and ports suites run against it on a KVM host
//! (`scripts/vm-suite.sh`). Also: what the REST API cannot carry is refused
//! by name, and a wrong key, a stopped server and a restarted one each give
//! the documented outcome (docs/engines.md, "Remote BoxLite").

use std::time::{Duration, Instant};

use boxd_client::tonic::Code;
use boxd_tests::registry::Registry;
use boxd_tests::serve::Serve;
use boxd_tests::*;

fn remote(serve: &Serve, key_file: &std::path::Path) -> Daemon {
    Daemon::with_env(
        "boxlite",
        vec![
            ("BOXD_BOXLITE_URL".into(), serve.url()),
            (
                "BOXD_BOXLITE_API_KEY_FILE".into(),
                key_file.to_string_lossy().into_owned(),
            ),
        ],
    )
}

async fn create_req(
    c: &mut Client,
    name: &str,
    spec: v1::BoxSpec,
) -> Result<v1::CreateBoxResponse, boxd_client::tonic::Status> {
    c.create_box(v1::CreateBoxRequest {
        name: name.into(),
        spec: Some(spec),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

fn status(d: &Daemon) -> String {
    let out = d.boxctl().args(["daemon", "status"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn boxes_live_on_the_server_by_name_and_say_where() {
    let serve = Serve::start();
    let d = remote(&serve, &serve.key_file);
    let mut c = d.client().await;
    let described = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(described.engine, "boxlite");
    assert_eq!(described.isolation, "microvm");
    assert_eq!(described.engine_host, format!("remote: {}", serve.url()));
    assert_eq!(described.engine_problem, "", "{described:?}");
    assert!(
        !described
            .capabilities
            .iter()
            .any(|c| c == "net.publish" || c == "files.copy")
    );
    let created = create_req(&mut c, "r1", busybox_spec()).await.unwrap();
    assert!(created.created);
    let info = created.r#box.unwrap();
    assert_eq!(
        (info.isolation.as_str(), info.engine_host.as_str()),
        ("microvm", described.engine_host.as_str())
    );
    // The server holds it, under the record's id (boxd keeps the name).
    assert_eq!(serve.box_names(), std::slice::from_ref(&info.id));
    let again = create_req(&mut c, "r1", busybox_spec()).await.unwrap();
    assert!(!again.created, "same name, same spec: reused");
    assert_eq!(again.r#box.unwrap().id, info.id);
    create_req(&mut c, "r2", busybox_spec()).await.unwrap();
    let names: Vec<String> = list(&mut c).await.into_iter().map(|b| b.name).collect();
    assert_eq!(names, ["r1", "r2"]);
    assert_eq!(serve.box_names().len(), 2);
    let ls = String::from_utf8(ok(d.boxctl().arg("ls")).stdout).unwrap();
    assert!(ls.contains(&format!("* runs on {}", serve.url())), "{ls}");
    let inspect: serde_json::Value =
        serde_json::from_slice(&ok(d.boxctl().args(["inspect", "r1"])).stdout).unwrap();
    assert_eq!(inspect["engineHost"], described.engine_host, "{inspect}");
    let st = status(&d);
    assert!(
        st.contains(&format!("microvm isolation, remote: {}", serve.url())),
        "{st}"
    );

    // Neither the key nor a trace of it in what boxd says or logs.
    let said = format!("{described:?}{ls}{inspect}{st}");
    let log = std::fs::read_to_string(d.home.join("logs/boxd.log")).unwrap_or_default();
    assert!(!said.contains(&serve.key) && !log.contains(&serve.key));

    for name in ["r1", "r2"] {
        remove(&mut c, name).await;
    }
    assert_eq!(serve.box_names(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_share_a_server_and_keep_their_own_names() {
    // Two boxd (two homes, as two users' would be) on one server and key:
    // the same name in each is two boxes there, each daemon sees its own.
    let serve = Serve::start();
    let (a, b) = (
        remote(&serve, &serve.key_file),
        remote(&serve, &serve.key_file),
    );
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let in_a = create_req(&mut ca, "shared", busybox_spec()).await.unwrap();
    let in_b = create_req(&mut cb, "shared", busybox_spec()).await.unwrap();
    assert!(in_a.created && in_b.created, "{in_a:?} {in_b:?}");
    let (id_a, id_b) = (in_a.r#box.unwrap().id, in_b.r#box.unwrap().id);
    assert_ne!(id_a, id_b);
    let mut both = vec![id_a.clone(), id_b.clone()];
    both.sort();
    assert_eq!(serve.box_names(), both);
    create_req(&mut cb, "only-b", busybox_spec()).await.unwrap();
    let names = |l: Vec<v1::BoxInfo>| l.into_iter().map(|b| b.name).collect::<Vec<_>>();
    assert_eq!(names(list(&mut ca).await), ["shared"]);
    assert_eq!(names(list(&mut cb).await), ["only-b", "shared"]);
    // One's removal leaves the other's box alone.
    remove(&mut ca, "shared").await;
    assert_eq!(serve.box_names().len(), 2);
    assert!(!serve.box_names().contains(&id_a));
    let still = inspect(&mut cb, "shared").await;
    assert_eq!(still.id, id_b);
    remove(&mut cb, "shared").await;
    remove(&mut cb, "only-b").await;
    assert_eq!(serve.box_names(), Vec::<String>::new());
}

async fn inspect(c: &mut Client, name: &str) -> v1::BoxInfo {
    c.inspect_box(v1::InspectBoxRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_fails_at_the_vm_boot_with_the_server_s_reason() {
    let serve = Serve::start();
    let d = remote(&serve, &serve.key_file);
    let mut c = d.client().await;
    create_req(&mut c, "boot", busybox_spec()).await.unwrap();
    let began = Instant::now();
    let err = c
        .start_box(v1::StartBoxRequest {
            name: "boot".into(),
        })
        .await
        .unwrap_err();
    eprintln!("start failed after {:?}: {err:?}", began.elapsed());
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains(&serve.url()) && err.message().contains("VM failed to start"),
        "{err:?}"
    );
    let info = inspect(&mut c, "boot").await;
    assert_eq!(info.state, v1::BoxState::Failed as i32);
    assert!(info.error.contains("VM failed to start"), "{info:?}");
    remove(&mut c, "boot").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_pulls_a_box_s_image_from_a_registry() {
    // A registry on loopback over plain HTTP, which the server is told of
    // (BoxLite's `image_registries`); boxd gives it only the reference.
    let reg = Registry::start(false);
    reg.push(&busybox(), "remote/busybox:1");
    let serve = Serve::start_with_registries(&[reg.host()]);
    let d = remote(&serve, &serve.key_file);
    let mut c = d.client().await;
    let reference = format!("{}/remote/busybox:1", reg.host());
    let spec = v1::BoxSpec {
        image: reference.clone(),
        ..Default::default()
    };
    let created = create_req(&mut c, "pulled", spec).await.unwrap();
    assert!(
        created
            .warnings
            .iter()
            .any(|w| w.contains(&reference) && w.contains("itself")),
        "{created:?}"
    );
    // The server pulls at the start, before the VM boot fails here.
    let err = c
        .start_box(v1::StartBoxRequest {
            name: "pulled".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("VM failed to start"), "{err:?}");
    let log = reg.log();
    assert!(
        log.contains("GET /v2/remote/busybox/manifests/1"),
        "the registry served no manifest: {log}"
    );
    assert!(
        log.contains("GET /v2/remote/busybox/blobs/sha256:"),
        "{log}"
    );
    // The image is the server's, and boxd lists the server's store.
    let on_server = serve.get("images").to_string();
    assert!(on_server.contains("remote/busybox"), "{on_server}");
    let images = c
        .list_images(v1::ListImagesRequest {})
        .await
        .unwrap()
        .into_inner()
        .images;
    assert!(
        images
            .iter()
            .any(|i| i.references.iter().any(|r| r.contains("remote/busybox"))),
        "{images:?}"
    );
    remove(&mut c, "pulled").await;
    assert_eq!(serve.box_names(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_rest_api_cannot_carry_is_refused_by_name() {
    let serve = Serve::start();
    let d = remote(&serve, &serve.key_file);
    let mut c = d.client().await;
    let project = host_dir();
    let mut spec = busybox_spec();
    spec.mounts.push(v1::Mount {
        host_path: project.path().to_string_lossy().into_owned(),
        guest_path: "/workspace".into(),
        read_only: false,
    });
    let err = create_req(&mut c, "m", spec).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert!(
        err.message().contains("mounting host directory") && err.message().contains(&serve.url()),
        "{err:?}"
    );
    let mut spec = busybox_spec();
    spec.ports.push(v1::PortMapping {
        box_port: 80,
        ..Default::default()
    });
    let err = create_req(&mut c, "p", spec).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert!(err.message().contains("publishing ports"), "{err:?}");
    let mut pull = c
        .pull_image(v1::PullImageRequest {
            reference: "127.0.0.1:1/x:1".into(),
        })
        .await;
    let err = match &mut pull {
        Err(e) => e.clone(),
        Ok(s) => loop {
            match s.get_mut().message().await {
                Err(e) => break e,
                Ok(None) => panic!("the pull ended without an error"),
                Ok(Some(_)) => {}
            }
        },
    };
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert_eq!(serve.box_names(), Vec::<String>::new(), "nothing was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_key_a_stopped_server_and_a_restarted_one() {
    let mut serve = Serve::start();

    // A wrong key: boxd serves, and says why boxes cannot be made.
    let wrong = serve.home().join("wrong-key");
    std::fs::write(&wrong, "not-the-key\n").unwrap();
    {
        let d = remote(&serve, &wrong);
        let mut c = d.client().await;
        let described = c
            .describe(v1::DescribeRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(
            described.engine_problem.contains("refused the API key"),
            "{described:?}"
        );
        let st = status(&d);
        assert!(
            st.contains("engine problem:") && st.contains(&serve.url()),
            "{st}"
        );
        let doctor = String::from_utf8_lossy(
            &d.boxctl()
                .args(["doctor", "--json"])
                .output()
                .unwrap()
                .stdout,
        )
        .into_owned();
        assert!(
            doctor.contains("remote engine") && doctor.contains("refused the API key"),
            "{doctor}"
        );
        let err = create_req(&mut c, "k", busybox_spec()).await.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        assert!(err.message().contains("API key"), "{err:?}");
    }

    // The right key; then the server stops, then comes back.
    let d = remote(&serve, &serve.key_file);
    let mut c = d.client().await;
    create_req(&mut c, "kept", busybox_spec()).await.unwrap();
    serve.stop();
    let began = Instant::now();
    let err = create_req(&mut c, "later", busybox_spec())
        .await
        .unwrap_err();
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "bounded: {:?}",
        began.elapsed()
    );
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains(&serve.url()), "{err:?}");
    let described = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        described.engine_problem.contains("cannot be reached"),
        "{described:?}"
    );
    // Still listed: boxd keeps the names while the server is away, and
    // each box says why nothing can be done with it.
    let listed = list(&mut c).await;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].error.contains(&serve.url()), "{listed:?}");

    serve.restart();
    let described = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(described.engine_problem, "", "{described:?}");
    create_req(&mut c, "later", busybox_spec()).await.unwrap();
    assert_eq!(
        serve.box_names().len(),
        2,
        "the box made before the stop is still the server's"
    );
    for name in ["kept", "later"] {
        remove(&mut c, name).await;
    }
    assert_eq!(serve.box_names(), Vec::<String>::new());
}

#[test]
fn boxd_started_while_the_server_is_down_serves_and_says_so() {
    let mut serve = Serve::start();
    serve.stop();
    let d = remote(&serve, &serve.key_file);
    let st = status(&d);
    assert!(
        st.contains("engine problem:") && st.contains("cannot be reached"),
        "{st}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_removed_on_the_server_behind_boxd_s_back_is_reported() {
    let serve = Serve::start();
    let d = remote(&serve, &serve.key_file);
    let mut c = d.client().await;
    let made = create_req(&mut c, "gone", busybox_spec()).await.unwrap();
    let id = made.r#box.unwrap().id;
    serve.delete(&format!("boxes/{id}?force=true"));
    let err = c
        .start_box(v1::StartBoxRequest {
            name: "gone".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(err.message().contains("is gone"), "{err:?}");
    // boxd's record goes with `rm`, with nothing left to remove on the server.
    remove(&mut c, "gone").await;
    assert!(list(&mut c).await.is_empty());
}
