//! A TCP proxy that delays every byte by a fixed time each way, to measure a broker as if
//! its server were a few milliseconds away: this kernel has no `netem`, and loopback's round
//! trip is a tenth of a millisecond where users run PostgreSQL, MySQL or RabbitMQ 1–5 ms
//! away.
//!
//! Each accepted connection gets a connection of its own to the upstream server and is
//! forwarded both ways. In each direction a reader task stamps every chunk it reads and
//! hands it to a writer task over a channel; the writer writes each chunk no earlier than
//! its stamp plus the delay, in order. Chunks are pipelined, only delayed: a stream of
//! them flows at the rate it arrives, each `one_way` late, rather than one chunk per delay.
//! `TCP_NODELAY` is set on both sockets, so the proxy adds no Nagle wait of its own. An
//! end of stream is passed on as a half-close once the chunks before it are out; an error
//! on either side closes both connections. The TCP handshake itself is not delayed.
//!
//! The proxy runs on a thread of its own with a single-threaded runtime, so that it keeps
//! forwarding while the caller blocks (the bench waits on a `hopper load` child process).
//!
//! tokio's timer counts whole milliseconds and rounds up, so a sleep of half a millisecond
//! lasts one to two: a writer sleeps on the timer until [`COARSE_SLACK`] before a chunk is
//! due, and the rest of the way on a blocking thread, whose sleep overshoots by tens of
//! microseconds instead. With `one_way` 0.5 ms, a round trip then takes about 1.1 ms.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// The most bytes one read takes.
const CHUNK: usize = 64 * 1024;
/// Chunks waiting out their delay in one direction before the reader waits: 64 MiB at
/// most, far more than a delay of milliseconds holds at loopback rates.
const QUEUED: usize = 1024;
/// How long before a chunk is due its writer leaves tokio's timer for a blocking sleep:
/// the timer's rounding up to the next millisecond, and as much again for the wake-up.
pub const COARSE_SLACK: Duration = Duration::from_millis(2);

/// A running proxy: connections to [`addr`](DelayProxy::addr) reach the upstream server,
/// each byte delayed by `one_way` in each direction. Dropping it stops it: it accepts no
/// more connections and closes those it forwards.
#[derive(Debug)]
pub struct DelayProxy {
    addr: SocketAddr,
    one_way: Duration,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Starts a proxy on 127.0.0.1 (a port of the system's choosing) in front of
    /// `upstream`, delaying each direction by `one_way`. Upstream is connected to for
    /// each connection accepted, not now: a server that is down shows as connections
    /// closed at once.
    ///
    /// # Errors
    /// No port to listen on, or no thread or runtime for the proxy.
    pub fn start(upstream: SocketAddr, one_way: Duration) -> io::Result<DelayProxy> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("delay-proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    let serve = std::pin::pin!(serve(listener, upstream, one_way));
                    futures_util::future::select(serve, stopped).await;
                });
                // Dropping the runtime here cancels every connection's task, closing its
                // sockets.
                drop(runtime);
            })?;
        Ok(DelayProxy {
            addr,
            one_way,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address to connect to instead of upstream's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The delay in each direction.
    pub fn one_way(&self) -> Duration {
        self.one_way
    }

    /// `url` pointing at this proxy instead of its own host and port (see [`through`]).
    ///
    /// # Errors
    /// A `url` that does not parse, or has no host to replace.
    pub fn url(&self, url: &str) -> io::Result<String> {
        through(url, self.addr)
    }
}

impl Drop for DelayProxy {
    /// Stops accepting, closes every forwarded connection, and waits for the proxy's
    /// thread to end (as long as any blocking sleep in progress, under [`COARSE_SLACK`]).
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `url` with its host and port replaced by `proxy`'s, all else kept (scheme, user,
/// password, path, parameters).
///
/// # Errors
/// A `url` that does not parse, or has no host to replace (`sqlite:`, `memory:`).
pub fn through(url: &str, proxy: SocketAddr) -> io::Result<String> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let mut parsed = url::Url::parse(url).map_err(|e| invalid(format!("{url}: {e}")))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid(format!("{url}: no host to replace")));
    }
    parsed
        .set_ip_host(proxy.ip())
        .map_err(|()| invalid(format!("{url}: no host to replace")))?;
    parsed
        .set_port(Some(proxy.port()))
        .map_err(|()| invalid(format!("{url}: no port to replace")))?;
    Ok(parsed.into())
}

