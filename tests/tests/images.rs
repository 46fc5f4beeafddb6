//! Images end to end: a real registry on loopback (`docker-registry`),
//! images pushed with `skopeo`, pulled by `boxd` through `boxctl`.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use boxd_tests::image::{docker_save_tarball, file_layer, foreign_arch, layout_with};
use boxd_tests::registry::{PASSWORD, Registry, SlowProxy, USER};
use boxd_tests::{Daemon, busybox};
use serde_json::Value;

fn run(mut c: Command) -> (i32, String, String) {
    let out = c.stdin(Stdio::null()).output().expect("run boxctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn boxctl(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    let mut c = d.boxctl();
    c.args(args);
    run(c)
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

fn images(d: &Daemon) -> Vec<Value> {
    let (code, out, err) = boxctl(d, &["--json", "image", "ls"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Files in the daemon's blob store, and anything half-written.
fn store_files(d: &Daemon) -> (Vec<String>, Vec<String>) {
    let dir = d.home.join("images/blobs/sha256");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let (tmp, blobs) = names.into_iter().partition(|n| n.starts_with('.'));
    (blobs, tmp)
}

#[test]
fn pull_by_tag_and_by_digest_then_create_with_progress() {
    let reg = Registry::start(false);
    reg.push(&busybox(), "tools/busybox:1.0");
    reg.push(&busybox(), "tools/busybox:2.0");
    let d = Daemon::start();
    let by_tag = format!("{}/tools/busybox:1.0", reg.host());

    let (code, out, err) = boxctl(&d, &["image", "pull", &by_tag]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("pulling") && err.contains("layer sha256:"),
        "progress lines on stderr: {err}"
    );
    assert!(out.contains("sha256:"), "{out}");
    let list = images(&d);
    assert_eq!(list.len(), 1);
    let digest = list[0]["digest"].as_str().unwrap().to_owned();
    assert_eq!(
        list[0]["architecture"],
        std::env::consts::ARCH
            .replace("x86_64", "amd64")
            .replace("aarch64", "arm64")
    );

    // By digest: the same image, a second reference to it, nothing downloaded.
    let by_digest = format!("{}/tools/busybox@{digest}", reg.host());
    let (code, out, err) = boxctl(&d, &["--json", "image", "pull", &by_digest]);
    assert_eq!(code, 0, "{err}");
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["event"], "started");
    assert_eq!(
        events.first().unwrap()["totalBytes"],
        0,
        "every layer was cached"
    );
    assert_eq!(events.last().unwrap()["event"], "done");
    assert_eq!(events.last().unwrap()["image"]["digest"], digest.as_str());
    assert_eq!(images(&d).len(), 1, "one image, two references");
    assert_eq!(images(&d)[0]["references"].as_array().unwrap().len(), 2);

    // `run` with a reference the daemon does not have: pulled first, with
    // progress, then the box runs.
    let by_tag2 = format!("{}/tools/busybox:2.0", reg.host());
    let (code, out, err) = boxctl(
        &d,
        &[
            "run",
            "--rm",
            "pulled",
            "--image",
            &by_tag2,
            "--",
            "echo",
            "ran from a registry",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ran from a registry\n");
    assert!(err.contains(&format!("pulling {by_tag2}")), "{err}");

    // A reference the daemon has is not pulled again at create.
    let pulls_before = reg
        .log()
        .matches("GET /v2/tools/busybox/manifests/")
        .count();
    let (code, _, err) = boxctl(&d, &["create", "again", "--image", &by_tag]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("pulling"), "{err}");
    assert_eq!(
        reg.log()
            .matches("GET /v2/tools/busybox/manifests/")
            .count(),
        pulls_before
    );
}

#[test]
fn a_multi_platform_index_gives_this_hosts_image() {
    let reg = Registry::start(false);
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("multi");
    let host = std::env::consts::ARCH
        .replace("x86_64", "amd64")
        .replace("aarch64", "arm64");
    layout_with(
        &layout,
        &[
            (
                foreign_arch(),
                vec![file_layer("etc/platform", foreign_arch().as_bytes())],
            ),
            (
                host.as_str(),
                vec![file_layer("etc/platform", host.as_bytes())],
            ),
        ],
    );
    reg.push(&layout, "multi:1");
    let d = Daemon::start();
    let reference = format!("{}/multi:1", reg.host());
    let (code, _, err) = boxctl(
        &d,
        &[
            "run",
            "--rm",
            "m",
            "--image",
            &reference,
            "--",
            "cat",
            "/etc/platform",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let list = images(&d);
    // (skopeo compresses layers on the way in, so digests differ from the
    // layout's; the platform and the content tell which image came.)
    assert_eq!(
        list[0]["architecture"],
        host.as_str(),
        "the host's image was chosen"
    );
    assert_ne!(
        list[0]["repoDigest"], list[0]["digest"],
        "the reference named an index"
    );
    let (code, out, _) = boxctl(
        &d,
        &[
            "run",
            "m2",
            "--image",
            &reference,
            "--",
            "cat",
            "/etc/platform",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(out, host);
    // Only the chosen platform's blobs were downloaded: the index, one
    // manifest, one config and two layers.
    let (blobs, _) = store_files(&d);
    assert_eq!(blobs.len(), 5, "{blobs:?}");
}

#[test]
fn credentials_come_from_the_users_container_config() {
    let reg = Registry::start(true);
    reg.push(&busybox(), "private/busybox:1");
    let reference = format!("{}/private/busybox:1", reg.host());

    let empty = tempfile::tempdir().unwrap();
    let anon = Daemon::with_env(
        "namespace",
        vec![
            ("HOME".into(), empty.path().display().to_string()),
            ("XDG_RUNTIME_DIR".into(), empty.path().display().to_string()),
            (
                "DOCKER_CONFIG".into(),
                empty.path().join("docker").display().to_string(),
            ),
        ],
    );
    let (code, _, err) = boxctl(&anon, &["image", "pull", &reference]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("credentials") || err.contains("denied"),
        "a clear message: {err}"
    );

    let conf = tempfile::tempdir().unwrap();
    let docker = conf.path().join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{USER}:{PASSWORD}"),
    );
    std::fs::write(
        docker.join("config.json"),
        serde_json::json!({"auths": {reg.host(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let authed = Daemon::with_env(
        "namespace",
        vec![
            ("HOME".into(), empty.path().display().to_string()),
            ("XDG_RUNTIME_DIR".into(), empty.path().display().to_string()),
            ("DOCKER_CONFIG".into(), docker.display().to_string()),
        ],
    );
    let (code, _, err) = boxctl(&authed, &["image", "pull", &reference]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(images(&authed).len(), 1);
}

#[test]
fn a_corrupted_blob_is_rejected_and_nothing_is_kept() {
    let reg = Registry::start(false);
    reg.push(&busybox(), "bad/busybox:1");
    // Damage the layer in the registry's storage (its largest blob: skopeo
    // compressed it on the way in), keeping its size.
    let blobs_dir = reg.dir.path().join("data/docker/registry/v2/blobs/sha256");
    let file = walk(&blobs_dir)
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .expect("blobs in the registry");
    let layer = format!(
        "sha256:{}",
        file.parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
    );
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();

    let d = Daemon::start();
    let reference = format!("{}/bad/busybox:1", reg.host());
    let (code, _, err) = boxctl(&d, &["image", "pull", &reference]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("does not match its digest"), "{err}");
    assert!(images(&d).is_empty(), "no image recorded");
    let (blobs, tmp) = store_files(&d);
    assert!(
        !blobs.contains(&layer[7..].to_owned()),
        "the bad layer is not stored"
    );
    assert!(tmp.is_empty(), "no temporary file left: {tmp:?}");
    let (code, _, err) = boxctl(&d, &["create", "b", "--image", &reference]);
    assert_eq!(
        code, 125,
        "a create from it fails too (docker's code): {err}"
    );
}

#[test]
fn a_registry_killed_mid_pull_is_a_clear_error_and_leaves_no_partial_cache() {
    let mut reg = Registry::start(false);
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("big");
    let mut big = vec![0u8; 48 << 20];
    rand::fill(&mut big[..]);
    layout_with(
        &layout,
        &[(
            &std::env::consts::ARCH
                .replace("x86_64", "amd64")
                .replace("aarch64", "arm64"),
            vec![file_layer("big.bin", &big)],
        )],
    );
    reg.push(&layout, "big:1");
    // 8 MiB/s: the big layer takes about six seconds to arrive.
    let proxy = SlowProxy::start(reg.port, 8 << 20);
    let d = Daemon::start();
    let reference = format!("127.0.0.1:{}/big:1", proxy.port);
    let mut pull = d.boxctl();
    let mut child = pull
        .args(["--json", "image", "pull", &reference])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut saw_progress = false;
    for line in stdout.lines() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if !saw_progress && v["event"] == "progress" && v["doneBytes"].as_u64() > Some(1 << 20) {
            saw_progress = true;
            reg.kill();
        }
    }
    assert!(
        saw_progress,
        "the pull made progress before the registry died"
    );
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("broke off") || err.contains("cannot reach") || err.contains("does not match"),
        "a clear error: {err}"
    );
    // Give the daemon a moment to finish cleaning up after the failure.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (blobs, tmp) = store_files(&d);
        let big_digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(file_layer(
            "big.bin", &big,
        )));
        if tmp.is_empty() {
            assert!(!blobs.contains(&big_digest), "no partial layer stored");
            break;
        }
        assert!(Instant::now() < deadline, "temporary files left: {tmp:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(images(&d).is_empty());
    let unpacked: Vec<_> = std::fs::read_dir(d.home.join("images"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().len() == 64)
        .collect();
    assert!(unpacked.is_empty(), "nothing unpacked");
}

#[test]
fn two_boxes_created_at_once_from_an_uncached_image_pull_it_once() {
    let reg = Registry::start(false);
    reg.push(&busybox(), "shared/busybox:1");
    let d = Daemon::start();
    let reference = format!("{}/shared/busybox:1", reg.host());
    let children: Vec<_> = (0..3)
        .map(|i| {
            let mut c = d.boxctl();
            c.args(["create", &format!("c{i}"), "--image", &reference])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = reg.log();
    let layer_gets = log
        .lines()
        .filter(|l| l.contains("GET /v2/shared/busybox/blobs/sha256:") && l.contains("\" 200 "))
        .count();
    // The config and the one layer, each once.
    assert_eq!(layer_gets, 2, "each blob fetched once:\n{log}");
    assert_eq!(images(&d).len(), 1);
    assert_eq!(images(&d)[0]["usedBy"].as_array().unwrap().len(), 3);
}

#[test]
fn import_a_layout_and_a_docker_save_tarball_and_prune_keeps_what_boxes_use() {
    let d = Daemon::start();
    let (code, out, err) = boxctl(
        &d,
        &[
            "image",
            "import",
            busybox().to_str().unwrap(),
            "--tag",
            "local/busybox:1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("docker.io/local/busybox:1"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let tarball = dir.path().join("saved.tar");
    docker_save_tarball(&tarball, "saved/app:3");
    let (code, out, err) = boxctl(&d, &["image", "import", tarball.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("docker.io/saved/app:3"), "{out}");
    let (code, out, err) = boxctl(
        &d,
        &[
            "run",
            "s",
            "--image",
            "saved/app:3",
            "--",
            "sh",
            "-c",
            "echo $FROM_DOCKER_SAVE",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "1\n");
    assert_eq!(images(&d).len(), 2);

    // Untagging the one a box uses needs --force; prune keeps it anyway.
    let (code, _, err) = boxctl(&d, &["image", "rm", "saved/app:3"]);
    assert_eq!(code, 1);
    assert!(err.contains("used by s"), "{err}");
    let (code, _, err) = boxctl(&d, &["image", "rm", "local/busybox:1"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = boxctl(&d, &["image", "rm", "--force", "saved/app:3"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = boxctl(&d, &["--json", "image", "prune"]);
    assert_eq!(code, 0, "{err}");
    let pruned: Value = serde_json::from_str(&out).unwrap();
    let still: Vec<Value> = images(&d);
    assert_eq!(still.len(), 1, "the image box s uses stays: {pruned}");
    assert_eq!(still[0]["usedBy"][0], "s");
    let (blobs, _) = store_files(&d);
    assert_eq!(
        blobs.len(),
        3,
        "its manifest, config and layer stay: {blobs:?}"
    );

    // Once the box is gone, prune removes the image and its blobs.
    assert_eq!(boxctl(&d, &["rm", "-f", "s"]).0, 0);
    let (code, out, _) = boxctl(&d, &["--json", "image", "prune"]);
    assert_eq!(code, 0);
    let pruned: Value = serde_json::from_str(&out).unwrap();
    assert!(pruned["reclaimedBytes"].as_u64().unwrap() > 0, "{pruned}");
    assert!(images(&d).is_empty());
    assert!(store_files(&d).0.is_empty());
}

#[test]
fn bad_references_and_unreachable_registries_are_clear_errors() {
    let d = Daemon::start();
    for bad in ["UPPER/Case:1", "a b", "x@sha256:zz", "name:", "../../etc"] {
        let (code, _, err) = boxctl(&d, &["image", "pull", bad]);
        assert_eq!(code, 1, "{bad}: {err}");
        assert!(err.contains("invalid image reference"), "{bad}: {err}");
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (code, _, err) = boxctl(
        &d,
        &["image", "pull", &format!("127.0.0.1:{port}/nothing:1")],
    );
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach 127.0.0.1"), "{err}");
    let reg = Registry::start(false);
    let (code, _, err) = boxctl(&d, &["image", "pull", &format!("{}/missing:1", reg.host())]);
    assert_eq!(code, 1);
    assert!(err.contains("not found"), "{err}");
    let (code, _, err) = boxctl(&d, &["image", "inspect", "never/pulled:1"]);
    assert_eq!(code, 1);
    assert!(err.contains("no image"), "{err}");
    assert!(Path::new(&d.home).exists());
}

#[test]
fn jsonl_box_create_reports_the_pull_as_image_pull_events() {
    let reg = Registry::start(false);
    reg.push(&busybox(), "jsonl/busybox:1");
    let d = Daemon::start();
    let reference = format!("{}/jsonl/busybox:1", reg.host());
    let mut j = boxd_tests::Jsonl::start(&d.socket);
    let reply = j.call(
        1,
        "box.create",
        serde_json::json!({"name": "pulled", "image": reference}),
    );
    assert_eq!(reply["result"]["created"], true, "{reply}");
    let pulls: Vec<&Value> = j.seen.iter().filter(|f| f["type"] == "imagePull").collect();
    let phases: Vec<&str> = pulls.iter().map(|f| f["phase"].as_str().unwrap()).collect();
    assert_eq!(phases.first(), Some(&"started"), "{phases:?}");
    assert_eq!(phases.last(), Some(&"done"), "{phases:?}");
    assert!(phases.contains(&"layerDone"), "{phases:?}");
    assert!(
        pulls
            .iter()
            .all(|f| f["requestId"] == 1 && f["name"] == "pulled")
    );
    // A second create of the same image pulls nothing.
    let before = j.seen.len();
    let reply = j.call(
        2,
        "box.create",
        serde_json::json!({"name": "again", "image": reference}),
    );
    assert_eq!(reply["result"]["created"], true, "{reply}");
    assert!(!j.seen[before..].iter().any(|f| f["type"] == "imagePull"));
    let (status, _) = j.close();
    assert!(status.success());
}
