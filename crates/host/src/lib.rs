//! The host's rules: validation, the receipt rules, task admission, executions and reads.
//!
//! One request ID executes at most once and means one request content. Everything that must be
//! atomic for that — looking the ID up, comparing fingerprints, admitting a mutation against
//! its task's state, checking capacity and creating the receipt — happens in one critical
//! section of one `std::sync::Mutex` (the mini-redis answer: every section is short and never
//! awaits). An admitted mutation is polled once in place: when the executor answers without
//! waiting it completes inline, otherwise it is spawned detached from the connection that asked
//! for it, so a caller that disconnects cancels nothing; replies, errors and panics included,
//! are stored under the receipt and shared by every copy of the request. An outcome that may or
//! may not have taken effect is never re-run: it blocks its task until `task.verifyOutcome`
//! reads the page. Completed receipts leave the book only by an operator's two-phase clear.
//!
//! Where each part lives:
//! - `lib.rs` (here): the [`Host`] handle, its [`HostConfig`], its [`Counters`] and the state
//!   behind the one lock (`State`, reached only through `Host::lock`).
//! - `handle.rs`: where requests come in — one frame, one parsed request, or a pipelined run
//!   of actions admitted under one taking of the lock and stored under one more.
//! - `admission.rs`: the receipt rules for a new request, and every refusal they give.
//! - `execution.rs`: an admitted `Execution` from the executor's start to its stored outcome.
//! - `fast_path/`: what the host does beyond the reference path (`Host::handle`) to answer
//!   the same for less: borrowed fills, fills done at once, pipelined batches.
//! - `read.rs`: reads, `task.verifyOutcome`, and the `host.hello`, `run.status` and
//!   `receipt.status` results.
//! - `clear.rs`: the clearability rule and the two phases of a clear.
//! - `operator_reads.rs`: the operator's reads of the book and tasks, and the live feed's
//!   `changed` frames.
//! - `fleet.rs`: claiming in the fleet ledger and settling copies from its rows (SPEC §13).
//! - `fleet_book.rs`: clearing, acknowledging and settling for the whole fleet, and keeping
//!   this host's copies consistent with the ledger's changes.

#![warn(missing_docs)]

// The layers below, under the names this crate's modules use for them.
use polaris_executor as executor;
use polaris_journal as journal;
use polaris_ledger as ledger;
use polaris_protocol as protocol;
use polaris_state::{book, events, tasks};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::book::{Book, RequestKey};
use crate::events::{EventBus, Subscription};
use crate::executor::Executor;
use crate::journal::Journal;
use crate::ledger::Ledger;
use crate::protocol::{now_millis, ErrorBody, LineEnds, Outcome, ReceiptKind};
use crate::tasks::{TaskId, Tasks};

mod admission;
mod clear;
mod execution;
mod failures;
mod fast_path;
mod fleet;
mod fleet_book;
mod fleet_report;
mod handle;
mod journaling;
pub mod operator_reads;
mod read;
mod task_record;
mod unsettled;

#[cfg(test)]
mod clear_tests;
#[cfg(test)]
mod tests;

pub(crate) use clear::{clear_refusal, Order};
pub use clear::{
    ClearCandidate, ClearRefusal, ClearTargets, ClearedReceipt, CommittedClear, PreparedClearView,
    CLEAR_TOKEN_TTL_MS, MAX_PREPARED_CLEARS,
};
pub use fleet::interrupted_reply;
pub use fleet_book::FleetTargets;
pub(crate) use fleet_book::{ledger_error, row_refusal};
pub use journaling::Acknowledgement;

/// Default `--capacity`.
pub const DEFAULT_CAPACITY: usize = 10_000;
/// Default `--tombstone-capacity`.
pub const DEFAULT_TOMBSTONE_CAPACITY: usize = 1_000_000;
/// How long [`Host::lock`] spins for a held lock before it sleeps until it is let go: about
/// what sleeping and being woken cost, so a taker never pays much more than twice the cheaper
/// of the two. Measured on the 2-core virtual machine Polaris is benchmarked on
/// (`cargo run --release --example lock_wake`): the holder's unlock takes 12–14 µs when it
/// must wake a sleeper (a system call and an interrupt to the other processor), and the
/// sleeper holds the lock 31–41 µs after the unlock — time its core does nothing. A batch's
/// critical section is shorter than that, so a taker that spins this long almost always gets
/// the lock without sleeping (`load --hold 5`, fresh fills 32 × 64, alternated: 0.85–0.96 M/s
/// with a 5 µs spin, 1.27–1.36 M/s with this one, host CPU per request unchanged).
const LOCK_SPIN: Duration = Duration::from_micros(50);

