//! The gRPC service: translates requests into registry and exec calls.
//! It holds no state of its own and maps every error through `error.rs`.
//! Files (`files.rs`), stats (`stats.rs`) and snapshots, clones and
//! archives (`snapshots.rs`) are served from modules of their own.

mod files;
mod snapshots;
mod stats;
pub mod wire;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use boxd_proto::tonic::{self, Request, Response, Status, Streaming};
use boxd_proto::v1::{self, boxd_server::Boxd, exec_request::Msg};
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::execs::{Attached, Execs};
use crate::model::{BoxRecord, ImageInfo};
use crate::registry::Registry;
use crate::validate;

pub struct Service {
    pub registry: Arc<Registry>,
    pub execs: Arc<Execs>,
    pub home: PathBuf,
    pub socket: PathBuf,
    pub shutdown: CancellationToken,
    /// The protocol `Describe` names: [`v1::PROTOCOL`] (see
    /// [`Service::protocol`]).
    pub protocol: String,
    /// The engine's isolation warning (namespaces where microVMs were
    /// asked for) went out once with a create reply since this start: it
    /// is not repeated on every create (`Describe` keeps it in its notes).
    pub isolation_warned: std::sync::atomic::AtomicBool,
}

impl Service {
    /// The engine's create warning, for the first create reply only.
    pub fn isolation_warning(&self) -> Option<String> {
        let w = self.registry.engine().info().create_warning.clone()?;
        (!self
            .isolation_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed))
        .then_some(w)
    }
}

