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

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

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
        let thread = std::thread::Builder::new()
            .name("hopper-sqlite".into())
            .spawn(move || match schema::open(&path, busy_timeout) {
                Ok(conn) => {
                    let _ = ready_tx.send(Ok(()));
                    serve(conn, &receiver, group_limit);
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
fn serve(conn: Connection, commands: &mpsc::Receiver<Box<dyn Command>>, group_limit: usize) {
    while let Ok(first) = commands.recv() {
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