/// Default `--action-timeout-ms`.
pub const DEFAULT_ACTION_TIMEOUT_MS: u64 = 2_000;

/// The knobs of one host run.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Hard receipt capacity; new mutating IDs are refused beyond it, nothing is evicted.
    pub capacity: usize,
    /// Hard tombstone capacity (also bounds the compact records of closed tasks).
    pub tombstone_capacity: usize,
    /// `--max-book-bytes`: the bytes the receipts may hold; new mutations are refused past it.
    pub max_book_bytes: usize,
    /// How long an action's effect may take to be observed, and how long a read may take.
    pub action_timeout: Duration,
    /// Whether frames take the fast path (the one-pass reader, borrowed fills, fills done at
    /// once, pipelined batches); off, every frame takes the reference path, [`Host::handle`].
    /// Both answer alike; off exists to check that they do.
    pub fast_path: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            capacity: DEFAULT_CAPACITY,
            tombstone_capacity: DEFAULT_TOMBSTONE_CAPACITY,
            max_book_bytes: crate::book::DEFAULT_MAX_BOOK_BYTES,
            action_timeout: Duration::from_millis(DEFAULT_ACTION_TIMEOUT_MS),
            fast_path: true,
        }
    }
}

pub use crate::protocol::introspection::Counters;

/// The state behind the host's one lock.
///
/// Whoever holds the lock holds it for one short critical section that never awaits and never
/// calls the executor: the receipt rules for one request (or a pipelined run of them), storing
/// one outcome (or a run's), a status read, one slice of an operator's scan or clear. Executions, reads of the page
/// and replies to waiting copies all happen after the lock is let go. Take it only through
/// [`Host::lock`].
pub(crate) struct State {
    /// The receipts and tombstones. Admission looks up, compares and inserts here under the
    /// lock in one step; completion stores outcomes; the operator's socket lists and clears.
    pub(crate) book: Book,
    /// Task states and pending outcomes, changed together with the receipts they depend on so
    /// an admission never sees one without the other.
    pub(crate) tasks: Tasks,
    /// What the console shows; every count changes in the critical section of the event it
    /// counts.
    pub(crate) counters: Counters,
    /// The operator's live feed: events are published under the lock so their order is the
    /// order of the changes (publishing never waits on a subscriber).
    pub(crate) events: EventBus,
    /// Verifications in progress, so a second one shares the first. Inserted and removed under
    /// the lock; the observation itself runs without it.
    verifying: std::collections::HashMap<TaskId, watch::Receiver<Option<Arc<Outcome>>>>,
    /// Clears prepared and not yet committed, by token.
    prepared_clears: std::collections::HashMap<String, clear::PreparedClear>,
    /// Receipts recovered as `INTERRUPTED` (executing when an earlier run stopped): each is an
    /// unsettled outcome until acknowledged, whether or not its task recorded it as pending.
    pub(crate) interrupted: Vec<RequestKey>,
    /// A fleet host's view of the ledger's `INTERRUPTED` receipts nobody acknowledged (read
    /// every second): unsettled outcomes of the whole fleet, also those of dead hosts.
    pub(crate) fleet_interrupted: Vec<unsettled::FleetInterrupted>,
}

/// The host: a cheap-to-clone handle shared by every connection and execution.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

