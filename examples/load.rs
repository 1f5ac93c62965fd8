//! Polaris's performance measured the way users run it: the release `polaris serve` binary in its
//! own process, this load client in another, and the baselines measured in the same run with the
//! same client — a minimal batched JSON echo server (this example again, as a child process) and
//! `redis-benchmark … SET key:__rand_int__ v NX` against a private `redis-server`.
//!
//! `cargo run --release --example load -- --table` builds the release binary if needed, runs every
//! system alternately (3 repetitions by default) and prints a markdown table of medians, ranges,
//! the host's CPU per request (from `/proc/PID/stat`) and ratios against the baselines of the
//! same run. `--help` lists the knobs; `--hold SECS` keeps a fresh-fill load on a host for a
//! profiler to attach to.
//!
//! The client: 2 tokio workers, 32 connections each keeping 64 requests in flight, one tokio task
//! per connection, a fresh request ID per request, 165-byte `page.fill` frames. Each connection
//! fills in its own Polaris task, or all 32 fill in one shared task.

#[path = "support/child.rs"]
mod child;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::UnixListener;
use tokio::runtime::Runtime;

/// The allocator the `polaris` binary uses, so the client costs what a Rust client would.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Connections, as in the issue's client shape.
const CONNECTIONS: usize = 32;
/// Requests each connection keeps in flight.
const WINDOW: usize = 64;
/// The length every `page.fill` frame has, newline included.
const FRAME_BYTES: usize = 165;
/// Hex digits of the sequence number in each frame's value (what fits in [`FRAME_BYTES`] beside
/// a UUID-long task ID): unique for the first 16^10 requests of a lane.
const VALUE_DIGITS: usize = 10;

#[derive(Parser, Debug)]
#[command(about = "Outside load client: Polaris vs a JSON echo vs Redis SET NX, alternated")]
struct Args {
    /// Run every system alternately and print the markdown table.
    #[arg(long)]
    table: bool,
    /// Keep a fresh-fill load on one host for SECS seconds (prints the host's PID first), for a
    /// profiler such as `perf record -p PID`.
    #[arg(long, value_name = "SECS")]
    hold: Option<u64>,
    /// Internal: serve the minimal JSON echo on this socket path.
    #[arg(long, value_name = "SOCK", hide = true)]
    echo_server: Option<PathBuf>,
    /// Repetitions of every row.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Requests per throughput measurement.
    #[arg(long, default_value_t = 1_000_000)]
    requests: u64,
    /// Receipts in the book for the flat-with-size rows (0 skips them).
    #[arg(long, default_value_t = 5_000_000)]
    book: u64,
    /// Seconds of the open-loop latency run at half the measured peak (0 skips it).
    #[arg(long, default_value_t = 5)]
    latency_secs: u64,
    /// Writes every round trip of Polaris's first latency run to FILE, one line each: the lane
    /// (connection), when its batch was written and when its reply arrived (ns from the start),
    /// to see when and where a tail happens; its first line (`#`) gives the start on
    /// CLOCK_MONOTONIC, the clock of `perf record -k CLOCK_MONOTONIC`.
    #[arg(long, value_name = "FILE")]
    latency_trace: Option<PathBuf>,
    /// The `polaris` binary [default: target/release/polaris, built first under `cargo run`].
    #[arg(long, value_name = "PATH")]
    polaris: Option<PathBuf>,
    /// Extra arguments for every `polaris serve` (split on whitespace).
    #[arg(
        long,
        value_name = "ARGS",
        default_value = "",
        allow_hyphen_values = true
    )]
    serve_args: String,
    /// With --hold: replay the same frames over and over instead of fresh ones.
    #[arg(long)]
    replays: bool,
    /// With --hold: params keys in SPEC's example order (not canonical) instead of sorted.
    #[arg(long)]
    spec_order: bool,
    /// With --hold: every connection fills in one Polaris task shared by all 32, instead of a
    /// task of its own.
    #[arg(long)]
    shared_task: bool,
    /// With --hold: offer this many fresh fills per second open loop (each lane once a
    /// millisecond, the lanes spread over it, as the latency rows do) instead of the closed loop's 64 in flight per connection, so the host
    /// sees the small batches of a load below its peak; prints p50/p99/p999 at the end.
    #[arg(long, value_name = "PER_SEC")]
    rate: Option<f64>,
    /// With --hold: the host's `--capacity` (default: room for what the hold can create, 4 M
    /// fills a second closed loop or the offered rate open loop, plus 2 M).
    #[arg(long, value_name = "N")]
    capacity: Option<u64>,
    /// Skip the Redis rows even when Redis is installed.
    #[arg(long)]
    no_redis: bool,
    /// Only the journal's rows: fresh fills with and without the journal against Redis with
    /// `appendfsync always`, and one client's round trip with and without it against the
    /// `fdatasync` p50 of this disk, all in one run.
    #[arg(long)]
    journal_table: bool,
}

