//! `USER[:GROUP]` as docker resolves it, against a box's own `/etc/passwd`
//! and `/etc/group` (read by the zygote, inside the box: the files are the
//! box's, so whatever they say binds only the box's own ids).
//!
//! Rules (docker's): a name must be in `passwd` (`group` for a group); a
//! number needs no entry; without a group, the user's entry gives the
//! primary group (0 for a number that has none) and every group that lists
//! the user by name is a supplementary one; `HOME` is the entry's
//! directory (`/` without one).
//!
//! A name in an error is quoted with `{:?}`: it comes from the image's
//! config (`User`) or the box's files, and its control characters must
//! reach no terminal raw.

use std::io::Read;

/// The ids a command runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub home: String,
}

/// Resolves `spec` (`USER`, `UID`, `USER:GROUP`, `UID:GID`, …) with the
/// texts of `passwd` and `group`.
pub fn resolve(spec: &str, passwd: &str, group: &str) -> Result<Ids, String> {
    let (user, grp) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    if user.is_empty() || grp.is_some_and(str::is_empty) {
        return Err(format!(
            "invalid user {spec:?}: use USER[:GROUP] or UID[:GID]"
        ));
    }
    let entry = passwd
        .lines()
        .filter_map(passwd_entry)
        .find(|e| e.name == user || (user.parse::<u32>().ok() == Some(e.uid)));
    let uid = match (user.parse::<u32>(), &entry) {
        (Ok(n), _) => n,
        (Err(_), Some(e)) => e.uid,
        (Err(_), None) => {
            return Err(format!(
                "unable to find user {user:?}: no matching entries in the box's /etc/passwd"
            ));
        }
    };
    let groups: Vec<GroupEntry> = group.lines().filter_map(group_entry).collect();
    let gid = match grp {
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => groups
                .iter()
                .find(|e| e.name == g)
                .map(|e| e.gid)
                .ok_or_else(|| {
                    format!(
                        "unable to find group {g:?}: no matching entries in the box's /etc/group"
                    )
                })?,
        },
        None => entry.as_ref().map_or(0, |e| e.gid),
    };
    let mut supplementary = vec![gid];
    if grp.is_none()
        && let Some(e) = &entry
    {
        for g in &groups {
            if g.members.contains(&e.name) && !supplementary.contains(&g.gid) {
                supplementary.push(g.gid);
            }
        }
    }
    Ok(Ids {
        uid,
        gid,
        groups: supplementary,
        home: entry
            .map(|e| e.home.to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "/".into()),
    })
}

struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: &'a str,
}

struct GroupEntry<'a> {
    name: &'a str,
    gid: u32,
    members: Vec<&'a str>,
}

/// `name:password:uid:gid:gecos:home:shell`.
fn passwd_entry(line: &str) -> Option<PasswdEntry<'_>> {
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 7 || f[0].is_empty() || line.starts_with('#') {
        return None;
    }
    Some(PasswdEntry {
        name: f[0],
        uid: f[2].parse().ok()?,
        gid: f[3].parse().ok()?,
        home: f[5],
    })
}

/// `name:password:gid:member,member`.
fn group_entry(line: &str) -> Option<GroupEntry<'_>> {
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 4 || f[0].is_empty() || line.starts_with('#') {
        return None;
    }
    Some(GroupEntry {
        name: f[0],
        gid: f[2].parse().ok()?,
        members: f[3].split(',').filter(|m| !m.is_empty()).collect(),
    })
}

/// A box file's text, at most 1 MiB, and only a regular file (a FIFO or a
/// device there would hold the zygote up); missing or odd: empty.
pub fn read_box_file(path: &str) -> String {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
    else {
        return String::new();
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return String::new();
    }
    let mut text = String::new();
    let _ = file.take(1 << 20).read_to_string(&mut text);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
        # a comment\n\
        node:x:1000:1000::/home/node:/bin/bash\n\
        broken line\n\
        www:x:33:33:www:/var/www:/usr/sbin/nologin\n";
    const GROUP: &str = "root:x:0:\nnode:x:1000:\nstaff:x:50:node,www\ndocker:x:999:node\n";

    #[test]
    fn names_and_numbers_resolve_as_docker_does() {
        let node = resolve("node", PASSWD, GROUP).unwrap();
        assert_eq!(
            node,
            Ids {
                uid: 1000,
                gid: 1000,
                groups: vec![1000, 50, 999],
                home: "/home/node".into()
            }
        );
        // A number finds its entry too; one without an entry runs as group 0.
        assert_eq!(resolve("1000", PASSWD, GROUP).unwrap(), node);
        let stranger = resolve("4242", PASSWD, GROUP).unwrap();
        assert_eq!(
            (stranger.uid, stranger.gid, stranger.home.as_str()),
            (4242, 0, "/")
        );
        // A group given replaces the primary and the supplementary ones.
        let g = resolve("node:staff", PASSWD, GROUP).unwrap();
        assert_eq!((g.uid, g.gid, g.groups), (1000, 50, vec![50]));
        let g = resolve("33:7", PASSWD, GROUP).unwrap();
        assert_eq!((g.uid, g.gid, g.home.as_str()), (33, 7, "/var/www"));
    }

    #[test]
    fn unknown_names_and_bad_words_are_refused() {
        let e = resolve("nobody", PASSWD, GROUP).unwrap_err();
        assert!(e.contains(r#"unable to find user "nobody""#), "{e}");
        let e = resolve("node:wheel", PASSWD, GROUP).unwrap_err();
        assert!(e.contains(r#"unable to find group "wheel""#), "{e}");
        // A name is the image's (its config's `User`) or the box's: quoted
        // with its control characters escaped, never raw on a terminal.
        let e = resolve("\x1b]0;pwned\x07:\x1b[2J", PASSWD, GROUP).unwrap_err();
        assert!(e.contains(r#"user "\u{1b}]0;pwned\u{7}""#), "{e}");
        assert!(!e.contains(['\x1b', '\x07']), "{e:?}");
        let e = resolve("root:\x1b[2J", PASSWD, GROUP).unwrap_err();
        assert!(e.contains(r#"group "\u{1b}[2J""#), "{e}");
        for bad in ["", ":", "node:", ":0"] {
            assert!(resolve(bad, PASSWD, GROUP).is_err(), "{bad:?}");
        }
        // Empty files: only numbers work.
        assert_eq!(resolve("5:6", "", "").unwrap().groups, vec![6]);
        assert!(resolve("root", "", "").is_err());
    }
}
