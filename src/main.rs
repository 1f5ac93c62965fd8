use std::process::ExitCode;
use std::time::Duration;

/// Each request allocates a handful of small buffers on whichever worker serves it; mimalloc's
/// per-thread free lists serve those faster than the system allocator (see docs/performance.md).
/// Built without transparent huge pages (`no_thp` in Cargo.toml): see docs/journal.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    /// mimalloc's collection (`mimalloc.h`), part of the allocator linked above: with `force`,
    /// it gives every range of freed memory waiting to be returned to the system back now.
    fn mi_collect(force: bool);
}

/// How often [`give_back_freed_memory`] returns freed memory to the system: well inside
/// mimalloc's purge delay (1 s), so no range waits long enough for an allocation to find it due.
const GIVE_BACK_EVERY: Duration = Duration::from_millis(250);

/// Returns freed memory to the system from a thread of its own, every [`GIVE_BACK_EVERY`].
///
/// mimalloc returns freed memory to the system (`madvise`) once it has stayed free for its
/// purge delay, and it does so inside whichever allocation first notices the delay passed —
/// all of it at once. After an operator's prepare or clear over a million receipts that is
/// hundreds of megabytes, tens of milliseconds of system time inside one allocation, which
/// could be one an agent's request makes under the host's lock, or one of an operator's slices
/// of that lock (SPEC §10: no more than about 1 ms at a time). Given back here first, no
/// allocation ever finds it due.
fn give_back_freed_memory() {
    let _ = std::thread::Builder::new()
        .name("polaris-give-back".to_owned())
        .spawn(|| loop {
            std::thread::sleep(GIVE_BACK_EVERY);
            // SAFETY: `mi_collect` takes no pointers and may be called from any thread at any
            // time; the allocator it collects is the one this binary links and uses.
            unsafe { mi_collect(true) };
        });
}

fn main() -> ExitCode {
    give_back_freed_memory();
    polaris::cli::main()
}
