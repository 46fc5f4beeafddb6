//! JSON-RPC 2.0 messages as ACP frames them: one object per line, told
//! apart by which of `method` and `id` they carry.

use serde_json::{Value, json};

/// Error codes the proxy answers with (JSON-RPC 2.0's own).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
}

/// What a message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `method` and `id`: an answer is owed.
    Request { id: Value, method: String },
    /// `method` and no `id`.
    Notification { method: String },
    /// `id` and `result` or `error`, no `method`.
    Response { id: Value },
}

/// Classifies a parsed line; `None` for anything that is not a JSON-RPC
/// message (an array, a scalar, a `method` that is not a string, an object
/// that is neither a call nor an answer).
pub fn classify(v: &Value) -> Option<Kind> {
    let obj = v.as_object()?;
    let id = obj.get("id").filter(|id| valid_id(id)).cloned();
    match obj.get("method") {
        Some(Value::String(m)) => Some(match id {
            Some(id) => Kind::Request {
                id,
                method: m.clone(),
            },
            None if obj.contains_key("id") => return None,
            None => Kind::Notification { method: m.clone() },
        }),
        Some(_) => None,
        None => {
            let answered = obj.contains_key("result") || obj.contains_key("error");
            match id {
                Some(id) if answered => Some(Kind::Response { id }),
                _ => None,
            }
        }
    }
}

/// Ids are strings, numbers or (for answers to unreadable requests) null.
fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_) | Value::Null)
}

/// A map key for an id (`1` and `"1"` stay distinct).
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

/// An error answer.
pub fn error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// A result answer.
pub fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart() {
        let k = |s: &str| classify(&serde_json::from_str(s).unwrap());
        assert_eq!(
            k(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#),
            Some(Kind::Request {
                id: json!(1),
                method: "initialize".into()
            })
        );
        assert_eq!(
            k(r#"{"jsonrpc":"2.0","method":"session/cancel"}"#),
            Some(Kind::Notification {
                method: "session/cancel".into()
            })
        );
        assert_eq!(
            k(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Some(Kind::Response { id: json!("a") })
        );
        assert_eq!(
            k(r#"{"id":null,"error":{}}"#),
            Some(Kind::Response { id: Value::Null })
        );
        for bad in [
            "[1,2]",
            "3",
            r#"{"method":5}"#,
            r#"{"id":{},"method":"x"}"#,
            r#"{"id":1}"#,
            r#"{}"#,
        ] {
            assert_eq!(k(bad), None, "{bad}");
        }
        assert_ne!(id_key(&json!(1)), id_key(&json!("1")));
    }
}
