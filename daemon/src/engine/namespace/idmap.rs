//! Which host uids and gids the ids inside a namespace box stand for.
//!
//! Every box gets a user namespace whose ids 0..65535 map to host ids that
//! are never the host's root:
//!
//! - **boxd run by root**: a pool of unprivileged host ids, the `root`
//!   entry of `/etc/subuid` and `/etc/subgid` when there is one, otherwise
//!   [`ROOT_RANGE_START`] onwards ([`ROOT_POOL`] ids). The pool's first
//!   65,536 ids own the image store's files; every box gets a range of
//!   65,536 of its own after them ([`IdMap::for_slot`], allocated by
//!   `slots.rs`), so no id of one box owns anything of another's and a
//!   set-id file one box leaves behind makes no one a member of another
//!   box. Box root is an ordinary host uid with no rights on the host's
//!   files; boxd writes the maps itself.
//! - **boxd run by a user with a subordinate range** (`/etc/subuid`,
//!   `/etc/subgid`, and `newuidmap`/`newgidmap` from Debian's `uidmap`):
//!   box root is the user, box ids 1..65535 are the user's subordinate ids,
//!   as rootless Podman maps them. The maps are written by
//!   `newuidmap`/`newgidmap`.
//! - **otherwise** (a user with no range): a single id, box root is the
//!   user and nothing else is mapped; `setgroups` is denied, so tools that
//!   switch users (`apt-get`, `su`) fail. `boxd doctor` says how to add a
//!   range.
//!
//! Invariant: no map this module writes sends any box id to host uid or
//! gid 0.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Where a root-run boxd puts its boxes' ids when `/etc/subuid` names no
/// range for root: 0x70000000, just above systemd's range for containers
/// (0x80000–0x6FFFFFFF) and below the ids signed 32-bit code mishandles.
pub const ROOT_RANGE_START: u32 = 0x7000_0000;
/// How many ids a box has (0..65535), as a user namespace of a container.
pub const RANGE: u32 = 65_536;
/// How many ids the built-in pool of a root-run boxd holds: up to
/// 0x7FFFFFFF, 4,096 ranges (the image store's and 4,095 boxes').
pub const ROOT_POOL: u32 = 0x1000_0000;

/// One line of a `uid_map`/`gid_map`: `count` ids from `inside` (in the
/// box) stand for host ids from `outside`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Extent {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

impl Extent {
    /// The lines of a `uid_map`/`gid_map` as a process reads them
    /// (`inside outside count`); a line that is not three ids is skipped.
    pub fn parse_map(text: &str) -> Vec<Extent> {
        text.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace().map(|w| w.parse::<u32>().ok());
                let e = Extent {
                    inside: w.next()??,
                    outside: w.next()??,
                    count: w.next()??,
                };
                w.next().is_none().then_some(e)
            })
            .collect()
    }
}

/// How the maps of a new user namespace get written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Writer {
    /// boxd writes them (it holds `CAP_SETUID`/`CAP_SETGID`: it is root).
    Direct,
    /// The setuid helpers `newuidmap`/`newgidmap`, which check the ranges
    /// against `/etc/subuid` and `/etc/subgid`.
    NewIdMap {
        newuidmap: std::path::PathBuf,
        newgidmap: std::path::PathBuf,
    },
    /// boxd writes a single-id map of its own ids, after denying
    /// `setgroups` (the kernel's rule for unprivileged maps).
    Own,
}

/// The ids of every box of this daemon.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdMap {
    pub uid: Vec<Extent>,
    pub gid: Vec<Extent>,
    pub writer: Writer,
    /// Where the range came from, for `doctor` and `Describe`.
    pub source: String,
    /// How many ranges of [`RANGE`] ids follow each other from this map's
    /// outside ids (boxd as root): range 0 owns the image store's files,
    /// each box takes one of the others ([`IdMap::for_slot`]). 1 where
    /// boxes share the map's ids (a user's subordinate range, a single id).
    #[serde(default = "one_slot")]
    pub slots: u32,
}

fn one_slot() -> u32 {
    1
}

