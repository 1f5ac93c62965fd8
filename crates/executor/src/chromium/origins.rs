//! Which addresses of the host's own machine and network a page may reach (`--allow-origin`).
//!
//! An agent takes its URLs from the pages it reads, so a prompt-injected agent could open
//! `http://169.254.169.254/latest/meta-data/` (a cloud's instance credentials),
//! `http://127.0.0.1:PORT/admin` or a router at `192.168.1.1` and read the answer back with
//! `page.read`. Such addresses are therefore refused unless the operator allows them, one
//! origin (or one host) at a time:
//!
//! - refused: a host written as a non-public IP address — IPv4 loopback `127/8`, private
//!   `10/8`, `172.16/12`, `192.168/16`, link-local `169.254/16`, shared `100.64/10`, "this
//!   network" `0/8`, multicast `224/4` and reserved `240/4`; IPv6 `::1`, `::`, unique local
//!   `fc00::/7`, link-local `fe80::/10`, site-local `fec0::/10`, multicast `ff00::/8`, and any
//!   IPv4 address written as IPv6 (`::ffff:a.b.c.d`, `::a.b.c.d`) that is one of these — and
//!   the names `localhost`, `*.localhost` (and Chromium's other names for loopback). Hosts are
//!   read as the browser reads them: `http://2130706433/`, `http://0x7f.1/` and `http://0177.1/`
//!   are `127.0.0.1`, percent-escapes and full-width forms are decoded, and a host holding
//!   other non-ASCII digits (`𝟏`, `①`) is refused ([`host_of`]). The rest of IDNA's mapping is
//!   not reproduced: a host it alone turns into an address (`127.0.0.1` with a soft hyphen,
//!   which it drops) passes this check and is stopped by the browser's block below, so the
//!   task fails to open (`ACTION_FAILED`) and nothing reaches the address;
//! - before anything is stored, a `task.start` or `page.navigate` URL to a refused address is
//!   `BAD_REQUEST` naming the flag to add ([`Origins::check`]);
//! - inside the browser, every request any page, frame, tab or worker makes to such an
//!   address — a link followed, a redirect, a `fetch`, an iframe, a form's POST — is paused by
//!   the browser-wide `Fetch` domain ([`Origins::pause_patterns`] are wide globs on the
//!   canonical URL) and failed (`BlockedByClient`) unless [`Origins::allows`] its URL; it shows
//!   in the action's network evidence as `blocked` and never reaches the server.
//!
//! `--allow-origin http://127.0.0.1:8080` allows exactly that scheme, host and port;
//! `--allow-origin 127.0.0.1` (a bare host) allows the host on every port and scheme, for a
//! development site served on several ports.
//!
//! Not caught: a DNS name that resolves to a private address (`internal.example.com`, or a
//! public name whose DNS answer is changed to `127.0.0.1` after a first look — DNS rebinding),
//! since the browser resolves names itself; and WebSocket connections, which the `Fetch` domain
//! does not see. A host that must not reach its own network at all belongs in a network
//! namespace or behind a firewall that drops those addresses.

use super::local_files::percent_decode;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The flag that allows an origin; named in every refusal.
pub const FLAG: &str = "--allow-origin";

/// A host as the browser reads it from a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// An IPv4 address, however it was written.
    V4(Ipv4Addr),
    /// An IPv6 address (written in brackets in a URL).
    V6(Ipv6Addr),
    /// A name, lower-cased, without a trailing dot.
    Name(String),
}

/// One `--allow-origin` value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Allowed {
    /// A bare host: every scheme and port.
    Host(Host),
    /// A scheme, host and port (the scheme's default when none was written).
    Origin {
        scheme: String,
        host: Host,
        port: u16,
    },
}

/// The non-public addresses the operator allowed; every other one is refused.
#[derive(Clone, Debug, Default)]
pub struct Origins {
    allowed: Vec<Allowed>,
}

/// What a URL names: scheme (lower case), host and port (the scheme's default if none).
#[derive(Debug, PartialEq, Eq)]
struct Place {
    scheme: String,
    host: Host,
    port: u16,
}

/// The IPv4 ranges that are not public, as (first address, prefix length, what they are):
/// the one table both the check and the browser's pause patterns come from.
const V4_REFUSED: [(Ipv4Addr, u8, &str); 9] = [
    (
        Ipv4Addr::new(0, 0, 0, 0),
        8,
        "an unspecified (this-network) address",
    ),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "a private address"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "a shared (carrier-grade NAT) address",
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "a loopback address"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "a link-local address"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "a private address"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "a private address"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "a multicast address"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "a reserved address"),
];