fn main() {
    let args = Args::parse();
    if let Some(sock) = &args.echo_server {
        echo_server(sock);
        return;
    }
    let result = if let Some(secs) = args.hold {
        hold(&args, secs)
    } else if args.journal_table {
        journal_table(&args)
    } else if args.table {
        table(&args)
    } else {
        Err(
            "nothing to do: pass --table (the whole measurement), --journal-table or --hold SECS"
                .into(),
        )
    };
    if let Err(e) = result {
        eprintln!("load: {e}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------------
// Frames

/// Writes `page.fill` frames whose request IDs are UUID-shaped and unique per (generator,
/// sequence number): 20 random hex digits fixed per generator, then the sequence number in the
/// last 12. The value is that sequence number's last [`VALUE_DIGITS`] digits (padded with `!` to
/// the frame's length), so no two fills (and no two stored
/// replies) are alike, as an agent's are not. Replaying a generator's range sends the very same
/// frames again.
#[derive(Clone)]
struct Frames {
    /// Up to the ID's sequence number.
    head: Vec<u8>,
    /// From after the ID to the value's sequence number.
    mid: Vec<u8>,
    /// From after the value's sequence number to the newline.
    tail: Vec<u8>,
}

impl Frames {
    /// `sorted`: params keys in sorted order, as Polaris's client library writes them (the
    /// canonical form); else in the order of SPEC's example (`taskId`, `target`, `value`).
    fn new(task: &str, sorted: bool) -> Frames {
        let r = uuid::Uuid::new_v4().simple().to_string();
        // Version 4, and one of the four variant digits, as a v4 UUID has.
        let variant = b"89ab"[usize::from(r.as_bytes()[16]) & 3] as char;
        let head = format!(
            "{{\"id\":\"{}-{}-4{}-{variant}{}-",
            &r[0..8],
            &r[8..12],
            &r[13..16],
            &r[17..20],
        );
        let params_head = if sorted {
            format!("{{\"target\":\"#title\",\"taskId\":\"{task}\",\"value\":\"")
        } else {
            format!("{{\"taskId\":\"{task}\",\"target\":\"#title\",\"value\":\"")
        };
        let mid = format!("\",\"method\":\"page.fill\",\"params\":{params_head}");
        // The value pads every frame to FRAME_BYTES whatever the task ID's length.
        let fixed = head.len() + 12 + mid.len() + VALUE_DIGITS + "\"}}\n".len();
        let tail = "!".repeat(FRAME_BYTES.saturating_sub(fixed)) + "\"}}\n";
        Frames {
            head: head.into_bytes(),
            mid: mid.into_bytes(),
            tail: tail.into_bytes(),
        }
    }

    fn push(&self, out: &mut Vec<u8>, seq: u64) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digits: [u8; 12] =
            std::array::from_fn(|i| HEX[((seq >> ((11 - i) * 4)) & 0xf) as usize]);
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&digits);
        out.extend_from_slice(&self.mid);
        out.extend_from_slice(&digits[12 - VALUE_DIGITS..]);
        out.extend_from_slice(&self.tail);
    }

    fn len(&self) -> usize {
        self.head.len() + 12 + self.mid.len() + VALUE_DIGITS + self.tail.len()
    }
}

/// The sequence number in a reply's request ID (the last 12 hex digits of a `Frames` ID).
fn reply_seq(line: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(line, b"\"id\":\"")? + 6;
    let end = at + memchr::memchr(b'"', &line[at..])?;
    let hex = std::str::from_utf8(line.get(end.checked_sub(12)?..end)?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}

// ---------------------------------------------------------------------------------------------
// The closed-loop client

/// A connection of the client or of the JSON echo, registered with its runtime for reading
/// only.
///
/// A socket registered for writing as well (as Tokio's own streams are) has its runtime woken
/// each time the other end reads and so frees room in it: a wake-up the reader pays for inside
/// its read, and the writer pays for again by waking to find nothing new. Polaris's host
/// registers its side for reading only, and `redis-benchmark` asks for room only while a write
/// of its own waits; the client and the echo do the same, so neither the servers nor the
/// baseline pay for it. A read that fills less than its room marks the socket drained, as the
/// host's does, so nobody asks the kernel once more per batch only to hear that nothing is
/// there.
struct LeanSocket {
    fd: AsyncFd<std::os::unix::net::UnixStream>,
}

impl LeanSocket {
    /// Takes over a connected stream (made non-blocking here).
    fn new(stream: std::os::unix::net::UnixStream) -> std::io::Result<LeanSocket> {
        stream.set_nonblocking(true)?;
        // SAFETY: the stream owns its descriptor and is owned by the `AsyncFd` from here on,
        // so the descriptor stays open, and the same, for as long as it is registered.
        let fd = unsafe { AsyncFd::register_with_interest(stream, Interest::READABLE) }?;
        Ok(LeanSocket { fd })
    }

    /// A second handle on the same connection, for a thread that writes on its own.
    fn try_clone_std(&self) -> std::io::Result<std::os::unix::net::UnixStream> {
        self.fd.get_ref().try_clone()
    }

    /// Reads what has arrived, waiting until something has.
    async fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::Read as _;
        let wanted = buf.len();
        loop {
            let mut ready = self.fd.readable().await?;
            let mut got = None;
            // A short read keeps what it read and says `WouldBlock`, which clears the
            // readiness it saw (bytes arriving meanwhile set it afresh).
            let read = ready.try_io(|fd| {
                let n = fd.get_ref().read(buf)?;
                got = Some(n);
                if n > 0 && n < wanted {
                    Err(std::io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(n)
                }
            });
            match (read, got) {
                (Ok(Ok(n)), _) | (Err(_), Some(n)) => return Ok(n),
                (Ok(Err(e)), _) if e.kind() == std::io::ErrorKind::Interrupted => {}
                (Ok(Err(e)), _) => return Err(e),
                (Err(_), None) => {}
            }
        }
    }

    /// Writes all of `bytes`, waiting for room (through a registration for writing made for
    /// that wait alone) whenever the socket is full.
    async fn write_all(&self, mut bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        while !bytes.is_empty() {
            match self.fd.get_ref().write(bytes) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let dup = self.try_clone_std()?;
                    // SAFETY: the duplicate owns its descriptor and is owned by the `AsyncFd`,
                    // so it stays open, and the same, while registered.
                    let room = unsafe { AsyncFd::register_with_interest(dup, Interest::WRITABLE) }?;
                    let _ = room.writable().await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

async fn connect(path: &Path) -> Result<LeanSocket, String> {
    std::os::unix::net::UnixStream::connect(path)
        .and_then(LeanSocket::new)
        .map_err(|e| format!("cannot connect to {}: {e}", path.display()))
}

/// Sends one request line and returns its reply line.
async fn call(s: &mut LeanSocket, line: &str) -> Result<String, String> {
    s.write_all(line.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    loop {
        let n = s.read(&mut byte).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        buf.extend_from_slice(&byte[..n]);
        if buf.ends_with(b"\n") {
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
    }
}

/// Starts a Polaris task and returns its ID; a JSON echo answers without one, so any ID of the
/// same length serves there.
async fn start_task(s: &mut LeanSocket) -> Result<String, String> {
    let line = format!(
        "{{\"id\":\"{}\",\"method\":\"task.start\",\"params\":{{\"title\":\"load\"}}}}\n",
        uuid::Uuid::new_v4()
    );
    let reply = call(s, &line).await?;
    let v: serde_json::Value =
        serde_json::from_str(&reply).map_err(|e| format!("task.start reply {reply:?}: {e}"))?;
    Ok(v["result"]["taskId"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| "t-0123456789abcdef0123456789abcdef".into()))
}

/// The longest frame sent (FRAME_BYTES unless a task ID is longer than 42 characters), for the
/// table's header.
static LONGEST_FRAME: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One connection's frames and the range of sequence numbers it sends.
struct Lane {
    stream: LeanSocket,
    frames: Frames,
}

/// Opens the 32 connections; each gets a task of its own, or all share the first one's.
async fn lanes(path: &Path, shared_task: bool, sorted: bool) -> Result<Vec<Lane>, String> {
    let mut v = Vec::with_capacity(CONNECTIONS);
    let mut shared = None;
    for _ in 0..CONNECTIONS {
        let mut stream = connect(path).await?;
        let task = match (&shared, shared_task) {
            (Some(t), true) => String::clone(t),
            _ => start_task(&mut stream).await?,
        };
        if shared_task {
            shared.get_or_insert_with(|| task.clone());
        }
        let frames = Frames::new(&task, sorted);
        LONGEST_FRAME.fetch_max(frames.len(), Ordering::Relaxed);
        v.push(Lane { stream, frames });
    }
    Ok(v)
}

/// Sends `seqs` keeping `WINDOW` in flight and checks that every reply says `"ok":true`.
async fn drive(
    s: &mut LeanSocket,
    frames: &Frames,
    seqs: std::ops::Range<u64>,
) -> Result<(), String> {
    let ok = memchr::memmem::Finder::new(b"\"ok\":true");
    let mut out = Vec::with_capacity(WINDOW * FRAME_BYTES);
    let mut inbuf = vec![0u8; 64 * 1024];
    let mut filled = 0;
    let (mut sent, mut received) = (seqs.start, seqs.start);
    while received < seqs.end {
        out.clear();
        while sent < seqs.end && sent - received < WINDOW as u64 {
            frames.push(&mut out, sent);
            sent += 1;
        }
        if !out.is_empty() {
            s.write_all(&out).await.map_err(|e| format!("write: {e}"))?;
        }
        let n = s
            .read(&mut inbuf[filled..])
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection mid-run".into());
        }
        filled += n;
        let mut pos = 0;
        while let Some(i) = memchr::memchr(b'\n', &inbuf[pos..filled]) {
            let line = &inbuf[pos..pos + i];
            if ok.find(line).is_none() {
                return Err(format!(
                    "a reply was not ok: {}",
                    String::from_utf8_lossy(line)
                ));
            }
            received += 1;
            pos += i + 1;
        }
        inbuf.copy_within(pos..filled, 0);
        filled -= pos;
        if filled == inbuf.len() {
            inbuf.resize(inbuf.len() * 2, 0);
        }
    }
    Ok(())
}

/// Runs `per_lane` requests on every lane at once, starting at sequence number `from`; returns
/// the wall time.
fn run_lanes(
    rt: &Runtime,
    lanes: &mut Vec<Lane>,
    from: u64,
    per_lane: u64,
) -> Result<Duration, String> {
    let taken: Vec<Lane> = std::mem::take(lanes);
    let t0 = Instant::now();
    let back = rt.block_on(async move {
        let handles: Vec<_> = taken
            .into_iter()
            .map(|mut lane| {
                tokio::spawn(async move {
                    let r = drive(&mut lane.stream, &lane.frames, from..from + per_lane).await;
                    (lane, r)
                })
            })
            .collect();
        let mut back = Vec::new();
        for h in handles {
            back.push(h.await.map_err(|e| format!("a client task failed: {e}"))?);
        }
        Ok::<_, String>(back)
    })?;
    let wall = t0.elapsed();
    for (lane, r) in back {
        r?;
        lanes.push(lane);
    }
    Ok(wall)
}

// ---------------------------------------------------------------------------------------------
// The open-loop client (latency at a fixed offered rate)

/// How many times a millisecond the open loop's pacer sends: the 32 lanes are spread over these
/// slots, so each lane still sends one batch a millisecond (the batch size of the load) but the
/// lanes do not all send at the same instant — independent clients do not share a clock tick.
const PACER_SLOTS: u64 = 8;

/// Offers `rate` requests/s spread over the 32 connections for `secs` seconds, whatever the
/// replies do: each lane sends what is due once a millisecond, the lanes spread over
/// [`PACER_SLOTS`] instants of the millisecond (`burst`: all lanes at the same instant instead,
/// the worst case of synchronised clients), after [`OPEN_LOOP_WARM_UP`] at the same rate whose
/// requests are answered but not timed. Returns the round trips (µs, from the write of each
/// request's batch to its reply) and the rate achieved.
fn open_loop(
    rt: &Runtime,
    lanes: Vec<Lane>,
    rate: f64,
    secs: u64,
    burst: bool,
) -> Result<(Vec<u32>, f64), String> {
    open_loop_traced(rt, lanes, rate, secs, burst, OPEN_LOOP_WARM_UP, None)
}

/// How long the open loop offers its rate before it times requests: as the closed-loop rows
/// warm up, so the first milliseconds of fresh connections and a client just started are not
/// the tail.
const OPEN_LOOP_WARM_UP: Duration = Duration::from_secs(1);

/// Each round trip of an open-loop run, and when the run started on the machine's clock.
#[derive(Default)]
struct Trace {
    /// `CLOCK_MONOTONIC` (ns) when the lanes started: what `perf record -k CLOCK_MONOTONIC`
    /// stamps its samples with, so a tail in the trace can be found in a profile of the host.
    start_monotonic_ns: u64,
    /// Each round trip: its lane, when its batch was written and when its reply arrived (ns
    /// from the lanes' start).
    trips: Vec<(usize, u64, u64)>,
}

impl Trace {
    /// The trace as its file holds it: a `#` line with the start, then a line a round trip.
    fn text(&self) -> String {
        let mut text = String::with_capacity(self.trips.len() * 32 + 64);
        let (secs, nanos) = (
            self.start_monotonic_ns / 1_000_000_000,
            self.start_monotonic_ns % 1_000_000_000,
        );
        let _ = writeln!(
            text,
            "# lane sent replied (ns from the start); started at CLOCK_MONOTONIC {secs}.{nanos:09} s"
        );
        for (lane, sent, replied) in &self.trips {
            let _ = writeln!(text, "{lane} {sent} {replied}");
        }
        text
    }
}

/// `CLOCK_MONOTONIC` now, in ns: the clock [`Instant`] reads on Linux.
fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One lane's sending side in the open loop: the socket (a second handle on the lane's
/// connection, written from the pacer thread), its frames, and when each request was written.
struct PacedLane {
    socket: std::os::unix::net::UnixStream,
    frames: Frames,
    sent_at: Arc<Vec<AtomicU64>>,
    sent: u64,
    /// Bytes of written batches the socket did not take yet.
    unsent: Vec<u8>,
}

impl PacedLane {
    /// Writes what the socket takes without waiting; the rest stays in `unsent`.
    fn flush(&mut self) -> Result<(), String> {
        use std::io::Write as _;
        let mut done = 0;
        while done < self.unsent.len() {
            match self.socket.write(&self.unsent[done..]) {
                Ok(0) => return Err("write: the connection closed".into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        self.unsent.drain(..done);
        Ok(())
    }
}

/// The open loop's sender: one thread that wakes [`PACER_SLOTS`] times a millisecond and writes
/// each due lane's batch (a tokio interval per lane would fire every lane on the same tick of the
/// runtime's 1 ms timer).
fn pace(
    mut lanes: Vec<PacedLane>,
    per_lane: f64,
    total_per_lane: u64,
    start: Instant,
    burst: bool,
) -> Result<(), String> {
    // Sleeps end within ~10 µs of their deadline instead of the default 50 µs slack.
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(10_000));
    let slots = if burst { 1 } else { PACER_SLOTS };
    let slot_ns = 1_000_000 / slots;
    let mut tick: u64 = 1;
    while lanes
        .iter()
        .any(|l| l.sent < total_per_lane || !l.unsent.is_empty())
    {
        let at = Duration::from_nanos(tick * slot_ns);
        let now = start.elapsed();
        if at > now {
            std::thread::sleep(at - now);
        } else if now - at > Duration::from_millis(1) {
            // Fell behind by more than a millisecond: skip the missed instants.
            tick = now.as_nanos() as u64 / slot_ns;
        }
        let slot = (tick % slots) as usize;
        for lane in lanes.iter_mut().skip(slot).step_by(slots as usize) {
            let due = ((start.elapsed().as_secs_f64() * per_lane) as u64).min(total_per_lane);
            if due > lane.sent {
                let now = start.elapsed().as_nanos() as u64;
                for seq in lane.sent..due {
                    lane.frames.push(&mut lane.unsent, seq);
                    lane.sent_at[seq as usize].store(now, Ordering::Release);
                }
                lane.sent = due;
            }
            if let Err(e) = lane.flush() {
                // The readers wait for every reply: end them too.
                for l in &lanes {
                    let _ = l.socket.shutdown(std::net::Shutdown::Both);
                }
                return Err(e);
            }
        }
        tick += 1;
    }
    Ok(())
}

/// [`open_loop`], also recording every round trip into `trace` when given.
fn open_loop_traced(
    rt: &Runtime,
    lanes: Vec<Lane>,
    rate: f64,
    secs: u64,
    burst: bool,
    warm_up: Duration,
    mut trace: Option<&mut Trace>,
) -> Result<(Vec<u32>, f64), String> {
    let tracing = trace.is_some();
    let per_lane = rate / CONNECTIONS as f64;
    let total_per_lane = (per_lane * (secs as f64 + warm_up.as_secs_f64())) as u64;
    let timed_from = warm_up.as_nanos() as u64;
    let t0 = Instant::now();
    if let Some(trace) = trace.as_deref_mut() {
        trace.start_monotonic_ns = monotonic_ns();
    }
    let start = Instant::now();
    let _runtime = rt.enter();
    let mut paced = Vec::with_capacity(lanes.len());
    let mut readers = Vec::with_capacity(lanes.len());
    for lane in lanes {
        let writing = lane
            .stream
            .try_clone_std()
            .map_err(|e| format!("a lane's socket: {e}"))?;
        let sent_at: Arc<Vec<AtomicU64>> =
            Arc::new((0..total_per_lane).map(|_| AtomicU64::new(0)).collect());
        paced.push(PacedLane {
            socket: writing,
            frames: lane.frames,
            sent_at: sent_at.clone(),
            sent: 0,
            unsent: Vec::new(),
        });
        readers.push((lane.stream, sent_at));
    }
    let pacer = std::thread::spawn(move || pace(paced, per_lane, total_per_lane, start, burst));
    let results = rt.block_on(async move {
        let mut handles = Vec::new();
        for (lane_no, (rd, sent_at)) in readers.into_iter().enumerate() {
            let reader = tokio::spawn(async move {
                let mut lat = Vec::with_capacity(total_per_lane as usize);
                let mut times =
                    Vec::with_capacity(if tracing { total_per_lane as usize } else { 0 });
                let mut inbuf = vec![0u8; 64 * 1024];
                let mut filled = 0;
                let mut replies = 0u64;
                while replies < total_per_lane {
                    let n = rd
                        .read(&mut inbuf[filled..])
                        .await
                        .map_err(|e| format!("read: {e}"))?;
                    if n == 0 {
                        return Err("the server closed the connection mid-run".to_string());
                    }
                    filled += n;
                    let now = start.elapsed().as_nanos() as u64;
                    let mut pos = 0;
                    while let Some(i) = memchr::memchr(b'\n', &inbuf[pos..filled]) {
                        let line = &inbuf[pos..pos + i];
                        if memchr::memmem::find(line, b"\"ok\":true").is_none() {
                            return Err(format!(
                                "a reply was not ok: {}",
                                String::from_utf8_lossy(line)
                            ));
                        }
                        let seq =
                            reply_seq(line)
                                .filter(|s| *s < total_per_lane)
                                .ok_or_else(|| {
                                    format!(
                                        "a reply without a known id: {}",
                                        String::from_utf8_lossy(line)
                                    )
                                })?;
                        let at = sent_at[seq as usize].load(Ordering::Acquire);
                        replies += 1;
                        if at >= timed_from {
                            lat.push(((now.saturating_sub(at)) / 1000).min(u32::MAX as u64) as u32);
                        }
                        if tracing {
                            times.push((lane_no, at, now));
                        }
                        pos += i + 1;
                    }
                    inbuf.copy_within(pos..filled, 0);
                    filled -= pos;
                    if filled == inbuf.len() {
                        inbuf.resize(inbuf.len() * 2, 0);
                    }
                }
                Ok::<_, String>((lat, times, replies))
            });
            handles.push(reader);
        }
        let mut all = Vec::new();
        let mut replies = 0;
        for r in handles {
            let (lat, times, got) = r.await.map_err(|e| e.to_string())??;
            all.extend(lat);
            replies += got;
            if let Some(trace) = trace.as_deref_mut() {
                trace.trips.extend(times);
            }
        }
        Ok::<_, String>((all, replies))
    });
    let paced = pacer
        .join()
        .map_err(|_| "the open loop's pacer panicked".to_string())?;
    let (results, replies) = results?;
    paced?;
    let achieved = replies as f64 / t0.elapsed().as_secs_f64();
    Ok((results, achieved))
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

// ---------------------------------------------------------------------------------------------
// Processes under test

/// User + system CPU seconds a process has used so far, from `/proc/PID/stat`.
fn proc_cpu(pid: u32) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    let after = stat
        .rfind(')')
        .map(|i| &stat[i + 2..])
        .ok_or("an unreadable /proc stat line")?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = rustix::param::clock_ticks_per_second() as f64;
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the command name.
    Ok((ticks(11) + ticks(12)) / hz)
}

/// A server process this client started; killed and reaped when dropped.
struct Server {
    child: Child,
    dir: tempfile::TempDir,
    sock: PathBuf,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }
    /// Waits until the socket accepts a connection, or the process exits (the log says why).
    fn wait_ready(mut self) -> Result<Server, String> {
        let log = self.dir.path().join("server.log");
        child::wait_for_socket(&mut self.child, &self.sock, Duration::from_secs(60), || {
            std::fs::read_to_string(&log).unwrap_or_default()
        })?;
        Ok(self)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        child::stop(&mut self.child);
    }
}

fn temp_dir(prefix: &str) -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .map_err(|e| format!("cannot make a temp dir in /tmp: {e}"))
}

fn spawn_logged(cmd: &mut Command, dir: &Path) -> Result<Child, String> {
    let log = std::fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))
}

/// How to start `polaris serve`.
#[derive(Clone)]
struct PolarisCmd {
    bin: PathBuf,
    /// `--no-journal`, when the binary knows it (receipts then live for the run).
    no_journal: bool,
    knows_journal: bool,
    extra: Vec<String>,
}

impl PolarisCmd {
    fn locate(args: &Args) -> Result<PolarisCmd, String> {
        let bin = match &args.polaris {
            Some(p) => p.clone(),
            None => {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                let release = exe
                    .parent()
                    .and_then(Path::parent)
                    .ok_or("cannot find the target directory")?
                    .to_path_buf();
                if let Some(cargo) = std::env::var_os("CARGO") {
                    // Under `cargo run` make sure the binary measured is this tree's.
                    let status = Command::new(cargo)
                        .args(["build", "--release", "--bin", "polaris"])
                        .status()
                        .map_err(|e| format!("cargo build: {e}"))?;
                    if !status.success() {
                        return Err("`cargo build --release --bin polaris` failed".into());
                    }
                }
                release.join("polaris")
            }
        };
        if !bin.is_file() {
            return Err(format!(
                "{} does not exist: run `cargo build --release --bin polaris` or pass --polaris PATH",
                bin.display()
            ));
        }
        let help = Command::new(&bin)
            .args(["serve", "--help"])
            .output()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let help = String::from_utf8_lossy(&help.stdout);
        Ok(PolarisCmd {
            no_journal: help.contains("--no-journal"),
            knows_journal: help.contains("--journal <"),
            bin,
            extra: args
                .serve_args
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
        })
    }

    /// Starts a host on a fresh temp socket dir; `journal` puts a journal in that dir.
    fn start(&self, capacity: u64, journal: bool) -> Result<Server, String> {
        let dir = temp_dir("polaris-load")?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("serve")
            .arg("--socket-dir")
            .arg(dir.path())
            .arg("--audit-log")
            .arg(dir.path().join("audit.jsonl"))
            .arg("--capacity")
            .arg(capacity.to_string());
        if journal {
            cmd.arg("--journal").arg(dir.path().join("journal"));
        } else if self.no_journal && !self.extra.iter().any(|a| a.starts_with("--journal")) {
            cmd.arg("--no-journal");
        }
        if !self.extra.iter().any(|a| a.starts_with("--max-book-bytes")) {
            // The book's byte bound (1 GiB by default) must not end a size row early: a
            // receipt of these frames takes about 430 bytes, so give each one a kibibyte.
            cmd.arg("--max-book-bytes")
                .arg(capacity.saturating_mul(1024).to_string());
        }
        cmd.args(&self.extra);
        let child = spawn_logged(&mut cmd, dir.path())?;
        Server {
            child,
            sock: dir.path().join("bridge.sock"),
            dir,
        }
        .wait_ready()
    }
}

fn start_echo() -> Result<Server, String> {
    let dir = temp_dir("polaris-echo")?;
    let sock = dir.path().join("echo.sock");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = spawn_logged(
        Command::new(exe).arg("--echo-server").arg(&sock),
        dir.path(),
    )?;
    Server { child, sock, dir }.wait_ready()
}

fn redis_installed() -> bool {
    ["redis-server", "redis-benchmark"].iter().all(|b| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    })
}

fn start_redis(aof_always: bool) -> Result<Server, String> {
    let dir = temp_dir("polaris-redis")?;
    let sock = dir.path().join("redis.sock");
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", "0", "--unixsocket"])
        .arg(&sock)
        .args(["--unixsocketperm", "700", "--dir"])
        .arg(dir.path())
        .args(["--save", "", "--daemonize", "no"]);
    if aof_always {
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
    } else {
        cmd.args(["--appendonly", "no"]);
    }
    let child = spawn_logged(&mut cmd, dir.path())?;
    Server { child, sock, dir }.wait_ready()
}

// ---------------------------------------------------------------------------------------------
// One measurement

/// One throughput sample: requests per second and the server's CPU µs per request.
#[derive(Clone, Copy, Debug)]
struct Sample {
    rate: f64,
    cpu_us: f64,
}

/// Drives `requests` (rounded to whole lanes) through `lanes` from sequence number `from`,
/// measuring the server's CPU over exactly that window.
fn measure(
    rt: &Runtime,
    server: &Server,
    lanes: &mut Vec<Lane>,
    from: u64,
    requests: u64,
) -> Result<Sample, String> {
    let per_lane = requests.div_ceil(CONNECTIONS as u64);
    let c0 = proc_cpu(server.pid())?;
    let wall = run_lanes(rt, lanes, from, per_lane)?;
    let cpu = proc_cpu(server.pid())? - c0;
    let n = (per_lane * CONNECTIONS as u64) as f64;
    Ok(Sample {
        rate: n / wall.as_secs_f64(),
        cpu_us: cpu / n * 1e6,
    })
}

/// A short warm-up of every lane (the first connections' buffers, the first pages).
const WARMUP_PER_LANE: u64 = 2_000;

/// Fresh fills on a new host (or the echo): warm-up, then the measured window.
fn fresh(
    rt: &Runtime,
    server: &Server,
    shared_task: bool,
    sorted: bool,
    requests: u64,
) -> Result<Sample, String> {
    let mut lanes = rt.block_on(lanes(&server.sock, shared_task, sorted))?;
    run_lanes(rt, &mut lanes, 0, WARMUP_PER_LANE)?;
    measure(rt, server, &mut lanes, WARMUP_PER_LANE, requests)
}

/// Fresh fills, then the very same frames again: every one a replay.
fn replay(rt: &Runtime, server: &Server, requests: u64) -> Result<Sample, String> {
    let mut lanes = rt.block_on(lanes(&server.sock, false, true))?;
    let per_lane = requests.div_ceil(CONNECTIONS as u64);
    run_lanes(rt, &mut lanes, 0, per_lane)?;
    measure(rt, server, &mut lanes, 0, requests)
}

/// Fresh fills into an empty book, then into a book holding `book` receipts.
fn growth(
    rt: &Runtime,
    server: &Server,
    shared_task: bool,
    requests: u64,
    book: u64,
) -> Result<(Sample, Sample), String> {
    let mut lanes = rt.block_on(lanes(&server.sock, shared_task, true))?;
    let empty = measure(rt, server, &mut lanes, 0, requests)?;
    let per_lane = requests.div_ceil(CONNECTIONS as u64);
    let fill = book.saturating_sub(per_lane * CONNECTIONS as u64) / CONNECTIONS as u64;
    run_lanes(rt, &mut lanes, per_lane, fill)?;
    let full = measure(rt, server, &mut lanes, per_lane + fill, requests)?;
    Ok((empty, full))
}

/// `redis-benchmark` with the issue's arguments; its own rate, the server's CPU per request.
fn redis_bench(server: &Server, requests: u64) -> Result<Sample, String> {
    let c0 = proc_cpu(server.pid())?;
    let out = Command::new("redis-benchmark")
        .arg("-s")
        .arg(&server.sock)
        .args(["-c", "32", "-P", "64", "-r", "100000000", "-n"])
        .arg(requests.to_string())
        .args(["-q", "SET", "key:__rand_int__", "v", "NX"])
        .output()
        .map_err(|e| format!("redis-benchmark: {e}"))?;
    let cpu = proc_cpu(server.pid())? - c0;
    let text = String::from_utf8_lossy(&out.stdout);
    let rate = text
        .split(['\r', '\n'])
        .filter_map(|l| {
            let before = l.split(" requests per second").next()?;
            if before.len() == l.len() {
                return None;
            }
            before.rsplit(' ').next()?.parse::<f64>().ok()
        })
        .next_back()
        .ok_or_else(|| format!("no rate in redis-benchmark's output: {text:?}"))?;
    Ok(Sample {
        rate,
        cpu_us: cpu / requests as f64 * 1e6,
    })
}

// ---------------------------------------------------------------------------------------------
// The table

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        f64::NAN
    } else if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    }
}

fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(*x), hi.max(*x))
        })
}

fn k(rate: f64) -> String {
    format!("{:.0}k", rate / 1000.0)
}

/// The samples of one row, one per repetition.
#[derive(Default)]
struct Row {
    samples: Vec<Sample>,
}

impl Row {
    fn rates(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.rate).collect()
    }
    fn cpus(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.cpu_us).collect()
    }
    fn rate_cell(&self) -> String {
        let r = self.rates();
        let (lo, hi) = range(&r);
        format!("{}/s ({}–{})", k(median(&r)), k(lo), k(hi))
    }
    fn cpu_cell(&self) -> String {
        let c = self.cpus();
        let (lo, hi) = range(&c);
        format!("{:.2} µs ({:.2}–{:.2})", median(&c), lo, hi)
    }
    /// Median and range of the per-repetition ratios against `base` (paired by repetition).
    fn ratio_cell(&self, base: &Row) -> String {
        match self.ratio(base) {
            Some((m, lo, hi)) => format!("{m:.2}× ({lo:.2}–{hi:.2})"),
            None => "–".into(),
        }
    }
    /// The per-repetition ratios against `base` as (median, lowest, highest), when both ran.
    fn ratio(&self, base: &Row) -> Option<(f64, f64, f64)> {
        let r: Vec<f64> = self
            .samples
            .iter()
            .zip(&base.samples)
            .map(|(a, b)| a.rate / b.rate)
            .collect();
        if r.is_empty() {
            return None;
        }
        let (lo, hi) = range(&r);
        Some((median(&r), lo, hi))
    }
}

