//! A small fuzzer for stable Rust, shared by the protocol crates' `tests/fuzz.rs`
//! (included with `#[path]`; cargo-fuzz needs nightly).
//!
//! Each target is a decoder fed mutated inputs: seeds from the crate's own
//! encoders and the checked-in corpus (`fuzz/corpus/<target>/`), mutated by
//! a seeded xorshift generator (bit flips, byte sets, boundary integers at
//! any offset, inserts, deletes, repeats and splices with other inputs).
//! An input that yields an outcome not seen before joins the working corpus,
//! a cheap stand-in for coverage guidance. Every execution checks:
//! - no panic (the input is written to `target/fuzz-failures/` first);
//! - the peak bytes the decoder allocated, counted by this test binary's
//!   global allocator on the decoding thread, stay within
//!   `per_input_byte × input length + constant`.
//!
//! Environment: `SWITCHYARD_FUZZ_SECS` (per target, default 2),
//! `SWITCHYARD_FUZZ_SEED` (default fixed, so CI runs are reproducible),
//! `SWITCHYARD_FUZZ_WRITE_SEEDS=1` writes the built-in seeds to the corpus.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Counts the bytes live and their peak, per thread: tests run on several
/// threads at once, and a decoder allocates only on the one that calls it.
pub struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    // `try_with`: the allocator also runs while thread locals are torn down.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now);
            }
        });
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // The old and new blocks may both be live during the move.
            add(new_size as isize);
            add(-(layout.size() as isize));
        }
        p
    }
}

/// Peak bytes allocated (beyond what was live before) while `f` runs.
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let r = f();
    let peak = PEAK.with(|p| p.get());
    (r, (peak - base).max(0) as usize)
}

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Longest input tried: decoders are bounded per byte, so short inputs find
/// the same bugs faster.
pub const MAX_INPUT: usize = 64 * 1024;

const INTERESTING: [u32; 12] = [
    0,
    1,
    2,
    0x10,
    0x7f,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
];

pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            2 if len >= 4 => {
                // A boundary value as a big-endian i32 (every length and
                // count on these wires), sometimes as a u16 or u8.
                let v = INTERESTING[rng.below(INTERESTING.len())];
                let i = rng.below(len - 3);
                match rng.below(3) {
                    0 => input[i..i + 4].copy_from_slice(&v.to_be_bytes()),
                    1 => input[i..i + 2].copy_from_slice(&(v as u16).to_be_bytes()),
                    _ => input[i] = v as u8,
                }
            }
            3 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(i..i, bytes);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                input.drain(i..i + n);
            }
            5 if len > 0 => {
                // Repeat a piece: what makes counts and chains grow.
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(256));
                let piece = input[i..i + n].to_vec();
                for _ in 0..1 + rng.below(8) {
                    let at = rng.below(input.len() + 1);
                    input.splice(at..at, piece.iter().copied());
                }
            }
            6 if !corpus.is_empty() => {
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let at = rng.below(len + 1);
                    input.truncate(at);
                    input.extend_from_slice(&other[from..]);
                }
            }
            _ if len > 0 => input.truncate(rng.below(len)),
            _ => input.push(rng.next() as u8),
        }
    }
    input.truncate(MAX_INPUT);
}

pub struct Target<'a> {
    pub name: &'static str,
    /// Seeds from the crate's encoders (also written to the corpus with
    /// `SWITCHYARD_FUZZ_WRITE_SEEDS=1`).
    pub seeds: Vec<Vec<u8>>,
    /// Peak allocation allowed per input byte, and on top of that.
    pub per_input_byte: usize,
    pub constant: usize,
    /// Decodes one input; returns a label of the outcome (an error's kind,
    /// the message type): new labels grow the working corpus.
    pub run: &'a dyn Fn(&[u8]) -> String,
}

fn corpus_dir(crate_dir: &str, name: &str) -> PathBuf {
    Path::new(crate_dir).join("fuzz/corpus").join(name)
}

/// Runs a target for its time budget; returns the executions run.
pub fn fuzz(crate_dir: &str, target: Target) -> u64 {
    let dir = corpus_dir(crate_dir, target.name);
    if std::env::var_os("SWITCHYARD_FUZZ_WRITE_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (i, seed) in target.seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}.bin")), seed).unwrap();
        }
    }
    let mut corpus = target.seeds.clone();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            corpus.push(std::fs::read(&f).unwrap());
        }
    }
    assert!(!corpus.is_empty(), "{}: no seeds", target.name);
    let secs: f64 = std::env::var("SWITCHYARD_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let seed: u64 = std::env::var("SWITCHYARD_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0f57_17c4);
    let mut rng =
        Rng::new(seed ^ target.name.len() as u64 ^ (target.name.as_bytes()[0] as u64) << 32);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut seen = HashSet::new();
    let mut execs = 0u64;
    let mut worst = 0f64;
    // Every seed once as is, then mutations until the deadline.
    let mut queue: Vec<Vec<u8>> = corpus.clone();
    loop {
        let input = match queue.pop() {
            Some(i) => i,
            None => {
                if Instant::now() >= deadline {
                    break;
                }
                let mut i = corpus[rng.below(corpus.len())].clone();
                mutate(&mut rng, &mut i, &corpus);
                i
            }
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            peak_during(|| (target.run)(&input))
        }));
        let (label, peak) = match outcome {
            // Numbers in error texts would make every input "new".
            Ok((label, peak)) => (
                label
                    .chars()
                    .filter(|c| !c.is_ascii_digit())
                    .collect::<String>(),
                peak,
            ),
            Err(panic) => {
                let path = save_failure(target.name, &input);
                eprintln!("{}: panic on {} (seed {seed})", target.name, path.display());
                std::panic::resume_unwind(panic);
            }
        };
        let bound = target.per_input_byte * input.len() + target.constant;
        if peak > bound {
            let path = save_failure(target.name, &input);
            panic!(
                "{}: {peak} bytes allocated for a {}-byte input (bound {bound}), input in {}",
                target.name,
                input.len(),
                path.display()
            );
        }
        worst = worst.max(peak as f64 / bound as f64);
        if seen.insert(label) && corpus.len() < 4096 {
            corpus.push(input);
        }
        execs += 1;
    }
    eprintln!(
        "fuzz {}: {execs} executions in {secs} s, {} outcomes, corpus {}, peak allocation at most {:.0}% of its bound",
        target.name,
        seen.len(),
        corpus.len(),
        worst * 100.0
    );
    execs
}

fn save_failure(name: &str, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{name}-{:016x}.bin", hash(input)));
    let _ = std::fs::write(&path, input);
    path
}

fn hash(input: &[u8]) -> u64 {
    input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A short name for what a decode step gave: the variant name of a value (its
/// Debug text up to the first non-alphanumeric character), or the error text.
/// Targets return these so that a run's outcomes can be told apart.
pub fn label<T: std::fmt::Debug, E: std::fmt::Display>(r: &Result<T, E>) -> String {
    match r {
        Ok(v) => format!("{v:?}")
            .chars()
            .take_while(|c| c.is_alphanumeric())
            .collect(),
        Err(e) => e.to_string(),
    }
}
