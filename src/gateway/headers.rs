//! The headers of a request as a door hands them to a run (`nonlocals.request.headers`): names
//! lower-case, credentials (`authorization`, `cookie`) left out, values that are not text
//! dropped.

use axum::http::{HeaderMap, header};
use serde_json::{Map, Value};

/// A request's headers as a JSON object of strings.
pub fn headers_json(headers: &HeaderMap) -> Value {
    let mut map = Map::new();
    for (name, value) in headers {
        if name == header::AUTHORIZATION || name == header::COOKIE {
            continue;
        }
        if let Ok(v) = value.to_str() {
            map.insert(name.as_str().to_string(), Value::String(v.to_string()));
        }
    }
    Value::Object(map)
}
