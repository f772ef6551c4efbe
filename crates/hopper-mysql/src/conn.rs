//! The broker's connections: a small fixed set of dedicated `MySqlConnection`s, each behind
//! a `tokio::sync::Mutex`, and the rules for reconnecting and repeating a call.
//!
//! Not sqlx's `Pool`, for two reasons. Going through a pool for every statement doubled
//! client CPU against a dedicated connection, measured on PostgreSQL with the same driver
//! (docs/design.md, "Costs that set the speed"). And a pool's reaper and acquire timeouts
//! register tokio timers, which break tests on tokio's paused clock: the clock jumps to the
//! next timer whenever the runtime waits on a socket. Nothing on the query path registers a
//! timer; idle time is measured with `std::time::Instant`.
//!
//! A call takes a free connection (trying each in turn, starting from a rotating index so
//! all stay in use), or waits for the next one in turn. A connection is dropped, and the
//! next call opens a new one, when a statement fails with an I/O or protocol error, and
//! when a call's future is dropped halfway: its connection may be inside a transaction or a
//! half-read reply, and closing it makes the server roll the transaction back.
//!
//! A call is repeated on another connection only when repeating it cannot apply it twice:
//! reads, idempotent updates, transactions that failed before `COMMIT` was sent (the server
//! rolled them back), and any statement the server aborted by ending the session with an
//! error of its own (`KILL`, shutdown). It goes on to the next connection while the one
//! that broke was an older one, since after a restart or a `KILL` of them all every one is
//! gone, and is repeated once more on a connection opened for it. A transaction is also
//! repeated once after a lock wait timeout, and after a deadlock: once, or as often as its
//! caller says (an enqueue of jobs with unique keys, whose producers race for the same
//! rows).
//!
//! Other calls report the error. Before one of those runs on a connection that sat idle
//! long enough for a server or proxy to have closed it, or that was last used before
//! another connection of the set broke, the connection is pinged first, so the first
//! enqueue after a quiet night or a restart does not fail.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hopper_core::{Error, Result, connect_within};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlDatabaseError};
use sqlx::{ConnectOptions, Connection, Executor};
use tokio::sync::{Mutex, MutexGuard};

use crate::sql;

/// Idle time after which a connection is pinged before a call that cannot be repeated.
const IDLE_CHECK: Duration = Duration::from_secs(30);

/// MySQL's error numbers for a deadlock and a lock wait timeout.
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;

/// Whether a call may run a second time after its connection broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Running it twice changes nothing more than running it once.
    Safe,
    /// It may have been applied before the connection broke: report the error.
    Unsafe,
}

/// One open connection, when it was last handed back, and the set's count of broken
/// connections then.
struct Open {
    conn: MySqlConnection,
    last_used: Instant,
    breaks_seen: usize,
}

pub(crate) struct Connections {
    options: MySqlConnectOptions,
    shown_url: String,
    /// How long a new connection may go unanswered.
    limit: Duration,
    /// The longest a statement may run on the server ([`limit_statements`]).
    statement_timeout: Option<Duration>,
    slots: Vec<Mutex<Option<Open>>>,
    next: AtomicUsize,
    /// Connections of the set dropped as broken so far. One that was fine before the last
    /// break is pinged before a call that cannot be repeated: what broke one (a restart, a
    /// `KILL` of them all) has often broken the others.
    breaks: AtomicUsize,
}

/// A connection taken for one call. Dropped before the call marked it clean, it closes the
/// connection (see the module docs).
pub(crate) struct Held<'a> {
    slot: MutexGuard<'a, Option<Open>>,
    clean: bool,
    /// Opened for this call rather than reused.
    fresh: bool,
    shown_url: &'a str,
    breaks: &'a AtomicUsize,
    /// How long a statement may go unanswered ([`answered`]).
    pub(crate) answer_limit: Option<Duration>,
}

/// What a call does after one try: return, or run again on a fresh connection.
pub(crate) enum Next<T> {
    Done(Result<T>),
    Again,
}

