//! JSON objects of fixed keys that every run makes ([`Shape`]): their keys laid out once, so a
//! run copies the layout and fills in its values instead of hashing each key again.
//!
//! Why: `serde_json`'s `Map` keeps its keys in order in an `IndexMap` hashed with SipHash, and
//! every insert hashes its key (about 190 instructions for a short one). The objects a gateway
//! run makes before its skill starts (`nonlocals.gateway`, `nonlocals.request`, the seed's
//! nonlocals) took about ten of those a run. A copy of a laid-out map keeps each key's hash.

use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The keys of an object, in order, and their layout once made.
pub struct Shape<const N: usize> {
    keys: [&'static str; N],
    layout: OnceLock<Map<String, Value>>,
}

impl<const N: usize> Shape<N> {
    /// An object of `keys`, in that order; they must be distinct.
    pub const fn new(keys: [&'static str; N]) -> Shape<N> {
        Shape {
            keys,
            layout: OnceLock::new(),
        }
    }

    /// The object of these keys with `values`, the `i`th value under the `i`th key.
    pub fn object(&self, values: [Value; N]) -> Map<String, Value> {
        let mut object = self.layout().clone();
        for (slot, value) in object.values_mut().zip(values) {
            *slot = value;
        }
        object
    }

    fn layout(&self) -> &Map<String, Value> {
        self.layout.get_or_init(|| {
            let layout: Map<String, Value> = self
                .keys
                .iter()
                .map(|key| (key.to_string(), Value::Null))
                .collect();
            assert_eq!(layout.len(), N, "the keys of a shape are distinct");
            layout
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_object_of_a_shape_is_the_object_built_key_by_key() {
        static SHAPE: Shape<3> = Shape::new(["name", "id", "replyTo"]);
        let made = SHAPE.object([json!("http"), json!("r-1"), Value::Null]);
        let built = json!({ "name": "http", "id": "r-1", "replyTo": null });
        assert_eq!(Value::Object(made.clone()), built);
        // In the same order, and its keys found and added to like any other map's.
        assert_eq!(
            made.keys().collect::<Vec<_>>(),
            ["name", "id", "replyTo"].iter().collect::<Vec<_>>()
        );
        let mut grown = SHAPE.object([json!("ws"), json!("r-2"), json!("q")]);
        assert_eq!(grown.get("replyTo"), Some(&json!("q")));
        grown.insert("sessionId".into(), json!("s"));
        assert_eq!(grown.get("sessionId"), Some(&json!("s")));
        assert_eq!(grown.get("name"), Some(&json!("ws")));
        // Each object is its own: the first is unchanged.
        assert_eq!(made.get("name"), Some(&json!("http")));
        assert_eq!(made.len(), 3);
    }
}
