//! Finding the daemon again: dial the socket, attach from the caller's
//! offsets, hand the uplink the new call.

use std::path::Path;
use std::time::{Duration, Instant};

use boxd_proto::tonic::Status;
use boxd_proto::v1::{self, exec_request::Msg};

use super::ExecStream;
use super::acks::{OutputOffsets, OutputStream};
use super::call::{call, is_transport};
use crate::{ConnectError, ErrorKind};

/// How long a reconnecting stream tries to reach the daemon again.
pub const RECONNECT_WITHIN: Duration = Duration::from_secs(30);
/// The first pause between attempts; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// What a reconnecting stream went through, for its owner to tell the
/// user (see [`ExecStream::on_reconnect`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Reconnect {
    /// The connection to boxd failed; reattaching.
    Lost { exec_id: String, error: String },
    /// Reattached: output continues where the caller is, stdin from where
    /// the command had it (`stdin_resent` bytes sent again).
    Reattached {
        exec_id: String,
        after: Duration,
        attempts: u32,
        stdin_resent: u64,
    },
    /// Output lost: the daemon that came back no longer keeps `from..to`
    /// of `stream`; the next bytes of that stream are from `to` on.
    Gap {
        exec_id: String,
        stream: OutputStream,
        from: u64,
        to: u64,
    },
}

/// How one reattach attempt ended, when not reattached.
enum Attempt {
    /// Worth another try (nothing answers yet, the connection failed).
    Retry(String),
    /// The end of reconnecting: this is the error.
    Fatal(Status),
}

impl ExecStream {
    pub(super) fn tell(&self, what: Reconnect) {
        if let Some(hook) = &self.hook {
            hook(&what);
        }
    }

    /// The call failed with `error`: reattach if reconnecting, else return
    /// the error.
    pub(super) async fn reattach(&mut self, error: Status) -> Result<(), Status> {
        let Some(socket) = self.socket.clone() else {
            return Err(error);
        };
        self.uplink.unlink();
        self.tell(Reconnect::Lost {
            exec_id: self.exec_id.clone(),
            error: error.message().to_owned(),
        });
        let began = Instant::now();
        let deadline = began + self.within;
        let mut pause = BACKOFF_FIRST;
        let mut last;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.try_reattach(&socket)).await {
                Ok(Ok(stdin_resent)) => {
                    self.tell(Reconnect::Reattached {
                        exec_id: self.exec_id.clone(),
                        after: began.elapsed(),
                        attempts,
                        stdin_resent,
                    });
                    return Ok(());
                }
                Ok(Err(Attempt::Fatal(s))) => return Err(s),
                Ok(Err(Attempt::Retry(why))) => last = why,
                Err(_) => last = "boxd did not answer".to_owned(),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Status::unavailable(format!(
                    "{}; could not reattach to exec {} within {:.0?}: {last}",
                    error.message(),
                    self.exec_id,
                    self.within
                )));
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(BACKOFF_MAX);
        }
    }

    /// One attempt: connect, attach from our offsets, hand the uplink the
    /// new call. Returns how many stdin bytes are resent.
    async fn try_reattach(&mut self, socket: &Path) -> Result<u64, Attempt> {
        let mut client = match crate::connect(socket).await {
            Ok(c) => c,
            Err(e @ ConnectError::Untrusted { .. }) => {
                return Err(Attempt::Fatal(Status::permission_denied(e.to_string())));
            }
            Err(e @ ConnectError::Protocol { .. }) => {
                return Err(Attempt::Fatal(Status::failed_precondition(e.to_string())));
            }
            Err(e) => return Err(Attempt::Retry(e.to_string())),
        };
        let at = self.position.at();
        let attach = v1::ExecAttach {
            exec_id: self.exec_id.clone(),
            stdout_offset: at.stdout,
            stderr_offset: at.stderr,
            resumable: self.resumable,
        };
        let (link, call, started) = match call(&mut client, Msg::Attach(attach)).await {
            Ok(ok) => ok,
            Err(s) if ErrorKind::of_status(&s) == ErrorKind::NotFound => {
                return Err(Attempt::Fatal(Status::not_found(format!(
                    "exec {} is gone: the daemon that came back does not know it",
                    self.exec_id
                ))));
            }
            Err(s)
                if is_transport(&s)
                    || matches!(
                        ErrorKind::of_status(&s),
                        ErrorKind::LostDaemon | ErrorKind::Unavailable
                    ) =>
            {
                return Err(Attempt::Retry(s.message().to_owned()));
            }
            Err(s) => return Err(Attempt::Fatal(s)),
        };
        if started.exec_id != self.exec_id {
            return Err(Attempt::Fatal(Status::internal(format!(
                "asked to attach to exec {}, boxd attached to {}",
                self.exec_id, started.exec_id
            ))));
        }
        let resent = self
            .uplink
            .relink(call, started.stdin_offset)
            .await
            .map_err(Attempt::Fatal)?;
        let gaps = self.position.resume(OutputOffsets {
            stdout: started.stdout_offset,
            stderr: started.stderr_offset,
        });
        self.link = link;
        for g in gaps {
            self.tell(Reconnect::Gap {
                exec_id: self.exec_id.clone(),
                stream: g.stream,
                from: g.from,
                to: g.to,
            });
        }
        Ok(resent)
    }
}