impl IdMap {
    /// The map for a daemon running as `uid`/`gid` (named `user`), from the
    /// subordinate-id files and the map of boxd's own user namespace.
    pub fn detect() -> IdMap {
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        let user = nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_default();
        let subuid = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
        let subgid = std::fs::read_to_string("/etc/subgid").unwrap_or_default();
        let own_uids = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        let own_gids = std::fs::read_to_string("/proc/self/gid_map").unwrap_or_default();
        let tools = (
            crate::host_programs::find_on_path("newuidmap")
                .or_else(|| existing("/usr/bin/newuidmap")),
            crate::host_programs::find_on_path("newgidmap")
                .or_else(|| existing("/usr/bin/newgidmap")),
        );
        IdMap::choose(&Host {
            uid,
            gid,
            user: &user,
            subuid: &subuid,
            subgid: &subgid,
            own_uids: &own_uids,
            own_gids: &own_gids,
            newidmap: match tools {
                (Some(u), Some(g)) => Some((u, g)),
                _ => None,
            },
        })
    }

    /// The decision, from what [`IdMap::detect`] read (pure, tested).
    fn choose(host: &Host) -> IdMap {
        if host.uid == 0 {
            let from_file = (
                sub_range(host.subuid, "root", 0),
                sub_range(host.subgid, "root", 0),
            );
            let (uids, gids, mut source) = match from_file {
                (Some(u), Some(g)) => (
                    u,
                    g,
                    format!(
                        "the root entries of /etc/subuid and /etc/subgid (uids {}-{}, gids {}-{})",
                        u.0,
                        u.0 + u.1 - 1,
                        g.0,
                        g.0 + g.1 - 1
                    ),
                ),
                _ => (
                    (ROOT_RANGE_START, ROOT_POOL),
                    (ROOT_RANGE_START, ROOT_POOL),
                    format!(
                        "boxd's built-in pool for root (host ids {ROOT_RANGE_START}-{}; add a root entry to /etc/subuid and /etc/subgid to choose another)",
                        ROOT_RANGE_START + ROOT_POOL - 1
                    ),
                ),
            };
            let fits = |own: &str, (start, count): (u32, u32)| {
                mapped(own, start, count.min(RANGE)) && start != 0
            };
            if fits(host.own_uids, uids) && fits(host.own_gids, gids) {
                // Whole ranges of the pool that this process's user
                // namespace maps (all of them, outside a container).
                let whole = |own: &str, (start, count): (u32, u32)| {
                    let mut n = (count / RANGE).max(1);
                    while n > 1 && !mapped(own, start, n * RANGE) {
                        n /= 2;
                    }
                    n
                };
                let slots = whole(host.own_uids, uids).min(whole(host.own_gids, gids));
                if slots < 2 {
                    source.push_str(
                        "; it holds one range of 65536 ids, so every box shares it (give root at least 131072 ids in /etc/subuid and /etc/subgid for a range per box)",
                    );
                }
                return IdMap {
                    slots,
                    uid: vec![Extent {
                        inside: 0,
                        outside: uids.0,
                        count: uids.1.min(RANGE),
                    }],
                    gid: vec![Extent {
                        inside: 0,
                        outside: gids.0,
                        count: gids.1.min(RANGE),
                    }],
                    writer: Writer::Direct,
                    source,
                };
            }
            // Root of a user namespace that lacks those ids (a container
            // with a narrow map): box root becomes `nobody`, still never
            // root.
            return IdMap {
                uid: vec![Extent {
                    inside: 0,
                    outside: NOBODY,
                    count: 1,
                }],
                gid: vec![Extent {
                    inside: 0,
                    outside: NOBODY,
                    count: 1,
                }],
                writer: Writer::Direct,
                slots: 1,
                source: format!(
                    "a single id (host uid {NOBODY}): this boxd runs in a user namespace that does not map {source}"
                ),
            };
        }
        let ranges = (
            sub_range(host.subuid, host.user, host.uid),
            sub_range(host.subgid, host.user, host.uid),
        );
        match (ranges, &host.newidmap) {
            ((Some(u), Some(g)), Some((newuidmap, newgidmap))) => {
                let (uc, gc) = (u.1.min(RANGE - 1), g.1.min(RANGE - 1));
                IdMap {
                    uid: vec![
                        Extent {
                            inside: 0,
                            outside: host.uid,
                            count: 1,
                        },
                        Extent {
                            inside: 1,
                            outside: u.0,
                            count: uc,
                        },
                    ],
                    gid: vec![
                        Extent {
                            inside: 0,
                            outside: host.gid,
                            count: 1,
                        },
                        Extent {
                            inside: 1,
                            outside: g.0,
                            count: gc,
                        },
                    ],
                    writer: Writer::NewIdMap {
                        newuidmap: newuidmap.clone(),
                        newgidmap: newgidmap.clone(),
                    },
                    slots: 1,
                    source: format!(
                        "your subordinate ids in /etc/subuid and /etc/subgid (uids {}-{}, gids {}-{}), mapped by newuidmap/newgidmap",
                        u.0,
                        u.0 + uc - 1,
                        g.0,
                        g.0 + gc - 1
                    ),
                }
            }
            (ranges, tools) => {
                let why = match (ranges, tools) {
                    ((Some(_), Some(_)), None) => {
                        "newuidmap/newgidmap are not installed".to_owned()
                    }
                    _ => format!(
                        "/etc/subuid and /etc/subgid give {} no range",
                        if host.user.is_empty() {
                            format!("uid {}", host.uid)
                        } else {
                            host.user.to_owned()
                        }
                    ),
                };
                IdMap {
                    uid: vec![Extent {
                        inside: 0,
                        outside: host.uid,
                        count: 1,
                    }],
                    gid: vec![Extent {
                        inside: 0,
                        outside: host.gid,
                        count: 1,
                    }],
                    writer: Writer::Own,
                    slots: 1,
                    source: format!("a single id (yours): {why}"),
                }
            }
        }
    }

