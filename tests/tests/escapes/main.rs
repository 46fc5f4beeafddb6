//! The newest channels tried as an attacker in a box (or a hostile
//! client, image or remote server) would: each test is one attack from
//! docs/reliability.md, against a real boxd on a temporary socket and
//! home, and prints what it observed. `make faults` runs this suite one
//! test at a time, as root and again as an ordinary user.

mod acp_login;
mod acp_mounts;
mod front_door;
mod mcp_copies;
mod printed;
mod setid;
mod shared_ids;
