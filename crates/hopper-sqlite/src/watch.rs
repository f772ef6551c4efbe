//! Wake-ups for commits made by other processes.
//!
//! Brokers of one process share a wake signal per file and bump it themselves after an
//! enqueue, a retry or a release. A commit by another process (a producer in a web server,
//! say) leaves no such trace, and a worker idle on the file would find its jobs only at
//! its next poll, a second later by default. So each broker watches the file's directory
//! (inotify on Linux, FSEvents on macOS, through `notify`): every commit appends to the
//! `-wal` file, and a change to it or to the database file sets off checks, on the
//! broker's own database thread, of whether anyone else committed. `PRAGMA data_version`
//! on that connection changes only when another connection has committed, so the
//! broker's own settlements never wake its workers for nothing.
//!
//! A commit writes its frames to the `-wal` file first and becomes visible only when the
//! shared-memory index is updated after, which no file event reports; a check right after
//! the event can come too early. So an event is followed by checks at about 0, 1, 2, 5,
//! 15, 40 and 95 ms, each waking the workers if it finds a commit. Meanwhile the watch is off: a busy broker's own
//! commits would otherwise raise thousands of events a second, and the kernel's work on
//! them cost a SQLite drain a tenth of its rate. A check sees every commit visible by
//! then, made while the watch was off or not, and a few more checks follow each time it
//! is turned back on, for a commit whose writes came while it was off. A commit that
//! shows later than the last of them (a client that syncs between writing and
//! publishing, on a slow disk) raises no event and is found at the workers' next poll, as
//! it is where no watch can be set up.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use rusqlite::Connection;
use tokio::sync::watch;

use crate::writer::Command;

/// Pauses between the checks that follow a file event: checks at about 0, 1, 2, 5, 15, 40
/// and 95 ms after it.
const PAUSES: [Duration; 6] = [
    Duration::from_millis(1),
    Duration::from_millis(1),
    Duration::from_millis(3),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(55),
];

/// A broker's watch on its file: the watcher and the thread that runs the checks. Dropped
/// before the broker's writer: it stops the thread, which holds a sender of the writer's.
pub(crate) struct FileWatch {
    shared: Arc<Shared>,
    checker: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Flags {
    /// A file event came since the checker last looked.
    event: bool,
    /// The broker is closing.
    closed: bool,
}

struct Shared {
    flags: Mutex<Flags>,
    changed: Condvar,
}

impl Shared {
    fn flags(&self) -> MutexGuard<'_, Flags> {
        self.flags.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for an event or the close; returns whether the broker is closing.
    fn wait_event(&self) -> bool {
        let mut flags = self.flags();
        while !flags.event && !flags.closed {
            flags = self
                .changed
                .wait(flags)
                .unwrap_or_else(PoisonError::into_inner);
        }
        flags.event = false;
        flags.closed
    }