/// The names Chromium sends to loopback without asking DNS (with `*.localhost`).
const LOOPBACK_NAMES: [&str; 4] = [
    "localhost",
    "localhost.localdomain",
    "localhost6",
    "localhost6.localdomain6",
];

/// What a non-public IPv4 address is, `None` for a public one.
fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let n = u32::from(ip);
    V4_REFUSED.iter().find_map(|(net, len, kind)| {
        let mask = u32::MAX << (32 - u32::from(*len));
        (n & mask == u32::from(*net)).then_some(*kind)
    })
}

/// What a non-public IPv6 address is, `None` for a public one.
fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("an unspecified address")
    } else if let Some(v4) = ip.to_ipv4_mapped() {
        v4_kind(v4)
    } else if s[..6] == [0; 6] {
        // IPv4-compatible (`::a.b.c.d`), deprecated but still an IPv4 address in IPv6 clothes.
        v4_kind(Ipv4Addr::from(u128::from(ip) as u32))
    } else if ip.is_unique_local() {
        Some("a private (unique local) address")
    } else if ip.is_unicast_link_local() || s[0] & 0xffc0 == 0xfec0 {
        Some("a link-local address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else {
        None
    }
}

impl Host {
    /// What the host is when it is not public (`a loopback address`), `None` when it is.
    pub fn refused_kind(&self) -> Option<&'static str> {
        match self {
            Host::V4(ip) => v4_kind(*ip),
            Host::V6(ip) => v6_kind(*ip),
            Host::Name(n) => (LOOPBACK_NAMES.contains(&n.as_str()) || n.ends_with(".localhost"))
                .then_some("a name for this machine (loopback)"),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::V4(ip) => write!(f, "{ip}"),
            Host::V6(ip) => write!(f, "[{ip}]"),
            Host::Name(n) => f.write_str(n),
        }
    }
}

