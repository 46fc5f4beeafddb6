//! The typed facade every client creates boxes through: a [`BoxSpec`]
//! builder, [`pull`] with progress, and [`create_or_reuse`], which pulls an
//! image the daemon lacks and then creates (or reuses) the box.
//!
//! `boxctl`, `harness-box-exec` and the JSONL driver build their create
//! requests here (from command-line words via [`crate::spec::SpecWords`],
//! or from JSON params), so a request is built in one place.
//!
//! Invariants: an image is pulled before a create only when it is a
//! registry reference the daemon has no image for (a local layout, or a
//! daemon that does not list images, needs nothing: the engine resolves it
//! at create); progress is handed to the caller event by event, in the
//! daemon's order, and the caller's handler is awaited before the next
//! event is read (so a slow display slows the pull stream, nothing piles
//! up).

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;

use boxd_proto::tonic::Status;

use crate::error_kind::ErrorKind;
use crate::{Client, v1};

/// One step of a pull, as boxd reports it.
pub use crate::v1::pull_image_event::Event as PullEvent;

/// A box spec under construction; [`BoxSpec::build`] gives the wire form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoxSpec {
    spec: v1::BoxSpec,
}

impl BoxSpec {
    /// A spec for a box made from `image` (a registry reference or the
    /// absolute path of a local layout; empty for a box that must exist).
    pub fn new(image: impl Into<String>) -> BoxSpec {
        BoxSpec {
            spec: v1::BoxSpec {
                image: image.into(),
                ..Default::default()
            },
        }
    }

    pub fn image(&self) -> &str {
        &self.spec.image
    }

    pub fn cpus(mut self, cpus: Option<u32>) -> BoxSpec {
        self.spec.cpus = cpus;
        self
    }

    pub fn memory_mib(mut self, mib: Option<u32>) -> BoxSpec {
        self.spec.memory_mib = mib;
        self
    }

    pub fn disk_size_gb(mut self, gb: Option<u32>) -> BoxSpec {
        self.spec.disk_size_gb = gb;
        self
    }

    pub fn mount(mut self, mount: v1::Mount) -> BoxSpec {
        self.spec.mounts.push(mount);
        self
    }

    pub fn mounts(mut self, mounts: impl IntoIterator<Item = v1::Mount>) -> BoxSpec {
        self.spec.mounts.extend(mounts);
        self
    }

    /// Hosts the box may reach (names, `*.suffix`, IPs, CIDRs).
    pub fn allow_net(mut self, hosts: impl IntoIterator<Item = String>) -> BoxSpec {
        self.spec.allow_net.extend(hosts);
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> BoxSpec {
        self.spec.env.insert(key.into(), value.into());
        self
    }

    pub fn envs(mut self, vars: HashMap<String, String>) -> BoxSpec {
        self.spec.env.extend(vars);
        self
    }

    /// The box's default working directory (`None`: the image's).
    pub fn working_dir(mut self, dir: Option<String>) -> BoxSpec {
        self.spec.working_dir = dir.unwrap_or_default();
        self
    }

    pub fn secret(mut self, secret: v1::Secret) -> BoxSpec {
        self.spec.secrets.push(secret);
        self
    }

    pub fn secrets(mut self, secrets: impl IntoIterator<Item = v1::Secret>) -> BoxSpec {
        self.spec.secrets.extend(secrets);
        self
    }

    pub fn publish(mut self, port: v1::PortMapping) -> BoxSpec {
        self.spec.ports.push(port);
        self
    }

    pub fn ports(mut self, ports: impl IntoIterator<Item = v1::PortMapping>) -> BoxSpec {
        self.spec.ports.extend(ports);
        self
    }

    /// Mounted directories' owners as box user `uid`:`gid`, that user the
    /// box's default ([`crate::spec::parse_userns`]).
    pub fn keep_id(mut self, keep_id: Option<v1::KeepId>) -> BoxSpec {
        self.spec.keep_id = keep_id;
        self
    }

    /// The spec as boxd takes it.
    pub fn build(self) -> v1::BoxSpec {
        self.spec
    }

    /// The create request for a box called `name` (an existing box of that
    /// name is reused as it is).
    pub fn request(self, name: impl Into<String>) -> v1::CreateBoxRequest {
        self.request_if_exists(name, v1::IfExists::Reuse)
    }

    /// The create request for a box called `name`, saying what to do with
    /// an existing box of that name.
    pub fn request_if_exists(
        self,
        name: impl Into<String>,
        if_exists: v1::IfExists,
    ) -> v1::CreateBoxRequest {
        v1::CreateBoxRequest {
            name: name.into(),
            spec: Some(self.spec),
            if_exists: if_exists.into(),
        }
    }
}

/// Whether a create made a new box or found one of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    /// The existing box is kept as it was; what the request asked for
    /// differently is in [`Created::warnings`].
    Reused,
}

/// A box a create (or a clone or an import) answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct Created {
    pub info: v1::BoxInfo,
    pub outcome: Outcome,
    /// Options of the request that the reused box does not have, or that
    /// boxd dropped, in words.
    pub warnings: Vec<String>,
    pub elapsed_ms: u64,
    /// A box of that name was removed first (`IfExists::Replace`).
    pub replaced: bool,
}

