//! `boxctl mcp` driven by the official MCP Python SDK (`tests/mcp/agent.py`,
//! `mcp` pinned in `tests/mcp/requirements.txt`), as an agent host spawns
//! it: every tool, and every refusal of the user's policy, against a real
//! boxd.

use boxd_tests::*;
use serde_json::Value;

fn agent_command(
    mode: &str,
    d: &Daemon,
    project: &std::path::Path,
    outside: &std::path::Path,
) -> std::process::Command {
    let mut cmd = agent::mcp_client(mode, d, project, outside);
    cmd.args(["--allow-mount".as_ref(), project.as_os_str()]);
    cmd
}

fn run_agent(d: &Daemon, project: &std::path::Path, outside: &std::path::Path) -> Value {
    let out = agent_command("all", d, project, outside)
        .output()
        .expect("run the MCP SDK client");
    assert!(
        out.status.success(),
        "the MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client's JSON report")
}

fn passed<'a>(r: &'a Value, step: &str) -> &'a Value {
    r[step]
        .get("ok")
        .unwrap_or_else(|| panic!("{step} failed: {}", r[step]))
}

fn refused<'a>(r: &'a Value, step: &str) -> &'a str {
    r[step]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{step} should have been refused: {}", r[step]))
}

#[test]
fn an_mcp_client_gets_boxes_within_the_user_s_policy() {
    let d = Daemon::start();
    // A box the user made themselves, which the agent may not touch.
    ok(d.boxctl()
        .args(["create", "--name", "userbox"])
        .arg(busybox()));
    ok(d.boxctl().args(["start", "userbox"]));
    let project = host_dir();
    let outside = host_dir();
    let r = run_agent(&d, project.path(), outside.path());
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());

    assert_eq!(r["server"], "boxd");
    let tools: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for t in [
        "list_boxes",
        "create_box",
        "start_box",
        "stop_box",
        "remove_box",
        "exec",
        "read_file",
        "write_file",
        "copy_to_box",
        "copy_from_box",
        "exec_start",
        "exec_output",
        "exec_kill",
        "list_files",
        "stat_path",
        "make_dir",
        "remove_path",
        "snapshot_create",
        "snapshot_list",
        "snapshot_restore",
        "clone_box",
        "box_stats",
    ] {
        assert!(tools.contains(&t), "{t} missing from {tools:?}");
    }
    assert_eq!(
        r["schemas_ok"], true,
        "every tool has a description and an object schema"
    );

    // Create, and the same create again reuses the box.
    assert_eq!(passed(&r, "create")["state"], "running");
    assert_eq!(passed(&r, "create")["made_by_mcp"], true);
    assert_eq!(passed(&r, "again")["id"], passed(&r, "create")["id"]);

    // Exec: in the box, writing through the mount to the host project.
    let exec = passed(&r, "exec");
    assert_eq!(exec["exit_code"], 0, "{exec}");
    assert_eq!(exec["stdout"]["text"], "m1\n", "the box's hostname");
    assert_eq!(
        std::fs::read_to_string(project.path().join("from-box")).unwrap(),
        "from-box\n"
    );
    let shell = passed(&r, "shell");
    assert_eq!(shell["exit_code"], 3);
    assert_eq!(shell["stdout"]["text"], "out\n");
    assert_eq!(shell["stderr"]["text"], "err\n");
    let binary = passed(&r, "binary");
    assert_eq!(binary["stdout"]["encoding"], "base64");
    assert_eq!(binary["stdout"]["text"], "//4=");
    assert_eq!(passed(&r, "stdin")["stdout"]["text"], "abc");
    let limit = passed(&r, "limit");
    assert_eq!(limit["stdout"]["text"], "y\ny\ny\ny\ny\n");
    assert_eq!(limit["stdout"]["bytes"], 100000);
    assert_eq!(limit["stdout"]["truncated"], true);
    let timeout = passed(&r, "timeout");
    assert_eq!(timeout["timed_out"], true, "{timeout}");
    assert_eq!(passed(&r, "missing")["exit_code"], 127);
    assert!(refused(&r, "neither").contains("argv"));

    // Files.
    assert_eq!(passed(&r, "write")["bytes"], 5);
    assert_eq!(passed(&r, "read")["content"]["text"], "hello");
    assert_eq!(passed(&r, "range")["content"]["text"], "el");
    assert_eq!(passed(&r, "range")["size"], 5);
    assert!(refused(&r, "read_dir").contains("not a regular file"));
    assert!(refused(&r, "read_missing").contains("No such file"));
    passed(&r, "copy_out");
    assert_eq!(
        std::fs::read_to_string(project.path().join("copied")).unwrap(),
        "hello"
    );

    // The user's policy, and what each refusal tells the agent.
    assert!(refused(&r, "copy_out_outside").contains("--allow-mount"));
    assert!(!outside.path().join("copied").exists());
    assert!(refused(&r, "mount_outside").contains("--allow-mount"));
    assert!(refused(&r, "mount_dotdot").contains("--allow-mount"));
    assert_eq!(
        passed(&r, "plant")["exit_code"],
        0,
        "the box plants a symlink in the project"
    );
    assert!(
        refused(&r, "mount_symlink").contains("symlink"),
        "a symlink the box planted leads nowhere: {}",
        r["mount_symlink"]
    );
    assert!(refused(&r, "net").contains("--allow-net example.com"));
    assert!(refused(&r, "publish").contains("--allow-publish"));
    assert!(refused(&r, "user_box_exec").contains("--any-box"));
    assert!(refused(&r, "user_box_remove").contains("--any-box"));
    let listed = ok(d.boxctl().args(["ls", "-q"])).stdout;
    assert!(
        String::from_utf8_lossy(&listed).contains("userbox"),
        "still there"
    );
    let m2 = d.boxctl().args(["inspect", "m2"]).output().unwrap();
    assert!(!m2.status.success(), "no refused box was made");

    // A long command read as it goes, then killed.
    let first = passed(&r, "long_1");
    assert_eq!(first["stdout"]["text"], "one\n", "{first}");
    assert_eq!(first["running"], true);
    assert_eq!(first["next_stdout_offset"], 4);
    let second = passed(&r, "long_2");
    assert_eq!(second["stdout"]["text"], "two\n", "{second}");
    assert_eq!(second["next_stdout_offset"], 8);
    passed(&r, "long_kill");
    let ended = passed(&r, "long_3");
    assert_eq!(ended["running"], false, "{ended}");
    assert_eq!(ended["signal"], 9);
    assert_eq!(ended["stdout"]["text"], "");

    // Files.
    passed(&r, "mkdir");
    let ls = passed(&r, "ls");
    assert_eq!(ls["entries"][0]["name"], "f.txt", "{ls}");
    assert_eq!(ls["entries"][0]["kind"], "file");
    assert_eq!(ls["entries"][0]["size"], 5);
    assert_eq!(passed(&r, "stat")["kind"], "directory");
    assert!(!refused(&r, "rm_nonrecursive").is_empty());
    passed(&r, "rm");
    assert!(refused(&r, "stat_gone").contains("No such file"));
    // A file in a directory that is not there: an error naming it, and
    // nothing written in its place (it once became a file named /tmp/nodir).
    assert!(
        refused(&r, "write_nodir").contains("/tmp/nodir"),
        "{}",
        r["write_nodir"]
    );
    assert!(refused(&r, "stat_nodir").contains("No such file"));

    // Snapshots, clones, stats.
    assert_eq!(passed(&r, "snap")["name"], "s1");
    assert_eq!(passed(&r, "snaps")["snapshots"][0]["name"], "s1");
    passed(&r, "restore");
    assert_eq!(passed(&r, "restored")["content"]["text"], "before");
    assert_eq!(passed(&r, "cloned")["content"]["text"], "before");
    assert!(passed(&r, "stats")["processes"].as_u64().unwrap() >= 1);
    assert!(refused(&r, "no_box").contains("nosuchbox"));

    // Lifecycle.
    assert_eq!(passed(&r, "stop")["state"], "stopped");
    assert_eq!(passed(&r, "start")["state"], "running");
    assert_eq!(passed(&r, "remove")["state"], "removed");
    ok(d.boxctl().args(["rm", "-f", "userbox"]));
}

