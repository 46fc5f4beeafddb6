//! `make bench`: what the remote BoxLite runtime adds per call on
//! loopback: `CreateBox` (then `RemoveBox`) and `ListBoxes` through boxd
//! with `--boxlite-url` against a real `boxlite serve`, beside the same
//! calls through boxd's local BoxLite engine, in one run. No VM boots
//! here, and none of these calls boots one. Not a test: it asserts
//! nothing about time. `BENCH_REMOTE_ITERS` sets the rounds (default 50).

use std::time::Instant;

use boxd_tests::bench::env_or;
use boxd_tests::serve::Serve;
use boxd_tests::*;

fn p(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// p50 of create+remove and of list, in ms, with 5 boxes listed.
fn measure(d: &Daemon, iters: usize) -> (f64, f64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = d.client().await;
        for i in 0..5 {
            create(&mut c, &format!("keep{i}"), busybox_spec()).await;
        }
        let (mut made, mut listed) = (Vec::new(), Vec::new());
        for i in 0..iters {
            let t = Instant::now();
            create(&mut c, &format!("b{i}"), busybox_spec()).await;
            c.remove_box(v1::RemoveBoxRequest {
                name: format!("b{i}"),
                force: true,
            })
            .await
            .unwrap();
            made.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            list(&mut c).await;
            listed.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        for i in 0..5 {
            c.remove_box(v1::RemoveBoxRequest {
                name: format!("keep{i}"),
                force: true,
            })
            .await
            .unwrap();
        }
        made.sort_by(f64::total_cmp);
        listed.sort_by(f64::total_cmp);
        (p(&made, 0.5), p(&listed, 0.5))
    })
}

fn main() {
    let iters: usize = env_or("BENCH_REMOTE_ITERS", 50);
    let serve = Serve::start();
    let local = Daemon::with_engine("boxlite");
    let (local_make, local_list) = measure(&local, iters);
    drop(local);
    let remote = Daemon::with_env(
        "boxlite",
        vec![
            ("BOXD_BOXLITE_URL".into(), serve.url()),
            (
                "BOXD_BOXLITE_API_KEY_FILE".into(),
                serve.key_file.to_string_lossy().into_owned(),
            ),
        ],
    );
    let (remote_make, remote_list) = measure(&remote, iters);
    println!(
        "\n## The remote BoxLite runtime on loopback against the local one ({iters} rounds, 5 boxes kept)\n"
    );
    println!("| call through boxd | local BoxLite p50 ms | remote p50 ms | added | ratio |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (what, l, r) in [
        ("CreateBox + RemoveBox", local_make, remote_make),
        ("ListBoxes (5 boxes)", local_list, remote_list),
    ] {
        println!(
            "| {what} | {l:.2} | {r:.2} | {:+.2} | {:.2}x |",
            r - l,
            r / l
        );
    }
}
