//! Bytes with descriptors over a Unix socket (`SCM_RIGHTS`): the one
//! place the namespace engine's helpers send and receive them (the
//! zygote's requests and replies, the set-id listener's handoff).
//!
//! Invariant: every descriptor received is owned at once (`O_CLOEXEC`),
//! so none leaks into a command, and none beyond `MAX` can arrive.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// The most descriptors one message carries (a spawn's stdio).
pub const MAX: usize = 3;

/// Sends `bytes` as one message, with `fds` (none: no control message).
pub fn send(sock: &impl AsFd, bytes: &[u8], fds: &[RawFd]) -> nix::Result<()> {
    let iov = [std::io::IoSlice::new(bytes)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsg: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    sendmsg::<()>(
        sock.as_fd().as_raw_fd(),
        &iov,
        cmsg,
        MsgFlags::empty(),
        None,
    )
    .map(drop)
}

/// Receives one message into `buf`: its length and the descriptors it
/// carried, owned. `flags` are added to `MSG_CMSG_CLOEXEC`.
pub fn receive(
    sock: &impl AsFd,
    buf: &mut [u8],
    flags: MsgFlags,
) -> nix::Result<(usize, Vec<OwnedFd>)> {
    let mut cmsg = nix::cmsg_space!([RawFd; MAX]);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        sock.as_fd().as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        flags | MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().into_iter().flatten() {
        if let ControlMessageOwned::ScmRights(list) = c {
            // SAFETY: descriptors just received, owned by nobody else.
            fds.extend(
                list.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    Ok((msg.bytes, fds))
}
