//! A fleet of `chaos-worker` processes on one queue: started, SIGKILLed and restarted by
//! slot. Each process (each slot's generation) logs to a file of its own in the fleet's
//! directory, so the time a restarted worker took to run its first job can be read back.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::checker::{RunLine, read_log};

/// How every worker of a fleet is run.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The `chaos-worker` binary (`env!("CARGO_BIN_EXE_chaos-worker")` in a test).
    pub bin: PathBuf,
    /// The broker URL the workers connect to.
    pub broker: String,
    /// The queue they work.
    pub queue: String,
    /// Handlers per worker (and window, and largest fetch).
    pub concurrency: usize,
    /// How long each job takes.
    pub job_ms: u64,
    /// The workers' lease: jobs of a killed worker run again this long after its last
    /// renewal.
    pub lease_ms: u64,
    /// An AMQP connection name (see `chaos-worker --name`).
    pub name: Option<String>,
    /// A network namespace to run the workers in (`ip netns exec`).
    pub netns: Option<String>,
}

impl WorkerSpec {
    /// A spec with 1 ms jobs and a 2 s lease.
    pub fn new(bin: impl Into<PathBuf>, broker: &str, queue: &str, concurrency: usize) -> Self {
        WorkerSpec {
            bin: bin.into(),
            broker: broker.to_owned(),
            queue: queue.to_owned(),
            concurrency,
            job_ms: 1,
            lease_ms: 2_000,
            name: None,
            netns: None,
        }
    }
}

#[derive(Debug)]
struct Slot {
    child: Option<Child>,
    generation: u32,
    started: Instant,
}

/// Worker processes by slot; dropping the fleet kills every one still running.
#[derive(Debug)]
pub struct Fleet {
    spec: WorkerSpec,
    dir: PathBuf,
    slots: Vec<Slot>,
}

impl Fleet {
    /// Starts `workers` processes; their logs go to `dir` (which must exist).
    pub fn start(spec: WorkerSpec, workers: usize, dir: &Path) -> Fleet {
        let mut fleet = Fleet {
            spec,
            dir: dir.to_owned(),
            slots: Vec::new(),
        };
        for i in 0..workers {
            let child = fleet.spawn(i, 0);
            fleet.slots.push(Slot {
                child: Some(child),
                generation: 0,
                started: Instant::now(),
            });
        }
        fleet
    }

    /// How many slots the fleet has.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the fleet has no slot at all.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn log_path(&self, slot: usize, generation: u32) -> PathBuf {
        self.dir.join(format!("w{slot}-{generation}.log"))
    }

    fn spawn(&self, slot: usize, generation: u32) -> Child {
        let s = &self.spec;
        let mut cmd = match &s.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&s.bin);
                c
            }
            None => Command::new(&s.bin),
        };
        cmd.arg("--broker")
            .arg(&s.broker)
            .arg("--queue")
            .arg(&s.queue)
            .arg("--log")
            .arg(self.log_path(slot, generation))
            .arg("--concurrency")
            .arg(s.concurrency.to_string())
            .arg("--job-ms")
            .arg(s.job_ms.to_string())
            .arg("--lease-ms")
            .arg(s.lease_ms.to_string());
        if let Some(name) = &s.name {
            cmd.arg("--name").arg(name);
        }
        let err = self.dir.join(format!("w{slot}-{generation}.err"));
        let err = File::create(&err).unwrap_or_else(|e| panic!("{}: {e}", err.display()));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
    }

    /// SIGKILLs slot `i`'s process and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.slots[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a new process in slot `i` (which must have been killed).
    pub fn restart(&mut self, i: usize) {
        assert!(self.slots[i].child.is_none(), "slot {i} is still running");
        let generation = self.slots[i].generation + 1;
        let child = self.spawn(i, generation);
        let slot = &mut self.slots[i];
        slot.generation = generation;
        slot.child = Some(child);
        slot.started = Instant::now();
    }

    /// Panics, showing its stderr, if a worker process exited by itself.
    pub fn assert_alive(&mut self) {
        for i in 0..self.slots.len() {
            let generation = self.slots[i].generation;
            let Some(child) = self.slots[i].child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                let err = self.dir.join(format!("w{i}-{generation}.err"));
                let text = std::fs::read_to_string(&err).unwrap_or_default();
                panic!("worker {i}.{generation} exited by itself ({status}):\n{text}");
            }
        }
    }

    /// Every run line logged so far by every process of the fleet.
    pub fn runs(&self) -> Vec<RunLine> {
        let mut all = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            for g in 0..=slot.generation {
                all.extend(read_log(&self.log_path(i, g)));
            }
        }
        all
    }

    /// The ends of runs, per process (each slot's each generation).
    pub fn ends_per_process(&self) -> Vec<Vec<crate::checker::RunEnd>> {
        let mut all = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            for g in 0..=slot.generation {
                all.push(crate::checker::read_ends(&self.log_path(i, g)));
            }
        }
        all
    }

    /// Run lines of slot `i`'s current process.
    pub fn runs_of(&self, i: usize) -> Vec<RunLine> {
        read_log(&self.log_path(i, self.slots[i].generation))
    }

    /// When slot `i`'s current process was started.
    pub fn started(&self, i: usize) -> Instant {
        self.slots[i].started
    }

    /// Stops every process: SIGTERM (a graceful drain), then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        for slot in &mut self.slots {
            if let Some(child) = &slot.child {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
            }
        }
        let deadline = Instant::now() + grace;
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for i in 0..self.slots.len() {
            self.kill(i);
        }
    }
}
