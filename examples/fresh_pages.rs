//! What the first touch of fresh memory costs on this machine: the price a new receipt pays for
//! each page of memory it is the first to use (the table entry, the stored request, the stored
//! reply), and why `Host` faults them in outside its lock (`docs/performance.md`).
//!
//! Maps anonymous memory and writes one byte per page, timing it: once from one thread, then
//! from two threads at once, each round on memory mapped anew (so the kernel hands out pages
//! again); then `memset` of memory already resident, for the cost of the zeroing alone. On a
//! virtual machine the first round after memory was handed back to the hypervisor is the
//! expensive one.
//!
//! `cargo run --release --example fresh_pages [-- --mib 1024 --rounds 3]` (a few seconds).

use std::time::Instant;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "The cost of first touches of fresh memory, one thread and two")]
struct Args {
    /// MiB mapped and touched per thread per round.
    #[arg(long, default_value_t = 1024)]
    mib: usize,
    /// Rounds of each kind.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

const PAGE: usize = 4096;

/// Maps `bytes` of fresh anonymous memory, touches every page once, unmaps it; the time per
/// page in nanoseconds.
fn touch_fresh(bytes: usize) -> f64 {
    // SAFETY: a private anonymous mapping of `bytes`; only its own pages are written, and it
    // is unmapped before returning.
    unsafe {
        let p = rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            bytes,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::NORESERVE,
        )
        .unwrap_or_else(|e| panic!("mmap of {bytes} bytes: {e}"));
        let p = p.cast::<u8>();
        let started = Instant::now();
        for off in (0..bytes).step_by(PAGE) {
            p.add(off).write_volatile(1);
        }
        let ns = started.elapsed().as_nanos() as f64 / (bytes / PAGE) as f64;
        let _ = rustix::mm::munmap(p.cast(), bytes);
        ns
    }
}

fn main() {
    let args = Args::parse();
    let bytes = args.mib << 20;
    for round in 1..=args.rounds {
        println!(
            "one thread, round {round}: {:.0} ns per fresh page",
            touch_fresh(bytes)
        );
    }
    for round in 1..=args.rounds {
        let both: Vec<f64> = std::thread::scope(|s| {
            let a = s.spawn(|| touch_fresh(bytes));
            let b = s.spawn(|| touch_fresh(bytes));
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        println!(
            "two threads at once, round {round}: {:.0} and {:.0} ns per fresh page",
            both[0], both[1]
        );
    }
    let mut resident = vec![1u8; bytes];
    let started = Instant::now();
    // SAFETY: writes exactly the vector's own `bytes` bytes.
    unsafe { std::ptr::write_bytes(resident.as_mut_ptr(), 0, bytes) };
    let secs = started.elapsed().as_secs_f64();
    std::hint::black_box(&resident);
    println!(
        "zeroing resident memory: {:.1} GB/s ({:.0} ns per page)",
        bytes as f64 / secs / 1e9,
        secs * 1e9 / (bytes / PAGE) as f64
    );
}
