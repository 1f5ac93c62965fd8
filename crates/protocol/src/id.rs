//! Request IDs: the alphabet and length every ID is checked against.

/// The longest request ID accepted: every receipt keeps its ID.
pub const MAX_ID_LEN: usize = 128;

/// The bytes a request ID may hold, `[A-Za-z0-9._:-]`, as a table: every request's ID is
/// checked, so the check is one lookup per byte.
pub(super) static ID_ALPHABET: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-');
        b += 1;
    }
    table
};

/// Checks a request ID: 1–128 characters from `[A-Za-z0-9._:-]`, an alphabet JSON needs no
/// escapes for, so replies copy IDs as they are. The error says what is wrong, for the caller.
pub fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!(
            "id must be 1 to {MAX_ID_LEN} characters long (got {})",
            id.len()
        ));
    }
    if id.bytes().all(|b| ID_ALPHABET[usize::from(b)]) {
        return Ok(());
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(format!(
            "id may only contain letters, digits and . _ : - (found {bad:?}); a fresh UUID is a good id"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(validate_id("9b1d-ab.c_d:e").is_ok());
        assert!(validate_id("").is_err());
        assert!(validate_id(&"a".repeat(129)).is_err());
        assert!(validate_id(&"a".repeat(128)).is_ok());
        assert!(validate_id("a b").is_err());
        assert!(validate_id("é").is_err());
        for c in (0..=0x7fu8).map(char::from) {
            let allowed = c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
            assert_eq!(validate_id(&c.to_string()).is_ok(), allowed, "{c:?}");
        }
    }
}
