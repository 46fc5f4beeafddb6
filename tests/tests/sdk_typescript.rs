//! The TypeScript SDK (`sdk/typescript`, `@boxd/sdk`): its locked npm
//! dependencies installed once per target directory (a copy of the package
//! under `target/sdk-typescript/`, so no `node_modules` lands in the
//! source tree), its generated code and its committed build (`dist/`)
//! checked against a fresh `generate.sh` and `tsc`, typechecked (strict,
//! the tests and the bench too), and its `node --test` suite run
//! against a real boxd it starts itself (`BOXD_BIN`) on the busybox image
//! (`BOXD_TEST_IMAGE`).

use std::process::Command;

use boxd_tests::*;

#[test]
fn the_typescript_sdk_builds_typechecks_and_passes_its_suite() {
    let (dir, _lock) = sdk::typescript();

    // The committed generated code is what generate.sh makes now.
    let fresh = tempfile::tempdir().expect("tempdir");
    let fresh_gen = fresh.path().join("gen");
    sdk::run(
        Command::new("sh")
            .arg("generate.sh")
            .arg(&fresh_gen)
            .current_dir(&dir)
            .env("PROTO_DIR", agent::workspace().join("proto/proto")),
        "generate.sh",
    );
    sdk::run(
        Command::new("diff")
            .arg("-r")
            .arg(dir.join("src/gen"))
            .arg(&fresh_gen),
        "diff -r src/gen (run sdk/typescript/generate.sh and commit src/gen)",
    );

    // The committed build (dist/, so that `npm install ./sdk/typescript`
    // needs no compiler) is what tsc makes now.
    let fresh_dist = fresh.path().join("dist");
    sdk::run(
        Command::new("npx")
            .args(["--no-install", "tsc", "-p", "tsconfig.json", "--outDir"])
            .arg(&fresh_dist)
            .current_dir(&dir),
        "tsc (build)",
    );
    sdk::run(
        Command::new("diff")
            .arg("-r")
            .arg(dir.join("dist"))
            .arg(&fresh_dist),
        "diff -r dist (run `npm run build` in sdk/typescript and commit dist)",
    );
    sdk::run(
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
