//! `boxctl attach` and `boxctl logs`: come back to an exec that runs (or
//! ran) and see its output.
//!
//! Both attach by id from offset 0, so the output boxd still keeps (its last
//! 1 MiB per exec, at least what no client has taken yet) comes first. An
//! attached client is never the exec's owner: leaving does not kill it.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use boxd_client::jsonl::output::{OutputEncoder, Payload};
use boxd_client::untrusted::{escape, escape_lines};
use boxd_client::{Client, ExecEvent, ExecStream, stdio, v1};
use clap::Args;
use serde_json::{Value, json};

use crate::{Ctx, Failure};

/// Without `--follow`, how long `logs` waits for more output of an exec
/// that runs before it moves on.
const IDLE: Duration = Duration::from_millis(200);

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// The exec's id (`boxctl logs BOX` names each exec it shows), or a
    /// box's name for its latest running exec.
    #[arg(value_name = "EXEC_ID|BOX")]
    pub exec_id: String,
    /// Stream this terminal's stdin to the command (EOF closes its stdin),
    /// forward SIGINT/SIGTERM/SIGHUP to it and, on a TTY, put this terminal
    /// in raw mode. Without it, Ctrl-C detaches and the command runs on.
    #[arg(short, long)]
    pub interactive: bool,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The box whose execs to show.
    #[arg(add = crate::complete::boxes())]
    pub name: String,
    /// Only this exec.
    #[arg(long = "exec", value_name = "ID")]
    pub exec_id: Option<String>,
    /// Follow execs that run until they exit (without it, an exec that runs
    /// is shown until no output arrives for 200 ms).
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines of each exec's kept output (with -f: of what
    /// is replayed, then everything new).
    #[arg(short = 'n', long, value_name = "N")]
    pub tail: Option<usize>,
    /// Only execs that started at or after this time, or still run: a
    /// duration back (10m, 1h30m), an RFC 3339 time or Unix seconds. boxd
    /// keeps no time per line, so -t/--timestamps has nothing to show.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
}

/// Finds an exec by id among all boxes' execs, or (a box's name) that
/// box's latest exec that runs, as `docker attach BOX` would.
async fn find(client: &mut Client, word: &str) -> Result<v1::ExecInfo, Failure> {
    let execs = client
        .list_execs(v1::ListExecsRequest::default())
        .await?
        .into_inner()
        .execs;
    if let Some(e) = execs.iter().find(|e| e.exec_id == word) {
        return Ok(e.clone());
    }
    let latest = execs
        .into_iter()
        .filter(|e| e.box_name == word && !e.exited)
        .max_by_key(|e| e.started_at_ms);
    match latest {
        Some(e) => Ok(e),
        None => {
            crate::boxes::must_exist(client, word)
                .await
                .map_err(|_| Failure {
                    code: 1,
                    message: format!("no exec with id {word:?}, and no box of that name"),
                    kind: Some(boxd_client::ErrorKind::NotFound),
                })?;
            Err(Failure {
                code: 1,
                message: format!("box {word} runs no command to attach to"),
                kind: None,
            })
        }
    }
}

pub async fn attach(ctx: &Ctx, args: AttachArgs) -> Result<u8, Failure> {
    let mut client = ctx.client().await?;
    let info = find(&mut client, &args.exec_id).await?;
    let exec = ExecStream::attach(&mut client, &info.exec_id)
        .await?
        .reconnecting(&ctx.paths.socket);
    let tty = info.tty && args.interactive;
    if tty && let Some(size) = stdio::terminal_size() {
        // The command draws on this terminal now.
        let _ = exec.input().resize(size.rows, size.cols).await;
    }
    let how = stdio::Attach {
        stdin: args.interactive,
        tty,
        signals: args.interactive,
        stderr: None,
    };
    let exit = stdio::attach(exec, how).await?;
    if !exit.error.is_empty() {
        // boxd's words, quoting what the image or box chose: escaped,
        // unlike the command's own output.
        eprintln!("boxctl: {}", escape_lines(&exit.error));
    }
    if exit.timed_out {
        eprintln!("boxctl: the command timed out");
    }
    Ok(stdio::exit_code(&exit))
}