    /// The map used when the full range did not work here (newuidmap
    /// refused, for instance): a single id, `why` saying what failed.
    pub fn single(&self, why: &str) -> IdMap {
        let me = |v: &[Extent]| v.first().map(|e| e.outside).unwrap_or(NOBODY);
        let (uid, gid) = match self.writer {
            Writer::Direct => (NOBODY, NOBODY),
            _ => (me(&self.uid), me(&self.gid)),
        };
        IdMap {
            uid: vec![Extent {
                inside: 0,
                outside: uid,
                count: 1,
            }],
            gid: vec![Extent {
                inside: 0,
                outside: gid,
                count: 1,
            }],
            writer: match self.writer {
                Writer::Direct => Writer::Direct,
                _ => Writer::Own,
            },
            source: format!("a single id: {why}"),
            slots: 1,
        }
    }

    /// Whether boxes get 65,536 ids (so `setgroups`, `chown`, `su` work),
    /// rather than one.
    pub fn is_range(&self) -> bool {
        self.uid.iter().map(|e| e.count).sum::<u32>() > 1
    }

    /// This map with box ids 0 and `uid` (as uids) and 0 and `gid` (as
    /// gids) exchanged: keep-id on a user-run boxd, where the user (box
    /// root in this map) becomes box user `uid`, and box root takes the
    /// host id that `uid` had. The same host ids, so `newuidmap` allows it.
    pub fn swapped(&self, uid: u32, gid: u32) -> IdMap {
        IdMap {
            uid: swap_extents(&self.uid, uid),
            gid: swap_extents(&self.gid, gid),
            writer: self.writer.clone(),
            source: format!(
                "{} (keep-id: box ids 0 and {uid}:{gid} exchanged)",
                self.source
            ),
            slots: self.slots,
        }
    }

    /// The ids of the box in range `slot` of the pool (1 and up; 0 is the
    /// image store's, and the ids of boxes made before boxes had ranges of
    /// their own): this map moved `slot` ranges up. This map itself where
    /// the pool has one range, or `slot` is past its end.
    pub fn for_slot(&self, slot: u32) -> IdMap {
        if slot == 0 || slot >= self.slots || self.writer != Writer::Direct {
            return self.clone();
        }
        let moved = |v: &[Extent]| {
            v.iter()
                .map(|e| Extent {
                    outside: e.outside + slot * RANGE,
                    ..*e
                })
                .collect()
        };
        let (uid, gid) = (moved(&self.uid), moved(&self.gid));
        IdMap {
            source: format!("range {slot} of {}", self.source),
            uid,
            gid,
            writer: Writer::Direct,
            slots: 1,
        }
    }

    /// The range of the pool that host uid `uid` is in, if any.
    pub fn slot_of_uid(&self, uid: u32) -> Option<u32> {
        let start = self.uid.first()?.outside;
        (uid >= start && uid - start < self.slots.saturating_mul(RANGE))
            .then(|| (uid - start) / RANGE)
    }

