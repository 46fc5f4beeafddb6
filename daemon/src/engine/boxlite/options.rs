//! A box's spec as BoxLite's [`BoxOptions`], pure: the image (an absolute
//! path is a local OCI layout, anything else a registry reference),
//! resources, bind mounts, network and secrets, environment, published
//! ports; plus what of the spec BoxLite will not honour as asked (warnings).
//!
//! Invariants:
//! - an empty `allow_net` means no network at all (BoxLite's empty list
//!   would mean unrestricted);
//! - secrets' values go to BoxLite's own proxy, which keeps them out of the
//!   VM; the box sees each placeholder in `$NAME`, as on the namespace
//!   engine;
//! - ports are published only from a box with a network (BoxLite's rule,
//!   checked here so the error says what to do in boxd's words);
//! - every box is detached and kept after stop, so it survives a boxd
//!   restart (a detached box that is removed on stop is refused by
//!   BoxLite).

use std::path::Path;

use ::boxlite::runtime::options::VolumeSpec;
use ::boxlite::{BoxOptions, NetworkSpec, RootfsSpec};

use super::ports::port_spec;
use crate::error::{Error, Result};
use crate::model::BoxSpec;

/// BoxLite rejects more vCPUs than this (0.11's `vm_defaults::MAX_CPUS`;
/// 0.10.8 does not check and fails later).
pub const MAX_CPUS: u32 = 16;