/// Adds one repetition's sample to `row` and prints it as it lands, so a long run shows progress.
fn record(row: &mut Row, label: &str, sample: Sample) {
    eprintln!("  {label}: {}", k(sample.rate));
    row.samples.push(sample);
}

/// Writes one table line `| name | throughput | CPU | ratio vs each base |` when `r` has samples;
/// a base with no samples (its system was skipped) shows `–`.
fn write_row(o: &mut String, name: &str, r: &Row, bases: &[&Row]) {
    if r.samples.is_empty() {
        return;
    }
    let mut line = format!("| {name} | {} | {} |", r.rate_cell(), r.cpu_cell());
    for base in bases {
        if base.samples.is_empty() {
            line.push_str(" – |");
        } else {
            let _ = write!(line, " {} |", r.ratio_cell(base));
        }
    }
    let _ = writeln!(o, "{line}");
}

/// Measures one system on a server of its own, stopped before the sample is recorded.
fn measure_on(
    row: &mut Row,
    label: &str,
    server: Server,
    measure: impl FnOnce(&Server) -> Result<Sample, String>,
) -> Result<(), String> {
    let sample = measure(&server)?;
    drop(server);
    record(row, label, sample);
    Ok(())
}

/// The progress line that opens each repetition.
fn announce_repetition(rep: usize, reps: usize) {
    eprintln!(
        "repetition {}/{} (load average {})",
        rep + 1,
        reps,
        uptime()
    );
}

