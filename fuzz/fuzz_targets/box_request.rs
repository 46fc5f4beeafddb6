//! Any create or exec request: validation never panics, and whatever it
//! accepts keeps the promises the rest of the daemon relies on (guest paths
//! absolute and normalized, nothing mounted over `/`, `/proc` or `/dev`,
//! no host path inside boxd's state directory or holding it or the
//! socket, environment names without `=` or NUL, published ports in range
//! and never two on one host port, everything within its size bound).
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use boxd::validate;
use boxd_proto::v1;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

/// A state and a socket directory that really exist, for the host-path rule.
fn dirs() -> &'static (tempfile::TempDir, tempfile::TempDir) {
    static DIRS: OnceLock<(tempfile::TempDir, tempfile::TempDir)> = OnceLock::new();
    DIRS.get_or_init(|| (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()))
}

/// A path-ish string: often built from parts that matter (`/`, `..`, the
/// protected directories, NUL), sometimes any text.
fn path(u: &mut Unstructured) -> Result<String> {
    let (state, run) = dirs();
    if u.ratio(1, 4)? {
        return u.arbitrary();
    }
    let mut s = String::new();
    for _ in 0..u.int_in_range(0..=6)? {
        let part = match u.int_in_range(0..=9)? {
            0 => "/".to_owned(),
            1 => "..".to_owned(),
            2 => ".".to_owned(),
            3 => state.path().to_string_lossy().into_owned(),
            4 => run.path().to_string_lossy().into_owned(),
            5 => "/proc".to_owned(),
            6 => "/dev".to_owned(),
            7 => "\0".to_owned(),
            8 => "/tmp".to_owned(),
            _ => u.arbitrary::<String>()?,
        };
        s.push_str(&part);
    }
    Ok(s)
}

fn spec(u: &mut Unstructured) -> Result<v1::BoxSpec> {
    let mut mounts = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        mounts.push(v1::Mount {
            host_path: path(u)?,
            guest_path: path(u)?,
            read_only: u.arbitrary()?,
        });
    }
    let mut ports = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        ports.push(v1::PortMapping {
            host_ip: match u.int_in_range(0..=3)? {
                0 => String::new(),
                1 => "0.0.0.0".into(),
                2 => "::1".into(),
                _ => u.arbitrary()?,
            },
            host_port: if u.arbitrary()? { u.int_in_range(0..=3)? } else { u.arbitrary()? },
            box_port: u.arbitrary()?,
            protocol: if u.arbitrary()? { "tcp".into() } else { u.arbitrary()? },
        });
    }
    Ok(v1::BoxSpec {
        image: u.arbitrary()?,
        ports,
        cpus: u.arbitrary()?,
        memory_mib: u.arbitrary()?,
        disk_size_gb: u.arbitrary()?,
        mounts,
        allow_net: u.arbitrary()?,
        env: u.arbitrary()?,
        working_dir: path(u)?,
        keep_id: u
            .arbitrary::<Option<(u32, u32)>>()?
            .map(|(uid, gid)| v1::KeepId { uid, gid }),
        ..Default::default()
    })
}

fn check(u: &mut Unstructured) -> Result<()> {
    let (state, run) = dirs();
    let socket = run.path().join("boxd.sock");
    let _ = std::fs::write(&socket, "");
    let protected = [("state", state.path()), ("socket", socket.as_path())];
    let name: String = u.arbitrary()?;
    if validate::box_name(&name).is_ok() {
        assert!((1..=64).contains(&name.len()));
        assert!(!name.contains(['/', '\0']) && name != "." && name != "..");
    }
    if let Ok(s) = validate::box_spec(spec(u)?, &protected) {
        assert!(!s.image.is_empty());
        if let Some(k) = s.keep_id {
            assert!((1..65_536).contains(&k.uid) && (1..65_536).contains(&k.gid));
        }
        assert!(s.mounts.len() <= validate::MAX_MOUNTS);
        for m in &s.mounts {
            let g = Path::new(&m.guest_path);
            assert!(g.is_absolute() && !m.guest_path.contains(['\0']));
            assert!(!g.components().any(|c| c.as_os_str() == ".."));
            assert!(validate::mount_target(&m.guest_path).is_ok());
            for (_, dir) in &protected {
                let dir = dir.canonicalize().unwrap();
                assert!(!m.host_path.starts_with(&dir) && !dir.starts_with(&m.host_path));
            }
        }
        let bytes: usize = s.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        assert!(bytes <= validate::MAX_ENV_BYTES);
        for (k, v) in &s.env {
            assert!(!k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0'));
        }
        assert!(s.ports.len() <= validate::MAX_PORTS);
        for (i, p) in s.ports.iter().enumerate() {
            assert!(p.box_port >= 1);
            assert!(s.ports[..i].iter().all(|o| !o.overlaps(p)));
        }
        if let Some(w) = &s.working_dir {
            assert!(w.starts_with('/') && !w.contains("/../"));
        }
    }
    let exec = v1::ExecStart {
        box_name: name,
        command: u.arbitrary()?,
        args: u.arbitrary()?,
        env: u.arbitrary()?,
        working_dir: path(u)?,
        user: u.arbitrary()?,
        ..Default::default()
    };
    if let Ok(exec) = validate::exec_start(exec) {
        // Empty: the image's Entrypoint and Cmd.
        assert!(!exec.command.contains('\0'));
        if let Some(user) = &exec.user {
            assert!(!user.is_empty() && user.split(':').count() <= 2);
            assert!(!user.contains('\0') && !user.contains('/'));
        }
        assert!(exec.args.iter().all(|a| !a.contains('\0')));
        if let Some(w) = &exec.working_dir {
            assert!(w.starts_with('/') && !w.contains("/../"));
        }
    }
    let _ = validate::signal(u.arbitrary()?);
    let _ = validate::image_reference(u.arbitrary()?);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = check(&mut Unstructured::new(data));
});
