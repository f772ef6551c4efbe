//! A small fixed set of dedicated connections.
//!
//! Not sqlx's `Pool`, for two measured reasons: going through a pool for every statement
//! doubled client CPU and cost about 15% at batch 10 against a dedicated connection
//! (docs/design.md, "Costs that set the speed"), and a pool's reaper and acquire timeouts
//! register tokio timers, which tests on tokio's paused clock cannot have while they wait
//! on a socket. A connection that fails with an I/O error is dropped and the next call
//! opens a new one; so are the idle connections beside it, which the same server restart
//! or `pg_terminate_backend` has most likely ended too, so that the one resend a broker
//! call makes after a lost connection does not land on another dead one.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use hopper_core::{Error, Result, connect_within};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{Mutex, MutexGuard};

pub(crate) struct Connections {
    options: PgConnectOptions,
    shown_url: String,
    /// How long a new connection may go unanswered.
    limit: Duration,
    slots: Vec<Mutex<Option<PgConnection>>>,
    next: AtomicUsize,
    /// A connection of this set was found gone: the next `get` drops the idle ones.
    suspect: AtomicBool,
}

impl std::fmt::Debug for Connections {
    // Not derived: the driver's options hold the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("url", &self.shown_url)
            .field("slots", &self.slots.len())
            .finish()
    }
}

/// One connection, held until dropped.
pub(crate) struct Held<'a> {
    slot: MutexGuard<'a, Option<PgConnection>>,
    suspect: &'a AtomicBool,
}

thread_local! {
    /// Set while [`abandon`] drops a call: the connections its [`Held`]s hold are dropped
    /// with it.
    static ABANDONING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Drops a call that got no answer in time, and with it any connection the call held: it
/// may be in the middle of a reply that will never come (a partition, a dead host), and
/// its next statement would wait for that reply first.
pub(crate) fn abandon<F: ?Sized>(call: std::pin::Pin<Box<F>>) {
    ABANDONING.set(true);
    drop(call);
    ABANDONING.set(false);
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if ABANDONING.get() {
            *self.slot = None;
        }
    }
}

impl Held<'_> {
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        self.slot.as_mut().expect("connected when handed out")
    }

    /// Drops the connection, so the next call reconnects.
    pub(crate) fn discard(&mut self) {
        *self.slot = None;
    }

    /// The error of a statement run on this connection, which is dropped first if `e`
    /// says it is broken: `.map_err(|e| held.fail("what", e))` on every statement keeps
    /// a dead connection from failing every later call.
    pub(crate) fn fail(&mut self, what: &str, e: sqlx::Error) -> Error {
        self.check(&e);
        Error::broker(what.to_owned(), e)
    }

    /// Drops the connection if `e` says it is broken, so the next call reconnects, and
    /// has the next call drop the idle connections beside it.
    pub(crate) fn check(&mut self, e: &sqlx::Error) {
        if is_connection_error(e) {
            *self.slot = None;
            self.suspect.store(true, Ordering::Relaxed);
        }
    }
}

/// Whether `e` means the connection is gone: a broken socket or stream, or the server
/// ending the session (SQLSTATE class 08, connection exceptions, and 57P, the server's
/// own shutdowns and `pg_terminate_backend`). Such a connection is dropped, not reused.
pub(crate) fn is_connection_error(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolClosed
    ) || ended_by_server(e)
}

/// Whether the server ended the session with an error of its own (SQLSTATE class 08 or
/// 57P): a transaction in progress was rolled back, so its statement may be sent again.
pub(crate) fn ended_by_server(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// Whether a broker error came from a connection that is gone ([`is_connection_error`]).
pub(crate) fn connection_lost(e: &Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<sqlx::Error>())
        .is_some_and(is_connection_error)
}

/// Opens one connection, giving up after `limit` (the URL's `connect_timeout`): a server
/// that accepts the connection and never answers must not hang the caller. Errors name
/// the URL, password hidden.
pub(crate) async fn connect(
    options: &PgConnectOptions,
    shown_url: &str,
    limit: Duration,
) -> Result<PgConnection> {
    connect_within(shown_url, limit, options.connect())
        .await?
        .map_err(|e| Error::broker(format!("cannot connect to {shown_url}"), e))
}

impl Connections {
    pub(crate) fn new(
        options: PgConnectOptions,
        shown_url: String,
        limit: Duration,
        n: usize,
    ) -> Self {
        Connections {
            options,
            shown_url,
            limit,
            slots: (0..n).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            suspect: AtomicBool::new(false),
        }
    }

    pub(crate) async fn open(&self) -> Result<PgConnection> {
        connect(&self.options, &self.shown_url, self.limit).await
    }

    /// A free open connection; else a free slot, where one is opened; else the next slot
    /// in turn once it is free. So connections are opened only as calls overlap: a broker
    /// whose calls come one at a time keeps one.
    pub(crate) async fn get(&self) -> Result<Held<'_>> {
        if self.suspect.swap(false, Ordering::Relaxed) {
            // Those in use are checked by their own calls.
            for slot in &self.slots {
                if let Ok(mut idle) = slot.try_lock() {
                    *idle = None;
                }
            }
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.slots.len();
        let mut slot = None;
        let mut empty = None;
        for i in 0..n {
            if let Ok(guard) = self.slots[(start + i) % n].try_lock() {
                if guard.is_some() {
                    slot = Some(guard);
                    break;
                }
                empty.get_or_insert(guard);
            }
        }
        let slot = slot.or(empty);
        let mut slot = match slot {
            Some(s) => s,
            None => self.slots[start % n].lock().await,
        };
        if slot.is_none() {
            *slot = Some(self.open().await?);
        }
        Ok(Held {
            slot,
            suspect: &self.suspect,
        })
    }

    /// Closes every idle connection politely.
    pub(crate) async fn close(&self) {
        for slot in &self.slots {
            if let Some(conn) = slot.lock().await.take() {
                let _ = conn.close().await;
            }
        }
    }
}
