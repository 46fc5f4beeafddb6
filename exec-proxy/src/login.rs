//! What an editor's re-run of the proxy for an agent's terminal login may
//! carry, and what this process's environment may not.
//!
//! ACP's `type: "terminal"` auth methods make the editor run the agent's
//! configured command (this proxy) again with the method's `args`
//! appended and its `env` set, on the host. The agent chose both, so the
//! proxy rewrites every such method (`acp::rewrite::initialize_result`):
//! no args, and an environment of proxy-named variables only, which this
//! module reads back into the box's command:
//!
//! - [`LOGIN_ARGS`]: a JSON array of strings, appended to the command in
//!   the box;
//! - [`BOX_ENV_PREFIX`]`NAME`: `NAME` in the box's environment (also what
//!   an `env_var` method's variable becomes).
//!
//! No loader or C library reads either name, so on the host they are inert.
//! Defense in depth, [`scrub`] drops from this process's environment
//! every variable the dynamic loader or the C library acts on (`LD_*`,
//! `GCONV_PATH`, ...) before the proxy starts anything (boxd), and says so.

use std::ffi::OsString;

/// The login's arguments, as a JSON array of strings.
pub const LOGIN_ARGS: &str = "BOXD_ACP_LOGIN_ARGS";
/// `BOXD_ACP_ENV_NAME=V` on the host is `NAME=V` in the box.
pub const BOX_ENV_PREFIX: &str = "BOXD_ACP_ENV_";
/// The most bytes [`LOGIN_ARGS`] may hold.
pub const MAX_LOGIN_ARGS: usize = 32 * 1024;

/// Variables the dynamic loader or the C library acts on: glibc's list of
/// variables it ignores in set-id programs, macOS's `DYLD_*`, and glibc's
/// tunables.
fn loader_variable(name: &str) -> bool {
    name.starts_with("LD_")
        || name.starts_with("DYLD_")
        || matches!(
            name,
            "GCONV_PATH"
                | "GETCONF_DIR"
                | "GLIBC_TUNABLES"
                | "HOSTALIASES"
                | "LOCALDOMAIN"
                | "LOCPATH"
                | "MALLOC_TRACE"
                | "NIS_PATH"
                | "NLSPATH"
                | "RESOLV_HOST_CONF"
                | "RES_OPTIONS"
        )
}

/// A name a box's environment may take: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What the editor's re-run carried for the box, and what was dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// Appended to the command in the box.
    pub args: Vec<String>,
    /// `K=V` for the box's environment.
    pub env: Vec<String>,
    /// Loader variables removed from this process (names only).
    pub dropped: Vec<String>,
    /// Carried variables that could not be taken, and why.
    pub refused: Vec<String>,
}

/// Sorts an environment into what the box gets and what this process must
/// lose (pure; [`scrub`] applies it).
pub fn sort(vars: impl IntoIterator<Item = (OsString, OsString)>) -> (Carried, Vec<OsString>) {
    let mut carried = Carried::default();
    let mut remove = Vec::new();
    for (k, v) in vars {
        let Some(name) = k.to_str() else {
            continue;
        };
        if loader_variable(name) {
            carried.dropped.push(name.to_owned());
            remove.push(k.clone());
        } else if name == LOGIN_ARGS {
            remove.push(k.clone());
            match login_args(&v) {
                Ok(args) => carried.args = args,
                Err(why) => carried.refused.push(format!("{LOGIN_ARGS}: {why}")),
            }
        } else if let Some(inner) = name.strip_prefix(BOX_ENV_PREFIX) {
            remove.push(k.clone());
            match v.to_str() {
                Some(v) if env_name(inner) && !loader_variable(inner) => {
                    carried.env.push(format!("{inner}={v}"))
                }
                Some(_) => carried
                    .refused
                    .push(format!("{name}: {inner:?} is not a name the box takes")),
                None => carried.refused.push(format!("{name}: not UTF-8")),
            }
        }
    }
    carried.dropped.sort();
    carried.env.sort();
    (carried, remove)
}

fn login_args(v: &std::ffi::OsStr) -> Result<Vec<String>, &'static str> {
    let v = v.to_str().ok_or("not UTF-8")?;
    if v.len() > MAX_LOGIN_ARGS {
        return Err("longer than 32 KiB");
    }
    serde_json::from_str::<Vec<String>>(v).map_err(|_| "not a JSON array of strings")
}

/// Takes this process's carried variables out of its environment and drops
/// the loader's, saying so on stderr. Call it first thing in `main`, while
/// the process has one thread.
pub fn scrub() -> Carried {
    let (carried, remove) = sort(std::env::vars_os());
    for k in remove {
        // SAFETY: called at the start of `main`, before any other thread
        // exists, so nothing reads the environment meanwhile.
        unsafe { std::env::remove_var(k) };
    }
    if !carried.dropped.is_empty() {
        eprintln!(
            "harness-box-exec: ignoring {} from the environment (a loader variable is never passed on)",
            carried.dropped.join(", ")
        );
    }
    for r in &carried.refused {
        eprintln!("harness-box-exec: ignoring {r}");
    }
    carried
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        v.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn loader_variables_go_and_carried_ones_reach_the_box() {
        let (c, remove) = sort(vars(&[
            ("PATH", "/usr/bin"),
            ("LD_PRELOAD", "/proj/.x.so"),
            ("LD_LIBRARY_PATH", "/proj"),
            ("GCONV_PATH", "/proj"),
            ("DYLD_INSERT_LIBRARIES", "/x"),
            (LOGIN_ARGS, r#"["--login","two words"]"#),
            ("BOXD_ACP_ENV_TOKEN_URL", "https://x"),
            ("BOXD_ACP_ENV_LD_PRELOAD", "/x.so"),
            ("BOXD_ACP_ENV_A=B", "1"),
        ]));
        assert_eq!(c.args, ["--login", "two words"]);
        assert_eq!(c.env, ["TOKEN_URL=https://x"]);
        assert_eq!(
            c.dropped,
            [
                "DYLD_INSERT_LIBRARIES",
                "GCONV_PATH",
                "LD_LIBRARY_PATH",
                "LD_PRELOAD"
            ]
        );
        assert_eq!(c.refused.len(), 2, "{:?}", c.refused);
        assert_eq!(remove.len(), 8, "PATH stays");
        assert!(!remove.contains(&OsString::from("PATH")));
    }

    #[test]
    fn login_args_are_bounded_and_typed() {
        for bad in ["[1]", "{}", "\"x\"", "[\"a\",null]", "not json"] {
            let (c, _) = sort(vars(&[(LOGIN_ARGS, bad)]));
            assert!(c.args.is_empty() && c.refused.len() == 1, "{bad}");
        }
        let long = serde_json::to_string(&vec!["x".repeat(1000); 40]).unwrap();
        let (c, _) = sort(vars(&[(LOGIN_ARGS, &long)]));
        assert!(c.refused[0].contains("32 KiB"), "{:?}", c.refused);
    }

    #[test]
    fn names() {
        for ok in ["A", "_x", "API_KEY2"] {
            assert!(env_name(ok), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A=B", "A B", "É"] {
            assert!(!env_name(bad), "{bad}");
        }
    }
}
