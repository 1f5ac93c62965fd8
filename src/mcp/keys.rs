//! Key spelling between the host and the tools: the host's params and results are camelCase,
//! the tools' arguments and results snake_case; translating is a mechanical key rename.

use serde_json::Value;

/// `taskId` → `task_id`, recursively over object keys. `automaticReplay` keeps the contract's
/// spelling.
pub(super) fn snake_keys(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = if k == "automaticReplay" {
                        k
                    } else {
                        to_snake(&k)
                    };
                    (key, snake_keys(v))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(snake_keys).collect()),
        other => other,
    }
}

fn to_snake(k: &str) -> String {
    let mut out = String::with_capacity(k.len() + 4);
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `task_id` → `taskId`, recursively over object keys.
pub(super) fn camel_keys(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (to_camel(&k), camel_keys(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(camel_keys).collect()),
        other => other,
    }
}

fn to_camel(k: &str) -> String {
    let mut out = String::with_capacity(k.len());
    let mut upper = false;
    for c in k.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
