//! boxd's egress, as a crate of its own (as `fs/` is): so far the per-box
//! certificate authority ([`ca`]) that HTTPS interception for a box's
//! secrets' hosts stands on, and the trust bundle a box gets ([`trust`]).
//! The proxy itself still lives in the daemon (`daemon/src/egress/`).

pub mod ca;
pub mod trust;
