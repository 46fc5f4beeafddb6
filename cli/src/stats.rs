//! `boxctl stats`: what running boxes use, as `docker stats` shows it: a
//! live table on a terminal, one table per sample when stdout is not one,
//! and with `--json` one line per box and sample.

use std::io::{IsTerminal, Write};

use boxd_client::jsonl::driver::stat_json;
use boxd_client::v1;
use clap::Args;

use crate::output::size;
use crate::{Ctx, Failure};

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Boxes to show (default: every running box).
    pub names: Vec<String>,
    /// Print one sample and exit.
    #[arg(long)]
    pub no_stream: bool,
    /// Between samples.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub interval_ms: u32,
}

pub async fn stats(ctx: &Ctx, args: StatsArgs) -> Result<u8, Failure> {
    let mut stream = ctx
        .client()
        .await?
        .box_stats(v1::BoxStatsRequest {
            names: args.names,
            stream: !args.no_stream,
            interval_ms: args.interval_ms,
        })
        .await?
        .into_inner();
    let live = !ctx.json && std::io::stdout().is_terminal();
    while let Some(sample) = stream.message().await? {
        let mut out = std::io::stdout().lock();
        let written = if ctx.json {
            sample
                .boxes
                .iter()
                .try_for_each(|b| writeln!(out, "{}", stat_json(b)))
        } else {
            // On a terminal each sample replaces the last, as docker does.
            let clear = if live { "\x1b[H\x1b[2J" } else { "" };
            write!(out, "{clear}{}", table(&sample.boxes))
        };
        // A closed pipe (`| head`) ends the command quietly.
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(0);
        }
    }
    Ok(0)
}

fn table(boxes: &[v1::BoxStat]) -> String {
    let mut s = format!(
        "{:<24} {:>7} {:>19} {:>6} {:>17} {:>7} {:>5}\n",
        "NAME", "CPU %", "MEM USAGE / LIMIT", "MEM %", "NET I/O", "DISK", "PIDS"
    );
    for b in boxes {
        let limit = b.memory_limit_bytes.map_or("-".into(), size);
        let mem_pct = b
            .memory_limit_bytes
            .filter(|&l| l > 0)
            .map_or("-".into(), |l| {
                format!("{:.1}%", b.memory_bytes as f64 * 100.0 / l as f64)
            });
        s.push_str(&format!(
            "{:<24} {:>6.1}% {:>19} {:>6} {:>17} {:>7} {:>5}\n",
            boxd_client::untrusted::escape(&b.name),
            b.cpu_percent,
            format!("{} / {limit}", size(b.memory_bytes)),
            mem_pct,
            format!("{} / {}", size(b.net_rx_bytes), size(b.net_tx_bytes)),
            b.disk_bytes.map_or("-".into(), size),
            b.pids,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_box() {
        let b = v1::BoxStat {
            name: "web".into(),
            cpu_percent: 12.34,
            memory_bytes: 64 << 20,
            memory_limit_bytes: Some(256 << 20),
            pids: 3,
            net_rx_bytes: 2048,
            net_tx_bytes: 10,
            ..Default::default()
        };
        let t = table(&[b]);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[0].starts_with("NAME"));
        assert!(rows[1].starts_with("web"), "{t}");
        assert!(rows[1].contains("12.3%"), "{t}");
        assert!(rows[1].contains("25.0%"), "{t}");
    }
}
