//! The envelope's methods as one serde-tagged enum, each variant carrying
//! its typed params, and [`METHODS`], the names `host.describe` lists.
//!
//! Invariants: a name not in [`METHODS`] is `unknown_method`; a known name
//! whose params do not fit (a missing or unknown key, a wrong type) is
//! `invalid_params` with serde's words for it; [`METHODS`] names exactly
//! the enum's variants (a unit test holds them together).

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::frame::{ErrorCode, Failure};
use crate::boxes::BoxSpec;
use crate::v1;

/// The methods of the envelope, in the order `host.describe` lists them.
pub const METHODS: &[&str] = &[
    "host.describe",
    "box.create",
    "box.start",
    "box.exec",
    "box.copyIn",
    "box.copyOut",
    "exec.stdin",
    "exec.kill",
    "exec.resize",
    "box.stop",
    "box.remove",
    "box.list",
    "box.stats",
    "box.snapshot",
    "box.snapshots",
    "box.restore",
    "box.removeSnapshot",
    "box.clone",
    "box.export",
    "box.import",
    "shutdown",
];

/// A request's method with its params.
#[derive(Debug, Deserialize)]
#[serde(tag = "method", content = "params")]
pub enum Method {
    #[serde(rename = "host.describe")]
    HostDescribe(Empty),
    #[serde(rename = "box.create")]
    BoxCreate(CreateParams),
    #[serde(rename = "box.start")]
    BoxStart(NameParams),
    #[serde(rename = "box.exec")]
    BoxExec(ExecParams),
    #[serde(rename = "box.copyIn")]
    BoxCopyIn(CopyParams),
    #[serde(rename = "box.copyOut")]
    BoxCopyOut(CopyParams),
    #[serde(rename = "exec.stdin")]
    ExecStdin(StdinParams),
    #[serde(rename = "exec.kill")]
    ExecKill(KillParams),
    #[serde(rename = "exec.resize")]
    ExecResize(ResizeParams),
    #[serde(rename = "box.stop")]
    BoxStop(ForceParams),
    #[serde(rename = "box.remove")]
    BoxRemove(ForceParams),
    #[serde(rename = "box.list")]
    BoxList(Empty),
    #[serde(rename = "box.stats")]
    BoxStats(StatsParams),
    #[serde(rename = "box.snapshot")]
    BoxSnapshot(SnapshotParams),
    #[serde(rename = "box.snapshots")]
    BoxSnapshots(NameParams),
    #[serde(rename = "box.restore")]
    BoxRestore(SnapshotParams),
    #[serde(rename = "box.removeSnapshot")]
    BoxRemoveSnapshot(SnapshotParams),
    #[serde(rename = "box.clone")]
    BoxClone(CloneParams),
    #[serde(rename = "box.export")]
    BoxExport(ArchiveParams),
    #[serde(rename = "box.import")]
    BoxImport(ImportParams),
    #[serde(rename = "shutdown")]
    Shutdown(Empty),
}

impl Method {
    /// The method `name` with `params` (an object), or the envelope's error.
    pub fn parse(name: &str, params: Value) -> Result<Method, Failure> {
        if !METHODS.contains(&name) {
            return Err(Failure::new(
                ErrorCode::UnknownMethod,
                format!("unknown method {name:?}"),
            ));
        }
        // The tag first, so serde reads the params straight into the
        // variant's type (its errors are the params' own).
        let mut tagged = Map::new();
        tagged.insert("method".into(), Value::String(name.to_owned()));
        tagged.insert("params".into(), params);
        Method::deserialize(Value::Object(tagged))
            .map_err(|e| Failure::new(ErrorCode::InvalidParams, e.to_string()))
    }
}