impl Place {
    /// The origin as a user writes it: `http://127.0.0.1:8080`, no port when it is the
    /// scheme's default.
    fn origin(&self) -> String {
        if Some(self.port) == default_port(&self.scheme) {
            format!("{}://{}", self.scheme, self.host)
        } else {
            format!("{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

impl Origins {
    /// No non-public address allowed (the default).
    pub fn refusing_private() -> Origins {
        Origins::default()
    }

    /// The `--allow-origin` values, each an origin (`http://127.0.0.1:8080`) or a bare host
    /// (`127.0.0.1`, `localhost`, `[::1]`) that would otherwise be refused.
    pub fn allowing(values: &[String]) -> Result<Origins, String> {
        let mut allowed = Vec::with_capacity(values.len());
        for v in values {
            allowed.push(parse_allowed(v)?);
        }
        Ok(Origins { allowed })
    }

    /// Checks a URL before anything is stored: anything but `http`/`https` passes (other
    /// schemes have their own checks); an `http`/`https` URL whose host is a non-public address
    /// passes only when allowed. No I/O (this runs under the host's lock).
    pub fn check(&self, url: &str) -> Result<(), String> {
        let place = match place_of(url) {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("the url's host is refused: {e}")),
        };
        let Some(kind) = place.host.refused_kind() else {
            return Ok(());
        };
        if self.admits(&place) {
            return Ok(());
        }
        let origin = place.origin();
        Err(format!(
            "{origin} is {kind} of this host's own machine or network, refused: a page there could hand an agent this machine's services or secrets. If tasks should reach it, start the host with {FLAG} {origin} (or {FLAG} {} for every port of that host)",
            place.host
        ))
    }

    /// Whether the browser may send a request to `url` (its canonical form, as the browser
    /// gives it): a URL whose host is not a non-public address, or one that is allowed.
    /// Anything that cannot be read is refused.
    pub fn allows(&self, url: &str) -> bool {
        match place_of(url) {
            Ok(None) => true,
            Ok(Some(p)) => p.host.refused_kind().is_none() || self.admits(&p),
            Err(_) => false,
        }
    }

    fn admits(&self, place: &Place) -> bool {
        self.allowed.iter().any(|a| match a {
            Allowed::Host(h) => *h == place.host,
            Allowed::Origin { scheme, host, port } => {
                *scheme == place.scheme && *host == place.host && *port == place.port
            }
        })
    }

    /// Globs (CDP `Fetch.RequestPattern.urlPattern`) that match every canonical URL whose
    /// host could be refused, and some that are not: the browser pauses those requests and
    /// [`Origins::allows`] decides. Wide on purpose — a pause costs one round trip, a miss
    /// would let a request through.
    pub fn pause_patterns() -> Vec<String> {
        let mut first_octets: Vec<u8> = Vec::new();
        for (net, len, _) in V4_REFUSED {
            let first = net.octets()[0];
            let span = if len >= 8 { 1 } else { 1u16 << (8 - len) };
            for o in 0..span {
                let octet = first as u16 + o;
                if !first_octets.contains(&(octet as u8)) {
                    first_octets.push(octet as u8);
                }
            }
        }
        let mut patterns: Vec<String> = first_octets.iter().map(|o| format!("*://{o}.*")).collect();
        // IPv6 literals, loopback names, and any URL with a user name before its host.
        patterns.extend(
            ["*://[*", "*://localhost*", "*://*.localhost*", "*@*"]
                .iter()
                .map(|p| p.to_string()),
        );
        patterns
    }
}

/// One `--allow-origin` value, checked.
fn parse_allowed(value: &str) -> Result<Allowed, String> {
    let bad = |why: &str| {
        format!("{FLAG} {value:?}: {why}; write an origin (http://127.0.0.1:8080) or a bare host (127.0.0.1, localhost, [::1]) for every port")
    };
    let allowed = if value.contains("://") {
        let trimmed = value.strip_suffix('/').unwrap_or(value);
        let place = place_of(trimmed)
            .map_err(|e| bad(&e))?
            .ok_or_else(|| bad("only http and https origins can be allowed"))?;
        if trimmed.contains('@') {
            return Err(bad("an origin has no user name"));
        }
        let (_, rest) = trimmed.split_once("://").unwrap_or_default();
        if rest.contains(['/', '?', '#', '\\']) {
            return Err(bad("an origin has no path, query or fragment"));
        }
        Allowed::Origin {
            scheme: place.scheme,
            host: place.host,
            port: place.port,
        }
    } else {
        if value.contains(['/', '?', '#', '@', '\\']) || value.is_empty() {
            return Err(bad("not a host"));
        }
        let host = if value.contains(':') && !value.starts_with('[') {
            // A bare IPv6 address, or a host with a port (which needs a scheme).
            match value.parse::<Ipv6Addr>() {
                Ok(ip) => Host::V6(ip),
                Err(_) => return Err(bad("a port needs a scheme (http://HOST:PORT)")),
            }
        } else {
            host_of(value).map_err(|e| bad(&e))?
        };
        Allowed::Host(host)
    };
    let host = match &allowed {
        Allowed::Host(h) | Allowed::Origin { host: h, .. } => h,
    };
    if host.refused_kind().is_none() {
        return Err(format!(
            "{FLAG} {value:?}: {host} is not refused, so there is nothing to allow (only loopback, private, link-local and other non-public addresses written as numbers, and localhost, are); drop the flag"
        ));
    }
    Ok(allowed)
}

/// The default port of a scheme the check reads.
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

/// What an `http`/`https` URL names, read as the browser reads it; `None` for other schemes.
fn place_of(url: &str) -> Result<Option<Place>, String> {
    let Some((scheme, rest)) = url.split_once(':') else {
        return Ok(None);
    };
    let scheme = scheme.trim().to_ascii_lowercase();
    let Some(default) = default_port(&scheme) else {
        return Ok(None);
    };
    // Special schemes skip any run of slashes and backslashes before the authority.
    let rest = rest.trim_start_matches(['/', '\\']);
    let authority = &rest[..rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len())];
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if hostport.starts_with('[') {
        let end = hostport
            .find(']')
            .ok_or("an IPv6 host lacks its closing ]")?;
        let after = &hostport[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err("text after an IPv6 host".into()),
        };
        (&hostport[..=end], port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None | Some("") => default,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("the port {:?} is not a number up to 65535", cut(p)))?,
    };
    Ok(Some(Place {
        scheme,
        host: host_of(host)?,
        port,
    }))
}

/// A URL's host as the browser reads it: percent-escapes decoded, full-width forms folded,
/// lower-cased; an IPv6 literal in brackets; a name whose last label is a number is an IPv4
/// address in any of the forms the URL standard reads (`2130706433`, `0x7f.1`, `0177.0.0.1`).
fn host_of(raw: &str) -> Result<Host, String> {
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or("an IPv6 host lacks its closing ]")?;
        return inner
            .parse::<Ipv6Addr>()
            .map(Host::V6)
            .map_err(|_| format!("{:?} is not an IPv6 address", cut(inner)));
    }
    let bytes = percent_decode(raw).ok_or("the host holds a bad %-escape")?;
    let text = String::from_utf8(bytes).map_err(|_| "the host is not UTF-8 once decoded")?;
    let folded: String = text.chars().map(fold).collect();
    if folded.chars().any(|c| !c.is_ascii() && c.is_numeric()) {
        // IDNA maps many of these (𝟏, ①, ¹) to ASCII digits, making the host an address.
        return Err(format!(
            "the host {:?} holds non-ASCII digits, which the browser may read as an address; write it with ASCII digits",
            cut(raw)
        ));
    }
    if folded.is_empty() {
        return Err("the URL has no host".into());
    }
    let name = folded.strip_suffix('.').unwrap_or(&folded).to_owned();
    let last = name.rsplit('.').next().unwrap_or("");
    if !last.is_empty() && number(last).is_some() {
        return ipv4(&name)
            .map(Host::V4)
            .ok_or_else(|| format!("{:?} ends in a number but is no IPv4 address", cut(raw)));
    }
    Ok(Host::Name(name))
}

/// The WHATWG IPv4 parser: up to four parts, each decimal, `0x` hex or leading-`0` octal;
/// the last part fills the bytes the others left.
fn ipv4(name: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let numbers: Vec<u64> = parts.iter().map(|p| number(p)).collect::<Option<_>>()?;
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|n| *n > 255) || *last >= 256u64.pow(5 - numbers.len() as u32) {
        return None;
    }
    let mut addr = *last;
    for (i, n) in init.iter().enumerate() {
        addr += n << (8 * (3 - i));
    }
    u32::try_from(addr).ok().map(Ipv4Addr::from)
}