#[test]
fn a_client_killed_mid_exec_leaves_no_command_running() {
    let d = Daemon::start();
    let (project, outside) = (host_dir(), host_dir());
    let mut child = agent_command("hang", &d, project.path(), outside.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the MCP SDK client");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "calling");
    let running = |d: &Daemon| {
        let out = ok(d.boxctl().args(["exec", "hang", "--", "ps", "-o", "args"])).stdout;
        String::from_utf8_lossy(&out).contains("sleep 1000")
    };
    let t = std::time::Instant::now();
    while !running(&d) {
        assert!(t.elapsed().as_secs() < 30, "the exec never ran");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The agent host dies; its server sees stdin end and goes, and boxd
    // reaps the command its call was running.
    child.kill().unwrap();
    child.wait().unwrap();
    let t = std::time::Instant::now();
    while running(&d) {
        assert!(
            t.elapsed().as_secs() < 30,
            "the command outlived its client"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    ok(d.boxctl().args(["rm", "-f", "hang"]));
}

#[test]
fn a_typescript_sdk_client_pulls_execs_and_is_refused() {
    let reg = boxd_tests::registry::Registry::start(false);
    reg.push(&busybox(), "tools/busybox:1.0");
    let image = format!("{}/tools/busybox:1.0", reg.host());
    let d = Daemon::start();
    let dir = agent::npm_dir("mcp", &["@modelcontextprotocol/sdk"]);
    let out = std::process::Command::new("node")
        .arg(dir.join("client.mjs"))
        .arg(bin("boxctl"))
        .arg(&image)
        .env("BOXD_SOCKET", &d.socket)
        .env("BOXD_HOME", &d.home)
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "the TypeScript MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("the client's JSON report");
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert_eq!(r["schemas_ok"], true);
    assert_eq!(passed(&r, "create")["state"], "running");
    assert!(
        r["progress_events"].as_u64().unwrap() >= 2,
        "the pull reported progress: {}",
        r["progress_events"]
    );
    assert_eq!(passed(&r, "exec")["stdout"]["text"], "hello from ts1\n");
    assert_eq!(passed(&r, "read")["content"]["text"], "typed");
    assert_eq!(passed(&r, "long_read")["stdout"]["text"], "go\n");
    passed(&r, "long_kill");
    assert_eq!(passed(&r, "snap")["name"], "s");
    assert!(refused(&r, "net").contains("--allow-net example.com"));
    assert!(refused(&r, "bad_args").contains("invalid type"));
    assert!(refused(&r, "missing").contains("nosuchbox"));
    passed(&r, "remove");
}

#[test]
fn an_exec_lives_through_a_restart_of_boxd() {
    let mut d = Daemon::start();
    let (project, outside) = (host_dir(), host_dir());
    let mut child = agent_command("restart", &d, project.path(), outside.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the MCP SDK client");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "calling");
    // boxd goes and comes back while the call waits for its command.
    d.restart();
    let mut report = String::new();
    std::io::Read::read_to_string(&mut out, &mut report).unwrap();
    assert!(child.wait().unwrap().success());
    let r: Value = serde_json::from_str(&report).expect("the client's JSON report");
    let exec = passed(&r, "exec");
    assert_eq!(exec["stdout"]["text"], "survived\n", "{exec}");
    assert_eq!(exec["exit_code"], 0);
    passed(&r, "remove");
}