pub async fn logs(ctx: &Ctx, args: LogsArgs) -> Result<u8, Failure> {
    let mut client = ctx.client().await?;
    crate::boxes::must_exist(&mut client, &args.name).await?;
    let mut execs = client
        .list_execs(v1::ListExecsRequest {
            box_name: args.name.clone(),
        })
        .await?
        .into_inner()
        .execs;
    if let Some(id) = &args.exec_id {
        execs.retain(|e| &e.exec_id == id);
        if execs.is_empty() {
            return Err(Failure {
                code: 1,
                message: format!("box {:?} has no exec with id {id:?}", args.name),
                kind: None,
            });
        }
    }
    if let Some(w) = &args.since {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let since = crate::words::since_ms(w, now).map_err(Failure::usage)?;
        execs.retain(|e| e.started_at_ms >= since || !e.exited);
    }
    execs.sort_by_key(|e| e.started_at_ms);
    let headers = !ctx.json && execs.len() > 1;
    let (done, running): (Vec<_>, Vec<_>) = execs.into_iter().partition(|e| e.exited);
    // Those that ended first, one after another; then those that run, one
    // after another, or all at once when following.
    for info in done
        .iter()
        .chain(if args.follow { &[][..] } else { &running[..] })
    {
        if headers {
            eprintln!("==> {} <==", header(info));
        }
        show(
            ctx.json,
            &ctx.paths.socket,
            &mut client,
            info,
            false,
            args.tail,
        )
        .await?;
    }
    if args.follow {
        let mut tasks = Vec::new();
        for info in running {
            if headers {
                eprintln!("==> {} (following) <==", header(&info));
            }
            let mut client = client.clone();
            let (json, socket, tail) = (ctx.json, ctx.paths.socket.clone(), args.tail);
            tasks.push(tokio::spawn(async move {
                show(json, &socket, &mut client, &info, true, tail).await
            }));
        }
        for t in tasks {
            if let Ok(r) = t.await {
                r?;
            }
        }
    }
    Ok(0)
}

/// `exec ID (STATE): ARGV`, escaped: the argv is whoever started the exec's
/// (another client, an agent, the image's Cmd).
fn header(info: &v1::ExecInfo) -> String {
    let mut argv = vec![info.command.clone()];
    argv.extend(info.args.iter().cloned());
    let state = match (&info.exit, info.exited) {
        (_, false) => "running".to_owned(),
        (Some(e), true) => describe_exit(e),
        (None, true) => "exited".to_owned(),
    };
    escape(&format!(
        "exec {} ({state}): {}",
        info.exec_id,
        argv.join(" ")
    ))
    .into_owned()
}