    /// The host uid and gid of box root.
    pub fn root(&self) -> (u32, u32) {
        (
            host_id(&self.uid, 0).unwrap_or(NOBODY),
            host_id(&self.gid, 0).unwrap_or(NOBODY),
        )
    }

    /// The host uid of box uid `id`; `None` when it is not mapped.
    pub fn host_uid(&self, id: u32) -> Option<u32> {
        host_id(&self.uid, id)
    }

    /// A short text that changes whenever the map does: files unpacked
    /// under one map are wrong under another.
    pub fn tag(&self) -> String {
        let text = |v: &[Extent]| {
            v.iter()
                .map(|e| format!("{}:{}:{}", e.inside, e.outside, e.count))
                .collect::<Vec<_>>()
                .join(",")
        };
        format!("uid={} gid={}", text(&self.uid), text(&self.gid))
    }

    /// Writes the maps of the user namespace of `pid` (a helper that has
    /// just unshared it and waits).
    pub fn apply(&self, pid: i32) -> Result<()> {
        let lines = |v: &[Extent]| {
            v.iter()
                .map(|e| format!("{} {} {}\n", e.inside, e.outside, e.count))
                .collect::<String>()
        };
        let write = |file: &str, text: &str| -> Result<()> {
            let path = format!("/proc/{pid}/{file}");
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|mut f| f.write_all(text.as_bytes()))
                .map_err(|e| Error::Engine(format!("writing {path} ({}): {e}", text.trim())))
        };
        match &self.writer {
            Writer::Direct => {
                write("uid_map", &lines(&self.uid))?;
                write("gid_map", &lines(&self.gid))
            }
            Writer::Own => {
                write("setgroups", "deny")?;
                write("uid_map", &lines(&self.uid))?;
                write("gid_map", &lines(&self.gid))
            }
            Writer::NewIdMap {
                newuidmap,
                newgidmap,
            } => {
                for (tool, extents) in [(newuidmap, &self.uid), (newgidmap, &self.gid)] {
                    let mut cmd = std::process::Command::new(tool);
                    cmd.arg(pid.to_string());
                    for e in extents {
                        cmd.args([
                            e.inside.to_string(),
                            e.outside.to_string(),
                            e.count.to_string(),
                        ]);
                    }
                    let out = cmd
                        .env_clear()
                        .stdin(std::process::Stdio::null())
                        .output()
                        .map_err(|e| Error::Engine(format!("run {}: {e}", tool.display())))?;
                    if !out.status.success() {
                        return Err(Error::Engine(format!(
                            "{} refused the box's map: {}",
                            tool.display(),
                            String::from_utf8_lossy(&out.stderr).trim()
                        )));
                    }
                }
                Ok(())
            }
        }
    }
}

/// The host's `nobody`.
const NOBODY: u32 = 65_534;

/// Whether box root's host ids `from` and `to` (uid, gid) are box root of
/// two different ranges of one pool: whole ranges apart, so a tree made
/// for one can move to the other ([`super::treecopy::shift_owners`]).
pub fn ranges_apart(from: (u32, u32), to: (u32, u32)) -> bool {
    let whole = |old: u32, new: u32| old.abs_diff(new).is_multiple_of(RANGE);
    from != to && from.0 != 0 && whole(from.0, to.0) && whole(from.1, to.1)
}

/// `extents` with box ids 0 and `n` exchanged ([`IdMap::swapped`]).
fn swap_extents(extents: &[Extent], n: u32) -> Vec<Extent> {
    let total = extents
        .iter()
        .map(|e| e.inside + e.count)
        .max()
        .unwrap_or(0);
    if n == 0 || n >= total {
        return extents.to_vec();
    }
    // (new inside, old inside, count)
    let segments = [
        (0, n, 1),
        (1, 1, n - 1),
        (n, 0, 1),
        (n + 1, n + 1, total - n - 1),
    ];
    let mut out = Vec::new();
    for (to, from, count) in segments {
        for e in extents {
            let lo = e.inside.max(from);
            let hi = (e.inside + e.count).min(from + count);
            if lo < hi {
                out.push(Extent {
                    inside: to + (lo - from),
                    outside: e.outside + (lo - e.inside),
                    count: hi - lo,
                });
            }
        }
    }
    out
}