impl Held<'_> {
    pub(crate) fn conn(&mut self) -> &mut MySqlConnection {
        &mut self.slot.as_mut().expect("connected when handed out").conn
    }

    /// Decides what follows one try of a call made outside a transaction.
    pub(crate) fn finish<T>(
        mut self,
        result: Result<T, sqlx::Error>,
        repeat: Repeat,
        repeated: &mut bool,
        what: &str,
    ) -> Next<T> {
        match result {
            Ok(value) => {
                self.clean = true;
                Next::Done(Ok(value))
            }
            Err(e) => {
                let broken = is_connection_error(&e);
                self.clean = !broken;
                let may = repeat == Repeat::Safe || ended_by_server(&e);
                if broken && may && !unanswered(&e) && self.again(repeated) {
                    tracing::debug!(
                        url = %self.shown_url,
                        error = %e,
                        "{what}: connection lost; repeating on a new one"
                    );
                    return Next::Again;
                }
                Next::Done(Err(Error::broker(what.to_owned(), e)))
            }
        }
    }

    /// Whether a call whose connection broke may run again: always when the connection
    /// was an older one (the others of the set may be gone too, after a server restart or
    /// a `KILL` of them all, and each try drops one), once when it was opened for the call.
    fn again(&self, repeated: &mut bool) -> bool {
        !self.fresh || !std::mem::replace(repeated, true)
    }

    /// Opens a transaction.
    pub(crate) async fn begin(&mut self) -> Result<(), sqlx::Error> {
        let (limit, shown) = (self.answer_limit, self.shown_url);
        let begin = self.conn().execute(sql::fixed(&sql::BEGIN));
        answered(limit, shown, begin).await.map(drop)
    }

    /// Ends the transaction of one try: commits it if `outcome` is a success, else rolls
    /// it back and says whether to run it again (see the module docs), counting a
    /// deadlock off `deadlocks`, the runs again they may still have. A failed commit is
    /// reported, never repeated: the server may have applied it.
    pub(crate) async fn finish_transaction<T>(
        mut self,
        outcome: Result<T, sqlx::Error>,
        repeated: &mut bool,
        deadlocks: &mut u32,
        what: &str,
    ) -> Next<T> {
        match outcome {
            Ok(value) => match answered(
                self.answer_limit,
                self.shown_url,
                self.conn().execute(sql::fixed(&sql::COMMIT)),
            )
            .await
            {
                Ok(_) => {
                    self.clean = true;
                    Next::Done(Ok(value))
                }
                Err(e) => Next::Done(Err(Error::broker(format!("{what}: committing"), e))),
            },
            Err(e) => {
                let broken = is_connection_error(&e);
                self.clean = !broken
                    && self
                        .conn()
                        .execute(sql::fixed(&sql::ROLLBACK))
                        .await
                        .is_ok();
                let again = if broken {
                    !unanswered(&e) && self.again(repeated)
                } else if server_error_number(&e) == Some(ER_LOCK_DEADLOCK) {
                    let left = *deadlocks > 0;
                    *deadlocks = deadlocks.saturating_sub(1);
                    left
                } else {
                    server_error_number(&e) == Some(ER_LOCK_WAIT_TIMEOUT)
                        && !std::mem::replace(repeated, true)
                };
                if again {
                    tracing::debug!(
                        url = %self.shown_url,
                        error = %e,
                        "{what}: transaction failed before commit; running it again"
                    );
                    return Next::Again;
                }
                Next::Done(Err(Error::broker(what.to_owned(), e)))
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.clean {
            if let Some(open) = self.slot.as_mut() {
                open.last_used = Instant::now();
                open.breaks_seen = self.breaks.load(Ordering::Relaxed);
            }
        } else {
            *self.slot = None;
            self.breaks.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs `$body` (a future using the connection bound to `$conn`) outside any transaction:
/// each statement commits on its own. Evaluates to `Result<T>`; `$what` names the
/// operation in errors; `$repeat` says whether a broken connection may run it again.
///
/// A macro rather than a method taking a closure: a closure over a borrowed connection
/// that returns a future cannot be proven `Send` for every lifetime of that borrow, which
/// the broker's `async_trait` futures require.
macro_rules! run {
    ($conns:expr, $what:expr, $repeat:expr, |$conn:ident| $body:expr) => {{
        let conns: &$crate::conn::Connections = $conns;
        let mut repeated = false;
        loop {
            let mut held = match conns.get($repeat).await {
                Ok(held) => held,
                Err(e) => break Err(e),
            };
            let result = {
                let (limit, shown) = (held.answer_limit, conns.shown_url());
                let $conn = held.conn();
                let body = $body;
                $crate::conn::answered(limit, shown, body).await
            };
            match held.finish(result, $repeat, &mut repeated, $what) {
                $crate::conn::Next::Done(result) => break result,
                $crate::conn::Next::Again => continue,
            }
        }
    }};
}

/// Runs `$body` (a future using the connection bound to `$conn`) inside one transaction
/// and commits it; see [`Held::finish_transaction`] for failures. Evaluates to
/// `Result<T>`. `deadlocks = n` runs it again after up to `n` deadlocks rather than one.
macro_rules! transaction {
    ($conns:expr, $what:expr, |$conn:ident| $body:expr) => {
        $crate::conn::transaction!($conns, $what, deadlocks = 1, |$conn| $body)
    };
    ($conns:expr, $what:expr, deadlocks = $deadlocks:expr, |$conn:ident| $body:expr) => {{
        let conns: &$crate::conn::Connections = $conns;
        let mut repeated = false;
        let mut deadlocks: u32 = $deadlocks;
        loop {
            let mut held = match conns.get($crate::conn::Repeat::Safe).await {
                Ok(held) => held,
                Err(e) => break Err(e),
            };
            let outcome = match held.begin().await {
                Ok(()) => {
                    let (limit, shown) = (held.answer_limit, conns.shown_url());
                    let $conn = held.conn();
                    let body = $body;
                    $crate::conn::answered(limit, shown, body).await
                }
                Err(e) => Err(e),
            };
            match held
                .finish_transaction(outcome, &mut repeated, &mut deadlocks, $what)
                .await
            {
                $crate::conn::Next::Done(result) => break result,
                $crate::conn::Next::Again => continue,
            }
        }
    }};
}

pub(crate) use {run, transaction};

/// Runs a statement or a call's body for at most `limit` of wall-clock time, past which
/// the server would have cancelled it ([`MySqlOptions::statement_timeout`] and as long
/// again, at most 10 s more), so no answer means none can come: a partition, a host gone
/// without closing its sockets. It then fails as a broken connection
/// ([`unanswered`]), which is dropped, and is not repeated: the next call would likely
/// wait as long.
///
/// [`MySqlOptions::statement_timeout`]: crate::MySqlOptions::statement_timeout
pub(crate) async fn answered<T>(
    limit: Option<Duration>,
    shown_url: &str,
    call: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    let Some(limit) = limit else {
        return call.await;
    };
    let call = std::pin::pin!(call);
    hopper_core::answer_within(limit, call)
        .await
        .unwrap_or_else(|| {
            let why = format!("no answer from {shown_url} within {limit:?}");
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                why,
            )))
        })
}

/// Whether `e` is a call that went unanswered past its deadline ([`answered`]).
fn unanswered(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}

/// Whether `e` means the connection itself is unusable: a broken socket or stream, or the
/// server ending the session ([`ended_by_server`]).
pub(crate) fn is_connection_error(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_)
    ) || ended_by_server(e)
}