/// The address of the server `url` names: its host, and its port or the scheme's usual
/// one (PostgreSQL 5432, MySQL 3306, AMQP 5672). A host name is looked up, blocking, and
/// its first address taken.
///
/// # Errors
/// A `url` that does not parse, names no host, or no port of a scheme without a default,
/// or a host that does not resolve.
pub fn upstream_of(url: &str) -> io::Result<SocketAddr> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let parsed = url::Url::parse(url).map_err(|e| invalid(format!("{url}: {e}")))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| invalid(format!("{url}: no host")))?;
    let port = parsed
        .port()
        .or(match parsed.scheme() {
            "postgres" | "postgresql" => Some(5432),
            "mysql" | "mariadb" => Some(3306),
            "amqp" => Some(5672),
            _ => None,
        })
        .ok_or_else(|| invalid(format!("{url}: no port")))?;
    // `[::1]` is how a URL writes an IPv6 host; a socket address wants it bare.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| invalid(format!("{url}: {host} has no address")))
}

/// Accepts connections until dropped, each forwarded by a task of its own.
async fn serve(listener: TcpListener, upstream: SocketAddr, one_way: Duration) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                tokio::spawn(forward(client, upstream, one_way));
            }
            // Out of file descriptors, say: try again shortly rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Forwards one connection both ways until both directions ended, or either failed;
/// then both sockets close.
async fn forward(client: TcpStream, upstream: SocketAddr, one_way: Duration) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let _ = futures_util::future::try_join(
        pipe(client_read, server_write, one_way),
        pipe(server_read, client_write, one_way),
    )
    .await;
}

/// One direction: a reader stamping each chunk it reads, and a writer writing each no
/// earlier than its stamp plus `one_way`. The end of `from` reaches `to` as a half-close
/// once every chunk before it is written; an error on either side ends both at once.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    one_way: Duration,
) -> io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUED);
    let read = async move {
        let mut buf = vec![0; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                // Dropping `tx` tells the writer: the end, once the queue is written.
                return Ok(());
            }
            let due = Instant::now() + one_way;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return Ok(());
            }
        }
    };
    let write = async move {
        while let Some((due, mut chunk)) = rx.recv().await {
            wait_until(due).await;
            // Whatever else is due by now goes out in the same write.
            while let Ok((next_due, next)) = rx.try_recv() {
                if next_due > Instant::now() {
                    to.write_all(&chunk).await?;
                    wait_until(next_due).await;
                    chunk = next;
                } else {
                    chunk.extend_from_slice(&next);
                }
            }
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    futures_util::future::try_join(read, write).await.map(drop)
}

/// Returns at `due` or just after: on tokio's timer until [`COARSE_SLACK`] before, then a
/// blocking sleep for the rest (see the module's documentation).
async fn wait_until(due: Instant) {
    let now = Instant::now();
    if due <= now {
        return;
    }
    if due - now > COARSE_SLACK {
        tokio::time::sleep_until((due - COARSE_SLACK).into()).await;
    }
    let left = due.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host and port are replaced; credentials, path (a vhost's `%2f` too) and parameters
    /// are kept; a URL without a port gets the proxy's.
    #[test]
    fn a_url_through_the_proxy_keeps_all_but_host_and_port() {
        let proxy: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        let cases = [
            (
                "postgres://postgres@127.0.0.1:5432/test?schema=s_1",
                "postgres://postgres@127.0.0.1:40123/test?schema=s_1",
            ),
            (
                "mysql://root:pw@db.example:3306/scratch",
                "mysql://root:pw@127.0.0.1:40123/scratch",
            ),
            (
                "amqp://guest:guest@localhost:5672/%2f?declare=true",
                "amqp://guest:guest@127.0.0.1:40123/%2f?declare=true",
            ),
            ("postgres://app@db/s", "postgres://app@127.0.0.1:40123/s"),
        ];
        for (url, want) in cases {
            assert_eq!(through(url, proxy).unwrap(), want);
        }
        assert!(through("memory://", proxy).is_err());
        assert!(through("not a url", proxy).is_err());
    }

    /// The port given, or the scheme's usual one; nothing for a scheme without one.
    #[test]
    fn upstream_is_the_urls_host_and_port() {
        let at = |url: &str| upstream_of(url).unwrap();
        assert_eq!(
            at("postgres://postgres@127.0.0.1:5433/test"),
            "127.0.0.1:5433".parse().unwrap()
        );
        assert_eq!(at("postgres://u@127.0.0.1/t").port(), 5432);
        assert_eq!(at("mysql://root@127.0.0.1/test").port(), 3306);
        assert_eq!(at("amqp://guest:guest@127.0.0.1/%2f").port(), 5672);
        assert_eq!(at("amqp://[::1]:5673/%2f"), "[::1]:5673".parse().unwrap());
        assert!(upstream_of("http2://127.0.0.1/x").is_err());
        assert!(upstream_of("sqlite:///tmp/x.db").is_err());
    }
}
