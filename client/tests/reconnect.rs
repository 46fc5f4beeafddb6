//! `ExecStream` against a fake boxd on a real socket: a daemon that goes
//! away mid-output (its connections cut, its socket removed) and one that
//! comes back knowing the exec (or not), and what the client makes of it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use boxd_client::tonic::{self, Request, Response, Status, Streaming};
use boxd_client::v1::{self, boxd_server, exec_request::Msg, exec_response::Event};
use boxd_client::{ExecEvent, ExecStream, OutputOffsets, OutputStream, Reconnect, bytes::Bytes};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;

const KIB: u64 = 1024;
/// What the first daemon sends before it goes away.
const PREFIX: OutputOffsets = OutputOffsets {
    stdout: 96 * KIB,
    stderr: 8 * KIB,
};
const EXEC_ID: &str = "x0000000000000001";

/// The command's whole output.
struct Script {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Script {
    fn new() -> Script {
        Script {
            stdout: (0..300 * KIB).map(|i| (i * 7 % 251) as u8).collect(),
            stderr: (0..40 * KIB).map(|i| (i * 13 % 241) as u8).collect(),
        }
    }

    /// Output from `from` to `to`, stdout and stderr chunks interleaved.
    fn events(&self, mut from: OutputOffsets, to: OutputOffsets) -> Vec<Event> {
        let mut events = Vec::new();
        while from.stdout < to.stdout || from.stderr < to.stderr {
            if from.stdout < to.stdout {
                let end = (from.stdout + 16 * KIB).min(to.stdout);
                events.push(Event::Stdout(Bytes::copy_from_slice(
                    &self.stdout[from.stdout as usize..end as usize],
                )));
                from.stdout = end;
            }
            if from.stderr < to.stderr {
                let end = (from.stderr + 4 * KIB).min(to.stderr);
                events.push(Event::Stderr(Bytes::copy_from_slice(
                    &self.stderr[from.stderr as usize..end as usize],
                )));
                from.stderr = end;
            }
        }
        events
    }

    fn end(&self) -> OutputOffsets {
        OutputOffsets {
            stdout: self.stdout.len() as u64,
            stderr: self.stderr.len() as u64,
        }
    }
}

/// What the fake daemons were sent, by which daemon (1 or 2).
#[derive(Default)]
struct Seen {
    starts: Vec<v1::ExecStart>,
    attaches: Vec<v1::ExecAttach>,
    requests: Vec<(u32, Msg)>,
}

impl Seen {
    fn stdin(&self, daemon: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for (d, m) in &self.requests {
            if let (true, Msg::Stdin(b)) = (*d == daemon, m) {
                v.extend_from_slice(b);
            }
        }
        v
    }

    fn acks(&self, daemon: u32) -> Vec<v1::ExecAck> {
        self.requests
            .iter()
            .filter_map(|(d, m)| match m {
                Msg::Ack(a) if *d == daemon => Some(*a),
                _ => None,
            })
            .collect()
    }
}

#[derive(Clone, Copy)]
enum Role {
    /// Starts the exec, sends [`PREFIX`], then holds the stream open (or
    /// ends it without an exit); knows no exec to attach to.
    First { end_after_prefix: bool },
    /// Knows the exec: keeps its output from `kept_from`, and the command
    /// was given `stdin_given` bytes of stdin; ends with exit code 3
    /// (with `wait_eof`, once its stdin is closed, as `cat` would, and an
    /// acknowledgement came).
    Second {
        kept_from: OutputOffsets,
        stdin_given: u64,
        wait_eof: bool,
    },
}

#[derive(Clone)]
struct Fake {
    id: u32,
    role: Role,
    script: Arc<Script>,
    seen: Arc<Mutex<Seen>>,
}

type Events<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn started(from: OutputOffsets, stdin_offset: u64) -> v1::ExecResponse {
    v1::ExecResponse {
        event: Some(Event::Started(v1::ExecStarted {
            exec_id: EXEC_ID.into(),
            launch_ms: 1,
            stdout_offset: from.stdout,
            stderr_offset: from.stderr,
            stdin_offset,
        })),
    }
}

#[tonic::async_trait]
impl boxd_server::Boxd for Fake {
    async fn describe(
        &self,
        _: Request<v1::DescribeRequest>,
    ) -> Result<Response<v1::DescribeResponse>, Status> {
        Ok(Response::new(v1::DescribeResponse {
            protocol: v1::PROTOCOL.into(),
            pid: std::process::id(),
            ..Default::default()
        }))
    }

