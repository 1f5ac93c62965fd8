//! Which local files a page may show (`--allow-file-urls DIR`).
//!
//! A `file:` URL lets a page read whatever the host's user can read, and an agent takes its
//! URLs from the pages it reads, so a prompt-injected agent could ask for `/etc/shadow` or an
//! SSH key and read it back with `page.read`. Local files are therefore refused unless the
//! operator names one directory, and then only files inside it open:
//!
//! - before anything is stored, a `file:` URL is read the way the browser reads it (`\` as
//!   `/`, percent-escapes decoded, `.` and `..` resolved) and must name a path inside the
//!   directory ([`FileUrls::check`]): else `BAD_REQUEST`;
//! - when the page is opened, the path is resolved with every symlink followed and must still
//!   be inside the directory, and the page opens at that resolved path, not at the text sent
//!   ([`FileUrls::resolve`]): a symlink pointing out is refused and nothing opens;
//! - a page that later shows a local file outside the directory (a link on an allowed page
//!   followed by a click) is not read: every read of the task's page checks its URL again,
//!   before and after reading ([`FileUrls::check_shown`]).

use std::path::{Component, Path, PathBuf};

/// The flag that allows local files; named in every refusal.
pub const FLAG: &str = "--allow-file-urls DIR";

/// The directory local pages may come from, if the operator named one.
#[derive(Clone, Debug, Default)]
pub struct FileUrls {
    /// The directory as given, made absolute (its symlinks not resolved), and its canonical
    /// form: a URL may name either.
    dir: Option<(PathBuf, PathBuf)>,
}

impl FileUrls {
    /// No local files at all (the default).
    pub fn refused() -> FileUrls {
        FileUrls { dir: None }
    }

    /// Local files inside `dir` only. `dir` must exist and be a directory.
    pub fn inside(dir: &Path) -> Result<FileUrls, String> {
        let canonical = dir
            .canonicalize()
            .ok()
            .filter(|d| d.is_dir())
            .ok_or_else(|| format!("--allow-file-urls {} is not a directory", dir.display()))?;
        let given = std::path::absolute(dir)
            .map(|p| lexical(&p))
            .unwrap_or_else(|_| canonical.clone());
        Ok(FileUrls {
            dir: Some((given, canonical)),
        })
    }

    /// Whether any local file may open (`--allow-file-urls` was given).
    pub fn allowed(&self) -> bool {
        self.dir.is_some()
    }

    /// Checks a URL before anything is stored: anything but `file:` passes; a `file:` URL
    /// passes only when local files are allowed and its path, as the browser reads it, is
    /// inside the directory. No file system access (this runs under the host's lock).
    pub fn check(&self, url: &str) -> Result<(), String> {
        let Some(path) = file_url_path(url)? else {
            return Ok(());
        };
        let Some((given, canonical)) = &self.dir else {
            return Err(format!(
                "file: URLs are refused: this host opens no local files unless it is started with {FLAG}, and then only files inside DIR"
            ));
        };
        if path.starts_with(given) || path.starts_with(canonical) {
            Ok(())
        } else {
            Err(format!(
                "{} is outside the directory this host opens local files from ({}); put the file there",
                path.display(),
                canonical.display()
            ))
        }
    }

    /// The URL to open for `url`: itself unless it is a `file:` URL; then the file's path with
    /// every symlink resolved, which must still be inside the directory.
    pub fn resolve(&self, url: &str) -> Result<String, String> {
        self.check(url)?;
        let Some(path) = file_url_path(url)? else {
            return Ok(url.to_owned());
        };
        let full = self.resolved_inside(&path)?;
        let suffix = url.find(['?', '#']).map_or("", |at| &url[at..]);
        Ok(format!("file://{}{suffix}", encode_path(&full)))
    }

    /// Checks the URL a task's page shows before it is read: a local file outside the
    /// directory (reached by a link on an allowed page) is never read.
    pub fn check_shown(&self, url: &str) -> Result<(), String> {
        let shown = |why: String| {
            format!("the page now shows a local file this host does not open ({why}); nothing was read. page.navigate \"back\" returns to the page before it")
        };
        let Some(path) = file_url_path(url).map_err(shown)? else {
            return Ok(());
        };
        self.check(url).map_err(shown)?;
        self.resolved_inside(&path).map(|_| ()).map_err(shown)
    }