type Stream2<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl Service {
    /// The protocol this daemon speaks. A debug build takes another from
    /// `BOXD_TEST_PROTOCOL`, so the tests can stand up a daemon of another
    /// version and check that every client refuses it; a release build
    /// never reads it.
    pub fn protocol() -> String {
        #[cfg(debug_assertions)]
        if let Ok(p) = std::env::var("BOXD_TEST_PROTOCOL") {
            return p;
        }
        v1::PROTOCOL.to_owned()
    }

    async fn info(&self, r: &BoxRecord) -> v1::BoxInfo {
        let disk_bytes = self.registry.engine().disk_usage(r).await;
        let engine_problem = self.registry.engine().known_problem();
        let engine = self.registry.engine().info();
        v1::BoxInfo {
            id: r.id.clone(),
            name: r.name.clone(),
            state: v1::BoxState::from(r.state) as i32,
            image: r.spec.image.clone(),
            image_digest: r.image_digest.clone(),
            created_at_ms: r.created_at_ms,
            started_at_ms: r.started_at_ms,
            isolation: engine.isolation.as_str().to_owned(),
            engine: engine.name.to_owned(),
            engine_host: engine.host.clone().unwrap_or_default(),
            spec: Some(wire::box_spec(&r.spec)),
            running_execs: self.execs.running_in(&r.name),
            // A box whose engine cannot be reached now says so (a remote
            // BoxLite server away), until the engine answers again.
            error: match engine_problem {
                Some(p) if r.error.is_empty() => p,
                _ => r.error.clone(),
            },
            disk_bytes,
            ports: self
                .registry
                .engine()
                .published(r)
                .iter()
                .map(wire::port)
                .collect(),
        }
    }

    /// Host paths no mount may expose.
    fn protected(&self) -> [(&'static str, &std::path::Path); 2] {
        [
            ("boxd's state directory", &self.home),
            ("boxd's socket", &self.socket),
        ]
    }

    fn spec_from_proto(&self, s: v1::BoxSpec) -> Result<crate::model::BoxSpec> {
        validate::box_spec(s, &self.protected())
    }

    /// Serves one `Exec` call: the first request starts or attaches, the
    /// rest are input and control.
    async fn exec_stream(
        &self,
        mut inbound: Streaming<v1::ExecRequest>,
    ) -> Result<ReceiverStream<Result<v1::ExecResponse, Status>>, Status> {
        let first = inbound
            .message()
            .await?
            .and_then(|r| r.msg)
            .ok_or_else(|| {
                Status::invalid_argument("the first exec request must be `start` or `attach`")
            })?;
        let (tx, rx) = mpsc::channel(16);
        let tx_for_errors = tx.clone();
        let attached = match first {
            Msg::Start(start) => self.execs.start(validate::exec_start(start)?, tx).await?,
            Msg::Attach(a) => self.execs.attach(a, tx).await?,
            _ => {
                return Err(Status::invalid_argument(
                    "the first exec request must be `start` or `attach`",
                ));
            }
        };
        tokio::spawn(pump_input(attached, inbound, tx_for_errors));
        Ok(ReceiverStream::new(rx))
    }
}

/// Applies a client's stdin, EOF, signals and resizes, in order. Input
/// that cannot be read (over the size limit, malformed) ends this client's
/// stream with the reason, which, like any client leaving, ends a
/// non-detached exec.
async fn pump_input(
    attached: Attached,
    mut inbound: Streaming<v1::ExecRequest>,
    errors: crate::execs::Subscriber,
) {
    let session = &attached.session;
    loop {
        let msg = tokio::select! {
            m = inbound.message() => m,
            _ = session.wait_done() => return,
        };
        let msg = match msg {
            Ok(Some(v1::ExecRequest { msg: Some(msg) })) => msg,
            Ok(_) => return,
            Err(status) => {
                let why = format!("exec input refused: {}", status.message());
                tracing::debug!(exec_id = %session.id, %why);
                let _ = errors.send(Err(Status::invalid_argument(why))).await;
                return;
            }
        };
        let result = match msg {
            Msg::Stdin(data) => session.write_stdin(data).await,
            Msg::CloseStdin(true) => session.close_stdin().await,
            Msg::CloseStdin(false) => Ok(()),
            Msg::Signal(s) => match validate::signal(&s.signal) {
                Ok(sig) => session.signal(sig).await,
                Err(e) => Err(e),
            },
            Msg::Resize(size) => session.resize(size.rows, size.cols).await,
            Msg::Ack(a) => {
                if attached.resumable {
                    attached.acks.ack(crate::exec_log::Offsets {
                        stdout: a.stdout_offset,
                        stderr: a.stderr_offset,
                    });
                }
                Ok(())
            }
            Msg::Start(_) | Msg::Attach(_) => Err(Error::InvalidArgument(
                "`start` and `attach` come only first".into(),
            )),
        };
        if let Err(e) = result {
            tracing::debug!(exec_id = %session.id, error = %e, "exec input refused");
        }
    }
}

#[tonic::async_trait]
impl Boxd for Service {
    async fn describe(
        &self,
        _: Request<v1::DescribeRequest>,
    ) -> Result<Response<v1::DescribeResponse>, Status> {
        let e = self.registry.engine().info();
        Ok(Response::new(v1::DescribeResponse {
            protocol: self.protocol.clone(),
            daemon_version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            engine: e.name.to_owned(),
            engine_version: e.version.clone(),
            isolation: e.isolation.as_str().to_owned(),
            capabilities: e.capabilities.clone(),
            notes: e.notes.clone(),
            network_filtering: e.network_filtering,
            socket: self.socket.to_string_lossy().into_owned(),
            home: self.home.to_string_lossy().into_owned(),
            engine_host: e.host.clone().unwrap_or_default(),
            engine_problem: self.registry.engine().problem().await.unwrap_or_default(),
        }))
    }

    async fn create_box(
        &self,
        req: Request<v1::CreateBoxRequest>,
    ) -> Result<Response<v1::CreateBoxResponse>, Status> {
        let begin = Instant::now();
        let req = req.into_inner();
        let name = validate::box_name(&req.name)?;
        let if_exists = match v1::IfExists::try_from(req.if_exists) {
            Ok(v1::IfExists::Reuse) => crate::registry::IfExists::Reuse,
            Ok(v1::IfExists::SameSpec) => crate::registry::IfExists::SameSpec,
            Ok(v1::IfExists::Replace) => crate::registry::IfExists::Replace,
            Ok(v1::IfExists::Fail) => crate::registry::IfExists::Fail,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "unknown if_exists {}",
                    req.if_exists
                )));
            }
        };
        let spec = self.spec_from_proto(req.spec.unwrap_or_default())?;
        let out = self.registry.create_with(&name, spec, if_exists).await?;
        let mut warnings = out.warnings;
        if out.created {
            warnings.extend(crate::model::public_port_warnings(&out.record.spec.ports));
        }
        warnings.extend(self.isolation_warning());
        Ok(Response::new(v1::CreateBoxResponse {
            r#box: Some(self.info(&out.record).await),
            created: out.created,
            warnings,
            elapsed_ms: begin.elapsed().as_millis() as u64,
            replaced: out.replaced,
        }))
    }

    async fn start_box(
        &self,
        req: Request<v1::StartBoxRequest>,
    ) -> Result<Response<v1::StartBoxResponse>, Status> {
        let name = validate::box_name(&req.into_inner().name)?;
        let (record, boot_ms) = self.registry.start(&name).await?;
        Ok(Response::new(v1::StartBoxResponse {
            r#box: Some(self.info(&record).await),
            boot_ms,
        }))
    }

    async fn stop_box(
        &self,
        req: Request<v1::StopBoxRequest>,
    ) -> Result<Response<v1::StopBoxResponse>, Status> {
        let req = req.into_inner();
        let name = validate::box_name(&req.name)?;
        let record = self.registry.stop(&name, req.force).await?;
        Ok(Response::new(v1::StopBoxResponse {
            r#box: Some(self.info(&record).await),
        }))
    }

    async fn update_box(
        &self,
        req: Request<v1::UpdateBoxRequest>,
    ) -> Result<Response<v1::UpdateBoxResponse>, Status> {
        let req = req.into_inner();
        let name = validate::box_name(&req.name)?;
        let change = validate::spec_update(&req)?;
        let (record, warnings) = self.registry.update(&name, change).await?;
        Ok(Response::new(v1::UpdateBoxResponse {
            r#box: Some(self.info(&record).await),
            warnings,
        }))
    }

    async fn remove_box(
        &self,
        req: Request<v1::RemoveBoxRequest>,
    ) -> Result<Response<v1::RemoveBoxResponse>, Status> {
        let req = req.into_inner();
        let name = validate::box_name(&req.name)?;
        self.registry.remove(&name, req.force).await?;
        Ok(Response::new(v1::RemoveBoxResponse {}))
    }

    async fn list_boxes(
        &self,
        _: Request<v1::ListBoxesRequest>,
    ) -> Result<Response<v1::ListBoxesResponse>, Status> {
        self.registry.engine().recheck().await;
        let records = self.registry.list().await;
        let boxes = futures::future::join_all(records.iter().map(|r| self.info(r))).await;
        Ok(Response::new(v1::ListBoxesResponse { boxes }))
    }

    async fn inspect_box(
        &self,
        req: Request<v1::InspectBoxRequest>,
    ) -> Result<Response<v1::BoxInfo>, Status> {
        let name = validate::box_name(&req.into_inner().name)?;
        let record = self.registry.get(&name).await?;
        self.registry.engine().recheck().await;
        Ok(Response::new(self.info(&record).await))
    }

    type WatchBoxesStream = Stream2<v1::BoxEvent>;

    async fn watch_boxes(
        &self,
        req: Request<v1::WatchBoxesRequest>,
    ) -> Result<Response<Self::WatchBoxesStream>, Status> {
        let req = req.into_inner();
        let (first, mut events) = match (req.initial, req.since_ms) {
            (true, s) if s > 0 => {
                return Err(Status::invalid_argument(
                    "`initial` and `since_ms` cannot be asked together: the initial list \
                     is every box as it is now, the kept events are what happened since",
                ));
            }
            (true, _) => {
                let (now, events) = self.registry.subscribe_current();
                let mut first: Vec<v1::BoxEvent> = now
                    .into_iter()
                    .map(|e| v1::BoxEvent {
                        initial: true,
                        ..e.into()
                    })
                    .collect();
                first.push(v1::BoxEvent {
                    synced: true,
                    at_ms: crate::model::now_ms(),
                    ..Default::default()
                });
                (first, events)
            }
            (false, s) if s > 0 => {
                let (past, events) = self.registry.subscribe_since(s);
                (past.into_iter().map(v1::BoxEvent::from).collect(), events)
            }
            (false, _) => (Vec::new(), self.registry.subscribe()),
        };
        let until = (req.until_ms > 0).then_some(req.until_ms);
        let (tx, rx) = mpsc::channel(64);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            for ev in first {
                if until.is_some_and(|u| ev.at_ms > u) {
                    return;
                }
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            // The time left until `until` (none: forever).
            let left = until.map(|u| {
                std::time::Duration::from_millis(
                    u.saturating_sub(crate::model::now_ms()).max(0) as u64
                )
            });
            let end = async move {
                match left {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(end);
            loop {
                let ev = tokio::select! {
                    ev = events.recv() => ev,
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => return,
                    _ = &mut end => return,
                };
                match ev {
                    Ok(ev) if until.is_some_and(|u| ev.at_ms > u) => return,
                    Ok(ev) => {
                        if tx.send(Ok(v1::BoxEvent::from(ev))).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "a box watcher fell behind");
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type ExecStream = Stream2<v1::ExecResponse>;

    async fn exec(
        &self,
        req: Request<Streaming<v1::ExecRequest>>,
    ) -> Result<Response<Self::ExecStream>, Status> {
        let stream = self.exec_stream(req.into_inner()).await?;
        Ok(Response::new(Box::pin(stream)))
    }

    async fn send_input(
        &self,
        req: Request<v1::SendInputRequest>,
    ) -> Result<Response<v1::SendInputResponse>, Status> {
        let req = req.into_inner();
        let session = self.execs.get(&req.exec_id)?;
        if !req.data.is_empty() {
            session.write_stdin(req.data).await?;
        }
        if req.close {
            session.close_stdin().await?;
        }
        Ok(Response::new(v1::SendInputResponse {}))
    }

    async fn signal_exec(
        &self,
        req: Request<v1::SignalExecRequest>,
    ) -> Result<Response<v1::SignalExecResponse>, Status> {
        let req = req.into_inner();
        let signal = validate::signal(&req.signal.map(|s| s.signal).unwrap_or_default())?;
        self.execs.get(&req.exec_id)?.signal(signal).await?;
        Ok(Response::new(v1::SignalExecResponse {}))
    }

    async fn resize_exec(
        &self,
        req: Request<v1::ResizeExecRequest>,
    ) -> Result<Response<v1::ResizeExecResponse>, Status> {
        let req = req.into_inner();
        let size = req
            .size
            .ok_or_else(|| Status::invalid_argument("size is required"))?;
        self.execs
            .get(&req.exec_id)?
            .resize(size.rows, size.cols)
            .await?;
        Ok(Response::new(v1::ResizeExecResponse {}))
    }

    async fn list_execs(
        &self,
        req: Request<v1::ListExecsRequest>,
    ) -> Result<Response<v1::ListExecsResponse>, Status> {
        let filter = req.into_inner().box_name;
        let mut execs = Vec::new();
        for s in self.execs.list() {
            if !filter.is_empty() && s.box_name != filter {
                continue;
            }
            execs.push(v1::ExecInfo {
                exec_id: s.id.clone(),
                box_name: s.box_name.clone(),
                command: s.command.clone(),
                args: s.args.clone(),
                started_at_ms: s.started_at_ms,
                tty: s.tty,
                detach: s.detach,
                attached: s.attached() as u32,
                exited: s.exited(),
                exit: s.exit(),
            });
        }
        Ok(Response::new(v1::ListExecsResponse { execs }))
    }

    type PullImageStream = Stream2<v1::PullImageEvent>;

    async fn pull_image(
        &self,
        req: Request<v1::PullImageRequest>,
    ) -> Result<Response<Self::PullImageStream>, Status> {
        let reference = validate::image_reference(&req.into_inner().reference)?;
        let (tx, rx) = mpsc::channel(64);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let engine = self.registry.engine().clone();
        // The pull runs to its end even if the client goes away: what it
        // stored is whole either way, and the next create needs it.
        tokio::spawn(async move {
            let progress = crate::image::pull::Progress::new(tx);
            let _ = done_tx.send(engine.images().pull(&reference, progress).await);
        });
        let in_use = self.in_use().await;
        let last = futures::stream::once(async move {
            match done_rx.await {
                Ok(Ok(info)) => Ok(v1::PullImageEvent {
                    event: Some(v1::pull_image_event::Event::Done(with_users(info, &in_use))),
                }),
                Ok(Err(e)) => Err(Status::from(e)),
                Err(_) => Err(Status::internal("the pull ended without a result")),
            }
        });
        let events =
            futures::StreamExt::map(ReceiverStream::new(rx), |e: crate::model::PullEvent| {
                Ok(v1::PullImageEvent::from(e))
            });
        Ok(Response::new(Box::pin(futures::StreamExt::chain(
            events, last,
        ))))
    }

    async fn list_images(
        &self,
        _req: Request<v1::ListImagesRequest>,
    ) -> Result<Response<v1::ListImagesResponse>, Status> {
        let in_use = self.in_use().await;
        let images = self.registry.engine().images().list().await?;
        Ok(Response::new(v1::ListImagesResponse {
            images: images.into_iter().map(|i| with_users(i, &in_use)).collect(),
        }))
    }

    async fn inspect_image(
        &self,
        req: Request<v1::InspectImageRequest>,
    ) -> Result<Response<v1::ImageInfo>, Status> {
        let reference = validate::image_reference(&req.into_inner().reference)?;
        let in_use = self.in_use().await;
        let info = self.registry.engine().images().inspect(&reference).await?;
        Ok(Response::new(with_users(info, &in_use)))
    }

    async fn remove_image(
        &self,
        req: Request<v1::RemoveImageRequest>,
    ) -> Result<Response<v1::RemoveImageResponse>, Status> {
        let req = req.into_inner();
        let reference = validate::image_reference(&req.reference)?;
        let in_use = self.in_use().await;
        let images = self.registry.engine().images();
        Ok(Response::new(
            images.remove(&reference, &in_use, req.force).await?.into(),
        ))
    }

    async fn prune_images(
        &self,
        _req: Request<v1::PruneImagesRequest>,
    ) -> Result<Response<v1::PruneImagesResponse>, Status> {
        let in_use = self.in_use().await;
        Ok(Response::new(
            self.registry.engine().images().prune(&in_use).await?.into(),
        ))
    }

    async fn import_image(
        &self,
        req: Request<v1::ImportImageRequest>,
    ) -> Result<Response<v1::ImageInfo>, Status> {
        let req = req.into_inner();
        let path = validate::import_path(&req.path)?;
        let reference = (!req.reference.is_empty())
            .then(|| validate::image_reference(&req.reference))
            .transpose()?;
        let info = self
            .registry
            .engine()
            .images()
            .import(&path, reference.as_deref())
            .await?;
        let in_use = self.in_use().await;
        Ok(Response::new(with_users(info, &in_use)))
    }

    type CopyOutStream = Stream2<v1::CopyOutResponse>;

    async fn copy_out(
        &self,
        req: Request<v1::CopyOutRequest>,
    ) -> Result<Response<Self::CopyOutStream>, Status> {
        Ok(Response::new(self.serve_copy_out(req.into_inner()).await?))
    }

    async fn copy_in(
        &self,
        req: Request<Streaming<v1::CopyInRequest>>,
    ) -> Result<Response<v1::CopyInResponse>, Status> {
        Ok(Response::new(self.serve_copy_in(req.into_inner()).await?))
    }

    type BoxStatsStream = Stream2<v1::BoxStatsResponse>;

    async fn box_stats(
        &self,
        req: Request<v1::BoxStatsRequest>,
    ) -> Result<Response<Self::BoxStatsStream>, Status> {
        Ok(Response::new(self.serve_stats(req.into_inner()).await?))
    }

    async fn create_snapshot(
        &self,
        req: Request<v1::CreateSnapshotRequest>,
    ) -> Result<Response<v1::SnapshotInfo>, Status> {
        Ok(Response::new(
            self.serve_create_snapshot(req.into_inner()).await?,
        ))
    }

    async fn list_snapshots(
        &self,
        req: Request<v1::ListSnapshotsRequest>,
    ) -> Result<Response<v1::ListSnapshotsResponse>, Status> {
        Ok(Response::new(
            self.serve_list_snapshots(req.into_inner()).await?,
        ))
    }

    async fn restore_snapshot(
        &self,
        req: Request<v1::RestoreSnapshotRequest>,
    ) -> Result<Response<v1::RestoreSnapshotResponse>, Status> {
        Ok(Response::new(
            self.serve_restore_snapshot(req.into_inner()).await?,
        ))
    }

    async fn remove_snapshot(
        &self,
        req: Request<v1::RemoveSnapshotRequest>,
    ) -> Result<Response<v1::RemoveSnapshotResponse>, Status> {
        Ok(Response::new(
            self.serve_remove_snapshot(req.into_inner()).await?,
        ))
    }

    async fn clone_box(
        &self,
        req: Request<v1::CloneBoxRequest>,
    ) -> Result<Response<v1::CreateBoxResponse>, Status> {
        Ok(Response::new(self.serve_clone(req.into_inner()).await?))
    }

    async fn export_box(
        &self,
        req: Request<v1::ExportBoxRequest>,
    ) -> Result<Response<v1::ExportBoxResponse>, Status> {
        Ok(Response::new(self.serve_export(req.into_inner()).await?))
    }

    async fn import_box(
        &self,
        req: Request<v1::ImportBoxRequest>,
    ) -> Result<Response<v1::CreateBoxResponse>, Status> {
        Ok(Response::new(self.serve_import(req.into_inner()).await?))
    }
}

impl Service {
    /// Which boxes were created from which image (manifest digest).
    async fn in_use(&self) -> crate::engine::InUse {
        let mut map = crate::engine::InUse::new();
        for r in self.registry.list().await {
            if !r.image_digest.is_empty() {
                map.entry(r.image_digest.clone())
                    .or_default()
                    .push(r.name.clone());
            }
        }
        map
    }
}

/// An image as the wire shows it, with the boxes made from it.
fn with_users(mut info: ImageInfo, in_use: &crate::engine::InUse) -> v1::ImageInfo {
    info.used_by = in_use.get(&info.digest).cloned().unwrap_or_default();
    info.used_by.sort();
    info.into()
}
