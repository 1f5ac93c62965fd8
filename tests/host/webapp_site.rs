//! The realistic site of `polaris::webapp` (SPEC §15) over plain HTTP, without a browser: the
//! controls are in the markup, each side effect is counted once by the server, the login sets
//! its cookie, the second origin serves the payment frame, uploads are parsed, and the request
//! log holds what arrived. The browser tests can then trust the app's counts as the truth.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use polaris::webapp::{SitePost, Upload, WebApp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP answer, read to the end of its connection.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request with `Connection: close` and reads the whole answer.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connects");
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.expect("writes");
        stream.write_all(body).await.expect("writes the body");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("reads");
        raw
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("the app answers within 10 s");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8(raw[..split].to_vec()).expect("an ASCII head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let body = String::from_utf8_lossy(&raw[split + 4..]).into_owned();
    Answer {
        status,
        headers,
        body,
    }
}

async fn get(addr: SocketAddr, path: &str) -> Answer {
    send(addr, "GET", path, &[], b"").await
}

async fn get_with_cookie(addr: SocketAddr, path: &str, cookie: &str) -> Answer {
    send(addr, "GET", path, &[("Cookie", cookie)], b"").await
}

async fn post_form(addr: SocketAddr, path: &str, form: &str) -> Answer {
    send(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/x-www-form-urlencoded")],
        form.as_bytes(),
    )
    .await
}

fn assert_contains(body: &str, needles: &[&str]) {
    for needle in needles {
        assert!(body.contains(needle), "{needle:?} missing from:\n{body}");
    }
}

