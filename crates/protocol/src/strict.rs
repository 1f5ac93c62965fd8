//! Strict JSON: the checks serde's own parse does not make, applied once where a frame becomes
//! a JSON value (SPEC §10).
//!
//! `serde_json` keeps the last of two equal keys in a [`Value`](serde_json::Value), so
//! `{"id":"a","id":"b"}` would silently be answered as `b` while its sender waits on `a`; and
//! it nests as deep as its recursion limit allows. [`check_strict`] walks the frame once with
//! `serde_json`'s own tokenizer (so what counts as JSON does not change) and refuses a
//! duplicate key at any depth and nesting deeper than [`MAX_DEPTH`]. The direct parse path
//! needs no such walk: it reads only typed structs, whose derived parsers refuse a repeated
//! field and which nest only as deep as the wire format does.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The deepest nesting of objects and arrays a frame may have (the frame itself is level 1).
pub const MAX_DEPTH: usize = 64;

/// Why a frame is not strict JSON: the refusal's message, and the top-level `id` when it could
/// be read unambiguously, so the refusal reaches the request it answers.
#[derive(Debug)]
pub struct StrictError {
    /// What is wrong and what to send instead.
    pub message: String,
    /// The frame's top-level `id`, when it is a string and was not itself repeated.
    pub id: Option<String>,
}

/// Checks a frame for duplicate keys (at any depth) and for nesting deeper than [`MAX_DEPTH`].
///
/// Returns `Ok` for frames that are not JSON at all: those are the general parser's to explain.
pub fn check_strict(frame: &[u8]) -> Result<(), StrictError> {
    let mut top_id = None;
    let mut de = serde_json::Deserializer::from_slice(frame);
    let walk = Walk {
        depth: 1,
        top_id: &mut top_id,
    };
    match walk.deserialize(&mut de) {
        Ok(()) => Ok(()),
        Err(e) if e.classify() == serde_json::error::Category::Data => Err(StrictError {
            message: without_position(&e),
            id: top_id,
        }),
        Err(_) => Ok(()),
    }
}

/// One value of the frame being walked, `depth` levels down.
struct Walk<'t> {
    depth: usize,
    /// Where the top-level `id` is recorded, if it is a string.
    top_id: &'t mut Option<String>,
}

/// A key as written, borrowed when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// Reads the top-level `id` when it is a string; any other value is only walked.
struct IdSeed<'t>(&'t mut Option<String>);

impl<'de> DeserializeSeed<'de> for IdSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(IdVisitor(self.0))
    }
}

struct IdVisitor<'t>(&'t mut Option<String>);

impl<'de> Visitor<'de> for IdVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an id")
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        *self.0 = Some(v.to_owned());
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let mut none = None;
        Walk {
            depth: 2,
            top_id: &mut none,
        }
        .visit_map(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        let mut none = None;
        Walk {
            depth: 2,
            top_id: &mut none,
        }
        .visit_seq(seq)
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Walk<'_> {
    fn too_deep<E: serde::de::Error>(&self) -> Result<(), E> {
        if self.depth > MAX_DEPTH {
            return Err(E::custom(format_args!(
                "the frame nests deeper than {MAX_DEPTH} levels; send flatter JSON"
            )));
        }
        Ok(())
    }
}

/// Objects with at most this many keys are checked for repeats by comparing each pair; larger
/// ones use a set, so a frame of many keys costs linear time.
const LINEAR_KEYS: usize = 16;

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.too_deep()?;
        let mut none = None;
        while seq
            .next_element_seed(Walk {
                depth: self.depth + 1,
                top_id: &mut none,
            })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.too_deep()?;
        let mut keys: Vec<Cow<'de, str>> = Vec::new();
        let mut set: HashSet<Cow<'de, str>> = HashSet::new();
        let mut none = None;
        while let Some(key) = map.next_key_seed(Key)? {
            let repeated = if keys.len() < LINEAR_KEYS {
                keys.contains(&key)
            } else {
                if set.is_empty() {
                    set.extend(keys.iter().cloned());
                }
                set.contains(&key)
            };
            if repeated {
                if self.depth == 1 && key == "id" {
                    self.top_id.take();
                }
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key `{key}`; send each key once"
                )));
            }
            let top_id = self.depth == 1 && key == "id";
            if keys.len() < LINEAR_KEYS {
                keys.push(key);
            } else {
                set.insert(key);
            }
            if top_id {
                map.next_value_seed(IdSeed(self.top_id))?;
            } else {
                map.next_value_seed(Walk {
                    depth: self.depth + 1,
                    top_id: &mut none,
                })?;
            }
        }
        Ok(())
    }
}

