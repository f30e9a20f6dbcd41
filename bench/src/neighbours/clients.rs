//! The aggressor's clients' own runtime. They stand for a big job's
//! executors, which on a fleet run on machines of their own; here they share
//! the two CPUs with the victims' JVMs, and what they take is CPU no queue
//! in the node can give back. So their threads run at a lower CPU priority
//! (a nice value, `--aggressor-nice`), and their CPU time is counted apart
//! from the node's, whose threads keep the default priority: the node's own
//! work for the aggressor still competes with the victims as it would on a
//! node of a fleet.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use tokio::runtime::{Handle, Runtime};

/// Worker threads: enough for the aggressor's writers to keep a throttled
/// disk busy.
const THREADS: usize = 2;

pub struct ClientRuntime {
    runtime: Option<Runtime>,
    /// Kernel thread ids of the runtime's threads, for their CPU time.
    tids: Arc<Mutex<Vec<i32>>>,
}

impl ClientRuntime {
    /// A runtime whose threads take `nice` (0: the default priority).
    pub fn new(nice: i32) -> anyhow::Result<ClientRuntime> {
        let tids: Arc<Mutex<Vec<i32>>> = Arc::default();
        let seen = tids.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(THREADS)
            .thread_name("aggressor")
            .enable_all()
            .on_thread_start(move || {
                // SAFETY: gettid and setpriority take no pointers. On Linux a
                // nice value belongs to a thread, so setting it for this tid
                // leaves the process's other threads as they are.
                let tid = unsafe { libc::gettid() };
                seen.lock().push(tid);
                if nice != 0 {
                    let _ =
                        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
                }
            })
            .build()
            .context("cannot start the aggressor's runtime")?;
        Ok(ClientRuntime {
            runtime: Some(runtime),
            tids,
        })
    }

    pub fn handle(&self) -> &Handle {
        self.runtime
            .as_ref()
            .expect("running until dropped")
            .handle()
    }

    /// CPU time the runtime's live threads have used so far (a thread that
    /// has ended is no longer counted; the workers last as long as the
    /// runtime).
    pub fn cpu_time(&self) -> Duration {
        let pid = std::process::id();
        self.tids
            .lock()
            .iter()
            .filter_map(|tid| {
                crate::report::cpu_time_at(&format!("/proc/{pid}/task/{tid}/stat")).ok()
            })
            .sum()
    }

    /// The nice value of one of the runtime's threads, as the kernel has it.
    pub fn nice_of_a_thread(&self) -> Option<i32> {
        let pid = std::process::id();
        let tid = *self.tids.lock().first()?;
        let fields = crate::report::stat_fields(&format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        // Field 19: nice.
        fields.get(19 - 3)?.parse().ok()
    }
}

impl Drop for ClientRuntime {
    fn drop(&mut self) {
        // Dropping a runtime waits for its threads, which may not be done
        // inside another runtime; its tasks have been stopped by then.
        if let Some(r) = self.runtime.take() {
            r.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_threads_run_at_the_nice_value_given_and_their_cpu_is_counted() {
        let rt = ClientRuntime::new(7).unwrap();
        rt.handle().block_on(async {});
        // Spins until this thread itself has used 200 ms of CPU (by its own
        // /proc entry), however busy the machine: a nice thread on loaded
        // cores gets little of its wall time.
        let spin = rt.handle().spawn(async {
            let started = std::time::Instant::now();
            let own = || crate::report::cpu_time_at("/proc/thread-self/stat").unwrap_or_default();
            let mut x = 0u64;
            while own() < Duration::from_millis(200) && started.elapsed() < Duration::from_secs(30)
            {
                for _ in 0..100_000 {
                    x = x.wrapping_mul(31).wrapping_add(1);
                }
            }
            x
        });
        rt.handle().block_on(spin).unwrap();
        assert_eq!(rt.nice_of_a_thread(), Some(7));
        assert!(
            rt.cpu_time() >= Duration::from_millis(150),
            "{:?}",
            rt.cpu_time()
        );
    }
}
