//! A child process appends with many writers (and compacts meanwhile) and is killed with
//! SIGKILL at random moments; every append whose ticket resolved before the kill must be in the
//! reopened journal, and damage before the tail must stop the open.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use super::*;

const DIR_ENV: &str = "POLARIS_JOURNAL_CRASH_DIR";
const ROUND_ENV: &str = "POLARIS_JOURNAL_CRASH_ROUND";
const WRITERS: u128 = 32;

fn n_of(round: u128, writer: u128, i: u128) -> u128 {
    (round << 40) | (writer << 20) | i
}

/// The child: runs only when the parent starts this test binary with the directory set.
#[test]
fn child() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let round: u128 = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
    let (j, r) = Journal::open(Path::new(&dir), Options::default()).expect("the child opens");
    // Turn what the last crash left running into completions, as the host does.
    for rec in r.interrupted() {
        j.append(&completed(&rec.request_id, b"INTERRUPTED", 0))
            .unwrap();
    }
    j.append(&Record::RunStarted {
        run_id: RUN,
        started_at: round as i64,
    })
    .unwrap()
    .wait()
    .unwrap();
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        out.write_all(line.as_bytes()).unwrap();
        out.flush().unwrap();
    };
    // (After a newline: the test harness has started a line of its own.)
    say(format!("\nopen {}\n", r.receipts.len()));
    let compactor = {
        let j = j.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(40));
            if let Err(e) = j.compact() {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "error compacting: {e}");
                std::process::exit(4);
            }
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let j = j.clone();
            tasks.push(tokio::spawn(async move {
                let say = |line: String| {
                    let mut out = std::io::stdout().lock();
                    out.write_all(line.as_bytes()).unwrap();
                    out.flush().unwrap();
                };
                for i in 0.. {
                    let n = n_of(round, w, i);
                    let k = key(n);
                    let req = request(n);
                    j.append(&begun(&k, &req, 1)).unwrap().await.unwrap();
                    say(format!("b {n}\n"));
                    let rep = reply(n);
                    j.append(&completed(&k, &rep, 2)).unwrap().await.unwrap();
                    say(format!("c {n}\n"));
                    if i % 10 == 9 {
                        let ids = [ClearedId {
                            request_id: k.clone(),
                            digest: digest(&req),
                        }];
                        j.append(&Record::ReceiptsCleared(Cleared {
                            at: 3,
                            reason: "crash test",
                            operator: "test",
                            ids: &ids,
                        }))
                        .unwrap()
                        .await
                        .unwrap();
                        say(format!("x {n}\n"));
                    }
                }
            }));
        }
        // Bounded, in case nobody kills us.
        tokio::time::sleep(Duration::from_secs(20)).await;
    });
    drop(compactor);
    std::process::exit(3);
}

#[derive(Default)]
struct Confirmed {
    begun: HashSet<u128>,
    completed: HashSet<u128>,
    cleared: HashSet<u128>,
}

#[test]
fn appends_confirmed_before_a_sigkill_are_all_recovered() {
    if std::env::var_os(DIR_ENV).is_some() {
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let mut confirmed = Confirmed::default();
    let mut cuts = 0;
    for round in 0..6u128 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::crash::child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_ENV, &dir)
            .env(ROUND_ENV, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match r.read_until(b'\n', &mut line) {
                    // Only whole lines count: a line cut by the kill was never said.
                    Ok(n) if n > 0 && line.ends_with(b"\n") => {
                        let _ = tx.send(String::from_utf8_lossy(&line).trim().to_owned());
                    }
                    _ => return,
                }
            }
        });
        // The test harness says things of its own first.
        let opened = loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(l) if !l.starts_with("open ") && !l.starts_with("error") => continue,
                other => break other,
            }
        };
        if !matches!(&opened, Ok(l) if l.starts_with("open ")) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "round {round}: the child did not open the journal ({opened:?}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let until = Instant::now() + Duration::from_millis(100 + rng.u64(..500));
        let mut lines = Vec::new();
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if let Ok(l) = rx.recv_timeout(left) {
                lines.push(l);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        assert!(
            lines.len() > 10,
            "round {round}: the child appended little: {lines:?}"
        );
        for l in &lines {
            assert!(
                !l.starts_with("error"),
                "round {round}: the child failed: {l}"
            );
            let Some((what, Ok(n))) = l.split_once(' ').map(|(w, n)| (w, n.parse::<u128>())) else {
                continue;
            };
            match what {
                "b" => confirmed.begun.insert(n),
                "c" => confirmed.completed.insert(n),
                "x" => confirmed.cleared.insert(n),
                other => panic!("{other}"),
            };
        }
        // Half the time, also leave an unfinished write after the last valid block.
        if rng.u64(..2) == 1 {
            let end = check(&dir).unwrap().bytes;
            let garbage: Vec<u8> = (0..1 + rng.u64(..300))
                .map(|_| rng.u64(..256) as u8)
                .collect();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join(LOG_FILE))
                .unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &garbage, end).unwrap();
        }
        let (j, r) = Journal::open(&dir, Options::default()).unwrap();
        cuts += r.cut_tail.is_some() as u32;
        let live: std::collections::HashMap<RequestKey, &RecoveredReceipt> = r
            .receipts
            .iter()
            .map(|r| (r.request_id.clone(), r))
            .collect();
        let tombs: HashSet<RequestKey> =
            r.tombstones.iter().map(|t| t.request_id.clone()).collect();
        for n in &confirmed.begun {
            let k = key(*n);
            assert!(
                live.contains_key(&k) || tombs.contains(&k),
                "round {round}: begun {n} lost"
            );
        }
        for n in &confirmed.completed {
            let k = key(*n);
            match live.get(&k) {
                Some(rec) => {
                    let c = rec.completion.as_ref().expect("a confirmed completion");
                    assert_eq!(c.reply[..], reply(*n)[..], "round {round}: {n}");
                }
                None => assert!(tombs.contains(&k), "round {round}: completed {n} lost"),
            }
        }
        for n in &confirmed.cleared {
            assert!(tombs.contains(&key(*n)), "round {round}: clear of {n} lost");
        }
        drop(j);
    }
    assert!(confirmed.completed.len() > 100);
    eprintln!(
        "crash test: {} begun, {} completed, {} cleared confirmed; {cuts} torn tails cut",
        confirmed.begun.len(),
        confirmed.completed.len(),
        confirmed.cleared.len()
    );

    // Damage before the tail is never accepted: the open stops, naming the offset.
    let (j, _) = Journal::open(&dir, Options::default()).unwrap();
    receipts(&j, 1 << 60..(1 << 60) + 3);
    drop(j);
    let mut bytes = std::fs::read(dir.join(LOG_FILE)).unwrap();
    let end = check(&dir).unwrap().bytes as usize;
    let at = format::HEADER_LEN + (end - format::HEADER_LEN) / 3;
    bytes[at] ^= 0xff;
    std::fs::write(dir.join(LOG_FILE), &bytes).unwrap();
    match Journal::open(&dir, Options::default()) {
        Err(Error::Corrupt { offset, .. }) => assert!(offset as usize <= at),
        other => panic!("a flipped byte at {at} of {end} was accepted: {other:?}"),
    }
}
