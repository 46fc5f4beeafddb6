//! `boxctl mcp` driven by the official MCP Python SDK (`tests/mcp/agent.py`)
//! against a box that races its policy: copies through a directory the box
//! flips to a symlink, and a ceiling a box that asks for nothing must get.

use boxd_tests::*;
use serde_json::Value;

fn agent(
    mode: &str,
    d: &Daemon,
    project: &std::path::Path,
    outside: &std::path::Path,
    flags: &[&str],
) -> Value {
    let out = agent::mcp_client(mode, d, project, outside)
        .args(flags)
        .output()
        .expect("run the MCP SDK client");
    assert!(
        out.status.success(),
        "the MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client's JSON report")
}

/// Items 3 and 4: `copy_to_box` and `copy_from_box` of paths through
/// `PROJECT/d` while the box flips `d` between a directory and a symlink
/// to a host directory outside `--allow-mount`. Today's main packed the
/// host file into the box in about 1 try of 5, and wrote into the outside
/// directory.
#[test]
fn mcp_copies_never_cross_a_symlink_the_box_swaps_in() {
    let d = Daemon::start();
    let project = host_dir();
    let outside = host_dir();
    std::fs::write(outside.path().join("secret"), "host secret\n").unwrap();
    let project_arg = project.path().to_str().unwrap().to_owned();
    // The box's move, made faster than a shell loop in the box can: `d`
    // and a symlink to the outside directory swapped atomically
    // (RENAME_EXCHANGE) in a tight loop, so that every copy meets both.
    let real = project.path().join("d.real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("secret"), "in-project\n").unwrap();
    give_to_host_user(&real);
    std::os::unix::fs::symlink(outside.path(), project.path().join("d")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let a = std::ffi::CString::new(
            project
                .path()
                .join("d")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        let b = std::ffi::CString::new(real.into_os_string().into_encoded_bytes()).unwrap();
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: two valid C strings, no other preconditions.
                let r = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(r, 0, "renameat2: {}", std::io::Error::last_os_error());
                flips += 1;
            }
            flips
        })
    };
    let r = agent(
        "race:300",
        &d,
        project.path(),
        outside.path(),
        &["--allow-mount", &project_arg],
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    println!("{} flips", flipper.join().unwrap());
    println!("copies while the box flips the directory: {}", r["counts"]);
    println!("what reached the box: {}", r["got"]);
    assert!(r["create"].get("ok").is_some(), "{}", r["create"]);
    let counts = &r["counts"];
    assert!(
        counts["in_ok"].as_u64().unwrap() > 0 && counts["in_refused"].as_u64().unwrap() > 0,
        "the race ran both ways (some copies met the directory, some the symlink): {counts}"
    );
    let got = r["got"]["ok"]["stdout"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        !got.contains("host secret"),
        "a host file outside --allow-mount was copied into the box: {got}"
    );
    let leaked: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "secret")
        .collect();
    assert!(
        leaked.is_empty(),
        "the box's files were written outside --allow-mount: {leaked:?}"
    );
}

/// Item 6: `--max-memory`/`--max-cpus` bound every box the server makes: a
/// box that asks for nothing gets the ceiling, and its stats show it.
#[test]
fn an_mcp_ceiling_bounds_a_box_that_asks_for_nothing() {
    let d = Daemon::start();
    let project = host_dir();
    let outside = host_dir();
    let r = agent(
        "ceiling",
        &d,
        project.path(),
        outside.path(),
        &["--max-memory", "300m", "--max-cpus", "1"],
    );
    println!("{r}");
    assert!(r["create"].get("ok").is_some(), "{}", r["create"]);
    assert!(
        r["over"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--max-memory"),
        "{}",
        r["over"]
    );
    let inspect = ok(d.boxctl().args(["inspect", "ceil"]));
    let info: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let info = if info.is_array() {
        info[0].clone()
    } else {
        info
    };
    println!("inspect: {}", info["spec"]);
    assert_eq!(info["spec"]["memoryMib"], 300, "{info}");
    assert_eq!(info["spec"]["cpus"], 1, "{info}");
    // What is in force: the ceiling, where boxd may make cgroups (a user's
    // boxd outside a delegated systemd unit may not, and says so).
    match r["stats"]["ok"]["memory_limit_bytes"].as_u64() {
        Some(limit) => assert_eq!(limit, 300 << 20, "{}", r["stats"]),
        None => {
            let doctor = d.boxctl().arg("doctor").output().unwrap();
            let doctor = String::from_utf8_lossy(&doctor.stdout);
            assert!(
                doctor.contains("memory and cpus are not enforced"),
                "box_stats shows no limit, and doctor does not say why: {}\n{doctor}",
                r["stats"]
            );
        }
    }
    ok(d.boxctl().args(["rm", "-f", "ceil"]));
}

/// A decoder's bound: an MCP client that sends an endless line ends its own
/// session with an error naming the bound, and `boxctl mcp` does not grow
/// with it (before, `rmcp`'s line reader took any length).
#[test]
fn an_endless_mcp_line_ends_the_session_naming_the_bound() {
    use std::io::Write;
    let d = Daemon::start();
    let mut child = d
        .boxctl()
        .arg("mcp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0usize;
    // 65 MiB without a newline, then more until the server stops reading.
    while sent < 80 << 20 {
        if stdin.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("after {} MiB: {stderr}", sent >> 20);
    assert!(!out.status.success());
    assert!(stderr.contains("longer than 64 MiB"), "{stderr}");
}
