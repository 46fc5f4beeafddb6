//! Envelope frames: parsing a request line, and the error codes.

use serde_json::{Map, Value};

use crate::tonic::Code;

/// The envelope's error codes (snake_case on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    ParseError,
    InvalidRequest,
    UnknownMethod,
    InvalidParams,
    TooLarge,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    Unavailable,
    Timeout,
    Internal,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::ParseError,
        ErrorCode::InvalidRequest,
        ErrorCode::UnknownMethod,
        ErrorCode::InvalidParams,
        ErrorCode::TooLarge,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::FailedPrecondition,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "parse_error",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::UnknownMethod => "unknown_method",
            ErrorCode::InvalidParams => "invalid_params",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::FailedPrecondition => "failed_precondition",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Internal => "internal",
        }
    }

    /// The gRPC status code each envelope code stands for, one to one.
    /// `parse_error` and `invalid_request` are the driver's own (boxd never
    /// sends them), so they take gRPC codes boxd never uses.
    pub fn grpc(self) -> Code {
        match self {
            ErrorCode::ParseError => Code::DataLoss,
            ErrorCode::InvalidRequest => Code::OutOfRange,
            ErrorCode::UnknownMethod => Code::Unimplemented,
            ErrorCode::InvalidParams => Code::InvalidArgument,
            ErrorCode::TooLarge => Code::ResourceExhausted,
            ErrorCode::NotFound => Code::NotFound,
            ErrorCode::AlreadyExists => Code::AlreadyExists,
            ErrorCode::FailedPrecondition => Code::FailedPrecondition,
            ErrorCode::Unavailable => Code::Unavailable,
            ErrorCode::Timeout => Code::DeadlineExceeded,
            ErrorCode::Internal => Code::Internal,
        }
    }

    /// The envelope code for a status from boxd. The inverse of [`grpc`]
    /// on its image, plus: `PERMISSION_DENIED` and `CANCELLED` mean boxd
    /// cannot be used (`unavailable`), `ABORTED` is a state conflict, and
    /// anything else is `internal`. `UNIMPLEMENTED` from boxd means a
    /// feature the engine lacks, not an unknown envelope method, and
    /// `RESOURCE_EXHAUSTED` a full disk or a limit such as `max-boxes`
    /// (a state the user must change: `failed_precondition`), not an
    /// overlong request line.
    ///
    /// [`grpc`]: ErrorCode::grpc
    pub fn from_grpc(code: Code) -> ErrorCode {
        match code {
            Code::InvalidArgument | Code::OutOfRange => ErrorCode::InvalidParams,
            Code::NotFound => ErrorCode::NotFound,
            Code::AlreadyExists => ErrorCode::AlreadyExists,
            Code::FailedPrecondition
            | Code::Aborted
            | Code::Unimplemented
            | Code::ResourceExhausted => ErrorCode::FailedPrecondition,
            Code::Unavailable | Code::PermissionDenied | Code::Cancelled => ErrorCode::Unavailable,
            Code::DeadlineExceeded => ErrorCode::Timeout,
            Code::DataLoss => ErrorCode::ParseError,
            _ => ErrorCode::Internal,
        }
    }
}

/// An error reply, before it is given an id.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
}

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<crate::tonic::Status> for Failure {
    fn from(s: crate::tonic::Status) -> Failure {
        Failure::new(ErrorCode::from_grpc(s.code()), crate::status_message(&s))
    }
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// A string or a non-negative integer, echoed verbatim.
    pub id: Value,
    pub method: String,
    /// An object (empty when omitted).
    pub params: Value,
}

/// Parses one request line. An error comes with the id to answer with
/// (`null` when the line has no usable id).
pub fn parse_request(line: &[u8]) -> Result<Request, (Value, Failure)> {
    let fail = |id: Value, code, msg: String| Err((id, Failure::new(code, msg)));
    let text = match std::str::from_utf8(line) {
        Ok(t) => t,
        Err(e) => {
            return fail(
                Value::Null,
                ErrorCode::ParseError,
                format!("the line is not UTF-8: {e}"),
            );
        }
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return fail(
                Value::Null,
                ErrorCode::ParseError,
                format!("the line is not JSON: {e}"),
            );
        }
    };
    let Value::Object(mut obj) = value else {
        return fail(
            Value::Null,
            ErrorCode::InvalidRequest,
            "a request is a JSON object".into(),
        );
    };
    let id = match obj.remove("id") {
        Some(id @ Value::String(_)) => id,
        Some(Value::Number(n)) if n.is_u64() => Value::Number(n),
        Some(other) => {
            return fail(
                Value::Null,
                ErrorCode::InvalidRequest,
                format!("id must be a string or a non-negative integer, not {other}"),
            );
        }
        None => {
            return fail(
                Value::Null,
                ErrorCode::InvalidRequest,
                "the request has no id".into(),
            );
        }
    };
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return fail(
                id,
                ErrorCode::InvalidRequest,
                "method must be a string".into(),
            );
        }
        None => {
            return fail(
                id,
                ErrorCode::InvalidRequest,
                "the request has no method".into(),
            );
        }
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return fail(
                id,
                ErrorCode::InvalidParams,
                "params must be an object".into(),
            );
        }
    };
    if let Some(key) = obj.keys().next() {
        let msg = format!("unknown top-level key {key:?}");
        return fail(id, ErrorCode::InvalidRequest, msg);
    }
    Ok(Request { id, method, params })
}

