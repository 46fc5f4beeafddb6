//! `boxctl` driven as a docker user drives docker: the real binary against
//! a real boxd, one habit after another. The data-loss and name-clash
//! cases come first, then the exit-code table (docs/cli.md), then the
//! shapes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use boxd_tests::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(cmd: &mut Command) -> (Option<i32>, String, String) {
    let out: Output = cmd.output().expect("run boxctl");
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn run_rm_never_removes_a_box_it_did_not_create() {
    let d = Daemon::start();
    let image = busybox();
    // A box with work in it, and a server running in it.
    ok(d.boxctl()
        .args(["run", "--name", "precious"])
        .arg(&image)
        .args(["sh", "-c", "echo important > /root/work.txt"]));
    ok(d.boxctl().args(["exec", "-d", "precious", "sleep", "300"]));
    // The habit that deleted it: `run --rm` with the name, both forms.
    let out = ok(d
        .boxctl()
        .args(["run", "--rm", "--image"])
        .arg(&image)
        .args(["precious", "--", "cat", "/root/work.txt"]));
    assert_eq!(text(&out.stdout), "important\n");
    let out = ok(d
        .boxctl()
        .args(["run", "--rm", "--name", "precious"])
        .arg(&image)
        .args(["cat", "/root/work.txt"]));
    assert_eq!(text(&out.stdout), "important\n");
    // Still there, still running, its command still running, its file kept.
    let out = ok(d
        .boxctl()
        .args(["inspect", "-f", "{{.State}} {{.RunningExecs}}", "precious"]));
    assert_eq!(text(&out.stdout), "running 1\n");
    let out = ok(d
        .boxctl()
        .args(["exec", "precious", "cat", "/root/work.txt"]));
    assert_eq!(text(&out.stdout), "important\n");
    // A box that run --rm made itself does go.
    ok(d.boxctl()
        .args(["run", "--rm", "--name", "scratch"])
        .arg(&image)
        .arg("true"));
    let (c, _, err) = code(d.boxctl().args(["inspect", "scratch"]));
    assert_eq!(c, Some(1), "{err}");
    ok(d.boxctl().args(["rm", "-f", "precious"]));
}

#[test]
fn a_name_with_another_spec_is_refused_and_the_box_kept() {
    let d = Daemon::start();
    let image = busybox();
    let other = tempfile::tempdir().unwrap();
    ok(d.boxctl()
        .args(["create", "--name", "web", "-e", "A=1"])
        .arg(&image));
    let id = || text(&ok(d.boxctl().args(["inspect", "-f", "{{.Id}}", "web"])).stdout);
    let first = id();
    // The same spec (either form) reuses it.
    let out = ok(d
        .boxctl()
        .args(["create", "web", "-e", "A=1", "--image"])
        .arg(&image));
    assert!(
        text(&out.stdout).starts_with("reused box web"),
        "{}",
        text(&out.stdout)
    );
    // Another image, other limits, mounts, env, network or ports: 125,
    // naming what differs, and nothing changes.
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["-e".into(), "A=2".into()], "env differs"),
        (
            vec!["--memory".into(), "64m".into(), "-e".into(), "A=1".into()],
            "memory_mib differs",
        ),
        (
            vec![
                "-v".into(),
                format!("{}:/w", other.path().display()),
                "-e".into(),
                "A=1".into(),
            ],
            "mounts differs",
        ),
        (
            vec![
                "--allow-net".into(),
                "example.com".into(),
                "-e".into(),
                "A=1".into(),
            ],
            "allow_net differs",
        ),
        (
            vec!["-p".into(), "8080".into(), "-e".into(), "A=1".into()],
            "ports differs",
        ),
    ];
    for (flags, what) in cases {
        for verb in ["create", "run"] {
            let mut cmd = d.boxctl();
            cmd.args([verb, "--name", "web"]).args(&flags).arg(&image);
            if verb == "run" {
                cmd.arg("true");
            }
            let (c, _, err) = code(&mut cmd);
            assert_eq!(c, Some(125), "{verb} {flags:?}: {err}");
            assert!(
                err.contains(what) && err.contains("--replace"),
                "{verb} {flags:?}: {err}"
            );
        }
    }
    let (c, _, err) = code(
        d.boxctl()
            .args(["create", "--name", "web", "-e", "A=1"])
            .arg(image.join("..")),
    );
    assert_eq!(c, Some(125), "{err}");
    assert!(err.contains("image differs"), "{err}");
    assert_eq!(id(), first, "the box was kept");
    // --replace makes a new one (podman's word).
    ok(d.boxctl()
        .args(["create", "--replace", "--name", "web", "-e", "A=2"])
        .arg(&image));
    assert_ne!(id(), first);
    let out = ok(d
        .boxctl()
        .args(["inspect", "-f", "{{index .Spec.Env \"A\"}}", "web"]));
    assert_eq!(text(&out.stdout), "2\n");
    ok(d.boxctl().args(["rm", "web"]));
}