/// The line above each table: the machine, the load around the run, what was repeated.
fn machine_line(o: &mut String, load_before: &str, args: &Args, detail: &str, started: Instant) {
    let _ = writeln!(
        o,
        "\nMachine: {} · load average {} before, {} after · {} repetitions of {} requests, alternated · {detail}{:.0} s\n",
        machine(),
        load_before,
        uptime(),
        args.reps,
        args.requests,
        started.elapsed().as_secs_f64()
    );
}

fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cpu}, {cores} cores")
}

fn client_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the client runtime starts")
}

fn table(args: &Args) -> Result<(), String> {
    let polaris = PolarisCmd::locate(args)?;
    let rt = client_runtime();
    let n = args.requests;
    let capacity = args.book + 4 * n + 1_000_000;
    let redis = !args.no_redis && redis_installed();
    let mut skipped = Vec::new();
    if !args.no_redis && !redis {
        skipped.push(
            "Redis rows skipped: redis-server/redis-benchmark not found (apt-get install redis-server redis-tools)"
                .to_string(),
        );
    }
    let mut journal_ok = polaris.knows_journal;
    if !journal_ok {
        skipped.push(format!(
            "journal row skipped: {} serve does not know --journal",
            polaris.bin.display()
        ));
    }
    let started = Instant::now();
    let load_before = uptime();
    let (mut fresh_own, mut fresh_shared, mut replays, mut journaled) = (
        Row::default(),
        Row::default(),
        Row::default(),
        Row::default(),
    );
    let mut unsorted = Row::default();
    let (mut echo, mut redis_plain, mut redis_aof) =
        (Row::default(), Row::default(), Row::default());
    let (mut g_own_empty, mut g_own_full, mut g_sh_empty, mut g_sh_full) = (
        Row::default(),
        Row::default(),
        Row::default(),
        Row::default(),
    );
    for rep in 0..args.reps {
        announce_repetition(rep, args.reps);
        measure_on(
            &mut fresh_own,
            "polaris fresh, task per connection",
            polaris.start(capacity, false)?,
            |s| fresh(&rt, s, false, true, n),
        )?;
        measure_on(&mut echo, "JSON echo", start_echo()?, |e| {
            fresh(&rt, e, false, true, n)
        })?;
        if redis {
            measure_on(&mut redis_plain, "redis SET NX", start_redis(false)?, |r| {
                redis_bench(r, n)
            })?;
        }
        measure_on(
            &mut fresh_shared,
            "polaris fresh, one shared task",
            polaris.start(capacity, false)?,
            |s| fresh(&rt, s, true, true, n),
        )?;
        measure_on(
            &mut replays,
            "polaris replays",
            polaris.start(capacity, false)?,
            |s| replay(&rt, s, n),
        )?;
        measure_on(
            &mut unsorted,
            "polaris fresh, params in SPEC's order",
            polaris.start(capacity, false)?,
            |s| fresh(&rt, s, false, false, n),
        )?;
        if journal_ok {
            match polaris.start(capacity, true) {
                Ok(s) => measure_on(&mut journaled, "polaris fresh, journal", s, |s| {
                    fresh(&rt, s, false, true, n)
                })?,
                Err(e) => {
                    journal_ok = false;
                    skipped.push(format!("journal row skipped: polaris serve --journal {e}"));
                }
            }
        }
        if redis {
            measure_on(
                &mut redis_aof,
                "redis SET NX, appendfsync always",
                start_redis(true)?,
                |r| redis_bench(r, n),
            )?;
        }
        if args.book > 0 {
            for (shared, empty, full) in [
                (false, &mut g_own_empty, &mut g_own_full),
                (true, &mut g_sh_empty, &mut g_sh_full),
            ] {
                let s = polaris.start(capacity, false)?;
                let (before, b) = growth(&rt, &s, shared, n, args.book)?;
                drop(s);
                // An empty book again, on a host of its own, just after the full one: the
                // empty book's figure is the mean of the two, so a machine that speeds up or
                // slows down between them (it drifts by a fifth between minutes) does not pass
                // for the book's size.
                let s = polaris.start(capacity, false)?;
                let mut l = rt.block_on(lanes(&s.sock, shared, true))?;
                let after = measure(&rt, &s, &mut l, 0, n)?;
                drop(s);
                eprintln!(
                    "  polaris {} book: empty {}, {} receipts {}, empty again {}",
                    if shared {
                        "shared task"
                    } else {
                        "task per connection"
                    },
                    k(before.rate),
                    args.book,
                    k(b.rate),
                    k(after.rate)
                );
                empty.samples.push(Sample {
                    rate: (before.rate + after.rate) / 2.0,
                    cpu_us: (before.cpu_us + after.cpu_us) / 2.0,
                });
                full.samples.push(b);
            }
        }
    }
    // Latency at half the peak of fresh fills measured on the same host just before (the
    // machine's capacity moves between minutes); then the echo at the same offered rate. Once
    // a repetition, each on a fresh host, like every other row: one 5-second run lands in
    // whatever minute it lands in.
    let mut tails: [Vec<Tail>; 4] = Default::default();
    if args.latency_secs > 0 {
        for rep in 0..args.reps {
            // Room for the peak's fills and two open-loop runs at half of it (well above
            // 1.5M/s each, more than this client offers).
            let s = polaris.start(n + 2 * 1_500_000 * args.latency_secs + 1_000_000, false)?;
            let peak = fresh(&rt, &s, false, true, n)?;
            let offered = peak.rate / 2.0;
            eprintln!(
                "latency {}/{}: peak {}, offering {}",
                rep + 1,
                args.reps,
                k(peak.rate),
                k(offered)
            );
            let l = rt.block_on(lanes(&s.sock, false, true))?;
            // The first repetition's round trips are the trace.
            let mut trace = Trace::default();
            let traced = args.latency_trace.as_ref().filter(|_| rep == 0);
            let (lat, achieved) = open_loop_traced(
                &rt,
                l,
                offered,
                args.latency_secs,
                false,
                OPEN_LOOP_WARM_UP,
                traced.map(|_| &mut trace),
            )?;
            if let Some(path) = traced {
                std::fs::write(path, trace.text())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            tails[0].push(Tail::of(offered, achieved, lat));
            let l = rt.block_on(lanes(&s.sock, false, true))?;
            let (lat, achieved) = open_loop(&rt, l, offered, args.latency_secs, true)?;
            drop(s);
            tails[1].push(Tail::of(offered, achieved, lat));
            let e = start_echo()?;
            for (burst, row) in [(false, 2), (true, 3)] {
                let l = rt.block_on(lanes(&e.sock, false, true))?;
                let (lat, achieved) = open_loop(&rt, l, offered, args.latency_secs, burst)?;
                tails[row].push(Tail::of(offered, achieved, lat));
            }
            drop(e);
        }
    }

    let mut o = String::new();
    let frames = format!("{}-byte frames · ", LONGEST_FRAME.load(Ordering::Relaxed));
    machine_line(&mut o, &load_before, args, &frames, started);
    let _ = writeln!(
        o,
        "| system (32 connections × 64 in flight) | throughput, median (range) | server CPU per request | vs Redis SET NX | vs JSON echo |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|");
    let none = Row::default();
    for (name, r, vs_redis, vs_echo) in [
        (
            "Polaris, fresh `page.fill`, one task per connection",
            &fresh_own,
            &redis_plain,
            &echo,
        ),
        (
            "Polaris, fresh `page.fill`, one task shared by all 32",
            &fresh_shared,
            &redis_plain,
            &echo,
        ),
        (
            "Polaris, replayed `page.fill` (same IDs again)",
            &replays,
            &redis_plain,
            &echo,
        ),
        (
            "Polaris, fresh `page.fill`, params keys in SPEC's example order (not canonical)",
            &unsorted,
            &redis_plain,
            &echo,
        ),
        (
            "Polaris with its journal, fresh `page.fill` (vs Redis appendfsync always)",
            &journaled,
            &redis_aof,
            &echo,
        ),
        ("JSON echo, same frames", &echo, &redis_plain, &none),
        (
            "Redis `SET key:__rand_int__ v NX` (`redis-benchmark -P 64`)",
            &redis_plain,
            &none,
            &echo,
        ),
        (
            "Redis `SET … NX`, `appendonly yes`, `appendfsync always`",
            &redis_aof,
            &none,
            &echo,
        ),
    ] {
        write_row(&mut o, name, r, &[vs_redis, vs_echo]);
    }
    if args.book > 0 {
        let _ = writeln!(
            o,
            "\n| flat with size (fresh `page.fill`) | empty book (a host just before the full one and another just after, their mean) | {} receipts in the book | full ÷ empty |\n|---|---|---|---|",
            args.book
        );
        for (name, e, f) in [
            ("one task per connection", &g_own_empty, &g_own_full),
            ("one task shared by all 32", &g_sh_empty, &g_sh_full),
        ] {
            let _ = writeln!(
                o,
                "| {name} | {} | {} | {} |",
                e.rate_cell(),
                f.rate_cell(),
                f.ratio_cell(e)
            );
        }
    }
    if !tails[0].is_empty() {
        write_tails(&mut o, &tails, args.latency_secs);
    }
    write_criteria(
        &mut o,
        &Measured {
            fresh: &fresh_own,
            replays: &replays,
            journaled: &journaled,
            echo: &echo,
            redis_plain: &redis_plain,
            redis_aof: &redis_aof,
            flat: [(&g_own_empty, &g_own_full), (&g_sh_empty, &g_sh_full)],
            p99_us: &tails[0]
                .iter()
                .map(|t| f64::from(t.p99))
                .collect::<Vec<_>>(),
        },
    );
    for s in &skipped {
        let _ = writeln!(o, "\n{s}");
    }
    println!("{o}");
    Ok(())
}

/// What one `--table` run measured, for [`write_criteria`].
struct Measured<'a> {
    fresh: &'a Row,
    replays: &'a Row,
    journaled: &'a Row,
    echo: &'a Row,
    redis_plain: &'a Row,
    redis_aof: &'a Row,
    /// (empty book, full book): task per connection, then one shared task.
    flat: [(&'a Row, &'a Row); 2],
    /// p99 of Polaris's round trip at half the peak, lanes spread, in µs: one a repetition
    /// (none when the latency rows did not run).
    p99_us: &'a [f64],
}