fn describe_exit(e: &v1::ExecExit) -> String {
    match (e.code, e.signal) {
        (Some(c), _) => format!("exited {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => "exited".to_owned(),
    }
}

/// Prints what boxd keeps of one exec's output; `follow`: and the rest,
/// until it exits.
async fn show(
    json: bool,
    socket: &Path,
    client: &mut Client,
    info: &v1::ExecInfo,
    follow: bool,
    tail: Option<usize>,
) -> Result<(), Failure> {
    // Not resumable: this reader acknowledges nothing and never holds the
    // command back; it is not the exec's owner, so leaving kills nothing.
    let attach = v1::ExecAttach {
        exec_id: info.exec_id.clone(),
        resumable: false,
        ..Default::default()
    };
    let mut exec = match ExecStream::attach_with(client, attach).await {
        Ok(e) => e,
        // Gone between the listing and now (dropped after it exited).
        Err(s) if boxd_client::ErrorKind::of_status(&s) == boxd_client::ErrorKind::NotFound => {
            return Ok(());
        }
        Err(s) => return Err(s.into()),
    };
    if follow {
        exec = exec.reconnecting(socket).on_reconnect(|r| {
            eprintln!("boxctl: {}", stdio::reconnect_line(r));
        });
    }
    let mut out = Printer::new(json, &info.exec_id);
    // With --tail, what is replayed (until IDLE passes with nothing new) is
    // held, and only its last lines go out.
    let mut held: Option<Vec<(bool, Vec<u8>)>> = tail.map(|_| Vec::new());
    loop {
        if let (Some(h), Some(n)) = (held.as_mut(), tail) {
            match tokio::time::timeout(IDLE, exec.next()).await {
                Ok(Ok(Some(ExecEvent::Stdout(b)))) => h.push((false, b.to_vec())),
                Ok(Ok(Some(ExecEvent::Stderr(b)))) => h.push((true, b.to_vec())),
                Ok(Ok(Some(ExecEvent::Exit(e)))) => {
                    for (err, b) in last_lines(h, n) {
                        out.output(err, &b);
                    }
                    out.exit(&e);
                    break;
                }
                Ok(Err(e)) => return Err(e.into()),
                Ok(Ok(None)) | Err(_) => {
                    for (err, b) in last_lines(h, n) {
                        out.output(err, &b);
                    }
                    held = None;
                    if !follow {
                        break;
                    }
                }
            }
            continue;
        }
        let event = if follow {
            exec.next().await?
        } else {
            match tokio::time::timeout(IDLE, exec.next()).await {
                Ok(event) => event?,
                Err(_) => break, // it runs on; what is kept is shown
            }
        };
        match event {
            Some(ExecEvent::Stdout(b)) => out.output(false, &b),
            Some(ExecEvent::Stderr(b)) => out.output(true, &b),
            Some(ExecEvent::Exit(e)) => {
                out.exit(&e);
                break;
            }
            None => break,
        }
        if out.closed {
            // Our reader went away (`| head`).
            break;
        }
    }
    out.finish();
    Ok(())
}

/// The last `n` lines of `chunks` (stdout and stderr interleaved as they
/// came), as chunks: a last line without its newline counts as a line.
fn last_lines(chunks: &[(bool, Vec<u8>)], n: usize) -> Vec<(bool, Vec<u8>)> {
    if n == 0 {
        return Vec::new();
    }
    // Walk back until n+1 newlines are seen (the last byte's own newline
    // ends the last line, so it does not start one).
    let mut newlines = 0;
    for (i, (_, bytes)) in chunks.iter().enumerate().rev() {
        let end = bytes.len();
        for (j, b) in bytes.iter().enumerate().rev() {
            let is_last_byte = i == chunks.len() - 1 && j + 1 == end;
            if *b == b'\n' && !is_last_byte {
                newlines += 1;
                if newlines == n {
                    let mut out = Vec::new();
                    if j + 1 < end {
                        out.push((chunks[i].0, bytes[j + 1..].to_vec()));
                    }
                    out.extend(chunks[i + 1..].iter().cloned());
                    return out;
                }
            }
        }
    }
    chunks.to_vec()
}

/// Output as it is (stdout to stdout, stderr to stderr), or with `--json`
/// as lines `{"execId", "stream", "data" | "dataBase64"}` and a last
/// `{"execId", "exit": {...}}`.
struct Printer {
    json: bool,
    exec_id: String,
    encoders: [OutputEncoder; 2],
    /// Stdout is closed.
    closed: bool,
}

impl Printer {
    fn new(json: bool, exec_id: &str) -> Printer {
        Printer {
            json,
            exec_id: exec_id.to_owned(),
            encoders: Default::default(),
            closed: false,
        }
    }

    fn output(&mut self, stderr: bool, data: &[u8]) {
        if self.json {
            let payloads = self.encoders[stderr as usize].push(data);
            self.payloads(stderr, payloads);
        } else if stderr {
            let _ = std::io::stderr().write_all(data);
        } else {
            let mut o = std::io::stdout().lock();
            if o.write_all(data).and_then(|_| o.flush()).is_err() {
                self.closed = true;
            }
        }
    }

    fn payloads(&mut self, stderr: bool, payloads: Vec<Payload>) {
        let stream = if stderr { "stderr" } else { "stdout" };
        for p in payloads {
            let mut v = json!({"execId": self.exec_id, "stream": stream});
            match p {
                Payload::Text(t) => v["data"] = json!(t),
                Payload::Base64(b) => v["dataBase64"] = json!(b),
            }
            self.line(&v);
        }
    }

    fn line(&mut self, v: &Value) {
        let mut o = std::io::stdout().lock();
        if writeln!(o, "{v}").and_then(|_| o.flush()).is_err() {
            self.closed = true;
        }
    }

    fn exit(&mut self, e: &v1::ExecExit) {
        self.finish();
        if self.json {
            let v = json!({"execId": self.exec_id, "exit": {
                "code": e.code, "signal": e.signal, "error": e.error, "timedOut": e.timed_out,
            }});
            self.line(&v);
        }
    }

    /// Writes what an encoder still holds (a UTF-8 sequence cut short).
    fn finish(&mut self) {
        if self.json {
            for stderr in [false, true] {
                let rest: Vec<Payload> = self.encoders[stderr as usize]
                    .finish()
                    .into_iter()
                    .collect();
                self.payloads(stderr, rest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(chunks: &[(bool, Vec<u8>)]) -> String {
        chunks
            .iter()
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    #[test]
    fn the_tail_is_the_last_lines_across_chunks_and_streams() {
        let c = |e: bool, s: &str| (e, s.as_bytes().to_vec());
        let chunks = vec![c(false, "a\nb\n"), c(true, "err\nc"), c(false, "d\ne\n")];
        assert_eq!(text(&last_lines(&chunks, 1)), "e\n");
        assert_eq!(text(&last_lines(&chunks, 2)), "cd\ne\n");
        assert_eq!(text(&last_lines(&chunks, 3)), "err\ncd\ne\n");
        assert_eq!(text(&last_lines(&chunks, 4)), "b\nerr\ncd\ne\n");
        assert_eq!(text(&last_lines(&chunks, 50)), "a\nb\nerr\ncd\ne\n");
        assert_eq!(last_lines(&chunks, 0), Vec::new());
        // A stderr line keeps its stream.
        assert!(last_lines(&chunks, 3)[0].0);
        let open = vec![c(false, "x\ny")];
        assert_eq!(text(&last_lines(&open, 1)), "y");
    }
}