    type ExecStream = Events<v1::ExecResponse>;

    async fn exec(
        &self,
        req: Request<Streaming<v1::ExecRequest>>,
    ) -> Result<Response<Self::ExecStream>, Status> {
        let mut inbound = req.into_inner();
        let first = inbound
            .message()
            .await?
            .and_then(|r| r.msg)
            .ok_or_else(|| Status::invalid_argument("no first request"))?;
        let (tx, rx) = mpsc::channel(4);
        // Daemon 1 gives the command the first 3 bytes of stdin, and says so.
        let progress = matches!(
            self.role,
            Role::First {
                end_after_prefix: false
            }
        )
        .then(|| tx.clone());
        let script = self.script.clone();
        let (eof_tx, eof) = tokio::sync::oneshot::channel::<()>();
        let (acked_tx, acked) = tokio::sync::oneshot::channel::<()>();
        match (first, self.role) {
            (Msg::Start(s), Role::First { end_after_prefix }) => {
                self.seen.lock().unwrap().starts.push(s);
                tokio::spawn(async move {
                    let mut events = vec![started(OutputOffsets::default(), 0)];
                    events.extend(
                        script
                            .events(OutputOffsets::default(), PREFIX)
                            .into_iter()
                            .map(|e| v1::ExecResponse { event: Some(e) }),
                    );
                    for e in events {
                        if tx.send(Ok(e)).await.is_err() {
                            return;
                        }
                    }
                    if !end_after_prefix {
                        tx.closed().await;
                    }
                });
            }
            (
                Msg::Attach(a),
                Role::Second {
                    kept_from,
                    stdin_given,
                    wait_eof,
                },
            ) => {
                let from = OutputOffsets {
                    stdout: a.stdout_offset.max(kept_from.stdout),
                    stderr: a.stderr_offset.max(kept_from.stderr),
                };
                self.seen.lock().unwrap().attaches.push(a);
                tokio::spawn(async move {
                    let mut events = vec![started(from, stdin_given)];
                    events.extend(
                        script
                            .events(from, script.end())
                            .into_iter()
                            .map(|e| v1::ExecResponse { event: Some(e) }),
                    );
                    for e in events {
                        if tx.send(Ok(e)).await.is_err() {
                            return;
                        }
                    }
                    if wait_eof && (eof.await.is_err() || acked.await.is_err()) {
                        return;
                    }
                    let exit = v1::ExecExit {
                        code: Some(3),
                        ..Default::default()
                    };
                    let _ = tx
                        .send(Ok(v1::ExecResponse {
                            event: Some(Event::Exit(exit)),
                        }))
                        .await;
                });
            }
            (Msg::Attach(a), Role::First { .. }) => {
                self.seen.lock().unwrap().attaches.push(a);
                return Err(Status::not_found(format!("no exec with id {EXEC_ID:?}")));
            }
            _ => return Err(Status::invalid_argument("unexpected first request")),
        }
        let (seen, id) = (self.seen.clone(), self.id);
        tokio::spawn(async move {
            let mut eof_tx = Some(eof_tx);
            let mut acked_tx = Some(acked_tx);
            let mut stdin = 0;
            while let Ok(Some(v1::ExecRequest { msg: Some(m) })) = inbound.message().await {
                if let (Some(p), Msg::Stdin(b)) = (&progress, &m) {
                    stdin += b.len() as u64;
                    let given = Event::StdinOffset(stdin.min(3));
                    let _ = p.send(Ok(v1::ExecResponse { event: Some(given) })).await;
                }
                let fire = match m {
                    Msg::CloseStdin(true) => eof_tx.take(),
                    Msg::Ack(_) => acked_tx.take(),
                    _ => None,
                };
                seen.lock().unwrap().requests.push((id, m));
                if let Some(f) = fire {
                    let _ = f.send(());
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn create_box(
        &self,
        _: Request<v1::CreateBoxRequest>,
    ) -> Result<Response<v1::CreateBoxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn start_box(
        &self,
        _: Request<v1::StartBoxRequest>,
    ) -> Result<Response<v1::StartBoxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn stop_box(
        &self,
        _: Request<v1::StopBoxRequest>,
    ) -> Result<Response<v1::StopBoxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn update_box(
        &self,
        _: Request<v1::UpdateBoxRequest>,
    ) -> Result<Response<v1::UpdateBoxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn remove_box(
        &self,
        _: Request<v1::RemoveBoxRequest>,
    ) -> Result<Response<v1::RemoveBoxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn list_boxes(
        &self,
        _: Request<v1::ListBoxesRequest>,
    ) -> Result<Response<v1::ListBoxesResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn inspect_box(
        &self,
        _: Request<v1::InspectBoxRequest>,
    ) -> Result<Response<v1::BoxInfo>, Status> {
        Err(Status::unimplemented(""))
    }
    type WatchBoxesStream = Events<v1::BoxEvent>;
    async fn watch_boxes(
        &self,
        _: Request<v1::WatchBoxesRequest>,
    ) -> Result<Response<Self::WatchBoxesStream>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn send_input(
        &self,
        _: Request<v1::SendInputRequest>,
    ) -> Result<Response<v1::SendInputResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn signal_exec(
        &self,
        _: Request<v1::SignalExecRequest>,
    ) -> Result<Response<v1::SignalExecResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn resize_exec(
        &self,
        _: Request<v1::ResizeExecRequest>,
    ) -> Result<Response<v1::ResizeExecResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn list_execs(
        &self,
        _: Request<v1::ListExecsRequest>,
    ) -> Result<Response<v1::ListExecsResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    type PullImageStream = Events<v1::PullImageEvent>;
    async fn pull_image(
        &self,
        _: Request<v1::PullImageRequest>,
    ) -> Result<Response<Self::PullImageStream>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn list_images(
        &self,
        _: Request<v1::ListImagesRequest>,
    ) -> Result<Response<v1::ListImagesResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn inspect_image(
        &self,
        _: Request<v1::InspectImageRequest>,
    ) -> Result<Response<v1::ImageInfo>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn remove_image(
        &self,
        _: Request<v1::RemoveImageRequest>,
    ) -> Result<Response<v1::RemoveImageResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn prune_images(
        &self,
        _: Request<v1::PruneImagesRequest>,
    ) -> Result<Response<v1::PruneImagesResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn import_image(
        &self,
        _: Request<v1::ImportImageRequest>,
    ) -> Result<Response<v1::ImageInfo>, Status> {
        Err(Status::unimplemented(""))
    }

    type CopyOutStream = Events<v1::CopyOutResponse>;

    async fn copy_out(
        &self,
        _: Request<v1::CopyOutRequest>,
    ) -> Result<Response<Self::CopyOutStream>, Status> {
        Err(Status::unimplemented(""))
    }

    type BoxStatsStream = Events<v1::BoxStatsResponse>;

    async fn box_stats(
        &self,
        _: Request<v1::BoxStatsRequest>,
    ) -> Result<Response<Self::BoxStatsStream>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn copy_in(
        &self,
        _: Request<Streaming<v1::CopyInRequest>>,
    ) -> Result<Response<v1::CopyInResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn create_snapshot(
        &self,
        _: Request<v1::CreateSnapshotRequest>,
    ) -> Result<Response<v1::SnapshotInfo>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn list_snapshots(
        &self,
        _: Request<v1::ListSnapshotsRequest>,
    ) -> Result<Response<v1::ListSnapshotsResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn restore_snapshot(
        &self,
        _: Request<v1::RestoreSnapshotRequest>,
    ) -> Result<Response<v1::RestoreSnapshotResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn remove_snapshot(
        &self,
        _: Request<v1::RemoveSnapshotRequest>,
    ) -> Result<Response<v1::RemoveSnapshotResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn clone_box(
        &self,
        _: Request<v1::CloneBoxRequest>,
    ) -> Result<Response<v1::CreateBoxResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn export_box(
        &self,
        _: Request<v1::ExportBoxRequest>,
    ) -> Result<Response<v1::ExportBoxResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn import_box(
        &self,
        _: Request<v1::ImportBoxRequest>,
    ) -> Result<Response<v1::CreateBoxResponse>, Status> {
        Err(Status::unimplemented(""))
    }
}

/// A fake daemon serving on `socket`, whose connections can be cut.
struct Server {
    socket: PathBuf,
    accept: tokio::task::JoinHandle<()>,
    serve: tokio::task::JoinHandle<()>,
    conns: Arc<Mutex<Vec<std::os::unix::net::UnixStream>>>,
}

impl Server {
    fn start(socket: &Path, fake: Fake) -> Server {
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let conns: Arc<Mutex<Vec<std::os::unix::net::UnixStream>>> = Arc::default();
        let (tx, rx) = mpsc::channel::<std::io::Result<tokio::net::UnixStream>>(4);
        let kept = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let s = s.into_std().unwrap();
                kept.lock().unwrap().push(s.try_clone().unwrap());
                let s = tokio::net::UnixStream::from_std(s).unwrap();
                if tx.send(Ok(s)).await.is_err() {
                    return;
                }
            }
        });
        let serve = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(boxd_server::BoxdServer::new(fake))
                .serve_with_incoming(ReceiverStream::new(rx))
                .await;
        });
        Server {
            socket: socket.to_path_buf(),
            accept,
            serve,
            conns,
        }
    }