/// One open-loop run's round trips, summed up: what the latency table prints.
struct Tail {
    /// The rate offered (half the peak measured just before).
    offered: f64,
    /// The rate achieved.
    achieved: f64,
    /// Percentiles of the round trips, µs.
    p50: u32,
    p99: u32,
    p999: u32,
    /// The longest round trip, µs.
    max: u32,
}

impl Tail {
    fn of(offered: f64, achieved: f64, mut round_trips: Vec<u32>) -> Tail {
        round_trips.sort_unstable();
        Tail {
            offered,
            achieved,
            p50: percentile(&round_trips, 0.5),
            p99: percentile(&round_trips, 0.99),
            p999: percentile(&round_trips, 0.999),
            max: round_trips.last().copied().unwrap_or(0),
        }
    }
}

/// The latency table: for each row (Polaris and the echo, lanes spread and on one instant),
/// the median of the repetitions and their range; the longest round trip of all.
fn write_tails(o: &mut String, tails: &[Vec<Tail>; 4], secs: u64) {
    let offered: Vec<f64> = tails[0].iter().map(|t| t.offered).collect();
    let (lo, hi) = range(&offered);
    let _ = writeln!(
        o,
        "\n| round trip at half the peak just measured on the same host (open loop, {:.0}k/s offered ({:.0}k–{:.0}k) for {secs} s after a 1 s warm-up, each lane writing once a millisecond, the 32 lanes spread over {PACER_SLOTS} instants of it unless said; from each batch's write to its reply; median of {} repetitions, each on a fresh host, and range) | achieved | p50 | p99 | p999 | max |\n|---|---|---|---|---|---|",
        median(&offered) / 1000.0,
        lo / 1000.0,
        hi / 1000.0,
        tails[0].len()
    );
    let names = [
        "Polaris fresh page.fill",
        "Polaris fresh page.fill, all 32 lanes on the same instant",
        "JSON echo",
        "JSON echo, all 32 lanes on the same instant",
    ];
    let cell = |runs: &[Tail], f: fn(&Tail) -> u32| {
        let v: Vec<f64> = runs.iter().map(|t| f64::from(f(t))).collect();
        let (lo, hi) = range(&v);
        format!("{:.0} µs ({lo:.0}–{hi:.0})", median(&v))
    };
    for (name, runs) in names.iter().zip(tails) {
        let achieved: Vec<f64> = runs.iter().map(|t| t.achieved).collect();
        let behind = runs.iter().any(|t| t.achieved < 0.95 * t.offered);
        let _ = writeln!(
            o,
            "| {name} | {}{} | {} | {} | {} | {} µs |",
            k(median(&achieved)),
            if behind {
                " (fell behind the offered rate: the round trips include queueing)"
            } else {
                ""
            },
            cell(runs, |t| t.p50),
            cell(runs, |t| t.p99),
            cell(runs, |t| t.p999),
            runs.iter().map(|t| t.max).max().unwrap_or(0)
        );
    }
}

/// The run held against what Polaris's performance promises (fresh fills at least Redis
/// `SET NX` and half the JSON echo, host CPU per fresh receipt ≤ 2 µs and per replay ≤ 1 µs, a
/// book of `--book` receipts no more than 10 % slower than an empty one, p99 at half the peak
/// ≤ 2 ms), each judged on the run's median, so a reader need not work it out from the tables.
fn write_criteria(o: &mut String, m: &Measured) {
    // Judged on the figure as printed (two decimals), so a row never shows a passing number
    // marked as failing.
    fn printed(x: f64) -> f64 {
        (x * 100.0).round() / 100.0
    }
    fn verdict(ok: bool) -> &'static str {
        if ok {
            "met"
        } else {
            "**not met**"
        }
    }
    let ratio_line = |name: &str, a: &Row, b: &Row, floor: f64| {
        a.ratio(b).map(|(med, lo, hi)| {
            format!(
                "| {name} | {med:.2}× ({lo:.2}–{hi:.2}) | {} |",
                verdict(printed(med) >= floor)
            )
        })
    };
    let mut lines: Vec<String> = [
        ratio_line(
            "fresh fills ≥ 1.0× Redis `SET NX`",
            m.fresh,
            m.redis_plain,
            1.0,
        ),
        ratio_line("fresh fills ≥ 0.5× the JSON echo", m.fresh, m.echo, 0.5),
    ]
    .into_iter()
    .flatten()
    .collect();
    for (name, row, ceiling) in [
        ("host CPU per fresh receipt ≤ 2.0 µs", m.fresh, 2.0),
        ("host CPU per replay ≤ 1.0 µs", m.replays, 1.0),
    ] {
        if !row.samples.is_empty() {
            let c = row.cpus();
            lines.push(format!(
                "| {name} | {} | {} |",
                row.cpu_cell(),
                verdict(printed(median(&c)) <= ceiling)
            ));
        }
    }
    for ((empty, full), name) in m.flat.iter().zip([
        "full book ≥ 0.90× an empty one, task per connection",
        "full book ≥ 0.90× an empty one, one shared task",
    ]) {
        lines.extend(ratio_line(name, full, empty, 0.9));
    }
    if !m.p99_us.is_empty() {
        let (med, (lo, hi)) = (median(m.p99_us) / 1000.0, range(m.p99_us));
        lines.push(format!(
            "| p99 round trip at half the peak ≤ 2 ms | {med:.3} ms ({:.3}–{:.3}) | {} |",
            lo / 1000.0,
            hi / 1000.0,
            verdict(med <= 2.0)
        ));
    }
    if let Some((med, lo, hi)) = m.journaled.ratio(m.redis_aof) {
        lines.push(format!(
            "| with the journal, against Redis `appendfsync always` | {med:.2}× ({lo:.2}–{hi:.2}) | its row |"
        ));
    }
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n| against what Polaris promises (judged on the median) | measured, median (range) | |\n|---|---|---|"
    );
    for line in lines {
        let _ = writeln!(o, "{line}");
    }
}

/// One client, one request at a time: the round trip of each fresh fill, in µs, sorted.
fn sequential(rt: &Runtime, server: &Server, requests: u64) -> Result<Vec<u32>, String> {
    rt.block_on(async {
        let mut s = connect(&server.sock).await?;
        let task = start_task(&mut s).await?;
        let frames = Frames::new(&task, true);
        let mut out = Vec::with_capacity(FRAME_BYTES);
        let mut lat = Vec::with_capacity(requests as usize);
        for seq in 0..requests + 200 {
            out.clear();
            frames.push(&mut out, seq);
            let line = std::str::from_utf8(&out).map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            let reply = call(&mut s, line).await?;
            let took = t0.elapsed();
            if !reply.contains("\"ok\":true") {
                return Err(format!("a reply was not ok: {reply}"));
            }
            // The first 200 warm the connection and the host's first pages.
            if seq >= 200 {
                lat.push(took.as_micros().min(u128::from(u32::MAX)) as u32);
            }
        }
        lat.sort_unstable();
        Ok(lat)
    })
}

/// The `fdatasync` of a 4 KiB append in `dir` (the journal's file system), in µs, sorted.
fn fsync_samples(dir: &Path, n: usize) -> Result<Vec<u32>, String> {
    use std::io::Write as _;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let block = [0x5au8; 4096];
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        f.write_all(&block).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        f.sync_data().map_err(|e| e.to_string())?;
        v.push(t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
    }
    let _ = std::fs::remove_file(&path);
    v.sort_unstable();
    Ok(v)
}