    /// `path` with its symlinks resolved, if that is inside the directory.
    fn resolved_inside(&self, path: &Path) -> Result<PathBuf, String> {
        let Some((_, canonical)) = &self.dir else {
            return Err(format!("local files are refused without {FLAG}"));
        };
        let full = path
            .canonicalize()
            .map_err(|e| format!("{} cannot be opened ({e})", path.display()))?;
        if full.starts_with(canonical) {
            Ok(full)
        } else {
            Err(format!(
                "{} resolves outside {} (through a symlink); only files inside it open",
                path.display(),
                canonical.display()
            ))
        }
    }
}

/// The path a `file:` URL names, read as the browser reads it; `None` for other schemes.
fn file_url_path(url: &str) -> Result<Option<PathBuf>, String> {
    let Some((scheme, rest)) = url.split_once(':') else {
        return Ok(None);
    };
    if !scheme.eq_ignore_ascii_case("file") {
        return Ok(None);
    }
    let rest = rest.replace('\\', "/");
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let path = match rest.strip_prefix("//") {
        Some(after) => {
            let (host, path) = after.split_at(after.find('/').unwrap_or(after.len()));
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                return Err(format!(
                    "file URLs name files on this machine only (got the host {:?})",
                    host.chars().take(60).collect::<String>()
                ));
            }
            if path.is_empty() {
                "/"
            } else {
                path
            }
        }
        None if rest.starts_with('/') => rest,
        None => return Err("a file URL must name an absolute path (file:///…)".into()),
    };
    let bytes = decode(path).ok_or("a file URL must not hold a NUL byte or a bad %-escape")?;
    use std::os::unix::ffi::OsStrExt;
    Ok(Some(lexical(Path::new(std::ffi::OsStr::from_bytes(
        &bytes,
    )))))
}

/// `path` with `.` and `..` resolved as text, as a URL's path is (`..` at the root stays there).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Percent-decodes a URL path; `None` on a NUL or a `%` not followed by two hex digits.
fn decode(s: &str) -> Option<Vec<u8>> {
    percent_decode(s).filter(|out| !out.contains(&0))
}

/// Percent-decodes a piece of a URL (a path, a host); `None` on a `%` not followed by two
/// hex digits.
pub(super) fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// A path written as a URL path: everything but unreserved characters and `/` escaped.
fn encode_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &c in path.as_os_str().as_bytes() {
        if c.is_ascii_alphanumeric() || b"/-._~".contains(&c) {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_are_read_as_the_browser_reads_them() {
        let p = |u: &str| file_url_path(u).unwrap().unwrap();
        assert_eq!(p("file:///etc/passwd"), Path::new("/etc/passwd"));
        assert_eq!(p("FILE://localhost/etc/passwd"), Path::new("/etc/passwd"));
        assert_eq!(p("file:/a/b/../../etc/shadow"), Path::new("/etc/shadow"));
        assert_eq!(p("file:///a/%2e%2E/etc"), Path::new("/etc"));
        assert_eq!(p("file:///a\\..\\etc?x#y"), Path::new("/etc"));
        assert_eq!(p("file:///../../etc"), Path::new("/etc"));
        assert!(file_url_path("file://example.org/etc").is_err());
        assert!(file_url_path("file:etc/passwd").is_err());
        assert!(file_url_path("file:///a%00b").is_err());
        assert!(file_url_path("file:///a%zz").is_err());
        assert_eq!(file_url_path("https://example.org/").unwrap(), None);
    }

    #[test]
    fn only_files_inside_the_directory_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pages");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a b.html"), "<p>a</p>").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("out.html")).unwrap();
        let none = FileUrls::refused();
        let e = none.check("file:///etc/passwd").unwrap_err();
        assert!(e.contains("--allow-file-urls"), "{e}");
        assert!(none.check("https://example.org/").is_ok());

        let some = FileUrls::inside(&dir).unwrap();
        let inside = format!("file://{}/a%20b.html#top", dir.display());
        assert!(some.check(&inside).is_ok());
        let opened = some.resolve(&inside).unwrap();
        assert!(opened.ends_with("/a%20b.html#top"), "{opened}");
        assert!(some.check("file:///etc/passwd").is_err());
        let up = format!("file://{}/../pages/../../etc/passwd", dir.display());
        assert!(some.check(&up).is_err());
        let link = format!("file://{}/out.html", dir.display());
        assert!(some.check(&link).is_ok(), "inside as text");
        let e = some.resolve(&link).unwrap_err();
        assert!(e.contains("through a symlink"), "{e}");
        assert!(some.check_shown(&link).is_err());
        assert!(some.check_shown(&inside).is_ok());
        assert!(some.check_shown("http://127.0.0.1/").is_ok());
    }
}