/// What BoxLite is asked to create for a box spec, and what of the spec
/// it will not honour as asked.
pub fn box_options(spec: &BoxSpec) -> Result<(BoxOptions, Vec<String>)> {
    let mut warnings = Vec::new();
    let mut o = BoxOptions::default();

    if spec.image.is_empty() {
        return Err(Error::InvalidArgument("an image is required".into()));
    }
    if spec.keep_id.is_some() {
        return Err(Error::Unimplemented(
            "keep-id (mount owners as a box user) is the namespace engine's: a microVM's shares keep the host's ids as they are".into(),
        ));
    }
    o.rootfs = if Path::new(&spec.image).is_absolute() {
        RootfsSpec::RootfsPath(spec.image.clone())
    } else {
        RootfsSpec::Image(spec.image.clone())
    };

    if let Some(cpus) = spec.cpus {
        if cpus == 0 || cpus > MAX_CPUS {
            return Err(Error::InvalidArgument(format!(
                "cpus must be between 1 and {MAX_CPUS} for a microVM, not {cpus}"
            )));
        }
        let host = std::thread::available_parallelism().map_or(0, |n| n.get() as u32);
        if host > 0 && cpus > host {
            warnings.push(format!(
                "the box gets {cpus} vCPUs but the host has {host} CPUs"
            ));
        }
        o.cpus = Some(cpus as u8);
    }
    if let Some(mib) = spec.memory_mib {
        if mib == 0 {
            return Err(Error::InvalidArgument("memory_mib must be positive".into()));
        }
        o.memory_mib = Some(mib);
    }
    if let Some(gb) = spec.disk_size_gb {
        if gb == 0 {
            return Err(Error::InvalidArgument(
                "disk_size_gb must be positive".into(),
            ));
        }
        o.disk_size_gb = Some(u64::from(gb));
    }

    for m in &spec.mounts {
        let host = m.host_path.to_str().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "mount source {} is not valid UTF-8, which BoxLite cannot take",
                m.host_path.display()
            ))
        })?;
        let mut v = VolumeSpec::bind_mount(host, m.guest_path.clone());
        v.read_only = m.read_only;
        o.volumes.push(v);
    }

    // boxd: an empty allow_net means no network at all (BoxLite's empty
    // list would mean unrestricted).
    o.network = if spec.allow_net.is_empty() {
        NetworkSpec::Disabled
    } else {
        NetworkSpec::Enabled {
            allow_net: spec.allow_net.clone(),
        }
    };

    // Secrets: BoxLite's own proxy keeps the values out of the VM; the box
    // sees each placeholder in $NAME, as on the namespace engine.
    o.secrets = spec
        .secrets
        .iter()
        .map(|s| ::boxlite::Secret {
            name: s.name.clone(),
            hosts: s.hosts.clone(),
            placeholder: s.placeholder.clone(),
            value: s.value.clone(),
        })
        .collect();
    o.env = spec
        .secrets
        .iter()
        .map(|s| (s.name.clone(), s.placeholder.clone()))
        .chain(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())))
        .collect();
    o.working_dir = spec.working_dir.clone().filter(|d| !d.is_empty());

    // Published ports: BoxLite's network backend listens on the host. It
    // publishes only from a box with a network (its rule, checked here so
    // the error says what to do in boxd's words).
    if !spec.ports.is_empty() && spec.allow_net.is_empty() {
        return Err(Error::InvalidArgument(
            "on the microvm engine a box publishes ports only if it has a network: give it --allow-net (BoxLite cannot publish ports of a box with no network)".into(),
        ));
    }
    o.ports = spec.ports.iter().map(port_spec).collect();

    // Survive a boxd restart: detached, and kept after stop (a detached box
    // that is removed on stop is refused by BoxLite).
    o.detach = true;
    o.auto_delete = Some(0);
    Ok((o, warnings))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use ::boxlite::runtime::options::PortSpec;

    use super::*;
    use crate::model::{Mount, PortMapping};

    fn spec(image: &str) -> BoxSpec {
        BoxSpec {
            image: image.into(),
            ..BoxSpec::default()
        }
    }

    #[test]
    fn options_map_every_field() {
        let s = BoxSpec {
            image: "/srv/images/busybox".into(),
            cpus: Some(1),
            memory_mib: Some(256),
            disk_size_gb: Some(4),
            mounts: vec![
                Mount {
                    host_path: "/home/u/src".into(),
                    guest_path: "/src".into(),
                    read_only: true,
                },
                Mount {
                    host_path: "/home/u/out".into(),
                    guest_path: "/out".into(),
                    read_only: false,
                },
            ],
            allow_net: vec!["example.com".into(), "10.0.0.0/8".into()],
            env: BTreeMap::from([("A".into(), "1".into()), ("B".into(), "2".into())]),
            working_dir: Some("/work".into()),
            secrets: vec![crate::egress::Secret {
                name: "KEY".into(),
                hosts: vec!["example.com".into()],
                placeholder: "PH".into(),
                value: "v".into(),
            }],
            ports: vec![],
            keep_id: None,
        };
        let (o, warnings) = box_options(&s).unwrap();
        assert_eq!(o.secrets.len(), 1);
        assert_eq!(
            (
                o.secrets[0].placeholder.as_str(),
                o.secrets[0].value.as_str()
            ),
            ("PH", "v")
        );
        assert!(matches!(&o.rootfs, RootfsSpec::RootfsPath(p) if p == "/srv/images/busybox"));
        assert_eq!(o.cpus, Some(1));
        assert_eq!(o.memory_mib, Some(256));
        assert_eq!(o.disk_size_gb, Some(4));
        assert_eq!(o.volumes.len(), 2);
        assert_eq!(o.volumes[0].host_path, "/home/u/src");
        assert_eq!(o.volumes[0].guest_path, "/src");
        assert!(o.volumes[0].read_only);
        assert!(o.volumes[0].managed_volume.is_none());
        assert!(!o.volumes[1].read_only);
        assert!(o.mounts.is_empty());
        assert!(
            matches!(&o.network, NetworkSpec::Enabled { allow_net } if allow_net == &["example.com", "10.0.0.0/8"])
        );
        assert!(matches!(o.inbound_network, NetworkSpec::Disabled));
        assert!(o.ports.is_empty());
        assert_eq!(
            o.env,
            vec![
                ("KEY".into(), "PH".into()),
                ("A".into(), "1".into()),
                ("B".into(), "2".into())
            ]
        );
        assert_eq!(o.working_dir.as_deref(), Some("/work"));
        assert!(o.detach);
        assert_eq!(o.auto_delete, Some(0));
        assert!(o.entrypoint.is_none() && o.cmd.is_none() && o.user.is_none() && !o.tty);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn published_ports_map_to_boxlite() {
        let mut s = spec("alpine");
        s.ports = vec![
            PortMapping {
                host_ip: "127.0.0.1".parse().unwrap(),
                host_port: 0,
                box_port: 8000,
            },
            PortMapping {
                host_ip: "::".parse().unwrap(),
                host_port: 8080,
                box_port: 80,
            },
        ];
        // BoxLite publishes only from a box with a network: said in boxd's words.
        let e = box_options(&s).unwrap_err().to_string();
        assert!(e.contains("--allow-net"), "{e}");
        s.allow_net = vec!["example.com".into()];
        let (o, _) = box_options(&s).unwrap();
        assert_eq!(
            o.ports,
            vec![
                PortSpec {
                    host_port: None,
                    guest_port: 8000,
                    protocol: ::boxlite::PortProtocol::Tcp,
                    host_ip: Some("127.0.0.1".into()),
                },
                PortSpec {
                    host_port: Some(8080),
                    guest_port: 80,
                    protocol: ::boxlite::PortProtocol::Tcp,
                    host_ip: Some("::".into()),
                },
            ]
        );
    }

    #[test]
    fn options_defaults_and_registry_images() {
        let (o, _) = box_options(&spec("docker.io/library/alpine:3.20")).unwrap();
        assert!(matches!(&o.rootfs, RootfsSpec::Image(r) if r == "docker.io/library/alpine:3.20"));
        // Empty allow_net is "no network" in boxd, not BoxLite's "anything".
        assert!(matches!(o.network, NetworkSpec::Disabled));
        assert_eq!((o.cpus, o.memory_mib, o.disk_size_gb), (None, None, None));
        assert!(o.volumes.is_empty() && o.env.is_empty() && o.working_dir.is_none());
        assert!(o.detach);
        assert_eq!(o.auto_delete, Some(0));

        let mut s = spec("alpine");
        s.working_dir = Some(String::new());
        assert!(box_options(&s).unwrap().0.working_dir.is_none());
    }

    #[test]
    fn options_reject_what_boxlite_cannot_do() {
        for cpus in [0, MAX_CPUS + 1, 255, 256] {
            let mut s = spec("alpine");
            s.cpus = Some(cpus);
            let e = box_options(&s).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains("between 1 and 16")),
                "{e}"
            );
        }
        let mut s = spec("alpine");
        s.cpus = Some(MAX_CPUS);
        let (o, warnings) = box_options(&s).unwrap();
        assert_eq!(o.cpus, Some(16));
        if std::thread::available_parallelism().unwrap().get() < 16 {
            assert!(
                warnings.iter().any(|w| w.contains("16 vCPUs")),
                "{warnings:?}"
            );
        }
        assert!(matches!(
            box_options(&spec("")),
            Err(Error::InvalidArgument(_))
        ));
        let mut s = spec("alpine");
        s.memory_mib = Some(0);
        assert!(matches!(box_options(&s), Err(Error::InvalidArgument(_))));
        let mut s = spec("alpine");
        s.disk_size_gb = Some(0);
        assert!(matches!(box_options(&s), Err(Error::InvalidArgument(_))));
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let mut s = spec("alpine");
            s.mounts.push(Mount {
                host_path: PathBuf::from(std::ffi::OsStr::from_bytes(b"/tmp/\xff")),
                guest_path: "/x".into(),
                read_only: false,
            });
            assert!(matches!(box_options(&s), Err(Error::InvalidArgument(_))));
        }
    }

    #[test]
    fn options_pass_boxlite_validation() {
        // BoxLite's own create-time checks (detach needs keep-on-stop, ...).
        let mut s = spec("alpine");
        s.allow_net = vec!["example.com".into()];
        let (o, _) = box_options(&s).unwrap();
        let json = serde_json::to_value(&o).unwrap();
        assert_eq!(json["detach"], true);
        assert_eq!(json["auto_delete"], 0);
    }
}
