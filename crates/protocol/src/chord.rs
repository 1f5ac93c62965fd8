//! Key chords in Playwright's form (`Enter`, `Control+a`, `Shift+ArrowDown`, `Meta+Enter`):
//! the one parser every executor and the params check use (SPEC §14).

/// The modifiers a chord may hold, as CDP's `Input.dispatchKeyEvent` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modifiers(u8);

impl Modifiers {
    /// Alt (Option).
    pub const ALT: Modifiers = Modifiers(1);
    /// Control.
    pub const CONTROL: Modifiers = Modifiers(2);
    /// Meta (Command, Windows key).
    pub const META: Modifiers = Modifiers(4);
    /// Shift.
    pub const SHIFT: Modifiers = Modifiers(8);

    /// The bit mask CDP takes (`modifiers`).
    pub fn bits(self) -> u8 {
        self.0
    }

    /// Whether no modifier is held.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether `other` is held.
    pub fn contains(self, other: Modifiers) -> bool {
        self.0 & other.0 == other.0
    }

    /// The modifier keys held, in the order they are pressed.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        [
            (Modifiers::ALT, "Alt"),
            (Modifiers::CONTROL, "Control"),
            (Modifiers::META, "Meta"),
            (Modifiers::SHIFT, "Shift"),
        ]
        .into_iter()
        .filter(move |(m, _)| self.contains(*m))
        .map(|(_, n)| n)
    }
}

/// A key with the modifiers held while it is pressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyChord<'a> {
    /// The modifiers, pressed before the key and released after it.
    pub modifiers: Modifiers,
    /// The key itself (`Enter`, `a`, `ArrowDown`, `+`).
    pub key: &'a str,
}

impl<'a> KeyChord<'a> {
    /// Reads `text` as Playwright writes chords: modifiers joined by `+` before the key
    /// (`ControlOrMeta` is `Control` here). The key may itself be `+` (`Shift++`).
    pub fn parse(text: &'a str) -> Result<KeyChord<'a>, String> {
        if text.is_empty() {
            return Err("key must not be empty".into());
        }
        let (mods, key) = match text.strip_suffix("++") {
            Some(rest) => (Some(rest), "+"),
            None if text == "+" => (None, "+"),
            None => match text.rsplit_once('+') {
                Some((mods, key)) => (Some(mods), key),
                None => (None, text),
            },
        };
        if key.is_empty() {
            return Err(format!(
                "key {text:?} ends in `+` with no key after it: write a chord as Control+a or Shift+ArrowDown"
            ));
        }
        let mut modifiers = Modifiers::default();
        for name in mods.into_iter().flat_map(|m| m.split('+')) {
            let m = match name {
                "Alt" => Modifiers::ALT,
                "Control" | "ControlOrMeta" => Modifiers::CONTROL,
                "Meta" => Modifiers::META,
                "Shift" => Modifiers::SHIFT,
                other => {
                    return Err(format!(
                        "key {text:?}: {other:?} is not a modifier; chords use Alt, Control, ControlOrMeta, Meta or Shift before the key, e.g. Control+a"
                    ))
                }
            };
            if modifiers.contains(m) {
                return Err(format!("key {text:?} names the modifier {name} twice"));
            }
            modifiers.0 |= m.0;
        }
        Ok(KeyChord { modifiers, key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chords_read_as_playwright_writes_them() {
        let c = KeyChord::parse("Control+a").unwrap();
        assert_eq!((c.modifiers, c.key), (Modifiers::CONTROL, "a"));
        let c = KeyChord::parse("Shift+ArrowDown").unwrap();
        assert_eq!((c.modifiers.bits(), c.key), (8, "ArrowDown"));
        let c = KeyChord::parse("Control+Shift+Enter").unwrap();
        assert_eq!((c.modifiers.bits(), c.key), (10, "Enter"));
        assert_eq!(
            KeyChord::parse("ControlOrMeta+c").unwrap().modifiers,
            Modifiers::CONTROL
        );
        assert_eq!(KeyChord::parse("Enter").unwrap().key, "Enter");
        assert!(KeyChord::parse("Enter").unwrap().modifiers.is_empty());
        assert_eq!(KeyChord::parse("+").unwrap().key, "+");
        let c = KeyChord::parse("Shift++").unwrap();
        assert_eq!((c.modifiers, c.key), (Modifiers::SHIFT, "+"));
        assert_eq!(
            KeyChord::parse("Meta+Enter")
                .unwrap()
                .modifiers
                .names()
                .collect::<Vec<_>>(),
            ["Meta"]
        );
        for bad in ["", "Control+", "Ctrl+a", "Control+Control+a", "Hyper+x"] {
            assert!(KeyChord::parse(bad).is_err(), "{bad:?}");
        }
    }
}
