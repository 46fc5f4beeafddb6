//! The Python SDK (`sdk/python`) against a real boxd: its pytest suite
//! (`sdk/python/tests`) runs in a venv of its own with the SDK installed
//! as a user installs it (`pip install ./sdk/python`) and the pinned test
//! tools (`sdk/python/requirements-test.txt`). The suite starts its own
//! boxd from `BOXD_BIN` on a private socket, with `BOXD_TEST_IMAGE` as
//! the image, and removes every box it made before stopping it.

use std::path::{Path, PathBuf};
use std::process::Command;

use boxd_tests::*;
use sha2::{Digest, Sha256};

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
fn sdk_venv() -> PathBuf {
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

#[test]
fn the_python_sdk_s_suite_passes_against_a_real_boxd() {
    let python = sdk_venv();
    let sdk = agent::workspace().join("sdk/python");
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .arg(sdk.join("tests"))
        .current_dir(&sdk)
        .env("BOXD_BIN", bin("boxd"))
        .env("BOXD_TEST_IMAGE", busybox())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("BOXD_SOCKET")
        .env_remove("BOXD_HOME")
        .output()
        .expect("run pytest");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{report}");
    assert!(
        out.status.success(),
        "the Python SDK's tests failed:\n{report}"
    );
    assert!(report.contains(" passed"), "pytest ran no test:\n{report}");
}
