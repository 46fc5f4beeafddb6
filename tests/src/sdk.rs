//! The SDKs of `sdk/` as their users install them, for the tests and
//! benches that drive them: the Python SDK in a venv of its own, the
//! TypeScript SDK in a copy with its locked dependencies.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{agent, target_dir};

/// Every file of the package as pip builds it (not its tests or bench), in
/// a stable order: what the installed SDK is stamped with.
fn package_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("read_dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name == "__pycache__" || name == "build" || name.ends_with(".egg-info") {
            continue;
        }
        if p.is_dir() {
            package_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn package_digest(sdk: &Path) -> String {
    let mut files = vec![sdk.join("pyproject.toml"), sdk.join("README.md")];
    package_files(&sdk.join("src"), &mut files);
    let mut h = Sha256::new();
    for f in files {
        h.update(f.strip_prefix(sdk).unwrap().to_string_lossy().as_bytes());
        h.update([0]);
        h.update(std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display())));
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The venv's Python, with the test tools (made again only when their
/// pins change) and the SDK as it is now (installed again only when one
/// of its files changed). Locked across test binaries.
pub fn python() -> PathBuf {
    let venvs = target_dir().join("test-venvs");
    std::fs::create_dir_all(&venvs).expect("create test-venvs");
    let venv = venvs.join("sdk-python");
    let lock =
        std::fs::File::create(venvs.join(".sdk-python.lock")).expect("create the venv's lock");
    // SAFETY: flock on a descriptor this process holds; released when
    // `lock` is dropped at the end of this function.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    let sdk = agent::workspace().join("sdk/python");
    let reqs = sdk.join("requirements-test.txt");
    let wanted =
        std::fs::read_to_string(&reqs).unwrap_or_else(|e| panic!("{}: {e}", reqs.display()));
    let python = venv.join("bin/python");
    let tools_stamp = venv.join("requirements-test.txt");
    let sdk_stamp = venv.join("sdk.sha256");
    let pip = |args: &[&std::ffi::OsStr]| {
        let status = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(args)
            .status()
            .expect("run pip");
        assert!(status.success(), "pip install {args:?} failed");
    };
    if !python.is_file() || std::fs::read_to_string(&tools_stamp).ok().as_deref() != Some(&wanted) {
        let _ = std::fs::remove_dir_all(&venv);
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("run python3 -m venv (apt-get install python3-venv)");
        assert!(status.success(), "python3 -m venv failed");
        pip(&["-r".as_ref(), reqs.as_os_str()]);
        std::fs::write(&tools_stamp, &wanted).expect("write the venv's stamp");
    }
    let digest = package_digest(&sdk);
    if std::fs::read_to_string(&sdk_stamp).ok().as_deref() != Some(&digest) {
        // The pinned runtime is in the venv already: the SDK alone, afresh,
        // built from a copy (setuptools writes build/ and *.egg-info beside
        // the sources it builds).
        let copy = tempfile::tempdir().expect("tempdir");
        let src = copy.path().join("python");
        let status = Command::new("cp")
            .arg("-r")
            .arg(&sdk)
            .arg(&src)
            .status()
            .expect("run cp");
        assert!(status.success(), "cp -r {} failed", sdk.display());
        pip(&[
            "--no-deps".as_ref(),
            "--force-reinstall".as_ref(),
            src.as_os_str(),
        ]);
        std::fs::write(&sdk_stamp, &digest).expect("write the SDK's stamp");
    }
    python
}

/// What of the package is copied (never `node_modules`).
const COPIED: &[&str] = &[
    "dist",
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "tsconfig.test.json",
    "buf.gen.yaml",
    "generate.sh",
    "src",
    "test",
    "bench",
];

fn copy_tree(from: &Path, to: &Path) {
    let meta =
        std::fs::symlink_metadata(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    if meta.is_dir() {
        std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
        let mut entries: Vec<_> = std::fs::read_dir(from)
            .unwrap_or_else(|e| panic!("{}: {e}", from.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for entry in entries {
            copy_tree(&entry, &to.join(entry.file_name().expect("a name")));
        }
    } else {
        std::fs::copy(from, to)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
    }
}

/// `target/sdk-typescript/`: a fresh copy of the package's sources with its
/// locked dependencies installed (`npm ci`, again only when
/// `package-lock.json` changes).
pub fn typescript() -> (PathBuf, std::fs::File) {
    let src = agent::workspace().join("sdk/typescript");
    let dir = target_dir().join("sdk-typescript");
    std::fs::create_dir_all(&dir).expect("create target/sdk-typescript");
    // Test binaries run side by side: one at a time in the copy.
    let lock = std::fs::File::create(target_dir().join(".sdk-typescript.lock"))
        .expect("create the package's lock");
    // SAFETY: flock on a descriptor this process holds; released when
    // `lock` is dropped, after the suite ran (the caller keeps it).
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    for name in COPIED {
        let to = dir.join(name);
        if to.is_dir() {
            std::fs::remove_dir_all(&to).unwrap_or_else(|e| panic!("remove {}: {e}", to.display()));
        }
        copy_tree(&src.join(name), &to);
    }
    let stamp = dir.join("node_modules/.package-lock.stamp");
    let wanted =
        std::fs::read_to_string(src.join("package-lock.json")).expect("read package-lock.json");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(&wanted) {
        run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
                .current_dir(&dir),
            "npm ci",
        );
        std::fs::write(&stamp, &wanted).expect("write the npm stamp");
    }
    (dir, lock)
}

/// Runs `cmd`; on failure, panics with what it printed.
pub fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}
