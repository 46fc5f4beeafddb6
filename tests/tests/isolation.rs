//! What a namespace box cannot reach or do. Each test has a control that
//! shows the same probe succeeding where the protection does not apply, so
//! it would fail if the protection were removed.

use std::io::{Read, Write};
use std::net::TcpListener;

use boxd_client::tonic;
use boxd_tests::*;

/// `grep FIELD /proc/PID/status` for every process of the box, as lines
/// `PID FIELD VALUE`.
const STATUS_OF_ALL: &str = r#"for p in /proc/[0-9]*; do
  [ -r $p/status ] || continue
  while read k v; do
    case "$k" in CapEff:|CapPrm:|CapBnd:|CapAmb:|NoNewPrivs:|Seccomp:) echo "${p#/proc/} $k $v";; esac
  done < $p/status
done"#;

/// The capabilities a command in a box keeps: rootless Podman's set
/// (chown, dac_override, fowner, fsetid, kill, setgid, setuid, setpcap,
/// net_bind_service, sys_chroot, setfcap), in the box's user namespace.
const BOX_ROOT_CAPS: &str = "00000000800405fb";
/// bubblewrap's own needs (sys_admin, sys_chroot, net_admin, setuid,
/// setgid, sys_ptrace): the most its pid 1's bounding set may hold.
const BWRAP_BOUNDING: &str = "00000000002c10c0";

