//! Human and `--json` renderings of replies.
//!
//! Every string a reply carries is printed through
//! [`boxd_client::untrusted`] in the human forms (boxd's warnings and
//! events quote images, boxes and remote servers; a name or an id is
//! escaped too, so no field is left to trust); JSON is escaped by serde.

use boxd_client::boxes::{Created, Outcome};
use boxd_client::untrusted::{escape, escape_lines};
use boxd_client::v1;
use serde_json::{Value, json};

use crate::Ctx;

pub fn state(s: i32) -> &'static str {
    v1::BoxState::try_from(s)
        .unwrap_or(v1::BoxState::Unspecified)
        .label()
}

pub fn box_json(b: &v1::BoxInfo) -> Value {
    let spec = b.spec.clone().unwrap_or_default();
    let intercepted = intercepted_hosts(&spec);
    json!({
        "boxId": b.id,
        "name": b.name,
        "state": state(b.state),
        "image": b.image,
        "imageDigest": b.image_digest,
        "createdAtMs": b.created_at_ms,
        "startedAtMs": b.started_at_ms,
        "isolation": b.isolation,
        "engine": b.engine,
        "engineHost": b.engine_host,
        "runningExecs": b.running_execs,
        "diskBytes": b.disk_bytes,
        "error": b.error,
        "ports": b.ports.iter().map(port_json).collect::<Vec<_>>(),
        "spec": {
            "cpus": spec.cpus,
            "memoryMib": spec.memory_mib,
            "diskSizeGb": spec.disk_size_gb,
            "mounts": spec.mounts.iter().map(|m| json!({"hostPath": m.host_path, "guestPath": m.guest_path, "readOnly": m.read_only})).collect::<Vec<_>>(),
            "allowNet": spec.allow_net,
            "env": spec.env,
            "workingDir": spec.working_dir,
            // Values never leave boxd.
            "secrets": spec.secrets.iter().map(|x| json!({"name": x.name, "hosts": x.hosts, "placeholder": x.placeholder})).collect::<Vec<_>>(),
            "ports": spec.ports.iter().map(port_json).collect::<Vec<_>>(),
        },
        // The hosts whose HTTPS boxd answers with the box's own CA (its
        // secrets' hosts); every other host is a blind tunnel.
        "interceptedHosts": intercepted,
    })
}