/// `{"id": ID, "result": VALUE}`
pub fn reply(id: &Value, result: Value) -> Value {
    serde_json::json!({"id": id, "result": result})
}

/// `{"id": ID, "error": {"code": CODE, "message": TEXT}}`
pub fn error(id: &Value, f: &Failure) -> Value {
    serde_json::json!({"id": id, "error": {"code": f.code.as_str(), "message": f.message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn code(line: &str) -> (Value, ErrorCode) {
        let (id, f) = parse_request(line.as_bytes()).unwrap_err();
        (id, f.code)
    }

    #[test]
    fn good_requests() {
        let r = parse_request(br#"{"id":"a","method":"box.list"}"#).unwrap();
        assert_eq!(
            (r.id, r.method.as_str(), r.params),
            (Value::from("a"), "box.list", serde_json::json!({}))
        );
        let r = parse_request(br#"{"id":7,"method":"box.start","params":{"name":"x"}}"#).unwrap();
        assert_eq!(r.id, Value::from(7));
    }

    #[test]
    fn bad_requests_get_the_right_code_and_id() {
        assert_eq!(code("not json"), (Value::Null, ErrorCode::ParseError));
        assert_eq!(code("[1]"), (Value::Null, ErrorCode::InvalidRequest));
        assert_eq!(
            code(r#"{"method":"x"}"#),
            (Value::Null, ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(r#"{"id":-1,"method":"x"}"#),
            (Value::Null, ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(r#"{"id":1.5,"method":"x"}"#),
            (Value::Null, ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(r#"{"id":null,"method":"x"}"#),
            (Value::Null, ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(r#"{"id":1}"#),
            (Value::from(1), ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(r#"{"id":1,"method":"x","extra":0}"#),
            (Value::from(1), ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(r#"{"id":"q","method":"x","params":[1]}"#),
            (Value::from("q"), ErrorCode::InvalidParams)
        );
        let (id, f) = parse_request(b"{\"id\":1,\"method\":\"\xff\"}").unwrap_err();
        assert_eq!((id, f.code), (Value::Null, ErrorCode::ParseError));
    }

    #[test]
    fn the_code_table_is_one_to_one() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.grpc() as i32), "{c:?} shares a gRPC code");
            // boxd's own codes come back as themselves.
            if !matches!(
                c,
                ErrorCode::UnknownMethod | ErrorCode::InvalidRequest | ErrorCode::TooLarge
            ) {
                assert_eq!(ErrorCode::from_grpc(c.grpc()), c, "{c:?}");
            }
        }
    }

    #[test]
    fn a_full_disk_or_a_limit_is_not_a_long_line() {
        let full = crate::tonic::Status::resource_exhausted("no space left on the device");
        assert_eq!(Failure::from(full).code, ErrorCode::FailedPrecondition);
    }

    proptest! {
        #[test]
        fn no_input_panics_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_request(&bytes);
        }

        #[test]
        fn any_request_round_trips(
            id in prop_oneof![any::<u64>().prop_map(Value::from), "\\PC{0,20}".prop_map(Value::from)],
            method in "\\PC{1,20}",
            params in proptest::collection::btree_map("[a-zA-Z]{1,8}", "\\PC{0,20}", 0..5),
        ) {
            let params: Map<String, Value> = params.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
            let line = serde_json::json!({"id": id, "method": method, "params": params}).to_string();
            let r = parse_request(line.as_bytes()).unwrap();
            prop_assert_eq!(r, Request { id, method, params: Value::Object(params) });
        }

        #[test]
        fn string_ids_are_echoed(id in "\\PC{0,40}", method in "[a-z.]{1,20}") {
            let line = serde_json::json!({"id": id, "method": method}).to_string();
            let r = parse_request(line.as_bytes()).unwrap();
            prop_assert_eq!(r.id, Value::from(id));
        }
    }
}
