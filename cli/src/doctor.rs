//! `boxctl doctor`: the host checks of `boxd doctor`, plus what the running
//! daemon says about itself.

use boxd_client::untrusted::escape_lines;
use serde_json::{Value, json};

use crate::{Ctx, Failure};

pub async fn run(ctx: &Ctx) -> Result<u8, Failure> {
    let boxd = boxd_client::spawn::boxd_binary(None);
    let out = std::process::Command::new(&boxd)
        .arg("--socket")
        .arg(&ctx.paths.socket)
        .arg("--home")
        .arg(&ctx.paths.home)
        .args(["doctor", "--json"])
        .output()
        .map_err(|e| Failure {
            code: 1,
            message: format!("cannot run {}: {e}", boxd.display()),
            kind: None,
        })?;
    let mut checks: Vec<Value> = serde_json::from_slice(&out.stdout).map_err(|e| Failure {
        code: 1,
        message: format!(
            "{} doctor gave no report ({e}): {}",
            boxd.display(),
            String::from_utf8_lossy(&out.stderr)
        ),
        kind: None,
    })?;
    // Reports on the daemon as it is: never starts one.
    let daemon = match boxd_client::connect(&ctx.paths.socket)
        .await
        .map_err(Failure::from)
    {
        Ok(mut c) => match c.describe(boxd_client::v1::DescribeRequest {}).await {
            Ok(d) => {
                let d = d.into_inner();
                if !d.engine_host.is_empty() {
                    checks.push(if d.engine_problem.is_empty() {
                        json!({"name": "remote engine", "status": "ok",
                               "detail": format!("boxes run on {}", d.engine_host)})
                    } else {
                        json!({"name": "remote engine", "status": "fail", "detail": d.engine_problem,
                               "fix": "start the BoxLite server, or fix --boxlite-url / --boxlite-api-key-file and restart boxd"})
                    });
                }
                json!({"name": "daemon", "status": "ok",
                       "detail": format!("boxd {} (pid {}) runs boxes with the {} engine ({} isolation{})", d.daemon_version, d.pid, d.engine, d.isolation, crate::output::host_suffix(&d.engine_host))})
            }
            Err(s) => {
                json!({"name": "daemon", "status": "fail", "detail": s.message(), "fix": "see the daemon log in the state directory"})
            }
        },
        Err(e) => {
            json!({"name": "daemon", "status": "warn", "detail": e.message, "fix": "boxctl daemon start"})
        }
    };
    checks.push(daemon);
    if ctx.json {
        println!("{}", Value::Array(checks.clone()));
    } else {
        // Escaped: a detail quotes the remote BoxLite server's error body,
        // or what a host program printed.
        for c in &checks {
            let s = |k: &str| escape_lines(c[k].as_str().unwrap_or("")).into_owned();
            println!("{:<5} {:<18} {}", s("status"), s("name"), s("detail"));
            if let Some(fix) = c["fix"].as_str() {
                println!("      {:<18} fix: {}", "", escape_lines(fix));
            }
        }
    }
    Ok(u8::from(checks.iter().any(|c| c["status"] == "fail")))
}