/// What every clone of a [`Host`] shares.
struct Inner {
    /// This run's ID: receipts and tasks mean something only within it.
    run_id: String,
    /// When this run started (epoch ms).
    started_at: i64,
    /// The knobs this run was started with.
    config: HostConfig,
    /// The one lock: a `std::sync::Mutex`, because every critical section is short and never
    /// awaits (see [`State`]).
    state: Mutex<State>,
    /// What performs actions and reads pages.
    executor: Arc<dyn Executor>,
    /// Set once by [`Host::begin_shutdown`]; read by admission without the lock's help.
    shutting_down: AtomicBool,
    /// Held for the whole of an operator's scan or clear (`receipts.list`, `clearPrepare`,
    /// `clearCommit`), which take the host's lock only in short slices: no clear can move the
    /// receipts between the slices of another operator's scan.
    operator_gate: Mutex<()>,
    /// Signalled whenever the last running execution finishes.
    idle: Notify,
    /// How many `wait_idle` calls are waiting, so completions skip `idle` when nobody is.
    idle_watchers: AtomicUsize,
    /// The durable journal (SPEC §11); `None` with `--no-journal`. Begins are appended under
    /// the lock at admission and awaited before the executor acts; completions are appended
    /// under the lock at completion and awaited before any copy is answered. A pipelined
    /// batch appends its begins as one append, and its completions stored together as one.
    journal: Option<Journal>,
    /// The fleet ledger (SPEC §13); `None` unless `--ledger`. A new mutation is claimed there
    /// before the executor acts, and its completion stored there before any copy is answered.
    ledger: Option<Ledger>,
    /// The fleet's counts as the ledger last gave them (refreshed every second).
    fleet_counts: fleet::FleetView,
    /// Request IDs whose claim this host is still taking back from the fleet ledger.
    withdrawing: fleet::Withdrawing,
    /// Fleet clears prepared on this host and not yet committed, by token.
    fleet_prepared: fleet_book::FleetPrepared,
    /// Set once the journal failed (why, naming the file): the host cannot keep its promise
    /// any more and stops.
    failure: watch::Sender<Option<String>>,
    /// Whether a journaled pipelined batch answers with one reply for all its frames (true
    /// while the executor has answered every batch's executions at once; see
    /// [`Host::run_begun_batch`]).
    batches_together: AtomicBool,
}

/// A reply that is ready now, or one that needs waiting (an execution, a slow read): what the
/// server writes back for each frame, in order.
pub enum Handled {
    /// The reply line.
    Ready(Vec<u8>),
    /// A reply made of a stored outcome (a replayed copy's, or a fresh execution's that
    /// completed inline), written by the connection straight into the bytes it sends next (no
    /// line of its own is built for it).
    Replay(Replay),
    /// A future resolving to the reply line.
    Later(BoxFuture<'static, Vec<u8>>),
    /// No reply of its own: this frame's reply comes with the `Later` answer at this index
    /// among the answers of the same [`Host::handle_frames`] call (an earlier one), which
    /// resolves to the lines of several frames (a journaled batch answered together: one
    /// future and one wake instead of one per frame). The frame keeps its in-flight slot until
    /// that answer is written. Only `handle_frames` gives it.
    Joined(usize),
}

/// A reply made of an outcome stored under a receipt: the stored outcome, the request ID and
/// how the reply relates to the receipt (`replayed` for a copy, `new` for the execution that
/// just stored it), written out only where the line is sent ([`Replay::write`]). The outcome is
/// shared with the receipt, so answering costs no line of its own.
pub struct Replay {
    /// The outcome, shared with the receipt.
    outcome: Arc<Outcome>,
    /// The request ID, as the book keys it.
    key: RequestKey,
    /// `replayed` or `new`.
    kind: ReceiptKind,
}

impl Replay {
    /// Appends the reply line, byte for byte what [`Outcome::reply_line`] gives.
    pub fn write(&self, out: &mut Vec<u8>, run_id: &str) {
        self.key.with_str(|id| {
            self.outcome
                .write_reply_line(out, Some(id), run_id, self.kind)
        })
    }

    /// [`Replay::write`] with the run's line ends at hand (a connection makes them once).
    pub fn write_ending(&self, out: &mut Vec<u8>, ends: &LineEnds) {
        self.outcome
            .write_reply_line_key(out, &self.key, ends, self.kind)
    }

    /// The reply line on its own.
    pub fn line(&self, run_id: &str) -> Vec<u8> {
        let mut line = Vec::new();
        self.write(&mut line, run_id);
        line
    }

