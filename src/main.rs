use std::process::ExitCode;

/// Each request allocates a handful of small buffers on whichever worker serves it; mimalloc's
/// per-thread free lists serve those faster than the system allocator (see docs/performance.md).
/// Built without transparent huge pages (`no_thp` in Cargo.toml): see docs/journal.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    polaris::cli::main()
}