    /// Sleeps `pause` unless the broker closes first; returns whether it is closing.
    fn sleep(&self, pause: Duration) -> bool {
        let deadline = Instant::now() + pause;
        let mut flags = self.flags();
        while !flags.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            flags = self
                .changed
                .wait_timeout(flags, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        flags.closed
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.shared.flags().closed = true;
        self.shared.changed.notify_all();
        if let Some(checker) = self.checker.take() {
            let _ = checker.join();
        }
    }
}

/// Watches the directory of the database at `path` for changes to the file or its `-wal`
/// file, and checks on the broker's database thread (through `commands`) whether another
/// connection committed since `data_version` was read there; when one did, bumps `wake`.
/// `None` (logged) when the directory cannot be watched: workers then find other
/// processes' jobs by polling, as they also do where a watch reports no appends to a file
/// (kqueue, on the BSDs, watches a directory's entries only).
pub(crate) fn watch_file(
    path: &Path,
    data_version: i64,
    commands: mpsc::Sender<Box<dyn Command>>,
    wake: Arc<watch::Sender<u64>>,
) -> Option<FileWatch> {
    let name = path.file_name()?.to_owned();
    let mut wal = name.clone();
    wal.push("-wal");
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // Absolute, so that turning the watch off and on names the same directory after the
    // process changes its working directory.
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let shared = Arc::new(Shared {
        flags: Mutex::new(Flags::default()),
        changed: Condvar::new(),
    });
    let on_event: Weak<Shared> = Arc::downgrade(&shared);
    let ours = move |p: &Path| {
        p.file_name()
            .is_some_and(|f| f == name.as_os_str() || f == wal.as_os_str())
    };
    let handler = move |event: notify::Result<notify::Event>| {
        // An error or an event of no particular file (an overflowed queue asks for a
        // rescan) may hide a commit: it sets off checks too.
        let relevant = match event {
            Err(_) => true,
            Ok(event) => match event.kind {
                EventKind::Modify(_) | EventKind::Create(_) => event.paths.iter().any(|p| ours(p)),
                EventKind::Any | EventKind::Other => true,
                EventKind::Access(_) | EventKind::Remove(_) => false,
            },
        };
        if !relevant {
            return;
        }
        if let Some(shared) = on_event.upgrade() {
            let first = !std::mem::replace(&mut shared.flags().event, true);
            if first {
                shared.changed.notify_all();
            }
        }
    };
    let watched = notify::recommended_watcher(handler).and_then(|mut watcher| {
        watcher.watch(&dir, RecursiveMode::NonRecursive)?;
        Ok(watcher)
    });
    let watcher = match watched {
        Ok(watcher) => watcher,
        Err(e) => {
            cannot_watch(&dir, &e);
            return None;
        }
    };
    let checker = Checker {
        shared: shared.clone(),
        watcher,
        dir,
        commands,
        wake,
        seen: data_version,
    };
    match std::thread::Builder::new()
        .name("hopper-sqlite-watch".into())
        .spawn(move || checker.run())
    {
        Ok(checker) => Some(FileWatch {
            shared,
            checker: Some(checker),
        }),
        Err(e) => {
            tracing::info!(error = %e, "cannot start the file watch's thread: workers poll");
            None
        }
    }
}

fn cannot_watch(dir: &Path, e: &notify::Error) {
    tracing::info!(
        dir = %dir.display(),
        error = %e,
        "cannot watch the database's directory: workers find jobs committed by other \
         processes at their next poll"
    );
}

/// The checker thread's state.
struct Checker {
    shared: Arc<Shared>,
    watcher: RecommendedWatcher,
    dir: PathBuf,
    commands: mpsc::Sender<Box<dyn Command>>,
    wake: Arc<watch::Sender<u64>>,
    /// `PRAGMA data_version` as last read: at open, then by each check.
    seen: i64,
}

impl Checker {
    /// After each event: the watch off, a check at once and after each of [`PAUSES`], the
    /// watch back on and one more check. Returns when the broker closes, its database
    /// thread is gone, or the watch cannot be turned back on.
    fn run(mut self) {
        loop {
            if self.shared.wait_event() {
                return;
            }
            // Off while checking. Failing that, it stays on, which costs only time.
            let _ = self.watcher.unwatch(&self.dir);
            for pause in std::iter::once(Duration::ZERO).chain(PAUSES) {
                if self.shared.sleep(pause) {
                    return;
                }
                // Every check of the series runs, even after one found a commit: the watch
                // stays off for the whole series, so brokers of one file in one process,
                // whose commits are foreign to each other, cost a series a tenth of a
                // second rather than one per commit.
                if self.check().is_none() {
                    return;
                }
            }
            if let Err(e) = self.watcher.watch(&self.dir, RecursiveMode::NonRecursive) {
                cannot_watch(&self.dir, &e);
                return;
            }
            // A commit whose writes came while the watch was off raised no event: a few
            // more checks, at about 0, 1, 2 and 5 ms, for one that was not yet visible at
            // the series' last check.
            for pause in std::iter::once(Duration::ZERO).chain(PAUSES.into_iter().take(3)) {
                if self.shared.sleep(pause) || self.check().is_none() {
                    return;
                }
            }
        }
    }

    /// One check on the database thread: `Some(true)` when another connection committed
    /// since the last (the file's workers are then woken), `None` when the thread is gone.
    fn check(&mut self) -> Option<bool> {
        let (reply, answer) = mpsc::channel();
        let check = Box::new(Check {
            version: None,
            reply,
        });
        self.commands.send(check).ok()?;
        // No version read (a failed group) may hide a commit: wake to be safe.
        let foreign = match answer.recv().ok()? {
            Some(version) => std::mem::replace(&mut self.seen, version) != version,
            None => true,
        };
        if foreign {
            self.wake.send_modify(|n| *n = n.wrapping_add(1));
        }
        Some(foreign)
    }
}

/// Reads `PRAGMA data_version` on the database thread and answers with it once the group
/// it ran in has ended; with `None` when the read or the group failed.
struct Check {
    version: Option<i64>,
    reply: mpsc::Sender<Option<i64>>,
}

impl Command for Check {
    fn writes(&self) -> bool {
        false
    }

    fn run(&mut self, conn: &Connection) -> bool {
        match conn.query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0)) {
            Ok(version) => {
                self.version = Some(version);
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "reading data_version failed; waking to be safe");
                false
            }
        }
    }

    fn finish(self: Box<Self>, failed: Option<&rusqlite::Error>) {
        let _ = self.reply.send(self.version.filter(|_| failed.is_none()));
    }
}