/// What [`IdMap::choose`] decides from.
struct Host<'a> {
    uid: u32,
    gid: u32,
    user: &'a str,
    subuid: &'a str,
    subgid: &'a str,
    /// boxd's own `/proc/self/uid_map` and `gid_map`.
    own_uids: &'a str,
    own_gids: &'a str,
    newidmap: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

fn existing(path: &str) -> Option<std::path::PathBuf> {
    Path::new(path).is_file().then(|| path.into())
}

fn host_id(extents: &[Extent], id: u32) -> Option<u32> {
    extents
        .iter()
        .find(|e| id >= e.inside && id - e.inside < e.count)
        .map(|e| e.outside + (id - e.inside))
}

/// The first range of `file` (`/etc/subuid` syntax: `NAME:START:COUNT`,
/// NAME a user name or uid) for `user`/`uid`, as (start, count). Ranges
/// that include id 0 are ignored.
fn sub_range(file: &str, user: &str, uid: u32) -> Option<(u32, u32)> {
    file.lines().find_map(|line| {
        let mut parts = line.trim().split(':');
        let (name, start, count) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !(name == user && !user.is_empty() || name == uid.to_string())
        {
            return None;
        }
        let (start, count): (u32, u32) = (start.parse().ok()?, count.parse().ok()?);
        (start > 0 && count > 0 && start.checked_add(count).is_some()).then_some((start, count))
    })
}

/// Whether host ids `start..start+count` all exist in this process's user
/// namespace (its `uid_map`/`gid_map` text).
fn mapped(own: &str, start: u32, count: u32) -> bool {
    // Ids as this process sees them are the "inside" column.
    Extent::parse_map(own).iter().any(|e| {
        u64::from(start) >= u64::from(e.inside)
            && u64::from(start) + u64::from(count) <= u64::from(e.inside) + u64::from(e.count)
    })
}