    /// Goes away as a crashed daemon does: connections cut, socket gone.
    fn kill(self) {
        self.accept.abort();
        self.serve.abort();
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    script: Arc<Script>,
    seen: Arc<Mutex<Seen>>,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        Setup {
            socket: dir.path().join("boxd.sock"),
            _dir: dir,
            script: Arc::new(Script::new()),
            seen: Arc::default(),
        }
    }

    fn serve(&self, id: u32, role: Role) -> Server {
        Server::start(
            &self.socket,
            Fake {
                id,
                role,
                script: self.script.clone(),
                seen: self.seen.clone(),
            },
        )
    }

    /// Starts the exec on daemon 1 (reconnecting, notices to a channel) and
    /// reads [`PREFIX`] of its output.
    async fn start(&self) -> (ExecStream, Output, mpsc::UnboundedReceiver<Reconnect>) {
        let mut client = boxd_client::connect(&self.socket).await.unwrap();
        let (tell, notices) = mpsc::unbounded_channel();
        let start = v1::ExecStart {
            box_name: "b".into(),
            command: "cmd".into(),
            stdin: true,
            ..Default::default()
        };
        let mut exec = ExecStream::start(&mut client, start)
            .await
            .unwrap()
            .reconnecting(&self.socket)
            .on_reconnect(move |r| {
                let _ = tell.send(r.clone());
            });
        assert_eq!(exec.exec_id(), EXEC_ID);
        let mut out = Output::default();
        while exec.offsets() != PREFIX {
            out.add(exec.next().await.unwrap().expect("an event"));
        }
        assert_eq!(out.stdout.len() as u64, PREFIX.stdout);
        assert!(self.seen.lock().unwrap().starts[0].resumable);
        (exec, out, notices)
    }