fn invalid(message: String) -> Failure {
    Failure::new(ErrorCode::InvalidParams, message)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsParams {
    pub names: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MountParams {
    host_path: String,
    guest_path: String,
    read_only: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateParams {
    pub name: String,
    image: Option<String>,
    cpus: Option<u32>,
    memory_mib: Option<u32>,
    disk_size_gb: Option<u32>,
    mounts: Option<Vec<MountParams>>,
    allow_net: Option<Vec<String>>,
    env: Option<HashMap<String, String>>,
    working_dir: Option<String>,
    secrets: Option<Vec<SecretParams>>,
    ports: Option<Vec<PortParams>>,
    /// `{"uid": N, "gid": M}`: mounted directories' owners as that box user.
    keep_id: Option<KeepIdParams>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeepIdParams {
    uid: u32,
    gid: Option<u32>,
}

impl CreateParams {
    /// The box's name and spec; secret values given by reference are read
    /// here, on the driver's side.
    pub fn into_spec(self) -> Result<(String, BoxSpec), Failure> {
        let secrets = self
            .secrets
            .unwrap_or_default()
            .into_iter()
            .map(SecretParams::into_proto)
            .collect::<Result<Vec<_>, _>>()?;
        let spec = BoxSpec::new(self.image.unwrap_or_default())
            .cpus(self.cpus)
            .memory_mib(self.memory_mib)
            .disk_size_gb(self.disk_size_gb)
            .mounts(
                self.mounts
                    .unwrap_or_default()
                    .into_iter()
                    .map(|m| v1::Mount {
                        host_path: m.host_path,
                        guest_path: m.guest_path,
                        read_only: m.read_only.unwrap_or(false),
                    }),
            )
            .allow_net(self.allow_net.unwrap_or_default())
            .envs(self.env.unwrap_or_default())
            .working_dir(self.working_dir)
            .secrets(secrets)
            .ports(
                self.ports
                    .unwrap_or_default()
                    .into_iter()
                    .map(PortParams::into_proto),
            )
            .keep_id(self.keep_id.map(|k| v1::KeepId {
                uid: k.uid,
                gid: k.gid.unwrap_or(k.uid),
            }));
        Ok((self.name, spec))
    }
}

/// A published port: `hostIp` defaults to 127.0.0.1, `hostPort` to 0 (any
/// free port), `protocol` to `tcp` (the only one relayed).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PortParams {
    host_ip: Option<String>,
    host_port: Option<u32>,
    box_port: u32,
    protocol: Option<String>,
}

impl PortParams {
    fn into_proto(self) -> v1::PortMapping {
        v1::PortMapping {
            host_ip: self.host_ip.unwrap_or_default(),
            host_port: self.host_port.unwrap_or(0),
            box_port: self.box_port,
            protocol: self.protocol.unwrap_or_default(),
        }
    }
}

/// A secret: its value given inline, or read by the driver (the client
/// side) from its own environment or a file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretParams {
    name: String,
    hosts: Vec<String>,
    placeholder: Option<String>,
    value: Option<String>,
    value_from_env: Option<String>,
    value_from_file: Option<String>,
}

impl SecretParams {
    fn into_proto(self) -> Result<v1::Secret, Failure> {
        let value = match (self.value, self.value_from_env, self.value_from_file) {
            (Some(v), None, None) => v,
            (None, Some(var), None) => std::env::var(&var).map_err(|_| {
                invalid(format!(
                    "secret {}: ${var} is not set for the driver",
                    self.name
                ))
            })?,
            (None, None, Some(path)) => {
                let mut v = std::fs::read_to_string(&path)
                    .map_err(|e| invalid(format!("secret {}: {path}: {e}", self.name)))?;
                if v.ends_with('\n') {
                    v.pop();
                }
                v
            }
            _ => {
                return Err(invalid(format!(
                    "secret {}: give exactly one of value, valueFromEnv, valueFromFile",
                    self.name
                )));
            }
        };
        Ok(v1::Secret {
            name: self.name,
            hosts: self.hosts,
            placeholder: self.placeholder.unwrap_or_default(),
            value,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameParams {
    pub name: String,
}

/// `box.copyIn` and `box.copyOut`: a path in the box and one on the host.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CopyParams {
    pub name: String,
    pub path: String,
    host_path: String,
    pub follow_symlinks: Option<bool>,
}

impl CopyParams {
    /// The host side, which must be an absolute path.
    pub fn host_path(&self) -> Result<PathBuf, Failure> {
        let p = PathBuf::from(&self.host_path);
        if !p.is_absolute() {
            return Err(invalid(format!(
                "hostPath must be absolute: {:?}",
                self.host_path
            )));
        }
        Ok(p)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotParams {
    pub name: String,
    pub snapshot: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloneParams {
    pub source: String,
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveParams {
    pub name: String,
    pub path: String,
}

/// `box.import`: the archive's allow-list and ports are never imported;
/// these take their place.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImportParams {
    pub name: String,
    pub path: String,
    pub allow_net: Option<Vec<String>>,
    pub ports: Option<Vec<PortParams>>,
}

impl ImportParams {
    pub fn into_request(self) -> v1::ImportBoxRequest {
        v1::ImportBoxRequest {
            path: self.path,
            name: self.name,
            allow_net: self.allow_net.unwrap_or_default(),
            ports: self
                .ports
                .unwrap_or_default()
                .into_iter()
                .map(PortParams::into_proto)
                .collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForceParams {
    pub name: String,
    pub force: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecParams {
    name: String,
    command: String,
    args: Option<Vec<String>>,
    env: Option<HashMap<String, String>>,
    working_dir: Option<String>,
    timeout_ms: Option<u64>,
    interactive: Option<bool>,
    tty: Option<bool>,
    /// `USER[:GROUP]` or `UID[:GID]`, resolved in the box.
    user: Option<String>,
}

impl ExecParams {
    /// The exec's start message: resumable, never detached (the driver's
    /// execs end with it).
    pub fn into_start(self) -> v1::ExecStart {
        v1::ExecStart {
            box_name: self.name,
            command: self.command,
            args: self.args.unwrap_or_default(),
            env: self.env.unwrap_or_default(),
            working_dir: self.working_dir.unwrap_or_default(),
            timeout_ms: self.timeout_ms.unwrap_or(0),
            stdin: self.interactive.unwrap_or(false),
            tty: self.tty.unwrap_or(false),
            tty_size: None,
            detach: false,
            resumable: true,
            user: self.user.unwrap_or_default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StdinParams {
    pub exec_id: String,
    data: Option<String>,
    data_base64: Option<String>,
    pub close: Option<bool>,
}

impl StdinParams {
    /// `data`, then the bytes of `dataBase64`.
    pub fn bytes(&mut self) -> Result<Vec<u8>, Failure> {
        use base64::Engine as _;
        let mut data = self.data.take().map(String::into_bytes).unwrap_or_default();
        if let Some(b64) = self.data_base64.take() {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| invalid(format!("dataBase64: {e}")))?;
            data.extend(bytes);
        }
        Ok(data)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KillParams {
    pub exec_id: String,
    signal: Option<Value>,
}

impl KillParams {
    /// The signal as boxd takes it: a name or a number, empty for the
    /// default (SIGKILL).
    pub fn signal(&self) -> Result<String, Failure> {
        match &self.signal {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(_) => Err(Failure::new(
                ErrorCode::InvalidParams,
                "signal is a name or a number",
            )),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResizeParams {
    pub exec_id: String,
    pub rows: u32,
    pub cols: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    /// The variant names serde knows, from its own "expected one of" list.
    fn variants() -> Vec<String> {
        let e = Method::deserialize(json!({"method": "no.such", "params": {}})).unwrap_err();
        let text = e.to_string();
        let list = text.split("expected one of ").nth(1).expect("variant list");
        list.split(", ")
            .map(|v| v.trim_matches('`').to_owned())
            .collect()
    }

    #[test]
    fn the_method_list_is_the_enum() {
        assert_eq!(variants(), METHODS);
    }

    #[test]
    fn unknown_methods_and_bad_params_keep_their_codes() {
        let f = Method::parse("box.frobnicate", json!({})).unwrap_err();
        assert_eq!(f.code, ErrorCode::UnknownMethod);
        assert_eq!(f.message, "unknown method \"box.frobnicate\"");
        let f = Method::parse("box.list", json!({"x": 1})).unwrap_err();
        assert_eq!(f.code, ErrorCode::InvalidParams);
        for name in METHODS {
            // Every method refuses a key it does not define.
            let f = Method::parse(name, json!({"noSuchKey": 1})).unwrap_err();
            assert_eq!(f.code, ErrorCode::InvalidParams, "{name}");
        }
        assert!(matches!(
            Method::parse("shutdown", json!({})),
            Ok(Method::Shutdown(_))
        ));
    }

    /// The params' errors read as they would from the params type alone.
    #[test]
    fn param_errors_are_the_params_own() {
        fn alone<T: DeserializeOwned + std::fmt::Debug>(p: &Value) -> String {
            T::deserialize(p).unwrap_err().to_string()
        }
        let cases: Vec<(&str, Value, String)> = vec![
            {
                let p = json!({"name": 3});
                ("box.start", p.clone(), alone::<NameParams>(&p))
            },
            {
                let p = json!({});
                ("box.create", p.clone(), alone::<CreateParams>(&p))
            },
            {
                let p = json!({"name": "a", "cpus": "two"});
                ("box.create", p.clone(), alone::<CreateParams>(&p))
            },
            {
                let p = json!({"name": "a", "extra": true});
                ("box.stop", p.clone(), alone::<ForceParams>(&p))
            },
            {
                let p = json!({"execId": "e", "rows": -1, "cols": 2});
                ("exec.resize", p.clone(), alone::<ResizeParams>(&p))
            },
        ];
        for (name, params, want) in cases {
            let f = Method::parse(name, params).unwrap_err();
            assert_eq!(
                (f.code, f.message),
                (ErrorCode::InvalidParams, want),
                "{name}"
            );
        }
    }

    #[test]
    fn create_params_make_a_spec() {
        let p = json!({"name": "b", "image": "/img", "mounts": [{"hostPath": "/h", "guestPath": "/g"}],
                       "ports": [{"boxPort": 80}], "secrets": [{"name": "K", "hosts": ["h"], "value": "v"}]});
        let Method::BoxCreate(c) = Method::parse("box.create", p).unwrap() else {
            panic!("not a create");
        };
        let (name, spec) = c.into_spec().unwrap();
        let spec = spec.build();
        assert_eq!(name, "b");
        assert_eq!(spec.image, "/img");
        assert!(!spec.mounts[0].read_only);
        assert_eq!(spec.ports[0].host_port, 0);
        assert_eq!(spec.secrets[0].value, "v");
    }
}