/// Why [`parse_strict`] refused a frame: not strict JSON (a repeated key, too deep), or not
/// JSON at all.
pub(super) enum StrictRefusal {
    /// Strict JSON's own refusal, with the top-level `id` when it was read.
    Strict(StrictError),
    /// serde's own error: the frame is not JSON (or not UTF-8).
    NotJson(serde_json::Error),
}

/// Reads a frame into its JSON value in one pass, refusing a duplicate key (at any depth) and
/// nesting deeper than [`MAX_DEPTH`] as it goes, exactly as [`check_strict`] and then
/// `serde_json` would one after the other: the general path reads a frame once.
pub(super) fn parse_strict(frame: &[u8]) -> Result<Value, StrictRefusal> {
    let mut top_id = None;
    let mut de = serde_json::Deserializer::from_slice(frame);
    let read = StrictValue {
        depth: 1,
        top_id: &mut top_id,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    match read {
        Ok(value) => Ok(value),
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            Err(StrictRefusal::Strict(StrictError {
                message: without_position(&e),
                id: top_id,
            }))
        }
        Err(e) => Err(StrictRefusal::NotJson(e)),
    }
}

/// serde_json appends the position to a message; a refusal's message stands on its own.
fn without_position(e: &serde_json::Error) -> String {
    let mut message = e.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    message
}

/// One value of the frame being read into a [`Value`], `depth` levels down.
struct StrictValue<'t> {
    depth: usize,
    /// Where the top-level `id` is recorded, if it is a string.
    top_id: &'t mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl StrictValue<'_> {
    fn too_deep<E: serde::de::Error>(&self) -> Result<(), E> {
        Walk {
            depth: self.depth,
            top_id: &mut None,
        }
        .too_deep()
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.too_deep()?;
        let mut items = Vec::new();
        let mut none = None;
        while let Some(item) = seq.next_element_seed(StrictValue {
            depth: self.depth + 1,
            top_id: &mut none,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.too_deep()?;
        let mut object = serde_json::Map::new();
        let mut none = None;
        while let Some(key) = map.next_key_seed(Key)? {
            let top_id = self.depth == 1 && key == "id";
            if object.contains_key(&*key) {
                if top_id {
                    self.top_id.take();
                }
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key `{key}`; send each key once"
                )));
            }
            let value = map.next_value_seed(StrictValue {
                depth: self.depth + 1,
                top_id: &mut none,
            })?;
            if let (true, Value::String(id)) = (top_id, &value) {
                *self.top_id = Some(id.clone());
            }
            object.insert(key.into_owned(), value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(frame: &str) -> StrictError {
        check_strict(frame.as_bytes()).expect_err(frame)
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let e = refused(r#"{"id":"a","id":"b","method":"host.hello"}"#);
        assert!(e.message.starts_with("duplicate key `id`"), "{}", e.message);
        assert_eq!(e.id, None);
        let e = refused(r#"{"id":"a","method":"x","params":{"k":{"z":1,"z":2}}}"#);
        assert!(e.message.starts_with("duplicate key `z`"), "{}", e.message);
        assert_eq!(e.id.as_deref(), Some("a"));
        // An escaped key is the same key.
        let e = refused(r#"{"id":"a","i\u0064":"b"}"#);
        assert!(e.message.starts_with("duplicate key `id`"), "{}", e.message);
        // Past the linear check: a repeat among many keys.
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let frame = format!("{{{},\"k7\":0}}", many.join(","));
        assert!(refused(&frame).message.starts_with("duplicate key `k7`"));
        let ok = format!("{{{}}}", many.join(","));
        assert!(check_strict(ok.as_bytes()).is_ok());
    }

    #[test]
    fn nesting_is_bounded() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(check_strict(nest(MAX_DEPTH).as_bytes()).is_ok());
        assert!(refused(&nest(MAX_DEPTH + 1))
            .message
            .contains("deeper than 64"));
        let objects = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
        assert!(check_strict(objects(MAX_DEPTH).as_bytes()).is_ok());
        assert!(check_strict(objects(MAX_DEPTH + 1).as_bytes()).is_err());
        // Deeper than serde_json's own limit: still our refusal, not a stack overflow.
        assert!(refused(&nest(100_000)).message.contains("deeper than 64"));
    }

    #[test]
    fn what_is_not_json_is_left_to_the_parser() {
        for frame in ["not json", "{\"a\":", "{\"a\":1}}", "\u{0}"] {
            assert!(check_strict(frame.as_bytes()).is_ok(), "{frame}");
        }
        assert!(check_strict(b"{\"a\":\"\xff\"}").is_ok());
    }
}
