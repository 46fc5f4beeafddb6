//! `boxd-box`: the namespace engine's per-box processes (a box's
//! supervisor, its boot helper and its zygote, and the daemon's other
//! box-root helpers) in a binary of their own. boxd starts it from the
//! descriptor it opened at its start (`engine::namespace::helper`), so a
//! running box keeps a few hundred KiB of this program mapped rather
//! than the daemon's whole binary, with its relocations, per process.

fn main() {
    // Run from a descriptor, its command name would be the descriptor's
    // number; `ps` and `top` show this instead.
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"boxd-box".as_ptr()) };
    boxd::engine::namespace::helper::this_is_the_helper_binary();
    boxd::run_helper_mode();
    eprintln!("boxd-box: the namespace engine's helper; boxd starts it, not people");
    std::process::exit(2);
}