#[tokio::test(flavor = "multi_thread")]
async fn processes_in_a_box_have_few_capabilities_no_new_privileges_and_a_seccomp_filter() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "iso-caps", busybox_spec()).await;
    // A background process started by an earlier exec, a plain exec, and
    // the box's own pid 1 (its init): all of them.
    sh(&mut c, "iso-caps", "sleep 300 >/dev/null 2>&1 &").await;
    let lines = sh(&mut c, "iso-caps", STATUS_OF_ALL).await;
    let pids: std::collections::BTreeSet<&str> =
        lines.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(pids.len() >= 3, "the init, sleep and sh: {lines}");
    for line in lines.lines() {
        let mut w = line.split_whitespace();
        let (pid, key, value) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
        // The box's init (pid 1) holds no capability (its bounding set keeps
        // only what bubblewrap needed to set the box up, out of reach with
        // no_new_privs); commands keep box root's few.
        let want = match (pid, key) {
            (_, "NoNewPrivs:") => "1",
            (_, "Seccomp:") => "2",
            (_, "CapAmb:") => "0000000000000000",
            ("1", "CapBnd:") => BWRAP_BOUNDING,
            ("1", _) => "0000000000000000",
            _ => BOX_ROOT_CAPS,
        };
        assert_eq!(value, want, "process {pid}: {key} {value}\n{lines}");
    }
    println!(
        "box processes: {} checked; commands keep CapBnd {BOX_ROOT_CAPS}",
        pids.len()
    );
    // A TTY exec goes through the same path.
    let mut start = start_req(
        "iso-caps",
        &["sh", "-c", "grep -E 'CapEff|Seccomp:' /proc/self/status"],
    );
    start.tty = true;
    let out = collect(ExecStream::start(&mut c, start).await.unwrap()).await;
    let text = out.stdout_str();
    assert!(
        text.contains(&format!("CapEff:\t{BOX_ROOT_CAPS}")) && text.contains("Seccomp:\t2"),
        "{text}"
    );

    // Behaviour, not just bookkeeping: with CAP_SYS_ADMIN, root in the box
    // could rename its host (its uts namespace); without the filter,
    // unshare(CLONE_NEWUSER) needs no capability at all.
    let out = run(&mut c, "iso-caps", &["hostname", "renamed"]).await;
    assert_ne!(out.exit.code, Some(0), "hostname succeeded: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"));
    let out = run(&mut c, "iso-caps", &["unshare", "-U", "true"]).await;
    assert_ne!(out.exit.code, Some(0), "unshare succeeded: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{out:?}"
    );
    // Control: the same busybox outside any box can create a user namespace.
    let host = std::process::Command::new(boxd_tests::image::busybox_binary())
        .args(["unshare", "-U", "true"])
        .status()
        .unwrap();
    assert!(host.success(), "unshare -U works on this host");
    // What box root may do, it does: give files away, only inside its box.
    let owned = sh(
        &mut c,
        "iso-caps",
        "touch /f && chown 1000:1000 /f && ls -n /f",
    )
    .await;
    assert!(
        owned.contains(" 1000 ") && owned.contains(" 1000 "),
        "{owned}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn box_root_is_never_host_root() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let project = host_dir();
    let mut spec = busybox_spec();
    spec.mounts.push(v1::Mount {
        host_path: project.path().to_string_lossy().into(),
        guest_path: "/workspace".into(),
        read_only: false,
    });
    up(&mut c, "iso-root", spec).await;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };

    // The box's ids, as the host sees them: no line maps to host uid 0.
    let map = sh(
        &mut c,
        "iso-root",
        "cat /proc/self/uid_map /proc/self/gid_map",
    )
    .await;
    for line in map.lines() {
        let outside: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_ne!(outside, 0, "box ids map to host root: {map}");
    }
    // A process of box root, seen from the host.
    sh(&mut c, "iso-root", "sleep 31338 >/dev/null 2>&1 &").await;
    let host_pid = host_process("31338").expect("the box's sleep, seen from the host");
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    println!(
        "box root on the host: {uid_line} (boxd runs as uid {me}); map: {}",
        map.replace('\n', "; ")
    );
    let host_uid: u32 = uid_line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_ne!(host_uid, 0, "box root is host root: {uid_line}");
    if me == 0 {
        assert!(
            host_uid > 65_535,
            "box root is an unprivileged host id: {uid_line}"
        );
    } else {
        assert_eq!(host_uid, me, "box root is boxd's own user: {uid_line}");
    }

    // Kernel settings: the write is refused (the same value is written
    // back, so a regression changes nothing on the host), and /proc/sys is
    // read-only in the box.
    let out = run(
        &mut c,
        "iso-root",
        &["sh", "-c", "v=$(cat /proc/sys/kernel/core_pattern); printf '%s\\n' \"$v\" > /proc/sys/kernel/core_pattern"],
    )
    .await;
    println!(
        "write core_pattern from the box: exit {:?}, {}",
        out.exit.code,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert_ne!(out.exit.code, Some(0), "core_pattern was writable: {out:?}");
    let mounts = sh(&mut c, "iso-root", "cat /proc/self/mounts").await;
    for covered in ["/proc/sys ", "/proc/irq ", "/proc/bus "] {
        let line = mounts.lines().find(|l| l.contains(&format!(" {covered}")));
        if std::path::Path::new(covered.trim()).exists() {
            let line = line.unwrap_or_else(|| panic!("{covered} is not covered:\n{mounts}"));
            assert!(line.contains(" ro,"), "{line}");
        }
    }

    // A host device node bound into the box: its owner is host root, so
    // box root may not change it (the same mode is asked for).
    let before = std::fs::metadata("/dev/null").unwrap();
    let out = run(&mut c, "iso-root", &["chmod", "666", "/dev/null"]).await;
    assert_ne!(out.exit.code, Some(0), "chmod of a host device: {out:?}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata("/dev/null").unwrap().permissions().mode(),
        before.permissions().mode()
    );

    // No setuid file can be left in a writable mount (on the host it would
    // run as its owner for anyone): the chmod is refused, and the copy
    // stays an ordinary file of the mount's owner, never root's.
    let out = run(
        &mut c,
        "iso-root",
        &[
            "sh",
            "-c",
            "cp /bin/busybox /workspace/suid && chmod 4755 /workspace/suid",
        ],
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::fs::MetadataExt;
    let made = std::fs::metadata(project.path().join("suid")).unwrap();
    println!(
        "setuid file asked for in /workspace: exit {:?} ({}); host owner {} mode {:o}",
        out.exit.code,
        err.trim(),
        made.uid(),
        made.mode() & 0o7777
    );
    assert_ne!(
        out.exit.code,
        Some(0),
        "chmod 4755 in a host mount: {out:?}"
    );
    assert!(err.contains("Operation not permitted"), "{err}");
    assert_eq!(
        made.mode() & 0o6000,
        0,
        "a box left a set-id file on the host"
    );
    assert_ne!(made.uid(), 0, "a box made a root file on the host");
    assert_eq!(made.uid(), std::fs::metadata(project.path()).unwrap().uid());

    // Root's own files, mounted: box root cannot write them (as root) at
    // all, unless others may.
    if me == 0 {
        let root_dir = tempfile::tempdir().unwrap();
        let mut spec = busybox_spec();
        spec.mounts.push(v1::Mount {
            host_path: root_dir.path().to_string_lossy().into(),
            guest_path: "/rootfiles".into(),
            read_only: false,
        });
        let created = create(&mut c, "iso-root-files", spec).await;
        assert!(
            created
                .warnings
                .iter()
                .any(|w| w.contains("belongs to root")),
            "{:?}",
            created.warnings
        );
        start(&mut c, "iso-root-files").await;
        let out = run(&mut c, "iso-root-files", &["touch", "/rootfiles/x"]).await;
        assert_ne!(
            out.exit.code,
            Some(0),
            "wrote into root's directory: {out:?}"
        );
        assert!(!root_dir.path().join("x").exists());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemons_environment_and_descriptors_stay_out_of_boxes() {
    let token = format!("tok-{}", std::process::id());
    // boxd started by something holding a directory (a full escape, were it
    // inherited: /proc/self/fd/7/..) and a pipe, with a token in its
    // environment.
    let d = Daemon::wrapped(
        "exec 7</ 8</etc 9>/dev/null",
        vec![("AGENT_HOST_TOKEN".into(), token.clone())],
    );
    let boxd_fds: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|p| p.display().to_string())
        .collect();
    println!("boxd's descriptors: {boxd_fds:?}");
    assert!(
        !boxd_fds.iter().any(|p| p == "/" || p == "/etc"),
        "boxd kept what it inherited: {boxd_fds:?}"
    );
    let mut c = d.client().await;
    let mut spec = busybox_spec();
    spec.secrets.push(v1::Secret {
        name: "API_KEY".into(),
        hosts: vec!["example.com".into()],
        value: format!("{token}-secret"),
        ..Default::default()
    });
    spec.allow_net.push("example.com".into());
    up(&mut c, "iso-env", spec).await;
    sh(&mut c, "iso-env", "sleep 300 >/dev/null 2>&1 &").await;
    // Every process's environment and descriptors, from inside.
    let seen = sh(
        &mut c,
        "iso-env",
        r#"for p in /proc/[0-9]*; do
  [ -e $p/environ ] || continue
  echo "pid ${p#/proc/} env: $(tr '\0' ' ' < $p/environ 2>/dev/null)"
  for f in $p/fd/*; do
    [ -e "$f" ] || continue
    t=$(readlink "$f"); n=${f##*/}
    if [ -d "$f" ]; then echo "pid ${p#/proc/} fd $n DIR $t"; else echo "pid ${p#/proc/} fd $n $t"; fi
  done
done"#,
    )
    .await;
    println!("{seen}");
    assert!(
        !seen.contains(&token),
        "the daemon's environment reached the box:\n{seen}"
    );
    for line in seen.lines().filter(|l| l.contains(" fd ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let fd: u32 = words[3].parse().unwrap();
        assert!(!line.contains(" DIR "), "a directory descriptor: {line}");
        // stdio only.
        assert!(
            fd <= 2 || line.contains("/proc/"),
            "a descriptor beyond stdio: {line}"
        );
    }
    // Control: the token is in boxd's own environment.
    let env = std::fs::read(format!("/proc/{}/environ", d.pid())).unwrap();
    assert!(String::from_utf8_lossy(&env).contains(&token));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_cannot_grow_boxds_memory_or_forge_its_log_lines() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "iso-log", busybox_spec()).await;
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let before = rss(d.pid());
    // 256 MiB and a forged log line into every descriptor a box process
    // might share with boxd (pid 1's stderr is a pipe to boxd).
    let out = run(
        &mut c,
        "iso-log",
        &[
            "sh",
            "-c",
            "for f in /proc/1/fd/2 /proc/1/fd/1; do                (printf '\n2026-01-01T00:00:00Z ERROR boxd: FORGED line\n'; head -c 268435456 /dev/zero) > $f && echo wrote $f;              done; true",
        ],
    )
    .await;
    println!("flood from the box: {}", out.stdout_str().trim());
    let after = rss(d.pid());
    println!("boxd RSS: {before} KiB before, {after} KiB after");
    assert!(
        after < before + 64 * 1024,
        "boxd grew by {} KiB",
        after - before
    );
    // The box's end lands in the log as one escaped line, never a line of
    // its own.
    let _ = c
        .stop_box(v1::StopBoxRequest {
            name: "iso-log".into(),
            force: true,
        })
        .await;
    std::thread::sleep(std::time::Duration::from_millis(300));
    let log = std::fs::read_to_string(d.home.join("logs/boxd.log")).unwrap_or_default();
    for line in log.lines() {
        assert!(
            !line
                .trim_start()
                .starts_with("2026-01-01T00:00:00Z ERROR boxd: FORGED"),
            "a forged log line: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sockets_of_other_families_are_refused() {
    let probes = probes();
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut spec = busybox_spec();
    spec.mounts.push(v1::Mount {
        host_path: probes.to_string_lossy().into(),
        guest_path: "/probes".into(),
        read_only: true,
    });
    up(&mut c, "iso-sock", spec).await;
    // (family, type): unix, inet, inet6, netlink allowed; vsock, packet,
    // alg (the kernel's crypto API) refused with EPERM.
    let cases = [
        (1, 1, true),
        (2, 2, true),
        (10, 1, true),
        (16, 3, true),
        (40, 1, false),
        (17, 3, false),
        (38, 5, false),
    ];
    for (family, kind, allowed) in cases {
        let out = run(
            &mut c,
            "iso-sock",
            &["/probes/sockprobe", &family.to_string(), &kind.to_string()],
        )
        .await;
        let said = out.stdout_str();
        println!("socket({family}, {kind}) in a box: {}", said.trim());
        if allowed {
            assert_eq!(said.trim(), "ok", "family {family}");
        } else {
            assert_eq!(
                said.trim(),
                "errno 1",
                "family {family} must be refused (EPERM)"
            );
        }
    }
    // Control: the kernel's crypto sockets work on this host.
    let host = std::process::Command::new(probes.join("sockprobe"))
        .args(["38", "5"])
        .output()
        .unwrap();
    println!(
        "socket(AF_ALG) on the host: {}",
        String::from_utf8_lossy(&host.stdout).trim()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_symlink_planted_in_a_mount_cannot_redirect_another_mount() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let project = host_dir();
    std::fs::create_dir(project.path().join("cache")).unwrap();
    give_to_host_user(&project.path().join("cache"));
    let mut spec = busybox_spec();
    for (host, guest) in [
        (project.path().to_path_buf(), "/w"),
        (project.path().join("cache"), "/cache"),
    ] {
        spec.mounts.push(v1::Mount {
            host_path: host.to_string_lossy().into(),
            guest_path: guest.into(),
            read_only: false,
        });
    }
    up(&mut c, "iso-swap", spec).await;
    // The box turns the second mount's source into a link to the host's /etc.
    sh(&mut c, "iso-swap", "rmdir /w/cache && ln -s /etc /w/cache").await;
    let _ = c
        .stop_box(v1::StopBoxRequest {
            name: "iso-swap".into(),
            force: true,
        })
        .await
        .unwrap();
    let err = c
        .start_box(v1::StartBoxRequest {
            name: "iso-swap".into(),
        })
        .await
        .unwrap_err();
    println!(
        "restart after the swap: {:?}: {}",
        err.code(),
        err.message()
    );
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("symbolic link"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn host_processes_home_socket_and_other_boxes_are_out_of_reach() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "iso-a", busybox_spec()).await;
    up(&mut c, "iso-b", busybox_spec()).await;

    // A host process with a recognizable command line.
    let mut host = std::process::Command::new("sleep")
        .arg("31337")
        .spawn()
        .unwrap();
    let seen = sh(
        &mut c,
        "iso-a",
        "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; ls -d /proc/[0-9]* | wc -l",
    )
    .await;
    assert!(!seen.contains("31337"), "a host process is visible: {seen}");
    let count: usize = seen.lines().last().unwrap().trim().parse().unwrap();
    assert!(count < 10, "only the box's processes: {seen}");
    let out = run(&mut c, "iso-a", &["kill", "-0", &host.id().to_string()]).await;
    assert_ne!(out.exit.code, Some(0), "signalled a host pid: {out:?}");
    // Control: visible from the host.
    assert!(
        std::fs::read_to_string(format!("/proc/{}/cmdline", host.id()))
            .unwrap()
            .contains("31337")
    );
    let _ = host.kill();
    let _ = host.wait();

    // The user's home, boxd's home and socket: files that exist on the host.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let marker = tempfile::Builder::new()
        .prefix("boxd-isolation-")
        .tempfile_in(&home)
        .unwrap();
    for path in [
        marker.path(),
        d.socket.as_path(),
        d.home.as_path(),
        d.socket.parent().unwrap(),
    ] {
        assert!(
            path.exists(),
            "control: {} exists on the host",
            path.display()
        );
        let out = run(&mut c, "iso-a", &["ls", "-d", path.to_str().unwrap()]).await;
        assert_ne!(
            out.exit.code,
            Some(0),
            "{} is visible in the box: {out:?}",
            path.display()
        );
    }
    let out = run(&mut c, "iso-a", &["ls", "-A", &home]).await;
    let name = marker.path().file_name().unwrap().to_str().unwrap();
    assert!(!out.stdout_str().contains(name), "{out:?}");

    // Another box's files.
    sh(&mut c, "iso-b", "echo private > /secret-of-b").await;
    let found = sh(
        &mut c,
        "iso-a",
        "find / -xdev -name 'secret-of-b' 2>/dev/null; ls /proc/*/root/ 2>/dev/null | grep -c secret-of-b; true",
    )
    .await;
    assert_eq!(found.trim(), "0", "box b's file seen from box a: {found}");
    assert_eq!(
        sh(&mut c, "iso-b", "cat /secret-of-b").await.trim(),
        "private",
        "control"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_with_an_empty_allow_list_has_no_network() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "iso-net", busybox_spec()).await;

    // A server on the host's loopback, answering anyone who connects.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            let mut conn = conn;
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    let url = format!("http://127.0.0.1:{port}/");
    // Control: the host reaches it.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert!(reply.ends_with("hello"), "{reply}");

    let out = run(
        &mut c,
        "iso-net",
        &["wget", "-q", "-O", "-", "-T", "3", &url],
    )
    .await;
    assert_ne!(out.exit.code, Some(0), "reached the host: {out:?}");
    assert!(!out.stdout_str().contains("hello"));
    // Only loopback, and no route anywhere.
    let devs = sh(&mut c, "iso-net", "cat /proc/net/dev").await;
    let names: Vec<&str> = devs
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(names, ["lo"], "{devs}");
    let routes = sh(&mut c, "iso-net", "cat /proc/net/route | wc -l").await;
    assert_eq!(routes.trim(), "1", "only the header: no routes");
    let dns = run(&mut c, "iso-net", &["nslookup", "example.com", "1.1.1.1"]).await;
    assert_ne!(dns.exit.code, Some(0), "{dns:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_cannot_exhaust_processes_or_memory() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let notes = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner()
        .notes
        .join("\n");
    let limits = notes
        .lines()
        .find(|l| l.starts_with("limits:"))
        .unwrap_or("");
    println!("{limits}");
    up(&mut c, "iso-pids", busybox_spec()).await;
    let mut spec = busybox_spec();
    spec.memory_mib = Some(128);
    up(&mut c, "iso-lim", spec).await;
    let mut events = c
        .watch_boxes(v1::WatchBoxesRequest::default())
        .await
        .unwrap()
        .into_inner();

    // A fork bomb: background sleeps until fork fails (which ends the
    // shell), counted with shell builtins only.
    let out = run(
        &mut c,
        "iso-pids",
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do sleep 15 & i=$((i+1)); echo $i > /tmp/started; done",
        ],
    )
    .await;
    println!("fork bomb ended: {:?}", out.exit);
    // The box, its init included, is still there, and works again once
    // the sleeps are over.
    let begin = std::time::Instant::now();
    let started: u64 = loop {
        let out = run(&mut c, "iso-pids", &["cat", "/tmp/started"]).await;
        if out.exit.code == Some(0) {
            break out.stdout_str().trim().parse().unwrap();
        }
        assert!(
            begin.elapsed().as_secs() < 60,
            "the box never recovered: {out:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    println!(
        "fork bomb: {started} processes started before the box's limit; the box answered again after {:.1} s",
        begin.elapsed().as_secs_f64()
    );
    assert!(started > 100, "the box could run processes at all");
    assert!(started < 4096, "the process limit held: {started}");

    // 300 MB held in memory by one process, in a box of 128 MiB.
    let out = run(
        &mut c,
        "iso-lim",
        &[
            "sh",
            "-c",
            "head -c 300000000 /dev/zero | tail -c 299000000 >/dev/null",
        ],
    )
    .await;
    println!("300 MB in a 128 MiB box: {:?}", out.exit);
    if !limits.contains("no cgroups") {
        assert_eq!(out.exit.signal, None, "the shell itself survives");
        assert_ne!(out.exit.code, Some(0), "the hog was killed: {out:?}");
        // The kill is a box event with its reason.
        let reason = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while let Some(e) = events.message().await.unwrap() {
                if e.name == "iso-lim" && e.message.contains("out of memory") {
                    return e.message;
                }
            }
            String::new()
        })
        .await
        .expect("an out-of-memory event within 10 s");
        println!("event: {reason}");
        assert!(reason.contains("128 MiB"), "{reason}");
        assert_eq!(sh(&mut c, "iso-lim", "echo alive").await.trim(), "alive");
    } else {
        println!("memory limits are not enforced here (no cgroups boxd may use): {limits}");
    }
}

/// A real distribution, lived in: packages install (apt drops to its own
/// user, which needs a full id range and setgroups), users are added and
/// switched to, files change owners, and the image's owners and setuid bits
/// are there to begin with.
#[tokio::test(flavor = "multi_thread")]
async fn a_debian_box_installs_packages_adds_users_and_changes_owners() {
    let image = boxd_tests::agent::node_image();
    let d = Daemon::start();
    let mut c = d.client().await;
    let spec = v1::BoxSpec {
        image: image.to_string_lossy().into_owned(),
        allow_net: vec!["deb.debian.org".into()],
        ..Default::default()
    };
    up(&mut c, "iso-debian", spec).await;
    let ids = sh(&mut c, "iso-debian", "cat /proc/self/uid_map").await;
    let count: u64 = ids
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    println!(
        "box ids: {count} ({})",
        ids.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    if count == 1 {
        println!("SKIPPED: boxd's user has no subordinate id range here (boxctl doctor: box ids)");
        return;
    }
    // The image's owners, groups and modes survive unpacking.
    let owners = sh(
        &mut c,
        "iso-debian",
        "stat -c '%n %U %G %a' /etc/shadow /usr/bin/su /usr/bin/passwd /var/log/apt 2>&1",
    )
    .await;
    println!("{}", owners.trim());
    assert!(owners.contains("/etc/shadow root shadow 640"), "{owners}");
    assert!(owners.contains("/usr/bin/su root root 4755"), "{owners}");

    let begin = std::time::Instant::now();
    let out = run(
        &mut c,
        "iso-debian",
        &[
            "sh",
            "-c",
            "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends curl && curl --version",
        ],
    )
    .await;
    let text = out.stdout_str();
    println!(
        "apt-get install curl: exit {:?} in {:.1} s; {}",
        out.exit.code,
        begin.elapsed().as_secs_f64(),
        text.lines().find(|l| l.starts_with("curl ")).unwrap_or("")
    );
    assert_eq!(
        out.exit.code,
        Some(0),
        "{}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let users = sh(
        &mut c,
        "iso-debian",
        "useradd -m alice && su alice -c 'id -un; touch ~/mine' && stat -c '%U:%G' /home/alice/mine \
         && chown alice:alice /srv && stat -c '%U:%G' /srv && su -s /bin/sh nobody -c 'id -u'",
    )
    .await;
    println!("{}", users.split_whitespace().collect::<Vec<_>>().join(" "));
    assert_eq!(
        users.split_whitespace().collect::<Vec<_>>(),
        ["alice", "alice:alice", "alice:alice", "65534"]
    );
}

/// Boxes of one image share its one unpacked copy: each adds only its own
/// writes, sees none of another's, and removing it leaves the image and the
/// others as they were.
#[tokio::test(flavor = "multi_thread")]
async fn boxes_share_one_read_only_image_and_keep_their_own_writes() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "cow-a", busybox_spec()).await;
    up(&mut c, "cow-b", busybox_spec()).await;
    let info = |b: &v1::BoxInfo| (b.name.clone(), b.disk_bytes);
    let fresh: Vec<_> = list(&mut c).await.iter().map(info).collect();
    println!("fresh boxes on disk: {fresh:?}");
    for (name, bytes) in &fresh {
        let bytes = bytes.unwrap_or_else(|| panic!("{name}: no disk usage"));
        assert!(bytes < 1 << 20, "{name} adds {bytes} bytes");
    }
    sh(&mut c, "cow-a", "echo mine > /etc/motd && rm /bin/ls && mkdir -p /data && head -c 1048576 /dev/zero > /data/blob").await;
    // b sees the image as it was.
    assert_eq!(
        sh(&mut c, "cow-b", "cat /etc/motd 2>/dev/null; ls /bin/ls")
            .await
            .trim(),
        "/bin/ls"
    );
    // Listing answers with the last measurement while a new one runs in
    // the background (a box of many files is never walked for a list).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let a = loop {
        let a = list(&mut c)
            .await
            .into_iter()
            .find(|b| b.name == "cow-a")
            .unwrap();
        if a.disk_bytes.unwrap_or(0) >= 1 << 20 || std::time::Instant::now() > deadline {
            break a;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    println!("cow-a after writing 1 MiB: {:?} bytes", a.disk_bytes);
    assert!(a.disk_bytes.unwrap() >= 1 << 20);
    // The writes survive a stop and a daemon restart.
    let mut d = d;
    d.restart();
    let mut c = d.client().await;
    start(&mut c, "cow-a").await;
    assert_eq!(
        sh(
            &mut c,
            "cow-a",
            "cat /etc/motd; ls /bin/ls 2>&1 | grep -c 'No such'"
        )
        .await,
        "mine\n1\n"
    );
    // Removing a leaves the image cache and b whole.
    let images = std::fs::read_dir(d.home.join("images")).unwrap().count();
    c.remove_box(v1::RemoveBoxRequest {
        name: "cow-a".into(),
        force: true,
    })
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_dir(d.home.join("images")).unwrap().count(),
        images
    );
    start(&mut c, "cow-b").await;
    assert_eq!(sh(&mut c, "cow-b", "ls /bin/ls").await.trim(), "/bin/ls");
}

/// A box's disk size is a file system of that size of its own (boxd as
/// root): writes past it fail with "no space left", the host's disk is
/// spared, and what the box deletes goes back to the host.
#[tokio::test(flavor = "multi_thread")]
async fn a_box_cannot_write_past_its_disk_size() {
    let d = Daemon::start();
    // The box's disk fills to 1 GiB on the host's: not on a disk without it.
    let free = boxd_tests::free_bytes(std::path::Path::new("/tmp"));
    if free < 3 << 29 {
        println!("SKIPPED: {} MiB free on the test disk", free >> 20);
        return;
    }
    let mut c = d.client().await;
    let mut spec = busybox_spec();
    spec.disk_size_gb = Some(1);
    let created = create(&mut c, "iso-disk", spec).await;
    if let Some(w) = created.warnings.iter().find(|w| w.contains("disk size")) {
        println!("SKIPPED: disk sizes are not enforced here: {w}");
        return;
    }
    start(&mut c, "iso-disk").await;
    let out = run(
        &mut c,
        "iso-disk",
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/big bs=1M count=1536 2>&1 | head -1; ls -l /big",
        ],
    )
    .await;
    let text = out.stdout_str();
    println!(
        "writing 1.5 GiB in a 1 GiB box: {}",
        text.trim().replace('\n', "; ")
    );
    assert!(
        text.contains("No space left on device"),
        "the write stopped: {text}"
    );
    let text = text.lines().last().unwrap_or_default().to_owned();
    let size: u64 = text.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert!(size < 1 << 30, "{size} bytes written");
    let used = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            list(&mut c)
                .await
                .into_iter()
                .find(|b| b.name == "iso-disk")
                .unwrap()
                .disk_bytes
                .unwrap()
        }
    };
    let full = used(&mut c).await;
    sh(&mut c, "iso-disk", "rm /big && sync").await;
    // The file system discards what was freed (the disk file's holes are
    // punched) as its journal commits and the loop device gets to it: a
    // few seconds on a busy machine.
    let removed = std::time::Instant::now();
    let freed = loop {
        let now = used(&mut c).await;
        if now < 64 << 20 || removed.elapsed() > std::time::Duration::from_secs(60) {
            break now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    println!(
        "the box's disk on the host: {} MiB full, {} MiB {:.1} s after rm",
        full >> 20,
        freed >> 20,
        removed.elapsed().as_secs_f64()
    );
    assert!(full > 900 << 20 && full <= (1 << 30) + (8 << 20), "{full}");
    assert!(freed < 64 << 20, "{freed}");
    assert_eq!(
        sh(&mut c, "iso-disk", "echo more > /x && cat /x").await,
        "more\n"
    );
}

/// A box made by an older boxd (a full copy of its image in `BOX/rootfs`,
/// every file the daemon's own: host root's, for a root-run boxd) still
/// starts, keeps its files, and its files become box root's.
#[tokio::test(flavor = "multi_thread")]
async fn a_box_made_by_an_older_boxd_keeps_working() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let made = up(&mut c, "legacy", busybox_spec()).await;
    sh(&mut c, "legacy", "echo kept > /etc/kept").await;
    c.stop_box(v1::StopBoxRequest {
        name: "legacy".into(),
        force: true,
    })
    .await
    .unwrap();
    d.stop();
    // Turn it into what an older boxd left: the image and the box's writes
    // flattened into one copy owned by the daemon's user, no upper layer.
    let dir = d.home.join("boxes").join(&made.id);
    let image = std::fs::read_dir(d.home.join("images"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("rootfs"))
        .find(|p| p.is_dir())
        .expect("the unpacked image");
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        let ok = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", from.display()))
            .arg(to)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    std::fs::create_dir(dir.join("rootfs")).unwrap();
    copy(&image, &dir.join("rootfs"));
    std::fs::write(dir.join("rootfs/etc/kept"), "kept\n").unwrap();
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let status = std::process::Command::new("chown")
        .args(["-R", &format!("{uid}:{gid}")])
        .arg(dir.join("rootfs"))
        .status()
        .unwrap();
    assert!(status.success());
    for layer in ["upper", "work"] {
        // The overlay's work directory keeps a mode-000 directory inside.
        let _ = std::process::Command::new("chmod")
            .args(["-R", "u+rwX"])
            .arg(dir.join(layer))
            .status();
        std::fs::remove_dir_all(dir.join(layer)).unwrap();
    }

    d.restart();
    let mut c = d.client().await;
    start(&mut c, "legacy").await;
    let seen = sh(
        &mut c,
        "legacy",
        "cat /etc/kept; stat -c '%u:%g' /etc/kept /bin/busybox; touch /new && echo wrote",
    )
    .await;
    println!(
        "an older box after the upgrade: {}",
        seen.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    assert_eq!(seen, "kept\n0:0\n0:0\nwrote\n");
    use std::os::unix::fs::MetadataExt;
    let host_uid = std::fs::metadata(dir.join("rootfs/etc/kept"))
        .unwrap()
        .uid();
    if uid == 0 {
        assert_ne!(host_uid, 0, "its files still belong to host root");
    }
}

/// Runs `argv` as box user `user` (`exec -u`).
async fn run_as(c: &mut Client, box_name: &str, user: &str, argv: &[&str]) -> Output {
    let mut req = start_req(box_name, argv);
    req.user = user.into();
    collect(ExecStream::start(c, req).await.expect("exec start")).await
}

/// A non-root box user and a mounted project: without keep-id the mount's
/// owner is box root and another box user gets a plain "Permission denied"
/// (never `EOVERFLOW`); with keep-id the owner is that user, the box's
/// default, whose files land on the host as the owner's, while box root's
/// land as an unprivileged host id and the image's files stay root's. A
/// root-run boxd idmaps the mount; a user-run one exchanges box root and
/// the user in the box's map and in a copy of the image.
#[tokio::test(flavor = "multi_thread")]
async fn a_non_root_box_user_works_in_a_mount_as_its_owner_with_keep_id() {
    use std::os::unix::fs::MetadataExt;
    let d = Daemon::start();
    let mut c = d.client().await;
    let project = host_dir();
    let owner = std::fs::metadata(project.path()).unwrap();
    let mount = |spec: &mut v1::BoxSpec| {
        spec.mounts.push(v1::Mount {
            host_path: project.path().to_string_lossy().into(),
            guest_path: "/workspace".into(),
            read_only: false,
        })
    };
    let mut spec = busybox_spec();
    mount(&mut spec);
    up(&mut c, "plain-ids", spec).await;
    let out = run_as(&mut c, "plain-ids", "1000", &["touch", "/workspace/f"]).await;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("without keep-id, box user 1000 touches a file in the mount: {err}");
    assert_ne!(out.exit.code, Some(0), "{out:?}");
    // A root-run boxd maps the owner alone (no other box id writes there:
    // EOVERFLOW); a user-run one binds plainly (the modes refuse it).
    // SAFETY: geteuid has no preconditions.
    let root_run = unsafe { libc::geteuid() } == 0;
    assert!(
        err.contains(if root_run {
            "too large"
        } else {
            "Permission denied"
        }),
        "{err}"
    );
    assert!(!project.path().join("f").exists());
    c.remove_box(v1::RemoveBoxRequest {
        name: "plain-ids".into(),
        force: true,
    })
    .await
    .unwrap();

    let mut spec = busybox_spec();
    mount(&mut spec);
    spec.keep_id = Some(v1::KeepId {
        uid: 1000,
        gid: 1000,
    });
    up(&mut c, "kept", spec).await;
    // The default user is the keep-id one; its files are the owner's.
    let ids = sh(
        &mut c,
        "kept",
        "id -u; id -g; touch /workspace/f; mkdir /workspace/d; echo x > /workspace/d/g; ls -ln /bin/busybox | awk '{print $3\":\"$4}'",
    )
    .await;
    println!("keep-id box, default user: {}", ids.replace('\n', "; "));
    assert_eq!(ids, "1000\n1000\n0:0\n", "the image's files stay root's");
    for made in ["f", "d", "d/g"] {
        let m = std::fs::metadata(project.path().join(made)).unwrap();
        assert_eq!((m.uid(), m.gid()), (owner.uid(), owner.gid()), "{made}");
    }
    // Box root is not the mount's owner: as root-run, it cannot write
    // there at all (the mount maps the keep-id user alone), as user-run it
    // writes as its own unprivileged host id.
    let out = run_as(&mut c, "kept", "0", &["touch", "/workspace/r"]).await;
    println!(
        "box root of a keep-id box touches a file in the mount: exit {:?} {}",
        out.exit.code,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    if root_run {
        assert_ne!(out.exit.code, Some(0), "{out:?}");
        assert!(!project.path().join("r").exists());
    } else {
        assert_eq!(out.exit.code, Some(0), "{out:?}");
        let r = std::fs::metadata(project.path().join("r")).unwrap();
        println!("box root's file on the host: uid {}", r.uid());
        assert!(r.uid() > 65_535 && r.uid() != owner.uid(), "{}", r.uid());
    }
    c.remove_box(v1::RemoveBoxRequest {
        name: "kept".into(),
        force: true,
    })
    .await
    .unwrap();
}