    /// About the bytes [`Replay::write`] appends.
    pub fn line_len(&self, run_id: &str) -> usize {
        self.key
            .with_str(|id| self.outcome.reply_line_len(Some(id), run_id))
    }
}

/// A refusal, answered at once.
fn reject(id: Option<&str>, run_id: &str, error: ErrorBody) -> Handled {
    Handled::Ready(Outcome::err(&error).reply_line(id, run_id, ReceiptKind::None))
}

/// An event's facts as the bus carries them.
fn to_data<T: serde::Serialize>(data: &T) -> serde_json::Value {
    serde_json::to_value(data).expect("event data serialises")
}

/// A read's result, answered at once.
fn ready_ok<T: serde::Serialize>(id: &str, run_id: &str, result: T) -> Handled {
    Handled::Ready(Outcome::ok(&result).reply_line(Some(id), run_id, ReceiptKind::None))
}

/// Waits for a running receipt's (or verification's) outcome; `None` when its sender went
/// away without one.
async fn wait_outcome(mut rx: watch::Receiver<Option<Arc<Outcome>>>) -> Option<Arc<Outcome>> {
    match rx.wait_for(Option::is_some).await {
        Ok(v) => v.clone(),
        Err(_) => None,
    }
}

impl Host {
    /// A host with a fresh run ID and no journal: receipts live for the run.
    pub fn new(config: HostConfig, executor: Arc<dyn Executor>) -> Host {
        Host::build(config, executor, None)
    }

    /// A host with a fresh run ID writing through `journal` (nothing recovered yet).
    fn build(config: HostConfig, executor: Arc<dyn Executor>, journal: Option<Journal>) -> Host {
        Host::build_run(
            uuid::Uuid::new_v4().to_string(),
            config,
            executor,
            journal,
            None,
        )
    }

    /// A host for the run `run_id`, writing through `journal` or claiming in `ledger`.
    fn build_run(
        run_id: String,
        config: HostConfig,
        executor: Arc<dyn Executor>,
        journal: Option<Journal>,
        ledger: Option<Ledger>,
    ) -> Host {
        let mut book = Book::new(config.capacity, config.tombstone_capacity)
            .with_max_bytes(config.max_book_bytes);
        // The receipt index whole, and the first stretch of the table's room, before any
        // request can wait on them: later stretches are faulted in as requests pass.
        while let Some(stretch) = book.fault_ahead() {
            stretch.fault_in();
        }
        if let Some((index, limit)) = book.index_left_to_receipts() {
            tracing::info!(
                "the receipt index for --capacity {} and --max-book-bytes {} is {} MiB, more than \
                 a quarter of the memory available ({} MiB of {} MiB): it is not faulted in at \
                 the start, its pages are faulted in by the first receipts that reach them; \
                 bound the book nearer what this host will hold to have it ready at the start",
                config.capacity,
                config.max_book_bytes,
                index >> 20,
                limit >> 20,
                (limit * 4) >> 20
            );
        }
        Host {
            inner: Arc::new(Inner {
                run_id,
                started_at: now_millis(),
                state: Mutex::new(State {
                    book,
                    tasks: Tasks::with_closed_capacity(config.tombstone_capacity),
                    counters: Counters::default(),
                    events: EventBus::default(),
                    verifying: Default::default(),
                    prepared_clears: Default::default(),
                    interrupted: Vec::new(),
                    fleet_interrupted: Vec::new(),
                }),
                config,
                executor,
                operator_gate: Mutex::new(()),
                shutting_down: AtomicBool::new(false),
                idle: Notify::new(),
                idle_watchers: Default::default(),
                journal,
                ledger,
                fleet_counts: Default::default(),
                withdrawing: Default::default(),
                fleet_prepared: Default::default(),
                failure: watch::channel(None).0,
                batches_together: AtomicBool::new(true),
            }),
        }
    }

    /// This run's ID.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// When this run started (epoch ms).
    pub fn started_at(&self) -> i64 {
        self.inner.started_at
    }

    /// The run's configuration.
    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// The executor.
    pub fn executor(&self) -> &Arc<dyn Executor> {
        &self.inner.executor
    }

