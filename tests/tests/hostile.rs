//! Hostile input: every case gets a clear error, and the daemon stays up
//! and keeps its boxes.

use std::collections::HashMap;

use boxd_client::tonic::Code;
use boxd_tests::*;

/// Creates `name` from `spec` and returns the error (panics on success).
async fn refused(c: &mut Client, name: &str, spec: v1::BoxSpec) -> boxd_client::tonic::Status {
    match c
        .create_box(v1::CreateBoxRequest {
            name: name.into(),
            spec: Some(spec),
        })
        .await
    {
        Ok(r) => panic!("{name:?} was accepted: {:?}", r.into_inner()),
        Err(s) => s,
    }
}

/// The daemon still answers and still has its boxes.
async fn still_up(c: &mut Client, boxes: usize) {
    let list = c
        .list_boxes(v1::ListBoxesRequest {})
        .await
        .expect("boxd answers")
        .into_inner()
        .boxes;
    assert_eq!(list.len(), boxes, "{list:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_names_are_refused() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "keeper", busybox_spec()).await;
    let long = "x".repeat(65);
    for name in [
        "",
        "a/b",
        "../up",
        "..",
        ".",
        ".hidden",
        "-flag",
        "a b",
        "tab\there",
        "nul\0byte",
        "ünïcödé",
        "名前",
        "emoji-📦",
        "back\\slash",
        "semi;colon",
        "new\nline",
        long.as_str(),
    ] {
        let s = refused(&mut c, name, busybox_spec()).await;
        assert_eq!(s.code(), Code::InvalidArgument, "{name:?}: {s:?}");
        assert!(
            s.message().contains("invalid box name"),
            "{name:?}: {}",
            s.message()
        );
        // The other calls that take a name refuse it the same way.
        let e = c
            .start_box(v1::StartBoxRequest { name: name.into() })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{name:?}");
        let e = ExecStream::start(&mut c, start_req(name, &["true"]))
            .await
            .err()
            .expect("exec refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{name:?}");
    }
    // Nothing was created on disk for any of them.
    assert_eq!(std::fs::read_dir(d.home.join("boxes")).unwrap().count(), 1);
    still_up(&mut c, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mounts_that_escape_or_cover_sensitive_paths_are_refused() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let project = tempfile::tempdir().unwrap();
    let links = tempfile::tempdir().unwrap();
    let to_home = links.path().join("to-home");
    let to_socket = links.path().join("to-socket");
    let to_root = links.path().join("to-root");
    std::os::unix::fs::symlink(&d.home, &to_home).unwrap();
    std::os::unix::fs::symlink(d.socket.parent().unwrap(), &to_socket).unwrap();
    std::os::unix::fs::symlink("/", &to_root).unwrap();
    let p = project.path().to_str().unwrap();
    let mount = |host: &str, guest: &str| v1::BoxSpec {
        mounts: vec![v1::Mount {
            host_path: host.into(),
            guest_path: guest.into(),
            read_only: false,
        }],
        ..busybox_spec()
    };
    let home_boxes = d.home.join("boxes");
    let cases: Vec<(String, String, &str)> = vec![
        (
            to_home.display().to_string(),
            "/w".into(),
            "state directory",
        ),
        (
            to_socket.display().to_string(),
            "/w".into(),
            "socket directory",
        ),
        (
            to_root.display().to_string(),
            "/w".into(),
            "state directory",
        ),
        (
            home_boxes.display().to_string(),
            "/w".into(),
            "state directory",
        ),
        (
            d.socket.display().to_string(),
            "/w".into(),
            "socket directory",
        ),
        ("relative/path".into(), "/w".into(), "absolute"),
        ("/does/not/exist".into(), "/w".into(), "No such file"),
        ("/proc".into(), "/w".into(), "no box may mount"),
        ("/proc/1/root".into(), "/w".into(), "no box may mount"),
        ("/sys/kernel".into(), "/w".into(), "no box may mount"),
        ("/dev".into(), "/w".into(), "no box may mount"),
        ("/dev/null".into(), "/w".into(), "no box may mount"),
        (p.into(), "/".into(), "cannot mount over /"),
        (p.into(), "/proc".into(), "cannot mount over /proc"),
        (p.into(), "/proc/sys".into(), "cannot mount over"),
        (p.into(), "/dev".into(), "cannot mount over /dev"),
        (p.into(), "/dev/shm".into(), "cannot mount over"),
        (p.into(), "/a/../proc".into(), "without '..'"),
        (p.into(), "/a/../../etc".into(), "without '..'"),
        (p.into(), "relative".into(), "absolute path"),
        (p.into(), "/w\0x".into(), "absolute path"),
    ];
    for (host, guest, why) in &cases {
        let s = refused(&mut c, "m", mount(host, guest)).await;
        assert_eq!(s.code(), Code::InvalidArgument, "{host} -> {guest}: {s:?}");
        assert!(
            s.message().contains(why),
            "{host} -> {guest}: {} (wanted {why:?})",
            s.message()
        );
    }
    // Two mounts at one place.
    let mut twice = mount(p, "/w");
    twice.mounts.push(twice.mounts[0].clone());
    let s = refused(&mut c, "m", twice).await;
    assert!(s.message().contains("two mounts at /w"), "{}", s.message());

    // Symlinks inside the box's own root (here, from its image) cannot
    // take a mount outside the box or onto /proc: the guest path resolves
    // inside the box.
    let image = tempfile::tempdir().unwrap();
    boxd_tests::image::layout_with(
        image.path(),
        &[(
            boxd_tests::image::host_arch(),
            vec![boxd_tests::image::symlink_layer(&[
                ("climb", "../../../../../../../tmp"),
                ("absolute", "/tmp"),
                ("into-proc", "/proc/self"),
            ])],
        )],
    )
    .remove(0);
    let marker = "boxd-hostile-mount-target";
    let spec = |guest: &str| v1::BoxSpec {
        image: image.path().to_string_lossy().into_owned(),
        mounts: vec![v1::Mount {
            host_path: p.into(),
            guest_path: guest.into(),
            read_only: true,
        }],
        ..Default::default()
    };
    std::fs::write(project.path().join("file"), "from the host").unwrap();
    up(&mut c, "climber", spec(&format!("/climb/{marker}"))).await;
    // The mount landed at /tmp/MARKER inside the box, not on the host.
    assert_eq!(
        sh(&mut c, "climber", &format!("cat /tmp/{marker}/file")).await,
        "from the host"
    );
    assert!(
        !std::path::Path::new("/tmp").join(marker).exists(),
        "the mount escaped onto the host's /tmp"
    );
    create(&mut c, "prober", spec("/into-proc/x")).await;
    let e = c
        .start_box(v1::StartBoxRequest {
            name: "prober".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("/proc/self/x"), "{}", e.message());
    still_up(&mut c, 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_environments_and_command_lines_are_refused() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "env", busybox_spec()).await;
    let env_spec = |k: &str, v: &str| v1::BoxSpec {
        env: HashMap::from([(k.to_owned(), v.to_owned())]),
        ..busybox_spec()
    };
    for (k, v) in [
        ("A=B", "x"),
        ("", "x"),
        ("NUL\0", "x"),
        ("OK", "nul\0value"),
    ] {
        let s = refused(&mut c, "e", env_spec(k, v)).await;
        assert_eq!(s.code(), Code::InvalidArgument, "{k:?}");
        assert!(
            s.message().contains("invalid environment variable"),
            "{}",
            s.message()
        );
        let mut start = start_req("env", &["true"]);
        start.env = HashMap::from([(k.to_owned(), v.to_owned())]);
        let e = ExecStream::start(&mut c, start)
            .await
            .err()
            .expect("refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{k:?}");
    }
    // A huge environment: under the message limit, over the exec limit.
    let huge: HashMap<String, String> = (0..3000)
        .map(|i| (format!("VAR_{i}"), "v".repeat(1000)))
        .collect();
    let s = refused(
        &mut c,
        "e",
        v1::BoxSpec {
            env: huge.clone(),
            ..busybox_spec()
        },
    )
    .await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("at most 1048576"), "{}", s.message());
    let mut start = start_req("env", &["true"]);
    start.env = huge;
    let e = ExecStream::start(&mut c, start)
        .await
        .err()
        .expect("refused");
    assert!(e.message().contains("environment"), "{}", e.message());
    // A command line too long to run.
    let long = "a".repeat(2 << 20);
    let e = ExecStream::start(&mut c, start_req("env", &["echo", &long]))
        .await
        .err()
        .expect("refused");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("command line"), "{}", e.message());
    // NUL in a command or argument.
    for argv in [vec!["ec\0ho"], vec!["echo", "a\0b"]] {
        let e = ExecStream::start(&mut c, start_req("env", &argv))
            .await
            .err()
            .expect("refused");
        assert!(e.message().contains("NUL"), "{}", e.message());
    }
    // A binary that does not exist, a directory, a working directory that
    // does not exist: the exec starts and fails with the shell's codes.
    let out = run(&mut c, "env", &["/no/such/binary"]).await;
    assert_eq!(out.exit.code, Some(127), "{out:?}");
    assert!(
        out.exit.error.contains("No such file"),
        "{:?}",
        out.exit.error
    );
    let out = run(&mut c, "env", &["/etc"]).await;
    assert_eq!(out.exit.code, Some(126), "{out:?}");
    let mut start = start_req("env", &["true"]);
    start.working_dir = "/no/such/dir".into();
    let out = collect(ExecStream::start(&mut c, start).await.unwrap()).await;
    assert_eq!(out.exit.code, Some(126), "{out:?}");
    assert!(
        out.exit.error.contains("working directory"),
        "{:?}",
        out.exit.error
    );
    // Unknown signals.
    let exec = ExecStream::start(&mut c, start_req("env", &["sleep", "30"]))
        .await
        .unwrap();
    for bad in ["SIGNOPE", "999", "-1", "KILL\0"] {
        let e = c
            .signal_exec(v1::SignalExecRequest {
                exec_id: exec.exec_id().to_owned(),
                signal: Some(v1::Signal { signal: bad.into() }),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}");
        assert!(e.message().contains("unknown signal"), "{}", e.message());
    }
    exec.input().signal("SIGKILL").await.unwrap();
    assert_eq!(collect(exec).await.exit.signal, Some(9));
    still_up(&mut c, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_at_and_over_the_size_limit() {
    let d = Daemon::start();
    let c = d.client().await;
    // A client that would send more than boxd accepts.
    let mut c = c
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    let limit = boxd_client::MAX_MESSAGE;
    let spec_of = |bytes: usize| v1::BoxSpec {
        env: HashMap::from([("BIG".to_owned(), "x".repeat(bytes))]),
        ..busybox_spec()
    };
    // Just under the message limit: decoded, then refused by validation.
    let s = refused(&mut c, "big", spec_of(limit - 4096)).await;
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    // Over it: refused by the transport with the limit named.
    for over in [limit + 1, 3 * limit] {
        let s = refused(&mut c, "big", spec_of(over)).await;
        assert!(
            matches!(s.code(), Code::OutOfRange | Code::ResourceExhausted),
            "{s:?}"
        );
        assert!(s.message().contains("too large"), "{}", s.message());
    }
    // A huge exec input chunk, over the limit, on an open stream.
    let mut c2 = d.client().await;
    up(&mut c2, "sized", busybox_spec()).await;
    let mut c = c;
    let mut start = start_req("sized", &["cat"]);
    start.stdin = true;
    let exec = ExecStream::start(&mut c, start).await.unwrap();
    let _ = exec.input().stdin(vec![b'x'; limit + 10]).await;
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        exec.into_parts().1.message(),
    )
    .await
    .expect("the stream ended");
    let err = out.expect_err("an over-limit input ends the stream with an error");
    assert!(err.message().contains("exec input refused"), "{err:?}");
    still_up(&mut c2, 1).await;
    assert_eq!(sh(&mut c2, "sized", "echo fine").await, "fine\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn thousands_of_boxes_hit_the_limit_not_the_disk() {
    let d = Daemon::with_env("namespace", vec![("BOXD_MAX_BOXES".into(), "32".into())]);
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let socket = d.socket.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = boxd_client::connect(&socket).await.unwrap();
            let mut outcomes = Vec::new();
            for i in 0..250 {
                let r = c
                    .create_box(v1::CreateBoxRequest {
                        name: format!("many-{worker}-{i}"),
                        spec: Some(busybox_spec()),
                    })
                    .await;
                outcomes.push(
                    r.map(|_| ())
                        .map_err(|s| (s.code(), s.message().to_owned())),
                );
            }
            outcomes
        }));
    }
    let mut ok = 0;
    let mut refused_count = 0;
    for t in tasks {
        for outcome in t.await.unwrap() {
            match outcome {
                Ok(()) => ok += 1,
                Err((code, msg)) => {
                    assert_eq!(code, Code::ResourceExhausted, "{msg}");
                    assert!(msg.contains("max-boxes"), "{msg}");
                    refused_count += 1;
                }
            }
        }
    }
    println!("2000 creates: {ok} created, {refused_count} refused (max-boxes 32)");
    assert_eq!(ok, 32);
    assert_eq!(refused_count, 2000 - 32);
    let mut c = d.client().await;
    still_up(&mut c, 32).await;
    // Removing one makes room for one.
    c.remove_box(v1::RemoveBoxRequest {
        name: "many-0-0".into(),
        force: true,
    })
    .await
    .ok();
    let names: Vec<String> = list(&mut c).await.into_iter().map(|b| b.name).collect();
    let victim = names[0].clone();
    c.remove_box(v1::RemoveBoxRequest {
        name: victim,
        force: true,
    })
    .await
    .unwrap();
    create(&mut c, "one-more", busybox_spec()).await;
    // Too many mounts or allow-net entries for one box.
    let project = tempfile::tempdir().unwrap();
    let spec = v1::BoxSpec {
        mounts: (0..65)
            .map(|i| v1::Mount {
                host_path: project.path().to_string_lossy().into_owned(),
                guest_path: format!("/m{i}"),
                read_only: true,
            })
            .collect(),
        ..busybox_spec()
    };
    let s = refused(&mut c, "mounts", spec).await;
    assert!(s.message().contains("at most 64"), "{}", s.message());
}
