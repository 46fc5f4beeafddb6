//! Shell completion of box and image names (clap's dynamic completion).
//!
//! `boxctl completions SHELL` prints a script that asks boxctl itself
//! (`COMPLETE=SHELL boxctl -- WORDS…`) what can follow; [`boxes`] and
//! [`images`] answer from the running daemon of this home (never starting
//! one), within a short time, or with nothing.

use std::ffi::OsStr;
use std::time::Duration;

use boxd_client::{Paths, v1};
use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};

/// How long a completion may wait for boxd.
const WAIT: Duration = Duration::from_millis(500);

/// Completes a box name (or id).
pub fn boxes() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| {
        names(current, |mut c| async move {
            let boxes = c
                .list_boxes(v1::ListBoxesRequest {})
                .await
                .ok()?
                .into_inner()
                .boxes;
            Some(boxes.into_iter().map(|b| (b.name, b.image)).collect())
        })
    })
}

/// Completes an image reference boxd has (a local layout path is the
/// shell's own file completion's to give).
pub fn images() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| {
        names(current, |mut c| async move {
            let images = c
                .list_images(v1::ListImagesRequest {})
                .await
                .ok()?
                .into_inner()
                .images;
            Some(
                images
                    .into_iter()
                    .flat_map(|i| i.references.into_iter().map(move |r| (r, i.digest.clone())))
                    .collect(),
            )
        })
    })
}

/// The `(value, help)` pairs `list` gets from the daemon that start with
/// `current`.
fn names<F, Fut>(current: &OsStr, list: F) -> Vec<CompletionCandidate>
where
    F: FnOnce(boxd_client::Client) -> Fut,
    Fut: std::future::Future<Output = Option<Vec<(String, String)>>>,
{
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    let Ok(paths) = Paths::resolve(None, None).map(Paths::following_lock) else {
        return Vec::new();
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let found = rt.block_on(async {
        tokio::time::timeout(WAIT, async {
            let client = boxd_client::connect(&paths.socket).await.ok()?;
            list(client).await
        })
        .await
        .ok()
        .flatten()
    });
    found
        .unwrap_or_default()
        .into_iter()
        .filter(|(value, _)| value.starts_with(current))
        .map(|(value, help)| CompletionCandidate::new(value).help(Some(help.into())))
        .collect()
}

/// The script that `shell` sources to complete boxctl's words by asking
/// boxctl (`COMPLETE=SHELL boxctl …`).
pub fn registration(shell: clap_complete::Shell, out: &mut Vec<u8>) -> Result<(), String> {
    let name = shell.to_string();
    let completer: &dyn clap_complete::env::EnvCompleter = match shell {
        clap_complete::Shell::Bash => &clap_complete::env::Bash,
        clap_complete::Shell::Zsh => &clap_complete::env::Zsh,
        clap_complete::Shell::Fish => &clap_complete::env::Fish,
        clap_complete::Shell::Elvish => &clap_complete::env::Elvish,
        clap_complete::Shell::PowerShell => &clap_complete::env::Powershell,
        _ => return Err(format!("no completions for {name}")),
    };
    completer
        .write_registration("COMPLETE", "boxctl", "boxctl", "boxctl", out)
        .map_err(|e| format!("completions for {name}: {e}"))
}