#[tokio::test]
async fn the_site_renders_its_controls() {
    let app = WebApp::start().await.expect("the web app starts");
    let r = get(app.addr(), "/site").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let card_src = format!("src=\"{}\"", app.card_url());
    assert_contains(
        &r.body,
        &[
            "<p id=\"who\">Not logged in</p>",
            "<p id=\"status\" role=\"status\">Ready</p>",
            "<form id=\"post\" method=\"post\" action=\"/site/posts\">",
            "<label for=\"title\">Title</label><input id=\"title\" name=\"title\">",
            "<label for=\"body\">Body</label><textarea id=\"body\" name=\"body\"",
            "<label for=\"category\">Category</label><select id=\"category\" name=\"category\">",
            "<option value=\"news\">News</option>",
            "<option value=\"guide\">How-to guide</option>",
            "<option value=\"op-ed\">Opinion</option>",
            "<input type=\"checkbox\" id=\"urgent\" name=\"urgent\" value=\"yes\">",
            "for=\"urgent\">Urgent</label>",
            "<legend>Visibility</legend>",
            "id=\"visibility-public\" name=\"visibility\" value=\"public\" checked>",
            "for=\"visibility-public\">Public</label>",
            "id=\"visibility-private\" name=\"visibility\" value=\"private\">",
            "for=\"visibility-private\">Private</label>",
            "<button id=\"publish\" type=\"submit\">Publish</button>",
            "<a id=\"drafts\" href=\"/site/drafts\">Drafts</a>",
            "href=\"/site/help\" target=\"_blank\">Open help</a>",
            "action=\"/site/delete\"",
            "onsubmit=\"return confirm('Delete the draft?')\"",
            ">Delete draft</button>",
            "action=\"/site/upload\" enctype=\"multipart/form-data\"",
            "<label for=\"attachment\">Attachment</label>",
            "<input type=\"file\" id=\"attachment\" name=\"attachment\">",
            ">Upload</button>",
            "<polaris-widget id=\"widget\"></polaris-widget>",
            "attachShadow({mode: 'open'})",
            "aria-label=\"Note\"",
            ">Save note</button>",
            "fetch('/site/notes'",
            "b.textContent = 'Load more'",
            "fetch('/site/more'",
            "}, 1000);",
            "<iframe id=\"confirm-frame\" title=\"Confirmation\" src=\"/site/frame\">",
            card_src.as_str(),
        ],
    );
    // "Load more" is not a button in the markup: the script adds it later.
    assert!(!r.body.contains(">Load more</button>"), "{}", r.body);
    assert!(app
        .card_url()
        .starts_with(&format!("http://127.0.0.1:{}/", app.card_addr().port())));

    // Each label names exactly one control.
    let fors: Vec<&str> = r
        .body
        .split("<label ")
        .skip(1)
        .filter_map(|l| l.split("for=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(fors.len(), 7, "{fors:?}");
    for id in fors {
        let count = r.body.matches(&format!("id=\"{id}\"")).count();
        assert_eq!(count, 1, "label for {id:?} matches {count} elements");
    }

    let frame = get(app.addr(), "/site/frame").await;
    assert_eq!(frame.status, 200);
    assert_contains(
        &frame.body,
        &[
            "action=\"/site/frame/confirm\"",
            ">Confirm in frame</button>",
            "<p id=\"status\" role=\"status\">Not confirmed</p>",
        ],
    );
    let drafts = get(app.addr(), "/site/drafts").await;
    assert_eq!(drafts.status, 200);
    assert_contains(
        &drafts.body,
        &[
            "<p id=\"who\">Not logged in</p>",
            "<li>Untitled draft</li>",
            "<a id=\"back\" href=\"/site\">Back to the form</a>",
        ],
    );
    let help = get(app.addr(), "/site/help").await;
    assert_eq!(help.status, 200);
    assert_contains(&help.body, &["<h1>Help</h1>"]);
    let login = get(app.addr(), "/site/login").await;
    assert_eq!(login.status, 200);
    assert_contains(
        &login.body,
        &[
            "<label for=\"username\">Username</label>",
            "<label for=\"password\">Password</label>",
            "type=\"password\"",
            ">Log in</button>",
        ],
    );

    // The original form is untouched.
    let old = get(app.addr(), "/").await;
    assert_eq!(old.status, 200);
    assert_contains(
        &old.body,
        &["action=\"/posts\"", "<p id=\"status\">Draft</p>"],
    );
    assert_eq!(get(app.addr(), "/site/nowhere").await.status, 404);
}

#[tokio::test]
async fn a_publish_counts_once_and_redirects_to_what_was_stored() {
    let app = WebApp::start().await.expect("the web app starts");
    assert_eq!(app.site_posts(), 0);
    assert_eq!(app.site_last_post(), None);

    let r = post_form(
        app.addr(),
        "/site/posts",
        "title=Hello+world&body=First+line&category=guide&urgent=yes&visibility=private",
    )
    .await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/site/posts/1"));
    assert_eq!(app.site_posts(), 1);
    // The original form's counters are apart.
    assert_eq!(app.commits(), 0);
    assert_eq!(app.received(), 0);
    assert_eq!(
        app.site_last_post(),
        Some(SitePost {
            n: 1,
            title: "Hello world".into(),
            body: "First line".into(),
            category: "guide".into(),
            urgent: true,
            visibility: "private".into(),
            author: None,
        })
    );
    let saved = get(app.addr(), "/site/posts/1").await;
    assert_eq!(saved.status, 200);
    assert_contains(
        &saved.body,
        &[
            "<p id=\"status\" role=\"status\">Published #1</p>",
            "<dd id=\"saved-title\">Hello world</dd>",
            "<dd id=\"saved-category\">guide</dd>",
            "<dd id=\"saved-urgent\">yes</dd>",
            "<dd id=\"saved-visibility\">private</dd>",
            "<dd id=\"saved-author\">anonymous</dd>",
        ],
    );

    // An unchecked box is not sent: the post is not urgent.
    let r = post_form(
        app.addr(),
        "/site/posts",
        "title=%3Cb%3EBold%3C%2Fb%3E&body=&category=news&visibility=public",
    )
    .await;
    assert_eq!(r.header("location"), Some("/site/posts/2"));
    assert_eq!(app.site_posts(), 2);
    let last = app.site_last_post().expect("a second post");
    assert_eq!((last.n, last.urgent), (2, false));
    let saved = get(app.addr(), "/site/posts/2").await;
    assert_contains(
        &saved.body,
        &[
            "Published #2",
            "<dd id=\"saved-title\">&lt;b&gt;Bold&lt;/b&gt;</dd>",
            "<dd id=\"saved-urgent\">no</dd>",
        ],
    );

    for missing in ["/site/posts/3", "/site/posts/0", "/site/posts/x"] {
        assert_eq!(get(app.addr(), missing).await.status, 404, "{missing}");
    }
    assert_eq!(app.site_posts(), 2);
}

#[tokio::test]
async fn a_login_sets_the_session_cookie_the_pages_recognise() {
    let app = WebApp::start().await.expect("the web app starts");
    let refused = post_form(app.addr(), "/site/login", "username=alice&password=").await;
    assert_eq!(refused.status, 422);
    assert_eq!(refused.header("set-cookie"), None);
    assert_contains(
        &refused.body,
        &["Rejected: a username and a password are required"],
    );
    assert_eq!(app.site_logins(), 0);

    let r = post_form(app.addr(), "/site/login", "username=alice&password=secret").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/site"));
    let cookie = r.header("set-cookie").expect("a session cookie");
    assert!(cookie.starts_with("session="), "{cookie}");
    assert!(cookie.contains("; HttpOnly"), "{cookie}");
    assert!(cookie.contains("; Path=/"), "{cookie}");
    assert_eq!(app.site_logins(), 1);
    let session = cookie.split(';').next().expect("name=value").to_owned();
    assert!(session.len() > "session=".len(), "{session}");

    let page = get_with_cookie(app.addr(), "/site", &session).await;
    assert_eq!(page.status, 200);
    assert_contains(&page.body, &["<p id=\"who\">Logged in as alice</p>"]);
    assert!(!page.body.contains("Sign in"), "{}", page.body);
    let among = get_with_cookie(
        app.addr(),
        "/site/drafts",
        &format!("theme=dark; {session}"),
    )
    .await;
    assert_contains(&among.body, &["<p id=\"who\">Logged in as alice</p>"]);

    for (cookie, what) in [("", "none"), ("session=forged", "a forged token")] {
        let page = get_with_cookie(app.addr(), "/site", cookie).await;
        assert_eq!(page.status, 200, "{what}");
        assert_contains(&page.body, &["<p id=\"who\">Not logged in</p>", "Sign in"]);
    }

    // A post made while logged in carries its author.
    let r = send(
        app.addr(),
        "POST",
        "/site/posts",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Cookie", session.as_str()),
        ],
        b"title=Signed&category=news&visibility=public",
    )
    .await;
    assert_eq!(r.status, 303);
    assert_eq!(
        app.site_last_post().and_then(|p| p.author),
        Some("alice".to_owned())
    );

    // Names are shown as text, never as markup.
    let r = post_form(app.addr(), "/site/login", "username=%3Cb%3Ebob&password=x").await;
    let other = r.header("set-cookie").expect("a second cookie");
    let other = other.split(';').next().expect("name=value");
    assert_ne!(other, session);
    assert_eq!(app.site_logins(), 2);
    let page = get_with_cookie(app.addr(), "/site", other).await;
    assert_contains(&page.body, &["<p id=\"who\">Logged in as &lt;b&gt;bob</p>"]);
}

#[tokio::test]
async fn the_second_origin_serves_the_card_frame_and_counts_payments() {
    let app = WebApp::start().await.expect("the web app starts");
    let card = app.card_addr();
    assert_ne!(card.port(), app.addr().port());

    let r = get(card, "/card").await;
    assert_eq!(r.status, 200);
    assert_contains(
        &r.body,
        &[
            "action=\"/card/pay\"",
            "<label for=\"card-number\">Card number</label>",
            "<button id=\"pay\" type=\"submit\">Pay</button>",
            "<p id=\"status\" role=\"status\">Unpaid</p>",
        ],
    );

    let refused = post_form(card, "/card/pay", "number=").await;
    assert_eq!(refused.status, 422);
    assert_eq!(app.card_payments(), 0);

    let r = post_form(card, "/card/pay", "number=4242+4242+4242+4242").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/card?paid=1"));
    assert_eq!(app.card_payments(), 1);
    assert_eq!(
        app.last_card_number().as_deref(),
        Some("4242 4242 4242 4242")
    );
    assert_contains(&get(card, "/card?paid=1").await.body, &["Paid #1"]);

    // Each origin serves only its own pages.
    assert_eq!(
        post_form(app.addr(), "/card/pay", "number=1").await.status,
        404
    );
    assert_eq!(get(app.addr(), "/card").await.status, 404);
    assert_eq!(get(card, "/site").await.status, 404);
    assert_eq!(get(card, "/").await.status, 404);
    assert_eq!(app.card_payments(), 1);
}

/// A multipart body with one file in the `attachment` field and a text field before it.
fn multipart(boundary: &str, filename: &str, content: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"comment\"\r\n\r\nsee attached\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"attachment\"; \
         filename=\"{filename}\"\r\nContent-Type: text/plain\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

#[tokio::test]
async fn an_upload_records_the_file_name_and_size() {
    let app = WebApp::start().await.expect("the web app starts");
    let boundary = "----PolarisBoundary7MA4YWxk";
    let content_type = format!("multipart/form-data; boundary={boundary}");
    // Content that looks like a boundary without being one.
    let content = b"first line\r\n--PolarisBoundary\r\n----PolarisBoundary7MA4YWx\r\nlast";
    let r = send(
        app.addr(),
        "POST",
        "/site/upload",
        &[("Content-Type", content_type.as_str())],
        &multipart(boundary, "report.txt", content),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_contains(
        &r.body,
        &[format!(
            "<p id=\"status\" role=\"status\">Uploaded report.txt ({} bytes)</p>",
            content.len()
        )
        .as_str()],
    );
    let one = vec![Upload {
        n: 1,
        name: "report.txt".into(),
        size: content.len() as u64,
    }];
    assert_eq!(app.site_uploads(), one);

    // Refusals count nothing.
    let no_file = send(
        app.addr(),
        "POST",
        "/site/upload",
        &[("Content-Type", content_type.as_str())],
        &multipart(boundary, "", b""),
    )
    .await;
    assert_eq!(no_file.status, 422);
    let unterminated = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"attachment\"; \
         filename=\"a.txt\"\r\n\r\nno closing delimiter"
    );
    let bad: [(&str, &[u8]); 3] = [
        ("multipart/form-data", b"--x\r\n"),
        ("application/x-www-form-urlencoded", b"attachment=a.txt"),
        (content_type.as_str(), unterminated.as_bytes()),
    ];
    for (ct, body) in bad {
        let r = send(
            app.addr(),
            "POST",
            "/site/upload",
            &[("Content-Type", ct)],
            body,
        )
        .await;
        assert_eq!(r.status, 400, "{ct}");
    }
    let too_large = send(
        app.addr(),
        "POST",
        "/site/upload",
        &[
            ("Content-Type", content_type.as_str()),
            ("Content-Length", "2000000"),
        ],
        b"",
    )
    .await;
    assert_eq!(too_large.status, 413);
    assert_eq!(app.site_uploads(), one);

    let r = send(
        app.addr(),
        "POST",
        "/site/upload",
        &[("Content-Type", content_type.as_str())],
        &multipart(boundary, "empty.bin", b""),
    )
    .await;
    assert_contains(&r.body, &["Uploaded empty.bin (0 bytes)"]);
    assert_eq!(app.site_uploads().len(), 2);
    assert_eq!(app.site_uploads()[1].n, 2);
}

#[tokio::test]
async fn the_frame_note_delete_and_load_more_posts_are_counted() {
    let app = WebApp::start().await.expect("the web app starts");

    let r = post_form(app.addr(), "/site/frame/confirm", "").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/site/frame?confirmed=1"));
    assert_eq!(app.site_frame_confirms(), 1);
    assert_contains(
        &get(app.addr(), "/site/frame?confirmed=1").await.body,
        &["Frame confirmed #1"],
    );

    let r = post_form(app.addr(), "/site/notes", "note=Remember+milk").await;
    assert_eq!((r.status, r.body.as_str()), (200, "1"));
    assert_eq!(app.site_notes(), 1);
    assert_eq!(app.site_last_note().as_deref(), Some("Remember milk"));

    let r = post_form(app.addr(), "/site/delete", "").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/site?deleted=1"));
    assert_eq!(app.site_deletes(), 1);
    assert_eq!(app.deletes(), 0, "the items page's deletes are apart");
    assert_contains(
        &get(app.addr(), "/site?deleted=1").await.body,
        &["<p id=\"status\" role=\"status\">Draft deleted #1</p>"],
    );
    assert_contains(
        &get(app.addr(), "/site/drafts").await.body,
        &["<p id=\"draft-list\">No drafts</p>"],
    );

    for n in 1..=2 {
        let r = send(app.addr(), "POST", "/site/more", &[], b"").await;
        assert_eq!((r.status, r.body), (200, n.to_string()));
    }
    assert_eq!(app.site_more(), 2);

    // Reading those endpoints commits nothing.
    for path in [
        "/site/notes",
        "/site/delete",
        "/site/more",
        "/site/frame/confirm",
    ] {
        assert_eq!(get(app.addr(), path).await.status, 404, "{path}");
    }
    assert_eq!(
        (
            app.site_frame_confirms(),
            app.site_notes(),
            app.site_deletes(),
            app.site_more()
        ),
        (1, 1, 1, 2)
    );
}

#[tokio::test]
async fn the_request_log_holds_every_request_of_both_origins() {
    let before = SystemTime::now();
    let app = WebApp::start().await.expect("the web app starts");
    assert!(app.requests().is_empty());
    let main = app.addr();
    let card = app.card_addr();

    get(main, "/site?from=test").await;
    post_form(card, "/card/pay", "number=1").await;
    get(main, "/nowhere").await;
    get(main, "/").await;
    send(main, "POST", "/site/more", &[], b"").await;
    let after = SystemTime::now();

    let log = app.requests();
    let seen: Vec<(&str, &str, u16)> = log
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.port))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("GET", "/site", main.port()),
            ("POST", "/card/pay", card.port()),
            ("GET", "/nowhere", main.port()),
            ("GET", "/", main.port()),
            ("POST", "/site/more", main.port()),
        ]
    );
    for r in &log {
        assert!(before <= r.at && r.at <= after, "{r:?}");
    }
    assert!(log.windows(2).all(|w| w[0].at <= w[1].at), "{log:?}");
}
