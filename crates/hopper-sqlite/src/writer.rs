//! The database thread: the one owner of the connection, and group commit.
//!
//! Async callers send a command over a std channel and await its reply on a oneshot. The
//! thread takes the first command waiting, drains up to the group-commit limit of those
//! queued behind it, and runs them all in one transaction, each inside its own savepoint:
//! a command that fails is rolled back alone and the others still commit. Replies go out
//! only after the commit, so no caller sees a result the file might not keep.
//!
//! One thread rather than a pool because SQLite allows one writer per file anyway, and
//! because batching many commands into one commit is what makes the file fast: each
//! commit costs a WAL append and, every so often, a sync, whether it carries one job or
//! a thousand.
//!
//! Between groups the thread checks for the next command for a moment before it sleeps
//! ([`SqliteOptions::spin_wait`]). A draining worker and this thread take turns, each
//! waiting while the other works, and on a virtual machine a sleeping thread took about
//! 80 µs (p50) to wake: at batch 100, where a claim took 270–320 µs, about a fifth of
//! the thread's turn.

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hopper_core::{Error, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::options::SqliteOptions;
use crate::{schema, sql};

/// What the thread runs: one broker call.
pub(crate) trait Command: Send {
    /// Whether the command may write; a group of reads only opens a read transaction.
    fn writes(&self) -> bool;

    /// Runs the command inside its savepoint. Returns whether it succeeded.
    fn run(&mut self, conn: &Connection) -> bool;

    /// Sends the reply once the group's transaction has ended; `failed` is the error that
    /// rolled the whole group back, if one did.
    fn finish(self: Box<Self>, failed: Option<&rusqlite::Error>);
}

/// A command made of a closure and the oneshot its caller awaits.
struct Call<T, F> {
    what: &'static str,
    writes: bool,
    work: Option<F>,
    outcome: Option<rusqlite::Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Command for Call<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> rusqlite::Result<T> + Send,
{
    fn writes(&self) -> bool {
        self.writes
    }

    fn run(&mut self, conn: &Connection) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let outcome = work(conn);
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn finish(self: Box<Self>, failed: Option<&rusqlite::Error>) {
        let result = match (self.outcome, failed) {
            (Some(Err(e)), _) => Err(Error::broker(self.what, e)),
            (Some(Ok(value)), None) => Ok(value),
            (_, Some(e)) => Err(Error::broker_msg(format!(
                "{}: the transaction carrying it failed: {e}",
                self.what
            ))),
            (None, None) => Err(Error::broker_msg(format!("{}: never ran", self.what))),
        };
        // The caller may have stopped waiting; the work is done either way.
        let _ = self.reply.send(result);
    }
}

/// The handle on the database thread. Dropping it lets the thread finish the commands
/// already sent, close the connection and exit, and waits for that.
#[derive(Debug)]
pub(crate) struct Writer {
    commands: Option<mpsc::Sender<Box<dyn Command>>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the thread, which opens and migrates the file, and waits (asynchronously)
    /// until it has.
    pub(crate) async fn start(path: PathBuf, options: &SqliteOptions) -> Result<Writer> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (commands, receiver) = mpsc::channel();
        let busy_timeout = options.busy_timeout;
        let group_limit = options.group_commit_limit;
        let spin = options.spin_wait;
        let thread = std::thread::Builder::new()
            .name("hopper-sqlite".into())
            .spawn(move || match schema::open(&path, busy_timeout) {
                Ok(conn) => {
                    let _ = ready_tx.send(Ok(()));
                    serve(conn, &receiver, group_limit, spin);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| Error::broker("starting the SQLite thread", e))?;
        let mut writer = Writer {
            commands: Some(commands),
            thread: Some(thread),
        };
        match ready_rx.await {
            Ok(Ok(())) => Ok(writer),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                writer.stop();
                Err(Error::broker_msg("the SQLite thread stopped while opening"))
            }
        }
    }

    /// Runs `work` on the database thread in the next group and returns its result once
    /// committed. `what` names the operation in errors. A call whose future is dropped
    /// after sending still runs.
    pub(crate) async fn call<T, F>(&self, what: &'static str, writes: bool, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let command = Box::new(Call {
            what,
            writes,
            work: Some(work),
            outcome: None,
            reply,
        });
        let sender = self
            .commands
            .as_ref()
            .ok_or(Error::Closed("sqlite broker"))?;
        sender
            .send(command)
            .map_err(|_| Error::Closed("sqlite broker"))?;
        answer.await.map_err(|_| Error::Closed("sqlite broker"))?
    }

    /// A sender of commands to the thread, for the file watcher's checks. A clone keeps the
    /// thread alive until dropped, so its holder must drop it before the writer.
    pub(crate) fn sender(&self) -> Option<mpsc::Sender<Box<dyn Command>>> {
        self.commands.clone()
    }

    fn stop(&mut self) {
        self.commands.take();
        if let Some(thread) = self.thread.take() {
            // A panic on the thread has already failed every caller waiting on it.
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread's loop: one group per turn until every sender is gone.
fn serve(
    conn: Connection,
    commands: &mpsc::Receiver<Box<dyn Command>>,
    group_limit: usize,
    spin: Duration,
) {
    let mut spin = Spin::new(spin);
    loop {
        let waiting = Instant::now();
        let Some(first) = next_command(commands, spin.budget()) else {
            break;
        };
        spin.waited(waiting.elapsed());
        let mut group = vec![first];
        while group.len() < group_limit {
            match commands.try_recv() {
                Ok(command) => group.push(command),
                Err(_) => break,
            }
        }
        let failed = run_group(&conn, &mut group).err();
        if let Some(e) = &failed {
            tracing::warn!(error = %e, commands = group.len(), "SQLite transaction rolled back");
        }
        for command in group {
            command.finish(failed.as_ref());
        }
    }
}

/// How long the thread checks for its next command before it sleeps: the whole
/// [`spin_wait`](SqliteOptions::spin_wait) while commands come in quick succession, none
/// once a wait outlasted it. A worker draining a backlog sends its next call within a few
/// hundred microseconds of the last reply, where waking a sleeping thread would add about
/// 80 more; one whose commands come seconds apart would only burn the time.
#[derive(Debug)]
struct Spin {
    limit: Duration,
    /// Whether the last wait ended within `limit`.
    brisk: bool,
}

impl Spin {
    fn new(limit: Duration) -> Spin {
        Spin { limit, brisk: true }
    }

    /// How long to check before sleeping, this time.
    fn budget(&self) -> Duration {
        if self.brisk {
            self.limit
        } else {
            Duration::ZERO
        }
    }

    /// Records how long the last wait for a command took.
    fn waited(&mut self, took: Duration) {
        self.brisk = took <= self.limit;
    }
}

/// The next command, once one arrives; `None` once every sender is gone. Checks for one,
/// yielding the core between checks, for up to `spin` before sleeping on the channel.
fn next_command(
    commands: &mpsc::Receiver<Box<dyn Command>>,
    spin: Duration,
) -> Option<Box<dyn Command>> {
    let until = Instant::now() + spin;
    loop {
        match commands.try_recv() {
            Ok(command) => return Some(command),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) if Instant::now() < until => std::thread::yield_now(),
            Err(mpsc::TryRecvError::Empty) => return commands.recv().ok(),
        }
    }
}

/// Runs a group in one transaction (`BEGIN IMMEDIATE` when any command writes, so the
/// write lock is taken up front rather than upgraded mid-way) and commits it; on any error
/// outside a command's own, rolls the whole group back.
fn run_group(conn: &Connection, group: &mut [Box<dyn Command>]) -> rusqlite::Result<()> {
    let writes = group.iter().any(|c| c.writes());
    let begin = if writes {
        sql::BEGIN_WRITE
    } else {
        sql::BEGIN_READ
    };
    conn.prepare_cached(begin)?.execute([])?;
    let result = run_commands(conn, group).and_then(|()| {
        conn.prepare_cached(sql::COMMIT)?.execute([])?;
        Ok(())
    });
    if result.is_err() && !conn.is_autocommit() {
        // The error that brought us here is the one worth reporting.
        let _ = conn
            .prepare_cached(sql::ROLLBACK)
            .and_then(|mut rollback| rollback.execute([]));
    }
    result
}

/// Runs each command in its own savepoint: a command that fails is rolled back alone.
fn run_commands(conn: &Connection, group: &mut [Box<dyn Command>]) -> rusqlite::Result<()> {
    let mut savepoint = conn.prepare_cached(sql::SAVEPOINT)?;
    let mut release = conn.prepare_cached(sql::RELEASE_SAVEPOINT)?;
    let mut rollback_to = conn.prepare_cached(sql::ROLLBACK_TO_SAVEPOINT)?;
    for command in group.iter_mut() {
        savepoint.execute([])?;
        if !command.run(conn) {
            rollback_to.execute([])?;
        }
        release.execute([])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Spin;

    /// The thread checks for the whole spin while commands come within it, stops checking
    /// after a wait that outlasted it, and starts again after the next quick one.
    #[test]
    fn spins_only_while_commands_come_quickly() {
        let limit = Duration::from_micros(250);
        let mut spin = Spin::new(limit);
        assert_eq!(spin.budget(), limit);
        spin.waited(Duration::from_micros(240));
        assert_eq!(spin.budget(), limit);
        spin.waited(Duration::from_millis(40));
        assert_eq!(spin.budget(), Duration::ZERO);
        spin.waited(Duration::from_secs(1));
        assert_eq!(spin.budget(), Duration::ZERO);
        // Woken from sleep a little after the command was sent: still a quick succession.
        spin.waited(Duration::from_micros(180));
        assert_eq!(spin.budget(), limit);
    }

    #[test]
    fn a_zero_spin_never_checks_before_sleeping() {
        let mut spin = Spin::new(Duration::ZERO);
        assert_eq!(spin.budget(), Duration::ZERO);
        spin.waited(Duration::ZERO);
        assert_eq!(spin.budget(), Duration::ZERO);
    }
}