/// Server errors that end the session, aborting the statement it was running: MariaDB's
/// "connection was killed" (`KILL` of a busy connection), a shutdown in progress, and
/// MySQL 8's disconnect of an inactive client. What the statement did was rolled back, so
/// even an enqueue may be sent again.
const ENDED_BY_SERVER: [u16; 3] = [1927, 1053, 4031];

/// Whether the server ended the session with an error of its own ([`ENDED_BY_SERVER`]).
pub(crate) fn ended_by_server(e: &sqlx::Error) -> bool {
    server_error_number(e).is_some_and(|n| ENDED_BY_SERVER.contains(&n))
}

/// The server's error number, for an error the server reported.
pub(crate) fn server_error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// Opens one connection and sets up its session. Errors name the URL, password hidden.
pub(crate) async fn open(
    options: &MySqlConnectOptions,
    shown_url: &str,
    limit: Duration,
) -> Result<MySqlConnection> {
    let mut conn = connect_within(shown_url, limit, options.connect())
        .await?
        .map_err(|e| Error::broker(format!("cannot connect to {shown_url}"), e))?;
    conn.execute(sqlx::raw_sql(sql::SESSION.as_str()))
        .await
        .map_err(|e| Error::broker(format!("setting up a session on {shown_url}"), e))?;
    Ok(conn)
}