    /// Takes the host's one lock: the only way anything in the crate reaches [`State`].
    ///
    /// A poisoned lock is recovered, not propagated: a panic while holding the lock cannot
    /// leave the book half-changed in a way that matters more than refusing all service, so
    /// keep serving. It also lets the guard that abandons a dropped execution's waiters take
    /// the lock while a panic unwinds, where panicking again would abort the process.
    ///
    /// A taker that finds the lock held spins for up to [`LOCK_SPIN`] first, retrying with a
    /// growing pause between tries, and only then sleeps in the kernel: a critical section for
    /// one request lasts a few microseconds, and sleeping costs both threads more than that —
    /// a system call to sleep, one for the holder to wake it, two context switches — while
    /// the waiting worker serves nobody either way.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        let state = &self.inner.state;
        let mut pause = 1u32;
        let mut since = None;
        loop {
            match state.try_lock() {
                Ok(guard) => return guard,
                Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            let started = *since.get_or_insert_with(std::time::Instant::now);
            if started.elapsed() >= LOCK_SPIN {
                return state.lock().unwrap_or_else(|p| p.into_inner());
            }
            for _ in 0..pause {
                std::hint::spin_loop();
            }
            pause = (pause * 2).min(64);
        }
    }

    /// A new event subscription and the sequence number it starts after.
    pub fn subscribe(&self) -> (u64, Subscription) {
        let st = self.lock();
        (st.events.seq(), st.events.subscribe())
    }

    /// From now on new mutations are refused with `SHUTTING_DOWN`.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Whether the host is stopping.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
    }

    /// Waits until no execution runs, or `timeout` passes. Returns the request IDs still
    /// running when it gave up (empty when idle).
    pub async fn wait_idle(&self, timeout: Duration) -> Vec<String> {
        // Counted before the first look at the book, so a completion that empties the book
        // after that look sees the count and wakes this waiter.
        struct Watching<'a>(&'a AtomicUsize);
        impl Drop for Watching<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.inner.idle_watchers.fetch_add(1, Ordering::SeqCst);
        let _watching = Watching(&self.inner.idle_watchers);
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.inner.idle.notified();
            {
                let st = self.lock();
                if st.book.running() == 0 {
                    return Vec::new();
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let st = self.lock();
                return st
                    .book
                    .iter()
                    .filter(|(_, r)| r.is_running())
                    .map(|(k, _)| k.to_string())
                    .collect();
            }
        }
    }

    /// The host can no longer keep its promise (`why` says what failed): log one line, refuse
    /// new work, and tell `polaris serve` to stop (exit non-zero).
    pub(crate) fn fail(&self, why: String) {
        let first = self.inner.failure.send_if_modified(|f| {
            if f.is_some() {
                return false;
            }
            *f = Some(why.clone());
            true
        });
        if first {
            tracing::error!("{why}; the host stops. Start it again once the cause is fixed");
            self.begin_shutdown();
        }
    }

    /// Whether the host failed and is stopping (see [`Host::fail`]).
    pub(crate) fn has_failed(&self) -> bool {
        self.inner.failure.borrow().is_some()
    }

    /// Wakes whoever waits for the host to have no execution running.
    fn ring_idle(&self, idle: bool) {
        if idle && self.inner.idle_watchers.load(Ordering::SeqCst) > 0 {
            self.inner.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod lock_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Host, HostConfig};
    use crate::executor::FixtureExecutor;

    fn host() -> Host {
        Host::new(HostConfig::default(), Arc::new(FixtureExecutor::new()))
    }

    /// A taker that finds the lock held past the spin gets it once it is let go, and sees what
    /// the holder changed.
    #[test]
    fn a_taker_of_a_held_lock_gets_it_once_let_go() {
        let host = host();
        let held = host.lock();
        let taker = std::thread::spawn({
            let host = host.clone();
            move || host.lock().counters.executions
        });
        // Held well past the spin: the taker sleeps until the holder lets go.
        std::thread::sleep(Duration::from_millis(50));
        assert!(!taker.is_finished(), "the lock is still held");
        let mut held = held;
        held.counters.executions = 7;
        drop(held);
        assert_eq!(taker.join().unwrap(), 7);
    }

    /// A lock poisoned by a panicking holder is taken anyway, held or not when asked for.
    #[test]
    fn a_poisoned_lock_is_taken_anyway() {
        let host = host();
        let poisoner = std::thread::spawn({
            let host = host.clone();
            move || {
                let _held = host.lock();
                panic!("a holder panics");
            }
        });
        assert!(poisoner.join().is_err());
        assert!(host.inner.state.is_poisoned());
        host.lock().counters.executions = 3;
        assert_eq!(host.lock().counters.executions, 3);
    }
}