/// Whether `extents` send some id of their namespace to host id `id`.
pub fn maps_host_id(extents: &[Extent], id: u32) -> bool {
    extents
        .iter()
        .any(|e| id >= e.outside && id - e.outside < e.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swapped_map_exchanges_two_box_ids_and_keeps_the_host_ids() {
        let user = |inside, outside, count| Extent {
            inside,
            outside,
            count,
        };
        let map = [user(0, 1000, 1), user(1, 100_000, 65_535)];
        let swapped = swap_extents(&map, 1000);
        let host = |v: &[Extent], id| host_id(v, id);
        assert_eq!(host(&swapped, 1000), Some(1000), "box 1000 is the user");
        assert_eq!(
            host(&swapped, 0),
            host(&map, 1000),
            "box root takes 1000's id"
        );
        for id in [1, 999, 1001, 65_535] {
            assert_eq!(host(&swapped, id), host(&map, id), "{id}");
        }
        let mut outside: Vec<u32> = (0..65_536).map(|i| host(&swapped, i).unwrap()).collect();
        outside.sort_unstable();
        outside.dedup();
        assert_eq!(outside.len(), 65_536, "still one host id each");
        assert_eq!(swap_extents(&map, 0), map.to_vec());
    }

    const INIT_MAP: &str = "         0          0 4294967295\n";

    fn host<'a>(uid: u32, user: &'a str, sub: &'a str, tools: bool) -> Host<'a> {
        Host {
            uid,
            gid: uid,
            user,
            subuid: sub,
            subgid: sub,
            own_uids: INIT_MAP,
            own_gids: INIT_MAP,
            newidmap: tools.then(|| ("/usr/bin/newuidmap".into(), "/usr/bin/newgidmap".into())),
        }
    }

    #[test]
    fn root_gets_an_unprivileged_range_never_uid_0() {
        let m = IdMap::choose(&host(0, "root", "", false));
        assert_eq!(m.writer, Writer::Direct);
        assert_eq!(m.root(), (ROOT_RANGE_START, ROOT_RANGE_START));
        assert_eq!(m.host_uid(65_535), Some(ROOT_RANGE_START + 65_535));
        assert_eq!(m.host_uid(65_536), None);
        assert!(m.is_range());
        // A root entry in /etc/subuid wins.
        let m = IdMap::choose(&host(0, "root", "root:200000:65536\n", false));
        assert_eq!(m.root(), (200_000, 200_000));
        // A range that would include host root is ignored.
        let m = IdMap::choose(&host(0, "root", "root:0:65536\n", false));
        assert_eq!(m.root().0, ROOT_RANGE_START);
    }

    #[test]
    fn root_gives_each_box_a_range_of_its_own_after_the_images() {
        let m = IdMap::choose(&host(0, "root", "", false));
        assert_eq!(m.slots, ROOT_POOL / RANGE);
        let (one, two) = (m.for_slot(1), m.for_slot(2));
        assert_eq!(one.root().0, ROOT_RANGE_START + RANGE);
        assert_eq!(two.root().0, ROOT_RANGE_START + 2 * RANGE);
        assert_eq!(one.host_uid(65_535), Some(ROOT_RANGE_START + 2 * RANGE - 1));
        // The store's own ids (slot 0) and a slot past the pool: the map.
        assert_eq!(m.for_slot(0), m);
        assert_eq!(m.for_slot(m.slots), m);
        assert_eq!(m.slot_of_uid(one.root().0 + 7), Some(1));
        assert_eq!(m.slot_of_uid(ROOT_RANGE_START - 1), None);
        // The last id of the pool stays below what signed code mishandles.
        let last = m.for_slot(m.slots - 1);
        assert!(u64::from(last.host_uid(65_535).unwrap()) <= 0x7FFF_FFFF);
        // A root entry of 4 ranges: 4 slots; of one range: shared, said so.
        let m = IdMap::choose(&host(0, "root", "root:200000:262144\n", false));
        assert_eq!(m.slots, 4);
        let m = IdMap::choose(&host(0, "root", "root:200000:65536\n", false));
        assert_eq!(m.slots, 1);
        assert!(m.source.contains("every box shares it"), "{}", m.source);
        // A user's map is never split.
        let m = IdMap::choose(&host(1000, "u", "u:100000:65536\n", true));
        assert_eq!(m.slots, 1);
        assert_eq!(m.for_slot(3), m);
    }

    #[test]
    fn root_in_a_narrow_namespace_is_nobody_not_root() {
        let mut h = host(0, "root", "", false);
        h.own_uids = "0 1000 1\n1 100000 65536\n";
        let m = IdMap::choose(&h);
        assert_eq!(m.root().0, NOBODY);
        assert!(!m.is_range());
        for map in [&m.uid, &m.gid] {
            assert!(map.iter().all(|e| e.outside != 0));
        }
    }

    #[test]
    fn users_map_themselves_to_root_and_their_range_above() {
        let sub = "other:300000:65536\nalice:100000:65536\n";
        let m = IdMap::choose(&host(1000, "alice", sub, true));
        assert_eq!(m.root(), (1000, 1000));
        assert_eq!(m.host_uid(1), Some(100_000));
        assert_eq!(m.host_uid(65_535), Some(165_534));
        assert!(m.is_range());
        assert!(matches!(m.writer, Writer::NewIdMap { .. }));
        // By uid, too.
        let m = IdMap::choose(&host(1000, "alice", "1000:100000:65536\n", true));
        assert!(m.is_range());
        // No range, or no tools: one id.
        let m = IdMap::choose(&host(1000, "alice", "bob:100000:65536\n", true));
        assert_eq!((m.is_range(), &m.writer), (false, &Writer::Own));
        assert!(m.source.contains("alice"), "{}", m.source);
        let m = IdMap::choose(&host(1000, "alice", sub, false));
        assert!(!m.is_range());
        assert!(m.source.contains("newuidmap"), "{}", m.source);
    }

    #[test]
    fn subordinate_files_parse_strictly() {
        assert_eq!(sub_range("a:1:2\n", "a", 5), Some((1, 2)));
        assert_eq!(sub_range("a:x:2\nb:1:2:3\n", "a", 5), None);
        assert_eq!(sub_range("b:1:2:3\n", "b", 5), None);
        assert_eq!(sub_range("a:4294967295:2\n", "a", 5), None);
        assert_eq!(sub_range("5:10:20\n", "", 5), Some((10, 20)));
        assert_eq!(sub_range(":10:20\n", "", 5), None);
    }

    #[test]
    fn tags_differ_by_map() {
        let a = IdMap::choose(&host(0, "root", "", false));
        let b = IdMap::choose(&host(0, "root", "root:200000:65536\n", false));
        assert_ne!(a.tag(), b.tag());
        assert_eq!(a.tag(), a.clone().tag());
    }
}