/// MySQL's error number for a system variable it does not know.
const ER_UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;

/// Bounds each statement of the session at `limit` on the server: MariaDB's
/// `max_statement_time`, or where that is unknown MySQL's `max_execution_time` (which
/// covers read-only SELECTs only), and the wait for a table's metadata lock (an `ALTER` or
/// `LOCK TABLES` elsewhere) with `lock_wait_timeout` in whole seconds. Row lock waits
/// already end at InnoDB's `innodb_lock_wait_timeout` (50 s by default).
async fn limit_statements(conn: &mut MySqlConnection, limit: Duration) -> Result<(), sqlx::Error> {
    let whole = (limit.as_secs() + u64::from(limit.subsec_nanos() > 0)).max(1);
    let mariadb = format!(
        "SET SESSION max_statement_time = {:.3}, lock_wait_timeout = {whole}",
        limit.as_secs_f64()
    );
    match conn.execute(sqlx::raw_sql(&mariadb)).await {
        Err(e) if server_error_number(&e) == Some(ER_UNKNOWN_SYSTEM_VARIABLE) => {
            let mysql = format!(
                "SET SESSION max_execution_time = {}, lock_wait_timeout = {whole}",
                limit.as_millis().max(1)
            );
            conn.execute(sqlx::raw_sql(&mysql)).await.map(drop)
        }
        other => other.map(drop),
    }
}

impl Connections {
    pub(crate) fn new(
        options: MySqlConnectOptions,
        shown_url: String,
        limit: Duration,
        statement_timeout: Option<Duration>,
        n: usize,
    ) -> Self {
        Connections {
            options,
            shown_url,
            limit,
            statement_timeout,
            slots: (0..n).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            breaks: AtomicUsize::new(0),
        }
    }

    pub(crate) fn shown_url(&self) -> &str {
        &self.shown_url
    }

    /// A free connection, or the next one in turn once it is free; opened if needed, and
    /// pinged first if it sat idle and the call cannot be repeated.
    pub(crate) async fn get(&self, repeat: Repeat) -> Result<Held<'_>> {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let free = (0..n).find_map(|i| self.slots[(start + i) % n].try_lock().ok());
        let mut slot = match free {
            Some(slot) => slot,
            None => self.slots[start % n].lock().await,
        };
        // Taken out while pinging or opening, so that a call dropped meanwhile leaves the
        // slot empty rather than holding a connection in an unknown state.
        let mut open = slot.take();
        if let Some(o) = open.as_mut() {
            let suspect = o.last_used.elapsed() >= IDLE_CHECK
                || o.breaks_seen != self.breaks.load(Ordering::Relaxed);
            if repeat == Repeat::Unsafe && suspect && o.conn.ping().await.is_err() {
                open = None;
            }
        }
        let fresh = open.is_none();
        let open = match open {
            Some(o) => o,
            None => {
                let mut conn = self::open(&self.options, &self.shown_url, self.limit).await?;
                if let Some(limit) = self.statement_timeout {
                    limit_statements(&mut conn, limit).await.map_err(|e| {
                        let what = format!("setting statement_timeout on {}", self.shown_url);
                        Error::broker(what, e)
                    })?;
                }
                Open {
                    conn,
                    last_used: Instant::now(),
                    breaks_seen: self.breaks.load(Ordering::Relaxed),
                }
            }
        };
        *slot = Some(open);
        Ok(Held {
            slot,
            clean: false,
            fresh,
            shown_url: &self.shown_url,
            breaks: &self.breaks,
            answer_limit: self.statement_timeout.map(hopper_core::answer_limit),
        })
    }

    /// Closes every connection not in use, politely.
    pub(crate) async fn close(&self) {
        for slot in &self.slots {
            if let Some(open) = slot.lock().await.take() {
                let _ = open.conn.close().await;
            }
        }
    }
}

/// Ends the current transaction without applying it and opens a new one.
pub(crate) async fn restart(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    conn.execute(sql::fixed(&sql::ROLLBACK)).await?;
    conn.execute(sql::fixed(&sql::BEGIN)).await?;
    Ok(())
}
