//! The longest each text field of a request may be (SPEC §10), in one place: the frame limit
//! bounds a line, these bound what a receipt, a task or the audit log keeps of it.

/// How a limit counts: characters for what people read (titles, reasons), bytes for what the
/// page gets (values, selectors, URLs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Unicode scalar values.
    Chars,
    /// UTF-8 bytes.
    Bytes,
}

/// The longest a text field may be, and how it is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextLimit {
    /// The most characters or bytes accepted.
    pub max: usize,
    /// What `max` counts.
    pub unit: Unit,
}

impl TextLimit {
    /// The length of `text` in this limit's unit.
    pub fn len(&self, text: &str) -> usize {
        match self.unit {
            Unit::Bytes => text.len(),
            Unit::Chars => text.chars().count(),
        }
    }

    /// Whether `text` fits; the refusal names `field` and the limit, for a `BAD_REQUEST`.
    pub fn check(&self, field: &str, text: &str) -> Result<(), String> {
        // A text of at most `max` bytes has at most `max` characters: count only when needed.
        if text.len() <= self.max {
            return Ok(());
        }
        let n = self.len(text);
        if n <= self.max {
            return Ok(());
        }
        let unit = match self.unit {
            Unit::Chars => "characters",
            Unit::Bytes => "bytes",
        };
        Err(format!(
            "`{field}` is {n} {unit}; its limit is {} {unit}: send a shorter `{field}`",
            self.max
        ))
    }
}

/// `task.start`'s `title`: 1–200 characters.
pub const TITLE: TextLimit = TextLimit {
    max: 200,
    unit: Unit::Chars,
};
/// `task.start`'s `url`: 8 KiB.
pub const URL: TextLimit = TextLimit {
    max: MAX_URL_BYTES,
    unit: Unit::Bytes,
};
/// `page.fill`'s `value`: 64 KiB.
pub const VALUE: TextLimit = TextLimit {
    max: 64 * 1024,
    unit: Unit::Bytes,
};
/// Every selector (`target`, `expect.target`): 1 KiB.
pub const SELECTOR: TextLimit = TextLimit {
    max: 1024,
    unit: Unit::Bytes,
};
/// `expect.equals` / `expect.contains`: the same bound as a filled value, since it is compared
/// with one.
pub const EXPECTED_TEXT: TextLimit = VALUE;
/// `page.press`'s `key`: the same bound as a selector.
pub const KEY: TextLimit = SELECTOR;
/// Every `reason` (`task.stop`, `receipts.clearCommit`, `outcome.acknowledge`): 1–500
/// characters.
pub const REASON: TextLimit = TextLimit {
    max: 500,
    unit: Unit::Chars,
};
/// The `operator` an operator names in the audit log: 1–200 characters.
pub const OPERATOR: TextLimit = TextLimit {
    max: 200,
    unit: Unit::Chars,
};

/// The longest `url` a task may name, in bytes.
pub const MAX_URL_BYTES: usize = 8 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field_and_count_in_their_unit() {
        assert!(TITLE.check("title", &"é".repeat(200)).is_ok());
        let e = TITLE.check("title", &"é".repeat(201)).unwrap_err();
        assert!(
            e.contains("`title` is 201 characters; its limit is 200"),
            "{e}"
        );
        assert!(VALUE.check("value", &"a".repeat(65536)).is_ok());
        let e = VALUE.check("value", &"a".repeat(65537)).unwrap_err();
        assert!(e.contains("65537 bytes; its limit is 65536 bytes"), "{e}");
        assert!(SELECTOR.check("target", &"a".repeat(1025)).is_err());
        assert!(REASON.check("reason", &"r".repeat(501)).is_err());
        assert!(URL.check("url", &"u".repeat(8193)).is_err());
    }
}
