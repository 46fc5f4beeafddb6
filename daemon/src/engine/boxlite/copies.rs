//! Files into and out of a running VM: boxd's archive streams as BoxLite's,
//! and back. Copies are recursive and overwrite (as `docker cp`), following
//! symlinks only when asked; an error in boxd's stream ends BoxLite's as an
//! error, so BoxLite fails the copy rather than keep a truncated archive.

use bytes::Bytes;
use futures::StreamExt;

use crate::engine::ByteStream;
use crate::error::Error;

/// BoxLite's copy options for a boxd copy: recursive, overwriting
/// (as `docker cp`), following symlinks only when asked.
pub(super) fn copy_options(follow_symlinks: bool) -> ::boxlite::CopyOptions {
    ::boxlite::CopyOptions::default().follow_symlinks(follow_symlinks)
}

/// BoxLite's archive stream as boxd's.
pub(super) fn from_boxlite(stream: ::boxlite::BoxByteStream) -> ByteStream {
    stream
        .map(|chunk| {
            chunk
                .map(Bytes::from)
                .map_err(|e| Error::Engine(format!("copy out of the microVM: {e}")))
        })
        .boxed()
}

/// boxd's archive stream as BoxLite takes it, counting the bytes in
/// `taken`. An error ends it as an error (BoxLite then fails the copy
/// rather than keep a truncated archive).
pub(super) fn to_boxlite(
    archive: ByteStream,
    taken: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> impl futures::Stream<Item = std::io::Result<Vec<u8>>> + Send + 'static {
    archive.map(move |chunk| match chunk {
        Ok(b) => {
            taken.fetch_add(b.len() as u64, std::sync::atomic::Ordering::SeqCst);
            Ok(b.to_vec())
        }
        Err(e) => Err(std::io::Error::other(e.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn copies_map_to_boxlite_streams() {
        assert!(!copy_options(false).follow_symlinks);
        assert!(copy_options(true).follow_symlinks);
        assert!(copy_options(false).recursive && copy_options(false).overwrite);
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let archive: ByteStream = futures::stream::iter(vec![
            Ok(Bytes::from_static(b"abc")),
            Ok(Bytes::from_static(b"de")),
            Err(Error::InvalidArgument("client went away".into())),
        ])
        .boxed();
        let out: Vec<_> = to_boxlite(archive, taken.clone()).collect().await;
        assert_eq!(out[0].as_ref().unwrap(), b"abc");
        assert_eq!(out[1].as_ref().unwrap(), b"de");
        assert!(
            out[2]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("went away")
        );
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 5);
        let back: ::boxlite::BoxByteStream = Box::pin(futures::stream::iter(vec![
            Ok(b"xy".to_vec()),
            Err(std::io::Error::other("vm gone")),
        ]));
        let back: Vec<_> = from_boxlite(back).collect().await;
        assert_eq!(back[0].as_ref().unwrap(), &Bytes::from_static(b"xy"));
        assert!(matches!(&back[1], Err(Error::Engine(m)) if m.contains("vm gone")));
    }
}
