//! The TypeScript SDK (`sdk/typescript`, `@boxd/sdk`): its locked npm
//! dependencies installed once per target directory (a copy of the package
//! under `target/sdk-typescript/`, so no `node_modules` lands in the
//! source tree), its generated code and its committed build (`dist/`)
//! checked against a fresh `generate.sh` and `tsc`, typechecked (strict,
//! the tests and the bench too), and its `node --test` suite run
//! against a real boxd it starts itself (`BOXD_BIN`) on the busybox image
//! (`BOXD_TEST_IMAGE`).

use std::path::{Path, PathBuf};
use std::process::Command;

use boxd_tests::*;

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
fn package_dir() -> (PathBuf, std::fs::File) {
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
fn run(cmd: &mut Command, what: &str) -> String {
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

#[test]
fn the_typescript_sdk_builds_typechecks_and_passes_its_suite() {
    let (dir, _lock) = package_dir();

    // The committed generated code is what generate.sh makes now.
    let fresh = tempfile::tempdir().expect("tempdir");
    let fresh_gen = fresh.path().join("gen");
    run(
        Command::new("sh")
            .arg("generate.sh")
            .arg(&fresh_gen)
            .current_dir(&dir)
            .env("PROTO_DIR", agent::workspace().join("proto/proto")),
        "generate.sh",
    );
    run(
        Command::new("diff")
            .arg("-r")
            .arg(dir.join("src/gen"))
            .arg(&fresh_gen),
        "diff -r src/gen (run sdk/typescript/generate.sh and commit src/gen)",
    );

    // The committed build (dist/, so that `npm install ./sdk/typescript`
    // needs no compiler) is what tsc makes now.
    let fresh_dist = fresh.path().join("dist");
    run(
        Command::new("npx")
            .args(["--no-install", "tsc", "-p", "tsconfig.json", "--outDir"])
            .arg(&fresh_dist)
            .current_dir(&dir),
        "tsc (build)",
    );
    run(
        Command::new("diff")
            .arg("-r")
            .arg(dir.join("dist"))
            .arg(&fresh_dist),
        "diff -r dist (run `npm run build` in sdk/typescript and commit dist)",
    );
    run(
        Command::new("npm")
            .args(["run", "--silent", "typecheck"])
            .current_dir(&dir),
        "tsc (typecheck, strict, with the tests)",
    );

    let out = Command::new("node")
        .args([
            "--test",
            "--test-concurrency=1",
            "--test-reporter=spec",
            "--test-timeout=300000",
        ])
        .arg("test/sdk.test.mjs")
        .current_dir(&dir)
        .env("BOXD_BIN", bin("boxd"))
        .env("BOXD_TEST_IMAGE", busybox())
        .output()
        .expect("run node --test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(
        out.status.success(),
        "node --test failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("ℹ fail 0"), "no failure line in:\n{stdout}");
}