    async fn until(&self, what: &str, ok: impl Fn(&Seen) -> bool) {
        for _ in 0..500 {
            if ok(&self.seen.lock().unwrap()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }
}

#[derive(Default, Debug)]
struct Output {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<v1::ExecExit>,
}

impl Output {
    fn add(&mut self, e: ExecEvent) {
        match e {
            ExecEvent::Stdout(b) => self.stdout.extend_from_slice(&b),
            ExecEvent::Stderr(b) => self.stderr.extend_from_slice(&b),
            ExecEvent::Exit(e) => self.exit = Some(e),
        }
    }
}

/// Reads the rest of the exec, on its own task.
fn drive(
    mut exec: ExecStream,
    mut out: Output,
) -> tokio::task::JoinHandle<(Result<Output, Status>, ExecStream)> {
    tokio::spawn(async move {
        loop {
            match exec.next().await {
                Ok(Some(e)) => out.add(e),
                Ok(None) => return (Ok(out), exec),
                Err(s) => return (Err(s), exec),
            }
        }
    })
}

async fn notice(notices: &mut mpsc::UnboundedReceiver<Reconnect>) -> Reconnect {
    tokio::time::timeout(Duration::from_secs(10), notices.recv())
        .await
        .expect("a notice")
        .expect("the stream is alive")
}

fn ack(o: OutputOffsets) -> v1::ExecAck {
    v1::ExecAck {
        stdout_offset: o.stdout,
        stderr_offset: o.stderr,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_is_reattached_and_the_output_and_stdin_are_whole() {
    let t = Setup::new();
    let first = t.serve(
        1,
        Role::First {
            end_after_prefix: false,
        },
    );
    let (exec, out, mut notices) = t.start().await;
    let input = exec.input();
    input.stdin(b"hello ".to_vec()).await.unwrap();
    let driver = drive(exec, out);
    // Waiting for more, the client acknowledges all it took, and no more.
    t.until("the ack of the prefix", |s| {
        s.acks(1).last() == Some(&ack(PREFIX))
    })
    .await;
    t.until("stdin", |s| s.stdin(1) == b"hello ").await;
    // Only of what the client took: up to the prefix, in order.
    let acks = t.seen.lock().unwrap().acks(1);
    for pair in acks.windows(2) {
        assert!(pair[0].stdout_offset <= pair[1].stdout_offset, "{acks:?}");
        assert!(pair[0].stderr_offset <= pair[1].stderr_offset, "{acks:?}");
    }

    first.kill();
    match notice(&mut notices).await {
        Reconnect::Lost { exec_id, .. } => assert_eq!(exec_id, EXEC_ID),
        other => panic!("{other:?}"),
    }
    // While boxd is away: more stdin, the EOF, a signal.
    input.stdin(b"world".to_vec()).await.unwrap();
    input.close_stdin().await.unwrap();
    input.signal("SIGUSR1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // It comes back; the command had been given 3 bytes of stdin.
    let _second = t.serve(
        2,
        Role::Second {
            kept_from: OutputOffsets::default(),
            stdin_given: 3,
            wait_eof: true,
        },
    );
    let (out, exec) = driver.await.unwrap();
    let out = out.unwrap();
    assert_eq!(out.stdout, t.script.stdout, "stdout is byte-exact");
    assert_eq!(out.stderr, t.script.stderr, "stderr is byte-exact");
    assert_eq!(out.exit.unwrap().code, Some(3));
    assert_eq!(exec.offsets(), t.script.end());
    match notice(&mut notices).await {
        Reconnect::Reattached {
            exec_id,
            attempts,
            stdin_resent,
            ..
        } => {
            assert_eq!(exec_id, EXEC_ID);
            assert!(
                attempts >= 2,
                "the first attempts found nothing: {attempts}"
            );
            assert_eq!(stdin_resent, 3);
        }
        other => panic!("{other:?}"),
    }
    assert!(notices.try_recv().is_err(), "no gap");

    let seen = t.seen.lock().unwrap();
    assert_eq!(
        seen.attaches,
        vec![v1::ExecAttach {
            exec_id: EXEC_ID.into(),
            stdout_offset: PREFIX.stdout,
            stderr_offset: PREFIX.stderr,
            resumable: true,
        }]
    );
    // Daemon 2 got the stdin the command lacked, the EOF, the signal, in
    // that order (acknowledgements aside).
    let rest: Vec<&Msg> = seen
        .requests
        .iter()
        .filter(|(d, m)| *d == 2 && !matches!(m, Msg::Ack(_)))
        .map(|(_, m)| m)
        .collect();
    assert_eq!(
        rest,
        vec![
            &Msg::Stdin(Bytes::from_static(b"lo ")),
            &Msg::Stdin(Bytes::from_static(b"world")),
            &Msg::CloseStdin(true),
            &Msg::Signal(v1::Signal {
                signal: "SIGUSR1".into()
            }),
        ]
    );
    // Acknowledgements to daemon 2 only of what the client took, in order.
    let acks = seen.acks(2);
    assert!(!acks.is_empty());
    for pair in acks.windows(2) {
        assert!(pair[0].stdout_offset <= pair[1].stdout_offset);
        assert!(pair[0].stderr_offset <= pair[1].stderr_offset);
    }
    let last = acks.last().unwrap();
    assert!(last.stdout_offset >= PREFIX.stdout && last.stdout_offset <= t.script.end().stdout);
    assert!(last.stderr_offset >= PREFIX.stderr && last.stderr_offset <= t.script.end().stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_the_daemon_no_longer_keeps_is_reported_as_a_gap() {
    let t = Setup::new();
    let first = t.serve(
        1,
        Role::First {
            end_after_prefix: false,
        },
    );
    let (exec, out, mut notices) = t.start().await;
    let driver = drive(exec, out);
    first.kill();
    let kept_from = OutputOffsets {
        stdout: 150 * KIB,
        stderr: 0,
    };
    let _second = t.serve(
        2,
        Role::Second {
            kept_from,
            stdin_given: 0,
            wait_eof: false,
        },
    );
    let (out, exec) = driver.await.unwrap();
    let out = out.unwrap();
    let mut expected = t.script.stdout[..PREFIX.stdout as usize].to_vec();
    expected.extend_from_slice(&t.script.stdout[kept_from.stdout as usize..]);
    assert_eq!(out.stdout, expected);
    assert_eq!(out.stderr, t.script.stderr);
    assert_eq!(exec.offsets(), t.script.end());
    let mut all = Vec::new();
    while let Ok(n) = notices.try_recv() {
        all.push(n);
    }
    assert!(matches!(all[0], Reconnect::Lost { .. }), "{all:?}");
    assert!(
        all.contains(&Reconnect::Gap {
            exec_id: EXEC_ID.into(),
            stream: OutputStream::Stdout,
            from: PREFIX.stdout,
            to: kept_from.stdout,
        }),
        "{all:?}"
    );
    assert!(
        matches!(all.last(), Some(Reconnect::Reattached { .. })),
        "{all:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_ends_without_an_exit_is_reattached_and_a_forgotten_exec_is_an_error() {
    let t = Setup::new();
    // Ends the stream after the prefix; the daemon does not know the exec
    // when asked again.
    let _first = t.serve(
        1,
        Role::First {
            end_after_prefix: true,
        },
    );
    let (mut exec, _, mut notices) = t.start().await;
    let e = tokio::time::timeout(Duration::from_secs(10), exec.next())
        .await
        .expect("gives up at once")
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    assert_eq!(
        e.message(),
        format!("exec {EXEC_ID} is gone: the daemon that came back does not know it")
    );
    assert!(matches!(notice(&mut notices).await, Reconnect::Lost { .. }));
    assert_eq!(t.seen.lock().unwrap().attaches.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_cannot_be_trusted_ends_the_reconnection_at_once() {
    let t = Setup::new();
    let first = t.serve(
        1,
        Role::First {
            end_after_prefix: false,
        },
    );
    let (mut exec, _, _notices) = t.start().await;
    first.kill();
    // Another user could now put a socket here.
    let dir = t.socket.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let _second = t.serve(
        2,
        Role::Second {
            kept_from: OutputOffsets::default(),
            stdin_given: 0,
            wait_eof: false,
        },
    );
    let e = tokio::time::timeout(Duration::from_secs(10), exec.next())
        .await
        .expect("gives up at once")
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("refusing to connect"), "{e:?}");
    assert!(t.seen.lock().unwrap().attaches.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_reconnecting_a_lost_daemon_is_an_error() {
    let t = Setup::new();
    let first = t.serve(
        1,
        Role::First {
            end_after_prefix: false,
        },
    );
    let mut client = boxd_client::connect(&t.socket).await.unwrap();
    let mut exec = ExecStream::start(&mut client, v1::ExecStart::default())
        .await
        .unwrap();
    while exec.offsets() != PREFIX {
        exec.next().await.unwrap();
    }
    first.kill();
    let e = tokio::time::timeout(Duration::from_secs(10), exec.next())
        .await
        .unwrap()
        .unwrap_err();
    assert!(e.message().contains("lost the connection to boxd"), "{e:?}");
    // Its input fails once the stream is gone.
    let input = exec.input();
    drop(exec);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(input.signal("SIGINT").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_does_not_come_back_ends_the_reconnection_in_time() {
    let t = Setup::new();
    let first = t.serve(
        1,
        Role::First {
            end_after_prefix: false,
        },
    );
    let (exec, _, _notices) = t.start().await;
    let mut exec = exec.reconnect_within(Duration::from_secs(1));
    first.kill();
    let began = std::time::Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(10), exec.next())
        .await
        .unwrap()
        .unwrap_err();
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(
        e.message()
            .starts_with("lost the connection to boxd (it stopped or crashed)"),
        "{e:?}"
    );
    assert!(
        e.message().contains(&format!(
            "could not reattach to exec {EXEC_ID} within 1s: boxd is not running"
        )),
        "{e:?}"
    );
}