fn intercepted_hosts(spec: &v1::BoxSpec) -> Vec<String> {
    let mut hosts: Vec<String> = spec
        .secrets
        .iter()
        .flat_map(|s| s.hosts.iter().cloned())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

pub fn port_json(p: &v1::PortMapping) -> Value {
    json!({"hostIp": p.host_ip, "hostPort": p.host_port, "boxPort": p.box_port, "protocol": proto(p)})
}

fn proto(p: &v1::PortMapping) -> &str {
    if p.protocol.is_empty() {
        "tcp"
    } else {
        &p.protocol
    }
}

/// `127.0.0.1:49153`, `[::1]:8080`.
fn host_addr(p: &v1::PortMapping) -> String {
    if p.host_ip.contains(':') {
        format!("[{}]:{}", p.host_ip, p.host_port)
    } else {
        format!("{}:{}", p.host_ip, p.host_port)
    }
}

/// The PORTS column of `ls`, as `docker ps` has it:
/// `127.0.0.1:49153->8000/tcp, 0.0.0.0:8080->80/tcp`.
pub fn ports_column(ports: &[v1::PortMapping]) -> String {
    if ports.is_empty() {
        return "-".into();
    }
    ports
        .iter()
        .map(|p| format!("{}->{}/{}", host_addr(p), p.box_port, proto(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `boxctl port`: docker's `8000/tcp -> 127.0.0.1:49153`, one per line.
pub fn ports(ctx: &Ctx, ports: &[v1::PortMapping]) {
    if ctx.json {
        print_json(&Value::Array(ports.iter().map(port_json).collect()));
        return;
    }
    for p in ports {
        println!(
            "{}/{} -> {}",
            p.box_port,
            escape(proto(p)),
            escape(&host_addr(p))
        );
    }
}

fn print_json(v: &Value) {
    println!("{v}");
}

pub fn created(ctx: &Ctx, r: &Created) {
    let b = &r.info;
    if ctx.json {
        print_json(
            &json!({"box": box_json(b), "created": r.created(), "warnings": r.warnings, "elapsedMs": r.elapsed_ms}),
        );
        return;
    }
    for w in &r.warnings {
        eprintln!("warning: {}", escape_lines(w));
    }
    let verb = match r.outcome {
        Outcome::Created => "created",
        Outcome::Reused => "reused",
    };
    println!(
        "{verb} box {} ({}, {} isolation{}) in {} ms",
        escape(&b.name),
        escape(&b.id),
        escape(r.isolation()),
        host_suffix(&b.engine_host),
        r.elapsed_ms
    );
}

pub fn started(ctx: &Ctx, r: &v1::StartBoxResponse) {
    let b = r.r#box.clone().unwrap_or_default();
    if ctx.json {
        print_json(&json!({"box": box_json(&b), "bootMs": r.boot_ms}));
    } else if r.boot_ms == 0 {
        println!("box {} is running", escape(&b.name));
    } else {
        println!("started box {} in {} ms", escape(&b.name), r.boot_ms);
    }
}

pub fn one_box(ctx: &Ctx, b: Option<&v1::BoxInfo>) {
    let b = b.cloned().unwrap_or_default();
    if ctx.json {
        print_json(&box_json(&b));
    } else {
        println!("box {} is {}", escape(&b.name), state(b.state));
    }
}

pub fn updated(ctx: &Ctx, r: &v1::UpdateBoxResponse) {
    let b = r.r#box.clone().unwrap_or_default();
    if ctx.json {
        print_json(&json!({"box": box_json(&b), "warnings": r.warnings}));
        return;
    }
    for w in &r.warnings {
        eprintln!("warning: {}", escape_lines(w));
    }
    println!("updated box {}", escape(&b.name));
}

pub fn removed(ctx: &Ctx, name: &str) {
    if ctx.json {
        print_json(&json!({"removed": name}));
    } else {
        println!("removed box {}", escape(name));
    }
}

pub fn list(ctx: &Ctx, boxes: &[v1::BoxInfo]) {
    if ctx.json {
        print_json(&Value::Array(boxes.iter().map(box_json).collect()));
        return;
    }
    println!(
        "{:<24} {:<13} {:<9} {:<10} {:>5} {:>7}  {:<25}  IMAGE",
        "NAME", "ID", "STATE", "ISOLATION", "EXECS", "DISK", "PORTS"
    );
    for b in boxes {
        println!(
            "{:<24} {:<13} {:<9} {:<10} {:>5} {:>7}  {:<25}  {}",
            escape(&b.name),
            escape(&b.id),
            state(b.state),
            if b.engine_host.is_empty() {
                escape(&b.isolation).into_owned()
            } else {
                format!("{}*", escape(&b.isolation))
            },
            b.running_execs,
            b.disk_bytes.map_or("-".into(), size),
            escape(&ports_column(&b.ports)),
            escape(&b.image)
        );
    }
    if let Some(b) = boxes.iter().find(|b| !b.engine_host.is_empty()) {
        println!(
            "* runs on {}",
            escape(b.engine_host.trim_start_matches("remote: "))
        );
    }
}

pub fn inspect(ctx: &Ctx, b: &v1::BoxInfo) {
    let v = box_json(b);
    if ctx.json {
        print_json(&v);
    } else {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    }
}

pub fn event(ctx: &Ctx, e: &v1::BoxEvent) {
    if ctx.json {
        print_json(&json!({
            "type": "boxState", "boxId": e.box_id, "name": e.name, "state": state(e.state),
            "elapsedMs": e.elapsed_ms, "atMs": e.at_ms, "time": crate::words::rfc3339_ms(e.at_ms), "message": e.message,
        }));
    } else {
        let extra = if e.message.is_empty() {
            String::new()
        } else {
            format!(" ({})", escape(&e.message))
        };
        let took = match (e.elapsed_ms, e.state) {
            (0, _) => String::new(),
            (ms, s) if s == v1::BoxState::Running as i32 => format!(" (booted in {ms} ms)"),
            (ms, _) => format!(" (in {ms} ms)"),
        };
        println!(
            "{} box {} {} (id={}){took}{extra}",
            crate::words::rfc3339_ms(e.at_ms),
            state(e.state),
            escape(&e.name),
            escape(&e.box_id),
        );
    }
}

pub fn describe_json(d: &v1::DescribeResponse) -> Value {
    json!({
        "protocol": d.protocol, "daemonVersion": d.daemon_version, "pid": d.pid,
        "engine": d.engine, "engineVersion": d.engine_version, "isolation": d.isolation,
        "capabilities": d.capabilities, "notes": d.notes, "networkFiltering": d.network_filtering,
        "socket": d.socket, "home": d.home,
        "engineHost": d.engine_host, "engineProblem": d.engine_problem,
    })
}

/// `, remote: URL` after an isolation word, for an engine elsewhere
/// (escaped).
pub fn host_suffix(host: &str) -> String {
    if host.is_empty() {
        String::new()
    } else {
        format!(", {}", escape(host))
    }
}

pub fn version(ctx: &Ctx, daemon: Option<&v1::DescribeResponse>) {
    let client = env!("CARGO_PKG_VERSION");
    if ctx.json {
        print_json(&json!({"client": client, "daemon": daemon.map(describe_json)}));
        return;
    }
    println!("boxctl {client}");
    match daemon {
        Some(d) => println!(
            "boxd {} ({}, engine {} {}, {} isolation{})",
            escape(&d.daemon_version),
            escape(&d.protocol),
            escape(&d.engine),
            escape(&d.engine_version),
            escape(&d.isolation),
            host_suffix(&d.engine_host)
        ),
        None => println!("boxd not running"),
    }
}

/// Bytes as `du -h` shows them: 4.0K, 12M, 1.5G.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}B")
    } else if v < 10.0 {
        format!("{v:.1}{}", UNITS[unit])
    } else {
        format!("{v:.0}{}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ports_read_like_docker() {
        let p = |ip: &str, host, port| boxd_client::v1::PortMapping {
            host_ip: ip.into(),
            host_port: host,
            box_port: port,
            protocol: "tcp".into(),
        };
        assert_eq!(super::ports_column(&[]), "-");
        assert_eq!(
            super::ports_column(&[p("127.0.0.1", 49153, 8000), p("::1", 8080, 80)]),
            "127.0.0.1:49153->8000/tcp, [::1]:8080->80/tcp"
        );
    }

    #[test]
    fn sizes_read_like_du() {
        assert_eq!(super::size(0), "0B");
        assert_eq!(super::size(4096), "4.0K");
        assert_eq!(super::size(203 << 20), "203M");
        assert_eq!(super::size(3 << 29), "1.5G");
    }
}
