//! Saved logins (SPEC §15): a profile is one file directly inside the host's `--profile-dir`,
//! holding the cookies of a task's browser context. `task.start` loads one into the task's
//! new context before its page opens; `task.saveProfile` writes one back. A profile is named,
//! never pathed: a name is one component of `[A-Za-z0-9._-]` ([`check_profile_name`]), a file
//! is read without following a symlink, and written as a new temporary file (mode 0600) that is
//! renamed over the old, so nothing is ever read from or written to outside the directory.
//!
//! Local storage is kept for the origins of the task's open tabs when the profile is saved
//! (reading an origin's storage needs a document of that origin); it is given back to the
//! first documents of a task that starts with the profile, before their own scripts run.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::cdp::methods::Cookie;
use crate::protocol::check_profile_name;

/// The largest profile file read back (a browser's cookies are far smaller).
pub const MAX_PROFILE_BYTES: u64 = 8 * 1024 * 1024;

/// What a profile file holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct Profile {
    /// The file format's version, 1.
    pub version: u32,
    /// The context's cookies.
    pub cookies: Vec<Cookie>,
    /// The local storage of the origins the task's tabs showed when it was saved (absent in
    /// profiles written before it was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local_storage: Vec<OriginStorage>,
}

/// One origin's local storage, as a profile keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginStorage {
    /// The origin (`https://shop.example`).
    pub origin: String,
    /// Its keys and values, in the order the page listed them.
    pub items: Vec<(String, String)>,
}

/// The file of profile `name` inside `dir`: the name checked, the directory configured.
pub fn profile_path(dir: Option<&Path>, name: &str) -> Result<PathBuf, String> {
    let Some(dir) = dir else {
        return Err("this host keeps no profiles: start it with --profile-dir DIR (polaris serve --executor chromium --profile-dir DIR)".into());
    };
    check_profile_name(name)?;
    Ok(dir.join(name))
}

/// Checks that profile `name` exists as a regular file (not a symlink) inside `dir`, so a
/// `task.start` naming one that does not is refused before anything is stored.
pub fn check_existing(dir: Option<&Path>, name: &str) -> Result<PathBuf, String> {
    let path = profile_path(dir, name)?;
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() => Ok(path),
        Ok(_) => Err(format!(
            "profile {name:?} is not a regular file of --profile-dir (a symlink or a directory); profiles never leave that directory"
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(format!(
            "profile {name:?} does not exist in --profile-dir; log in on a task and save it with task.saveProfile first"
        )),
        Err(e) => Err(format!("profile {name:?} cannot be read: {e}")),
    }
}

/// Reads profile `name` (never through a symlink).
pub fn load(dir: Option<&Path>, name: &str) -> Result<Profile, String> {
    let path = profile_path(dir, name)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(|e| format!("profile {name:?} cannot be opened: {e}"))?;
    let mut text = String::new();
    file.take(MAX_PROFILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("profile {name:?} cannot be read: {e}"))?;
    if text.len() as u64 > MAX_PROFILE_BYTES {
        return Err(format!(
            "profile {name:?} is larger than {MAX_PROFILE_BYTES} bytes"
        ));
    }
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "profile {name:?} is not a Polaris profile ({e}); save it again with task.saveProfile"
        )
    })
}

/// Writes `profile` as `name` inside `dir`: a new temporary file (mode 0600, created without
/// following anything) renamed over the old one, so a reader sees the old file or the new,
/// and a symlink in its place is replaced, never followed.
pub fn save(dir: Option<&Path>, name: &str, profile: &Profile) -> Result<(), String> {
    let path = profile_path(dir, name)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let text = serde_json::to_vec_pretty(profile)
        .map_err(|e| format!("profile {name:?} could not be written: {e}"))?;
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let temp = dir.join(format!(".{name}.{nonce}.tmp"));
    let written = (|| -> std::io::Result<()> {
        let mut f: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&temp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&temp, &path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(format!(
            "profile {name:?} could not be written in --profile-dir: {e}; check the directory is writable"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_the_directory() {
        let dir = std::env::temp_dir().join(format!("polaris-profiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "/etc/passwd",
            "a b",
            "é",
            &"x".repeat(65),
        ] {
            assert!(profile_path(Some(&dir), bad).is_err(), "{bad:?}");
        }
        assert!(profile_path(None, "shop")
            .unwrap_err()
            .contains("--profile-dir"));
        let ok = "shop-admin_2.v1";
        assert_eq!(profile_path(Some(&dir), ok).unwrap(), dir.join(ok));
        let e = check_existing(Some(&dir), "missing").unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let p = Profile {
            version: 1,
            cookies: Vec::new(),
            local_storage: Vec::new(),
        };
        save(Some(&dir), "saved", &p).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join("saved")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert!(load(Some(&dir), "saved").unwrap().cookies.is_empty());
        // A symlink named like a profile is neither read nor followed when saving.
        let outside = dir
            .join("..")
            .join(format!("polaris-outside-{}", std::process::id()));
        std::fs::write(&outside, b"keep").unwrap();
        let _ = std::fs::remove_file(dir.join("link"));
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        assert!(check_existing(Some(&dir), "link").is_err());
        assert!(load(Some(&dir), "link").is_err());
        save(Some(&dir), "link", &p).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        let _ = std::fs::remove_file(&outside);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
