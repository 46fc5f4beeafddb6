//! Builds the busybox OCI image layout used by the tests, the benchmarks
//! and `make demo`, and prints its path.
fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| boxd_tests::target_dir().join("test-images").join("busybox"));
    let dir = std::path::absolute(dir).expect("absolute path");
    println!("{}", boxd_tests::image::busybox_layout(&dir).display());
}