#[test]
fn exit_codes_follow_the_table() {
    let d = Daemon::start();
    let image = busybox();
    ok(d.boxctl()
        .args(["run", "-d", "--name", "ex"])
        .arg(&image)
        .args(["sleep", "300"]));
    let table: Vec<(Vec<&str>, i32)> = vec![
        (vec!["exec", "ex", "sh", "-c", "exit 7"], 7),
        (vec!["exec", "ex", "sh", "-c", "kill -KILL $$"], 128 + 9),
        (vec!["exec", "ex", "no-such-command"], 127),
        (vec!["exec", "ex", "/etc/passwd"], 126),
        (vec!["exec", "-u", "nosuch", "ex", "true"], 126),
        (vec!["exec", "nosuch", "true"], 125),
        (
            vec![
                "run",
                "--name",
                "ex",
                "--memory",
                "64m",
                "/nonexistent-image",
            ],
            125,
        ),
        (vec!["rm", "nosuch"], 1),
        (vec!["stop", "nosuch"], 1),
        (vec!["start", "nosuch"], 1),
        (vec!["logs", "nosuch"], 1),
        (vec!["inspect", "nosuch"], 1),
        (vec!["inspect", "ex", "nosuch"], 1),
        (vec!["port", "nosuch"], 1),
        (vec!["ls", "--no-such-flag"], 2),
        (vec!["ps", "--filter", "colour=red"], 2),
        (vec!["create", "--name", "x", "--memory", "lots"], 2),
    ];
    for (args, want) in table {
        let (c, _, err) = code(d.boxctl().args(&args));
        assert_eq!(c, Some(want), "boxctl {args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("BoxName("),
            "{args:?}: {err}"
        );
    }
    // A typo gets a suggestion; --json gets its error as JSON.
    let (_, _, err) = code(d.boxctl().args(["logs", "xe"]));
    assert!(err.contains("no box named xe (did you mean ex?)"), "{err}");
    let (c, _, err) = code(d.boxctl().args(["--json", "rm", "nosuch"]));
    assert_eq!(c, Some(1));
    let v: serde_json::Value = serde_json::from_str(err.trim()).expect(&err);
    assert_eq!(v["error"]["exitCode"], 1);
    assert_eq!(v["error"]["kind"], "NotFound");
    // -it without a terminal fails at once instead of waiting.
    let (c, _, err) = code(
        d.boxctl()
            .args(["exec", "-it", "ex", "sh"])
            .stdin(Stdio::null()),
    );
    assert_eq!(c, Some(1));
    assert!(err.contains("the input device is not a TTY"), "{err}");
    // A reader that goes away ends boxctl quietly (no panic).
    for args in [vec!["completions", "bash"], vec!["ps", "-a"]] {
        let mut child = d
            .boxctl()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert!(
            text(&out.stderr).is_empty(),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // Not reachable, and told not to start one: 3.
    let dir = tempfile::tempdir().unwrap();
    let (c, _, err) = code(
        Command::new(bin("boxctl"))
            .env("BOXD_AUTOSTART", "0")
            .env("BOXD_HOME", dir.path().join("home"))
            .env("BOXD_SOCKET", dir.path().join("s.sock"))
            .arg("ps"),
    );
    assert_eq!(c, Some(3), "{err}");
    ok(d.boxctl().args(["rm", "-f", "ex"]));
}

#[test]
fn docker_shapes_work_as_typed() {
    let d = Daemon::start();
    let image = busybox();
    // run IMAGE COMMAND: a generated name, the command's output.
    let out = ok(d.boxctl().arg("run").arg(&image).args(["echo", "hi"]));
    assert_eq!(text(&out.stdout), "hi\n");
    let names = text(&ok(d.boxctl().args(["ps", "-aq"])).stdout);
    let generated = names.trim();
    assert!(generated.contains('_'), "{names:?}");
    // No command: the image's Cmd (sh), here reading stdin.
    let mut child = d
        .boxctl()
        .args(["run", "-i", "--rm"])
        .arg(&image)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo from-cmd\n")
        .unwrap();
    assert_eq!(
        text(&child.wait_with_output().unwrap().stdout),
        "from-cmd\n"
    );
    // -d, then logs -f and attach follow it.
    let out = ok(d
        .boxctl()
        .args(["run", "-d", "--name", "bg"])
        .arg(&image)
        .args(["sh", "-c", "echo one; sleep 1; echo two"]));
    assert_eq!(text(&out.stdout), "bg\n");
    let out = ok(d.boxctl().args(["logs", "-f", "bg"]));
    assert_eq!(text(&out.stdout), "one\ntwo\n");
    ok(d.boxctl()
        .args(["exec", "-d", "bg", "sh", "-c", "sleep 1; echo attached"]));
    let out = ok(d.boxctl().args(["attach", "bg"]));
    assert!(
        text(&out.stdout).ends_with("attached\n"),
        "{}",
        text(&out.stdout)
    );
    // exec with and without --, -u by name and number, -e VAR, --env-file, -w.
    let out = ok(d.boxctl().args(["exec", "bg", "--", "echo", "dashes"]));
    assert_eq!(text(&out.stdout), "dashes\n");
    let out = ok(d.boxctl().args(["exec", "-u", "nobody", "bg", "id", "-u"]));
    assert_eq!(text(&out.stdout), "65534\n");
    let out = ok(d.boxctl().args(["exec", "--user", "1234:5678", "bg", "id"]));
    assert!(
        text(&out.stdout).starts_with("uid=1234 gid=5678"),
        "{}",
        text(&out.stdout)
    );
    let envf = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(envf.path(), "# comment\nFROM_FILE=1\nHOSTVAL\n").unwrap();
    let out = ok(d
        .boxctl()
        .env("HOSTVAL", "from-host")
        .args([
            "exec",
            "-e",
            "HOSTVAL",
            "-e",
            "NOT_SET_ANYWHERE",
            "--env-file",
        ])
        .arg(envf.path())
        .args([
            "-w",
            "/tmp",
            "bg",
            "sh",
            "-c",
            "echo $FROM_FILE $HOSTVAL ${NOT_SET_ANYWHERE-unset} $(pwd)",
        ]));
    assert_eq!(text(&out.stdout), "1 from-host unset /tmp\n");
    // Limits in docker's words.
    ok(d.boxctl()
        .args(["create", "--name", "lim", "--memory", "64m", "--cpus", "1"])
        .arg(&image));
    let out = ok(d
        .boxctl()
        .args(["inspect", "-f", "{{.Spec.MemoryMib}} {{.Spec.Cpus}}", "lim"]));
    assert_eq!(text(&out.stdout), "64 1\n");
    // ps: running only; -a all; -q names; --filter.
    let running = text(&ok(d.boxctl().args(["ps", "-q"])).stdout);
    assert!(
        running.contains("bg") && !running.contains("lim"),
        "{running}"
    );
    let all = text(&ok(d.boxctl().args(["ps", "-a", "-q"])).stdout);
    assert!(all.contains("lim") && all.contains(generated), "{all}");
    let created = text(&ok(d.boxctl().args(["ps", "-aq", "--filter", "status=created"])).stdout);
    assert_eq!(created.trim(), "lim");
    let named = text(&ok(d.boxctl().args(["ls", "-q", "--filter", "name=li"])).stdout);
    assert_eq!(named.trim(), "lim");
    // inspect several, by name and id, with --format; a list without it.
    let id = text(&ok(d.boxctl().args(["inspect", "-f", "{{.Id}}", "lim"])).stdout);
    let out = ok(d.boxctl().args([
        "inspect",
        "--format",
        "{{.Name}}={{.State}}",
        "bg",
        id.trim(),
    ]));
    assert_eq!(text(&out.stdout), "bg=running\nlim=created\n");
    let out = ok(d.boxctl().args(["inspect", "bg", "lim"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(2));
    // images, stop/start/rm of several, prune (asks first).
    ok(d.boxctl().arg("images"));
    ok(d.boxctl().args(["stop", "bg", "lim"]));
    ok(d.boxctl().args(["start", "bg", "lim"]));
    ok(d.boxctl().args(["stop", "lim"]));
    let mut no = d
        .boxctl()
        .args(["box", "prune"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    no.stdin.take().unwrap().write_all(b"n\n").unwrap();
    assert_eq!(no.wait_with_output().unwrap().status.code(), Some(1));
    let out = ok(d.boxctl().args(["box", "prune", "-f"]));
    let pruned = text(&out.stdout);
    // The box `run` made keeps running after its command (a box is not
    // tied to one command, unlike a container): prune keeps it too.
    assert!(pruned.contains("removed box lim"), "{pruned}");
    assert!(
        !pruned.contains("removed box bg") && !pruned.contains(generated),
        "a running box stays: {pruned}"
    );
    ok(d.boxctl().args(["rm", "-f", generated]));
    ok(d.boxctl().args(["rm", "-f", "bg"]));
}

#[test]
fn the_daemon_starts_itself() {
    let dir = tempfile::Builder::new()
        .prefix("boxd-auto-")
        .tempdir_in("/tmp")
        .unwrap();
    let ctl = || {
        let mut c = Command::new(bin("boxctl"));
        c.env("BOXD_HOME", dir.path().join("home"))
            .env("BOXD_SOCKET", dir.path().join("s.sock"));
        c
    };
    let (c, out, err) = code(ctl().args(["ps", "-a"]));
    assert_eq!(c, Some(0), "{err}");
    assert!(out.starts_with("NAME"), "{out}");
    assert_eq!(err.lines().count(), 1, "one line says so: {err}");
    assert!(err.contains("started boxd"), "{err}");
    // The next command finds it running and says nothing.
    let (c, _, err) = code(ctl().args(["ps"]));
    assert_eq!((c, err.as_str()), (Some(0), ""));
    ok(ctl().args(["daemon", "stop"]));
}

/// `boxctl ls | head -0` ends boxctl as it ends `cat` (SIGPIPE, nothing on
/// stderr), while a daemon socket that closes mid-write stays an error
/// boxctl handles: the fault suite's SIGKILL test covers that side.
#[test]
fn a_closed_stdout_ends_boxctl_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let d = Daemon::start();
    ok(d.boxctl()
        .args(["create", "--name", "quiet"])
        .arg(busybox()));
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = d
        .boxctl()
        .args(["ls"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run boxctl");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
    assert_eq!(text(&out.stderr), "", "nothing but the signal");
    // The completions are written in one go, to the same end.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = d
        .boxctl()
        .args(["completions", "bash"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run boxctl");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
    assert_eq!(text(&out.stderr), "");
    ok(d.boxctl().args(["rm", "-f", "quiet"]));
}

/// podman's `--userns keep-id`: a non-root box user writes in the mounted
/// project as its host owner (root-run boxd; a user-run one refuses it in
/// isolation.rs), and is the user `run` and `exec` run as.
#[test]
fn userns_keep_id_makes_the_project_the_box_users() {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let d = Daemon::start();
    let project = host_dir();
    let volume = format!("{}:/work", project.path().display());
    let out = ok(d
        .boxctl()
        .args([
            "run",
            "--name",
            "agent",
            "--userns",
            "keep-id:uid=1000",
            "-v",
            &volume,
        ])
        .arg(busybox())
        .args(["sh", "-c", "id -u; touch /work/made-by-agent"]));
    assert_eq!(text(&out.stdout), "1000\n");
    let made = std::fs::metadata(project.path().join("made-by-agent")).unwrap();
    assert_eq!(made.uid(), HOST_USER);
    // Another --userns is refused (125, as docker refuses a bad flag value)
    // saying what boxd knows.
    let (c, _, err) = code(
        d.boxctl()
            .args(["run", "--rm", "--userns", "host"])
            .arg(busybox())
            .arg("true"),
    );
    assert_eq!(c, Some(125), "{err}");
    assert!(err.contains("keep-id only"), "{err}");
    ok(d.boxctl().args(["rm", "-f", "agent"]));
}

/// `docker update -m` / `--cpus` on a running box reach its cgroup at
/// once, and the spec keeps them; `--allow-net` waits for `restart`, and
/// `update` of a missing box fails with a did-you-mean.
#[test]
fn update_changes_a_running_boxs_limits_and_restart_its_network() {
    let d = Daemon::start();
    ok(d.boxctl()
        .args(["run", "-d", "--name", "limited", "-m", "256m"])
        .arg(busybox())
        .args(["sleep", "3071"]));
    let out = ok(d
        .boxctl()
        .args(["update", "-m", "96m", "--cpus", "1", "limited"]));
    assert_eq!(text(&out.stdout), "updated box limited\n");
    let out = ok(d.boxctl().args([
        "inspect",
        "-f",
        "{{.Spec.MemoryMib}} {{.Spec.Cpus}}",
        "limited",
    ]));
    assert_eq!(text(&out.stdout), "96 1\n");
    // The box's memory cgroup, as the kernel enforces it, from the host
    // (the box has a cgroup namespace of its own).
    let sleeper = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x003071\x00"))
        .expect("the box's sleep, seen from the host");
    let cgroups = std::fs::read_to_string(sleeper.path().join("cgroup")).unwrap();
    let memory = cgroups
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            let v1 = controllers.split(',').any(|c| c == "memory");
            match (v1, controllers.is_empty()) {
                (true, _) => Some(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")),
                (false, true) => Some(format!("/sys/fs/cgroup{path}/memory.max")),
                _ => None,
            }
        })
        .filter(|p| std::path::Path::new(p).exists());
    match memory {
        Some(file) => {
            let limit = std::fs::read_to_string(&file).unwrap();
            println!("{file}: {}", limit.trim());
            assert_eq!(limit.trim(), (96u64 << 20).to_string());
        }
        None => println!("no memory cgroup here: the spec alone is checked"),
    }
    // The allow-list: kept for the next start, said to wait for it.
    let out = ok(d
        .boxctl()
        .args(["update", "--allow-net", "example.com", "limited"]));
    assert!(
        text(&out.stderr).contains("next starts"),
        "{}",
        text(&out.stderr)
    );
    let out = ok(d
        .boxctl()
        .args(["inspect", "-f", "{{json .Spec.AllowNet}}", "limited"]));
    assert_eq!(text(&out.stdout), "[\"example.com\"]\n");
    ok(d.boxctl().args(["restart", "limited"]));
    let (c, _, err) = code(d.boxctl().args(["update", "--no-net", "limitd"]));
    assert_eq!(c, Some(1), "{err}");
    assert!(err.contains("limited"), "did you mean: {err}");
    let (c, _, err) = code(d.boxctl().args(["update", "limited"]));
    assert_eq!(c, Some(2), "{err}");
    ok(d.boxctl().args(["rm", "-f", "limited"]));
}

/// `docker events --since … --until … --filter`, readable times; `docker
/// logs --tail`, `--since`.
#[test]
fn events_and_logs_take_docker_s_time_words() {
    let d = Daemon::start();
    ok(d.boxctl()
        .args(["run", "--name", "evbox"])
        .arg(busybox())
        .args(["sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done"]));
    // logs --tail: the last lines only.
    let out = ok(d.boxctl().args(["logs", "--tail", "2", "evbox"]));
    assert_eq!(text(&out.stdout), "line4\nline5\n");
    let out = ok(d.boxctl().args(["logs", "--since", "0s", "evbox"]));
    assert_eq!(text(&out.stdout), "", "nothing started since now");
    let out = ok(d.boxctl().args(["logs", "--since", "10m", "evbox"]));
    assert_eq!(text(&out.stdout), "line1\nline2\nline3\nline4\nline5\n");
    ok(d.boxctl().args(["stop", "evbox"]));
    // The past, bounded: no waiting, every state change, times readable.
    let out = ok(d
        .boxctl()
        .args(["events", "--since", "5m", "--until", "0s"]));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    println!("{}", lines.join("\n"));
    let states: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains(" evbox "))
        .filter_map(|l| l.split(' ').nth(2))
        .collect();
    assert_eq!(
        states,
        ["created", "starting", "running", "stopping", "stopped"],
        "{lines:?}"
    );
    assert!(lines[0].starts_with("20") && lines[0].contains('T') && lines[0].contains("Z box "));
    let out = ok(d.boxctl().args([
        "events",
        "--since",
        "5m",
        "--until",
        "0s",
        "--filter",
        "state=running",
        "--filter",
        "box=evbox",
    ]));
    assert_eq!(
        text(&out.stdout).lines().count(),
        1,
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stdout).contains("booted in"));
    let (c, _, err) = code(d.boxctl().args(["events", "--since", "yesterday"]));
    assert_eq!(c, Some(2), "{err}");
    assert!(err.contains("not a time"), "{err}");
    ok(d.boxctl().args(["rm", "-f", "evbox"]));
}

/// Tab completion names the daemon's boxes (clap's dynamic completion, as
/// the script `boxctl completions bash` prints asks it), and never starts
/// a daemon to do so.
#[test]
fn completion_names_the_daemons_boxes() {
    let complete = |mut cmd: Command, words: &[&str]| {
        let out = ok(cmd
            .env("COMPLETE", "bash")
            .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
            .env("_CLAP_COMPLETE_COMP_TYPE", "9")
            .env("_CLAP_COMPLETE_SPACE", "true")
            .arg("--")
            .args(words));
        let mut got: Vec<String> = text(&out.stdout)
            .split(['\u{b}', '\n'])
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect();
        got.sort();
        got
    };
    let d = Daemon::start();
    let script = ok(d.boxctl().args(["completions", "bash"]));
    assert!(
        text(&script.stdout).contains("COMPLETE=\"bash\""),
        "{}",
        text(&script.stdout)
    );
    for name in ["webapp", "worker", "db"] {
        ok(d.boxctl().args(["create", "--name", name]).arg(busybox()));
    }
    assert_eq!(
        complete(d.boxctl(), &["boxctl", "start", "w"]),
        ["webapp", "worker"]
    );
    assert_eq!(complete(d.boxctl(), &["boxctl", "rm", "-f", "d"]), ["db"]);
    assert_eq!(complete(d.boxctl(), &["boxctl", "exec", "web"]), ["webapp"]);
    assert_eq!(complete(d.boxctl(), &["boxctl", "logs", "wo"]), ["worker"]);
    ok(d.boxctl().args(["rm", "-f", "webapp", "worker", "db"]));
    // No daemon: nothing to offer, and none started.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let mut idle = Command::new(bin("boxctl"));
    idle.env("BOXD_HOME", dir.path().join("home"))
        .env("BOXD_SOCKET", &socket);
    assert_eq!(
        complete(idle, &["boxctl", "start", "w"]),
        Vec::<String>::new()
    );
    assert!(!socket.exists(), "completion started a daemon");
}
