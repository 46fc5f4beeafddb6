//! The namespace engine's translation of a validated box into bubblewrap's
//! command line and the boot helper's mounts, against a box root full of
//! hostile symlinks (absolute, climbing, looping, into `/proc`): never a
//! panic, and every translation keeps its invariants: all namespaces new
//! (the network one too: a box reaches hosts only through its proxy),
//! capabilities dropped, the seccomp programs installed, every mount
//! landing inside the box and never over `/`, `/proc` or `/dev`, the hosts
//! file read-only, the init last.
#![no_main]

use std::ffi::OsString;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::OnceLock;

use boxd::engine::namespace::options::{self, SECCOMP_FDS};
use boxd::model::{BoxSpec, Mount};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

/// A box root as a box could leave it: symlinks everywhere.
fn root() -> &'static tempfile::TempDir {
    static ROOT: OnceLock<tempfile::TempDir> = OnceLock::new();
    ROOT.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("work/deep/er")).unwrap();
        for (name, target) in [
            ("abs", "/etc"),
            ("climb", "../../../../.."),
            ("work/up", "../../../../etc"),
            ("proc", "/proc/self"),
            ("devl", "/dev"),
            ("rootl", "/"),
            ("loop1", "loop2"),
            ("loop2", "loop1"),
            ("work/deep/back", "/work"),
            ("dot", "."),
        ] {
            symlink(target, r.join(name)).unwrap();
        }
        d
    })
}

const NAMES: [&str; 14] = [
    "abs", "climb", "work", "up", "proc", "devl", "rootl", "loop1", "deep", "er", "back", "dot",
    "..", "x",
];

fn guest(u: &mut Unstructured) -> Result<String> {
    let mut s = String::new();
    for _ in 0..u.int_in_range(1..=5)? {
        s.push('/');
        s.push_str(u.choose(&NAMES)?);
    }
    Ok(s)
}

fn check(u: &mut Unstructured) -> Result<()> {
    let root = root().path();
    let mut mounts = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        // Guest paths as validation leaves them: absolute, normalized.
        let Ok(g) = boxd::validate::guest_path("g", &guest(u)?) else {
            continue;
        };
        if boxd::validate::mount_target(&g).is_err() {
            continue;
        }
        mounts.push(Mount {
            host_path: "/srv/project".into(),
            guest_path: g,
            read_only: u.arbitrary()?,
        });
    }
    let spec = BoxSpec {
        image: "img".into(),
        allow_net: if u.arbitrary()? { vec!["example.com".into()] } else { vec![] },
        mounts,
        ..Default::default()
    };
    let name = "fuzz-box";
    let hosts = Path::new("/state/hosts");
    let with_hosts = (!spec.allow_net.is_empty()).then_some(hosts);
    let owner = u
        .arbitrary::<Option<((u32, u32), (u32, u32))>>()?
        .map(|(host, as_box)| boxd::engine::namespace::boot::MountOwner { host, as_box });
    let planned = options::plan_mounts(&spec, with_hosts, |_| owner);
    assert_eq!(planned.iter().any(|m| m.host_path == hosts), !spec.allow_net.is_empty());
    for m in &planned {
        // Where the boot helper will mount it, in the hostile root.
        let Ok(resolved) = options::resolve_target(root, &m.guest_path) else {
            continue;
        };
        let g = Path::new(&resolved);
        assert!(g.is_absolute());
        assert!(!g.components().any(|c| c.as_os_str() == ".."));
        assert!(boxd::validate::mount_target(&resolved).is_ok());
        // Never outside the root: resolving again inside it changes nothing.
        assert_eq!(options::resolve_target(root, &resolved).ok().as_deref(), Some(resolved.as_str()));
        if m.host_path == hosts {
            assert!(m.read_only && m.owner.is_none());
        }
    }
    let args = options::bwrap_args(name, Path::new("/tmp"));
    let words: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
    let has = |w: &[&str]| words.windows(w.len()).any(|x| x == w);
    for ns in ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"] {
        assert!(has(&[ns]));
    }
    assert!(has(&["--cap-drop", "ALL"]));
    for fd in SECCOMP_FDS {
        assert!(has(&["--add-seccomp-fd", &fd.to_string()]));
    }
    assert!(has(&["--hostname", name]));
    assert!(has(&["--bind", "/tmp", "/"]));
    assert_eq!(words.last(), Some(&"/proc/self/fd/10"));
    assert!(args.iter().all(|a: &OsString| !a.as_encoded_bytes().contains(&0)));
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = check(&mut Unstructured::new(data));
});