impl Created {
    pub fn created(&self) -> bool {
        self.outcome == Outcome::Created
    }

    /// `microvm` or `namespace`.
    pub fn isolation(&self) -> &str {
        &self.info.isolation
    }
}

impl From<v1::CreateBoxResponse> for Created {
    fn from(r: v1::CreateBoxResponse) -> Created {
        Created {
            info: r.r#box.unwrap_or_default(),
            outcome: if r.created {
                Outcome::Created
            } else {
                Outcome::Reused
            },
            warnings: r.warnings,
            elapsed_ms: r.elapsed_ms,
            replaced: r.replaced,
        }
    }
}

/// Whether a create from `image` would have to pull it first: a registry
/// reference the daemon has no image for. A local layout (an absolute path)
/// never does; an engine that does not list images pulls at create itself.
pub async fn image_missing(client: &mut Client, image: &str) -> Result<bool, Status> {
    if image.is_empty() || Path::new(image).is_absolute() {
        return Ok(false);
    }
    let request = v1::InspectImageRequest {
        reference: image.to_owned(),
    };
    match client.inspect_image(request).await {
        Ok(_) => Ok(false),
        Err(s) => match ErrorKind::of_status(&s) {
            ErrorKind::NotFound => Ok(true),
            ErrorKind::Unsupported => Ok(false),
            _ => Err(s),
        },
    }
}

/// Pulls `reference`, handing each event to `on_event` (awaited before the
/// next is read), and returns the image once boxd reports it done.
pub async fn pull<F, Fut>(
    client: &mut Client,
    reference: &str,
    mut on_event: F,
) -> Result<v1::ImageInfo, Status>
where
    F: FnMut(&PullEvent) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut stream = client
        .pull_image(v1::PullImageRequest {
            reference: reference.to_owned(),
        })
        .await?
        .into_inner();
    while let Some(ev) = stream.message().await? {
        let Some(event) = ev.event else { continue };
        on_event(&event).await;
        if let PullEvent::Done(info) = event {
            return Ok(info);
        }
    }
    Err(Status::internal("boxd ended the pull without a result"))
}

/// Creates the box `name` from `spec`, or reuses the one of that name;
/// first pulls the image when the daemon lacks it ([`image_missing`]),
/// with its progress handed to `on_pull`.
pub async fn create_or_reuse<F, Fut>(
    client: &mut Client,
    name: &str,
    spec: BoxSpec,
    on_pull: F,
) -> Result<Created, Status>
where
    F: FnMut(&PullEvent) -> Fut,
    Fut: Future<Output = ()>,
{
    create(client, name, spec, v1::IfExists::Reuse, on_pull).await
}

/// As [`create_or_reuse`], with `if_exists` saying what happens to an
/// existing box of that name (`SameSpec`: reuse only an identical one,
/// else `ALREADY_EXISTS` naming the differences; `Replace`: a new box).
pub async fn create<F, Fut>(
    client: &mut Client,
    name: &str,
    spec: BoxSpec,
    if_exists: v1::IfExists,
    on_pull: F,
) -> Result<Created, Status>
where
    F: FnMut(&PullEvent) -> Fut,
    Fut: Future<Output = ()>,
{
    if image_missing(client, spec.image()).await? {
        pull(client, spec.image(), on_pull).await?;
    }
    let reply = client
        .create_box(spec.request_if_exists(name, if_exists))
        .await?
        .into_inner();
    Ok(reply.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_fills_the_wire_spec() {
        let spec = BoxSpec::new("alpine:3.20")
            .cpus(Some(2))
            .memory_mib(Some(512))
            .mount(v1::Mount {
                host_path: "/h".into(),
                guest_path: "/g".into(),
                read_only: true,
            })
            .env("A", "1")
            .allow_net(["example.com".to_owned()])
            .working_dir(Some("/w".into()))
            .publish(v1::PortMapping {
                box_port: 80,
                ..Default::default()
            });
        assert_eq!(spec.image(), "alpine:3.20");
        let req = spec.request("b");
        assert_eq!(req.name, "b");
        let s = req.spec.unwrap();
        assert_eq!(
            (s.cpus, s.memory_mib, s.disk_size_gb),
            (Some(2), Some(512), None)
        );
        assert_eq!(s.mounts.len(), 1);
        assert_eq!(s.env["A"], "1");
        assert_eq!(s.allow_net, ["example.com"]);
        assert_eq!(s.working_dir, "/w");
        assert_eq!(s.ports[0].box_port, 80);
        assert_eq!(BoxSpec::new("x").working_dir(None).build().working_dir, "");
    }

    #[test]
    fn a_reply_says_whether_it_created() {
        let c = Created::from(v1::CreateBoxResponse {
            r#box: Some(v1::BoxInfo {
                isolation: "namespace".into(),
                ..Default::default()
            }),
            created: false,
            warnings: vec!["cpus differ".into()],
            elapsed_ms: 3,
            replaced: false,
        });
        assert_eq!(c.outcome, Outcome::Reused);
        assert!(!c.created());
        assert_eq!(c.isolation(), "namespace");
        assert!(
            Created::from(v1::CreateBoxResponse {
                created: true,
                ..Default::default()
            })
            .created()
        );
    }
}