/// The journal's rows (SPEC §11's cost, measured against Redis with every write fsynced).
fn journal_table(args: &Args) -> Result<(), String> {
    let polaris = PolarisCmd::locate(args)?;
    if !polaris.knows_journal {
        return Err(format!(
            "{} serve does not know --journal",
            polaris.bin.display()
        ));
    }
    let rt = client_runtime();
    let n = args.requests;
    let capacity = 2 * n + 1_000_000;
    let redis = !args.no_redis && redis_installed();
    let started = Instant::now();
    let load_before = uptime();
    let (mut plain, mut journaled, mut redis_aof) =
        (Row::default(), Row::default(), Row::default());
    let (mut rt_plain, mut rt_journal, mut fsyncs) = (Vec::new(), Vec::new(), Vec::new());
    const SEQUENTIAL: u64 = 3_000;
    for rep in 0..args.reps {
        announce_repetition(rep, args.reps);
        measure_on(
            &mut plain,
            "polaris fresh, no journal",
            polaris.start(capacity, false)?,
            |s| fresh(&rt, s, false, true, n),
        )?;
        measure_on(
            &mut journaled,
            "polaris fresh, journal",
            polaris.start(capacity, true)?,
            |s| fresh(&rt, s, false, true, n),
        )?;
        if redis {
            measure_on(
                &mut redis_aof,
                "redis SET NX, appendfsync always",
                start_redis(true)?,
                |r| redis_bench(r, n),
            )?;
        }
        let s = polaris.start(capacity, false)?;
        rt_plain.push(sequential(&rt, &s, SEQUENTIAL)?);
        drop(s);
        let s = polaris.start(capacity, true)?;
        rt_journal.push(sequential(&rt, &s, SEQUENTIAL)?);
        fsyncs.push(fsync_samples(s.dir.path(), 500)?);
        drop(s);
        eprintln!(
            "  one client: p50 {} µs without, {} µs with the journal; fdatasync p50 {} µs",
            percentile(&rt_plain[rep], 0.5),
            percentile(&rt_journal[rep], 0.5),
            percentile(&fsyncs[rep], 0.5)
        );
    }
    let mut o = String::new();
    machine_line(&mut o, &load_before, args, "", started);
    let _ = writeln!(
        o,
        "| system (32 connections × 64 in flight, fresh IDs) | throughput, median (range) | server CPU per request | vs Redis `appendfsync always` |\n|---|---|---|---|"
    );
    let none = Row::default();
    for (name, r, base) in [
        ("Polaris, no journal", &plain, &redis_aof),
        ("Polaris with its journal", &journaled, &redis_aof),
        (
            "Redis `SET … NX`, `appendonly yes`, `appendfsync always`",
            &redis_aof,
            &none,
        ),
    ] {
        write_row(&mut o, name, r, &[base]);
    }
    let _ = writeln!(
        o,
        "\n| one client, one request at a time ({SEQUENTIAL} fresh fills a repetition) | p50 without | p50 with the journal | p99 without / with | `fdatasync` p50 (4 KiB) | with − without, in fdatasyncs |\n|---|---|---|---|---|---|"
    );
    for rep in 0..args.reps {
        let (a, b, f) = (
            percentile(&rt_plain[rep], 0.5),
            percentile(&rt_journal[rep], 0.5),
            percentile(&fsyncs[rep], 0.5),
        );
        let _ = writeln!(
            o,
            "| repetition {} | {a} µs | {b} µs | {} / {} µs | {f} µs | {:.2} |",
            rep + 1,
            percentile(&rt_plain[rep], 0.99),
            percentile(&rt_journal[rep], 0.99),
            (f64::from(b) - f64::from(a)) / f64::from(f.max(1))
        );
    }
    if !redis && !args.no_redis {
        let _ = writeln!(
            o,
            "\nRedis row skipped: redis-server/redis-benchmark not found (apt-get install redis-server redis-tools)"
        );
    }
    println!("{o}");
    Ok(())
}

/// A fresh-fill load on one host for `secs` seconds, for a profiler.
fn hold(args: &Args, secs: u64) -> Result<(), String> {
    let polaris = PolarisCmd::locate(args)?;
    let rt = client_runtime();
    // Room for what the hold can create (no machine has run 4 M fresh fills a second; open
    // loop, the offered rate) and no more: the receipt index is sized by the capacity, and an
    // index far larger than the receipts written takes a fresh page for nearly every one of
    // them, which a profile would then show as the host's cost.
    let per_sec = args.rate.unwrap_or(4_000_000.0).max(1.0) as u64;
    let capacity = args
        .capacity
        .unwrap_or(per_sec.saturating_mul(secs + 1) + 2_000_000);
    let s = polaris.start(capacity, false)?;
    println!("host pid {}", s.pid());
    let mut lanes = rt.block_on(lanes(&s.sock, args.shared_task, !args.spec_order))?;
    if let Some(rate) = args.rate {
        // Warm the host up closed loop on connections of their own (so the open loop's
        // request IDs are all fresh), then offer `rate` open loop for the whole hold.
        let mut warm = rt.block_on(crate::lanes(&s.sock, args.shared_task, !args.spec_order))?;
        run_lanes(&rt, &mut warm, 0, 2_000)?;
        drop(warm);
        let c0 = proc_cpu(s.pid())?;
        let (mut lat, achieved) = open_loop(&rt, lanes, rate, secs, false)?;
        let cpu = proc_cpu(s.pid())? - c0;
        lat.sort_unstable();
        println!(
            "{} fresh fills open loop at {}/s offered: {}/s achieved, p50 {} µs, p99 {} µs, p999 {} µs, max {} µs, host CPU {:.2} µs per request",
            lat.len(),
            k(rate),
            k(achieved),
            percentile(&lat, 0.50),
            percentile(&lat, 0.99),
            percentile(&lat, 0.999),
            lat.last().copied().unwrap_or(0),
            cpu / lat.len().max(1) as f64 * 1e6
        );
        return Ok(());
    }
    let chunk = 20_000;
    if args.replays {
        // The receipts every later round replays.
        run_lanes(&rt, &mut lanes, 0, chunk)?;
    }
    let t0 = Instant::now();
    let (mut from, mut total) = (0, 0u64);
    let c0 = proc_cpu(s.pid())?;
    let rss0 = vm_rss(s.pid())?;
    while t0.elapsed() < Duration::from_secs(secs) {
        run_lanes(&rt, &mut lanes, from, chunk)?;
        if !args.replays {
            from += chunk;
        }
        total += chunk * CONNECTIONS as u64;
    }
    let cpu = proc_cpu(s.pid())? - c0;
    println!(
        "{} {} in {:.1} s: {}/s, host CPU {:.2} µs per request",
        total,
        if args.replays {
            "replays"
        } else {
            "fresh fills"
        },
        t0.elapsed().as_secs_f64(),
        k(total as f64 / t0.elapsed().as_secs_f64()),
        cpu / total as f64 * 1e6
    );
    let rss = vm_rss(s.pid())?;
    println!(
        "host RSS {} MiB, grown {:.0} bytes per request held",
        rss >> 20,
        rss.saturating_sub(rss0) as f64 / total as f64
    );
    Ok(())
}

/// The resident set of process `pid` in bytes (`VmRSS`): its growth over a hold of fresh
/// fills, divided by the receipts created, is what each receipt costs in memory.
fn vm_rss(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

// ---------------------------------------------------------------------------------------------
// The JSON echo baseline

/// What the echo parses out of each request line (the whole line is parsed and checked).
#[derive(serde::Deserialize)]
struct EchoRequest<'a> {
    #[serde(borrow)]
    id: &'a str,
    #[allow(dead_code)]
    #[serde(borrow)]
    method: &'a str,
    #[allow(dead_code)]
    #[serde(borrow)]
    params: Option<&'a serde_json::value::RawValue>,
}