/// One IPv4 part: `0x…` hex (empty is 0), `0…` octal, else decimal; `None` if not a number.
fn number(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            if h.is_empty() {
                return Some(0);
            }
            (h, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() || digits.len() > 20 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// A host character as IDNA maps it, for the characters an address can be written with:
/// full-width ASCII to ASCII, the ideographic full stops to `.`, ASCII lower-cased. Other
/// characters stay (a name that holds them is no address).
fn fold(c: char) -> char {
    let c = match c {
        '\u{3002}' | '\u{ff0e}' | '\u{ff61}' => '.',
        '\u{ff01}'..='\u{ff5e}' => char::from_u32(c as u32 - 0xfee0).unwrap_or(c),
        c => c,
    };
    c.to_ascii_lowercase()
}

/// At most 60 characters of `s`, for a message.
fn cut(s: &str) -> String {
    s.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(url: &str) -> Host {
        place_of(url).unwrap().unwrap().host
    }

    #[test]
    fn hosts_are_read_as_the_browser_reads_them() {
        let lo = Host::V4(Ipv4Addr::LOCALHOST);
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0x7F000001/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://127.0.0.1./x",
            "HTTP://user:pw@127.0.0.1:8080/x",
            "http:\\\\127.0.0.1\\x",
            "http:127.0.0.1",
            "http://%31%32%37.0.0.1/",
            "http://\u{ff11}\u{ff12}\u{ff17}\u{3002}0.0.1/",
        ] {
            assert_eq!(host(url), lo, "{url}");
        }
        assert_eq!(
            host("http://[::ffff:127.0.0.1]/"),
            Host::V6("::ffff:7f00:1".parse().unwrap())
        );
        assert_eq!(
            host("https://Example.COM./a@b"),
            Host::Name("example.com".into())
        );
        assert_eq!(
            host("https://medium.com/@someone"),
            Host::Name("medium.com".into())
        );
        assert!(place_of("http://1.2.3.4.5/").is_err());
        assert!(place_of("http://256.0.0.1/").is_err());
        assert!(place_of("http://127.0.0.1:99999/").is_err());
        assert!(place_of("http://[::1/").is_err());
        assert!(place_of("http://\u{1d7cf}\u{1d7d0}\u{1d7d5}.0.0.1/").is_err());
        assert!(place_of("http://127.0.0.\u{2460}/").is_err());
        assert_eq!(place_of("file:///etc/passwd").unwrap(), None);
        assert_eq!(place_of("http://h:8080").unwrap().unwrap().port, 8080);
        assert_eq!(place_of("https://h").unwrap().unwrap().port, 443);
    }

    #[test]
    fn every_non_public_class_is_refused_and_public_hosts_are_not() {
        let none = Origins::refusing_private();
        for url in [
            "http://127.0.0.1/",
            "http://127.255.1.2:9/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://100.64.0.1/",
            "http://100.127.255.255/",
            "http://0.0.0.0/",
            "http://0/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://[::1]/",
            "http://[::]/",
            "http://[fc00::1]/",
            "http://[fd12:3456::1]/",
            "http://[fe80::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[::127.0.0.1]/",
            "http://localhost:3000/",
            "http://LOCALHOST./",
            "http://app.localhost/",
        ] {
            let e = none.check(url).unwrap_err();
            assert!(e.contains("--allow-origin"), "{url}: {e}");
            assert!(!none.allows(url), "{url}");
        }
        for url in [
            "https://example.org/",
            "http://8.8.8.8/",
            "http://172.32.0.1/",
            "http://172.15.0.1/",
            "http://100.128.0.1/",
            "http://169.255.0.1/",
            "http://[2001:4860::8888]/",
            "http://[::ffff:8.8.8.8]/",
            "http://localhost.example.com/",
            "file:///etc/passwd",
            "about:blank",
        ] {
            assert!(none.check(url).is_ok(), "{url}");
            assert!(none.allows(url), "{url}");
        }
    }

    #[test]
    fn the_refusal_names_the_origin_to_allow() {
        let e = Origins::refusing_private()
            .check("http://0x7f.1:8080/admin")
            .unwrap_err();
        assert!(e.contains("a loopback address"), "{e}");
        assert!(
            e.contains("--allow-origin http://127.0.0.1:8080 (or --allow-origin 127.0.0.1"),
            "{e}"
        );
        let e = Origins::refusing_private()
            .check("https://[::1]/")
            .unwrap_err();
        assert!(e.contains("--allow-origin https://[::1] "), "{e}");
    }

    #[test]
    fn an_origin_allows_itself_and_a_bare_host_every_port() {
        let o = Origins::allowing(&["http://127.0.0.1:8080/".into()]).unwrap();
        assert!(o.check("http://127.0.0.1:8080/admin").is_ok());
        assert!(o.check("http://2130706433:8080/").is_ok());
        assert!(o.check("http://127.0.0.1:8081/").is_err());
        assert!(o.check("https://127.0.0.1:8080/").is_err());
        assert!(o.check("http://localhost:8080/").is_err());
        let o = Origins::allowing(&["http://localhost".into()]).unwrap();
        assert!(o.allows("http://localhost/"));
        assert!(o.allows("http://localhost:80/"));
        assert!(!o.allows("http://localhost:81/"));
        let o = Origins::allowing(&["127.0.0.1".into(), "[::1]".into(), "::1".into()]).unwrap();
        assert!(o.allows("http://127.0.0.1:1/"));
        assert!(o.allows("https://127.0.0.1:65535/"));
        assert!(o.allows("http://[::1]:5/"));
        assert!(!o.allows("http://127.0.0.2/"));
        assert!(!o.allows("http://10.0.0.1/"));
    }

    #[test]
    fn malformed_or_pointless_values_are_refused_at_start() {
        for v in [
            "",
            "http://127.0.0.1:8080/path",
            "http://127.0.0.1/?q",
            "http://u@127.0.0.1",
            "ftp://127.0.0.1",
            "127.0.0.1:8080",
            "http://127.0.0.1:port",
            "http://[::1",
            "http://1.2.3.4.5",
            "example.org",
            "https://8.8.8.8",
        ] {
            let e = Origins::allowing(&[v.into()]).unwrap_err();
            assert!(e.starts_with("--allow-origin"), "{v}: {e}");
        }
        let e = Origins::allowing(&["example.org".into()]).unwrap_err();
        assert!(e.contains("nothing to allow"), "{e}");
    }

    #[test]
    fn the_pause_patterns_cover_every_refused_range() {
        let patterns = Origins::pause_patterns();
        let glob = |p: &str, s: &str| {
            // `*` only (the patterns use no `?`).
            let parts: Vec<&str> = p.split('*').collect();
            let mut at = 0;
            for (i, part) in parts.iter().enumerate() {
                match s[at..].find(part) {
                    Some(f) if i > 0 || f == 0 => at += f + part.len(),
                    _ => return false,
                }
            }
            p.ends_with('*') || at == s.len()
        };
        for url in [
            "http://0.0.0.0/",
            "http://10.0.0.1/",
            "http://100.64.0.1/",
            "http://127.0.0.1:9/",
            "http://169.254.169.254/",
            "http://172.31.0.1/",
            "http://192.168.0.1/",
            "http://239.1.1.1/",
            "http://255.255.255.255/",
            "http://[::1]/",
            "http://localhost/",
            "http://a.localhost/",
            "http://u:p@127.0.0.1/",
        ] {
            assert!(patterns.iter().any(|p| glob(p, url)), "{url}");
        }
        assert!(!patterns.iter().any(|p| glob(p, "https://example.org/")));
    }
}
