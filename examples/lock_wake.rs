//! What it costs on this machine to sleep on a held `std::sync::Mutex` instead of spinning:
//! the figure `Host::lock`'s spin is set from (`LOCK_SPIN` in `crates/host/src/lib.rs`).
//!
//! Two threads. The holder takes the lock, keeps it for `--hold-us`, lets it go and notes when;
//! the taker, which asked for the lock while it was held and went to sleep in the kernel, notes
//! when it got it. Printed: how long the holder's unlock took (it wakes the sleeper: a system
//! call, on a virtual machine an interrupt sent to the other processor), and the time from the
//! unlock to the taker holding the lock — the time its core could have been working. A taker
//! that spins instead of sleeping waits for the rest of the critical section and nothing more.
//!
//! `cargo run --release --example lock_wake` (about a second).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "The cost of sleeping on a held mutex and being woken, on this machine")]
struct Args {
    /// Rounds to measure.
    #[arg(long, default_value_t = 2_000)]
    rounds: usize,
    /// How long the holder keeps the lock each round, in microseconds (long enough that the
    /// taker is asleep when it is let go).
    #[arg(long, default_value_t = 200)]
    hold_us: u64,
}

fn main() {
    let args = Args::parse();
    let lock = Arc::new(Mutex::new(()));
    let epoch = Instant::now();
    let unlocked_at = Arc::new(AtomicU64::new(0));
    let taker_waiting = Arc::new(AtomicBool::new(false));
    let round = Arc::new(Barrier::new(2));
    let taker = {
        let (lock, unlocked_at, taker_waiting, round) = (
            lock.clone(),
            unlocked_at.clone(),
            taker_waiting.clone(),
            round.clone(),
        );
        std::thread::spawn(move || {
            let mut woken = Vec::with_capacity(args.rounds);
            for _ in 0..args.rounds {
                round.wait();
                taker_waiting.store(true, Ordering::Release);
                let guard = lock.lock().unwrap();
                let got = epoch.elapsed().as_nanos() as u64;
                drop(guard);
                woken.push(got.saturating_sub(unlocked_at.load(Ordering::Acquire)));
                round.wait();
            }
            woken
        })
    };
    let mut unlocks = Vec::with_capacity(args.rounds);
    for _ in 0..args.rounds {
        let guard = lock.lock().unwrap();
        round.wait();
        while !taker_waiting.swap(false, Ordering::AcqRel) {
            std::hint::spin_loop();
        }
        // The taker is in `lock()` by now, and asleep well before the hold ends.
        let until = Instant::now() + Duration::from_micros(args.hold_us);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        let before = epoch.elapsed().as_nanos() as u64;
        unlocked_at.store(before, Ordering::Release);
        drop(guard);
        unlocks.push(epoch.elapsed().as_nanos() as u64 - before);
        round.wait();
    }
    let mut woken = taker.join().unwrap();
    println!(
        "{} rounds, the lock held {} µs each (the taker asleep when it is let go):",
        args.rounds, args.hold_us
    );
    for (what, v) in [
        ("the holder's unlock (waking the taker)", &mut unlocks),
        ("unlock to the taker holding the lock", &mut woken),
    ] {
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        println!(
            "  {what}: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs",
            at(0.5),
            at(0.9),
            at(0.99)
        );
    }
}