/// The minimal batched JSON echo: 2 tokio workers as the host has here; per connection, parse
/// each complete line and write a small reply, all replies to one read in one write.
fn echo_server(sock: &Path) {
    let rt = client_runtime();
    rt.block_on(async {
        let listener = UnixListener::bind(sock).expect("the echo socket binds");
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            let Ok(s) = s.into_std().and_then(LeanSocket::new) else {
                continue;
            };
            tokio::spawn(async move {
                let mut inbuf = vec![0u8; 64 * 1024];
                let mut filled = 0;
                let mut out = Vec::with_capacity(64 * 1024);
                loop {
                    let Ok(n) = s.read(&mut inbuf[filled..]).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    filled += n;
                    let mut pos = 0;
                    out.clear();
                    while let Some(i) = memchr::memchr(b'\n', &inbuf[pos..filled]) {
                        match serde_json::from_slice::<EchoRequest>(&inbuf[pos..pos + i]) {
                            Ok(r) => {
                                out.extend_from_slice(b"{\"id\":\"");
                                out.extend_from_slice(r.id.as_bytes());
                                out.extend_from_slice(b"\",\"ok\":true,\"result\":{}}\n");
                            }
                            Err(_) => out.extend_from_slice(
                                b"{\"id\":null,\"ok\":false,\"error\":{\"code\":\"BAD_REQUEST\"}}\n",
                            ),
                        }
                        pos += i + 1;
                    }
                    inbuf.copy_within(pos..filled, 0);
                    filled -= pos;
                    if filled == inbuf.len() {
                        inbuf.resize(inbuf.len() * 2, 0);
                    }
                    if !out.is_empty() && s.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    //! `cargo test --release --example load`: the frames, the reply matching, the CPU reading
    //! and the closed-loop client against the echo over a real socket.
    use super::*;

    #[test]
    fn frames_are_165_bytes_of_valid_page_fill_requests_with_unique_ids() {
        let task = uuid::Uuid::new_v4().to_string();
        let mut seen = std::collections::HashSet::new();
        for sorted in [true, false] {
            let frames = Frames::new(&task, sorted);
            assert_eq!(frames.len(), FRAME_BYTES);
            let mut values = std::collections::HashSet::new();
            for seq in [0u64, 1, 4095, (1 << 48) - 1] {
                let mut out = Vec::new();
                frames.push(&mut out, seq);
                assert_eq!(out.len(), FRAME_BYTES);
                assert_eq!(out.last(), Some(&b'\n'));
                let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
                assert_eq!(v["method"], "page.fill");
                assert_eq!(v["params"]["taskId"], task.as_str());
                let id = v["id"].as_str().unwrap();
                assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
                assert!(seen.insert(id.to_owned()), "id {id} repeated");
                assert_eq!(reply_seq(&out), Some(seq));
                // No two fills alike: the value names the sequence number too.
                let value = v["params"]["value"].as_str().unwrap();
                assert!(
                    format!("{seq:012x}").ends_with(&value[..VALUE_DIGITS]),
                    "{value}"
                );
                assert!(values.insert(value.to_owned()), "value {value} repeated");
                // Sorted keys are the canonical text the host fingerprints as is.
                let params = &out[memchr::memmem::find(&out, b"\"params\":").unwrap() + 9..];
                assert_eq!(params.starts_with(b"{\"target\""), sorted);
            }
        }
    }

    #[test]
    fn proc_cpu_counts_this_process_working() {
        let pid = std::process::id();
        let before = proc_cpu(pid).unwrap();
        let mut x = 0u64;
        while proc_cpu(pid).unwrap() < before + 0.05 {
            for i in 0..1_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
        assert!(proc_cpu(pid).unwrap() >= before + 0.05);
        assert!(proc_cpu(u32::MAX).is_err());
    }

    #[test]
    fn vm_rss_sees_this_process_touch_memory() {
        let pid = std::process::id();
        let before = vm_rss(pid).unwrap();
        let touched = vec![1u8; 64 << 20];
        let after = vm_rss(pid).unwrap();
        assert!(after >= before + (32 << 20), "{before} -> {after}");
        std::hint::black_box(&touched);
        assert!(vm_rss(u32::MAX).is_err());
    }

    /// The echo in a thread of this process, on a fresh temp dir.
    fn echo_in_thread() -> (tempfile::TempDir, PathBuf) {
        let dir = temp_dir("polaris-load-test").unwrap();
        let sock = dir.path().join("echo.sock");
        let s = sock.clone();
        std::thread::spawn(move || echo_server(&s));
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            std::thread::sleep(Duration::from_millis(5));
        }
        (dir, sock)
    }

    #[test]
    fn the_closed_loop_client_gets_every_reply_from_the_echo() {
        let (_dir, sock) = echo_in_thread();
        let rt = client_runtime();
        let mut l = rt.block_on(lanes(&sock, false, true)).unwrap();
        assert_eq!(l.len(), CONNECTIONS);
        // 1,000 per lane: far more than the 64-deep window, so the window refills many times.
        run_lanes(&rt, &mut l, 0, 1_000).unwrap();
        assert_eq!(
            l.len(),
            CONNECTIONS,
            "every lane comes back for the next window"
        );
    }

    #[test]
    fn a_reply_that_is_not_ok_fails_the_run() {
        let (_dir, sock) = echo_in_thread();
        let rt = client_runtime();
        let mut l = rt.block_on(lanes(&sock, false, true)).unwrap();
        // Frames the echo cannot parse: it answers "ok":false, and the client must say so.
        l[0].frames.tail = b"\",\"method\":}\n".to_vec();
        let err = run_lanes(&rt, &mut l, 0, 10).unwrap_err();
        assert!(err.contains("not ok"), "{err}");
    }

    #[test]
    fn the_open_loop_client_times_every_request_once() {
        let (_dir, sock) = echo_in_thread();
        let rt = client_runtime();
        // Lanes spread over the millisecond, and all on the same instant.
        for burst in [false, true] {
            let l = rt.block_on(lanes(&sock, false, true)).unwrap();
            let (lat, achieved) =
                open_loop_traced(&rt, l, 32_000.0, 1, burst, Duration::ZERO, None).unwrap();
            assert_eq!(lat.len(), 32_000, "burst: {burst}");
            assert!(achieved > 0.0);
        }
        // With a warm-up, its requests are answered (the run waits for every reply) but only
        // those written after it are timed.
        let l = rt.block_on(lanes(&sock, false, true)).unwrap();
        let mut trace = Trace::default();
        let warm_up = Duration::from_millis(500);
        let before = monotonic_ns();
        let (lat, _) =
            open_loop_traced(&rt, l, 32_000.0, 1, false, warm_up, Some(&mut trace)).unwrap();
        let after_run = monotonic_ns();
        assert!(
            (before..after_run).contains(&trace.start_monotonic_ns),
            "the start is on the machine's monotonic clock, within the run"
        );
        let text = trace.text();
        assert!(text.starts_with("# lane sent replied"), "{}", &text[..80]);
        assert_eq!(
            text.lines().count(),
            48_001,
            "a line a round trip after the header"
        );
        assert_eq!(trace.trips.len(), 48_000, "every request answered");
        let after = trace
            .trips
            .iter()
            .filter(|(_, sent, _)| *sent >= warm_up.as_nanos() as u64)
            .count();
        assert_eq!(
            lat.len(),
            after,
            "only requests written after the warm-up are timed"
        );
    }

    #[test]
    fn the_open_loop_fails_instead_of_waiting_when_the_server_goes_away() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("gone.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        // A server that answers each lane's task.start, then closes every connection.
        let server = std::thread::spawn(move || {
            use std::io::{BufRead as _, Write as _};
            let mut held = Vec::new();
            for _ in 0..CONNECTIONS {
                let (s, _) = listener.accept().unwrap();
                let mut line = String::new();
                std::io::BufReader::new(&s).read_line(&mut line).unwrap();
                (&s).write_all(b"{\"ok\":true,\"result\":{\"taskId\":\"t-1\"}}\n")
                    .unwrap();
                held.push(s);
            }
            drop(held);
        });
        let rt = client_runtime();
        let l = rt.block_on(lanes(&sock, false, true)).unwrap();
        server.join().unwrap();
        assert!(open_loop(&rt, l, 32_000.0, 1, false).is_err());
    }
    #[test]
    fn the_criteria_are_judged_on_the_median_as_printed() {
        let row = |rates: &[f64], cpu: f64| Row {
            samples: rates
                .iter()
                .map(|&rate| Sample { rate, cpu_us: cpu })
                .collect(),
        };
        let fresh = row(&[1000.0, 1996.0, 3000.0], 0.8);
        let echo = row(&[1000.0, 4000.0, 1000.0], 0.2);
        let redis = row(&[2000.0, 1000.0, 1000.0], 1.0);
        let replays = row(&[1.0; 3], 1.004);
        let (empty, full) = (row(&[100.0; 3], 1.0), row(&[89.0; 3], 1.0));
        let none = Row::default();
        let mut o = String::new();
        write_criteria(
            &mut o,
            &Measured {
                fresh: &fresh,
                replays: &replays,
                journaled: &none,
                echo: &echo,
                redis_plain: &redis,
                redis_aof: &none,
                flat: [(&empty, &full), (&empty, &empty)],
                p99_us: &[1500.0, 2001.0, 9000.0],
            },
        );
        let line = |start: &str| {
            o.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no line {start:?} in\n{o}"))
                .to_string()
        };
        // Ratios 1.0, 0.499, 3.0 against the echo: the median is 0.998 → 1.00, met.
        assert!(line("| fresh fills ≥ 0.5× the JSON echo | 1.00×").ends_with("| met |"));
        // Against Redis 0.5, 1.996, 3.0: median 1.996, met.
        assert!(line("| fresh fills ≥ 1.0× Redis").ends_with("| met |"));
        // 1.004 µs prints as 1.00: met, as printed.
        assert!(line("| host CPU per replay ≤ 1.0 µs | 1.00 µs").ends_with("| met |"));
        assert!(
            line("| full book ≥ 0.90× an empty one, task per connection | 0.89×")
                .ends_with("| **not met** |")
        );
        assert!(
            line("| full book ≥ 0.90× an empty one, one shared task | 1.00×").ends_with("| met |")
        );
        // The median of the repetitions' p99s, 2.001 ms: not met.
        assert!(
            line("| p99 round trip at half the peak ≤ 2 ms | 2.001 ms (1.500–9.000)")
                .ends_with("| **not met** |")
        );
        // A system that did not run gives no line (the journal row here).
        assert!(!o.contains("appendfsync always"), "{o}");
    }
}
