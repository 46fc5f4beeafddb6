//! The Python SDK (`sdk/python`) against a real boxd: its pytest suite
//! (`sdk/python/tests`) runs in a venv of its own with the SDK installed
//! as a user installs it (`pip install ./sdk/python`) and the pinned test
//! tools (`sdk/python/requirements-test.txt`). The suite starts its own
//! boxd from `BOXD_BIN` on a private socket, with `BOXD_TEST_IMAGE` as
//! the image, and removes every box it made before stopping it.

use std::process::Command;

use boxd_tests::*;

#[test]
fn the_python_sdk_s_suite_passes_against_a_real_boxd() {
    let python = sdk::python();
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
