//! The delay proxy on real sockets: an echo server on 127.0.0.1 spawned by each test, and
//! the PostgreSQL server the other tests use. Delays are checked as lower bounds only: a
//! byte never arrives before its delay; how soon after it does is the machine's business.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hopper_bench::proxy::{DelayProxy, upstream_of};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An echo server on 127.0.0.1: each connection gets back what it sends, and a half-close
/// once it half-closed.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = conn.into_split();
                if tokio::io::copy(&mut read, &mut write).await.is_ok() {
                    let _ = write.shutdown().await;
                }
            });
        }
    });
    addr
}

/// `len` bytes of a pattern that repeats only every 251 bytes, so a chunk dropped,
/// repeated or swapped shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Writes `chunks` one after the other, half-closes, and reads everything that comes back
/// until the end of the stream, concurrently.
async fn send_and_collect(conn: TcpStream, chunks: Vec<Vec<u8>>) -> Vec<u8> {
    let (mut read, mut write) = conn.into_split();
    let writer = tokio::spawn(async move {
        for chunk in chunks {
            write.write_all(&chunk).await.unwrap();
        }
        write.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    read.read_to_end(&mut got).await.unwrap();
    writer.await.unwrap();
    got
}

/// 1 MiB of patterned data, written in chunks of many sizes, crosses the proxy to the echo
/// server and back intact and in order; the client's half-close reaches the server and the
/// server's comes back, which ends the read.
#[tokio::test]
async fn a_mebibyte_crosses_both_ways_intact() {
    let proxy = DelayProxy::start(echo_server().await, Duration::from_millis(2)).unwrap();
    let data = pattern(1 << 20);
    let mut chunks = Vec::new();
    let mut at = 0;
    for size in [1, 7, 100, 1500, 4096, 65_536, 70_000, 3].iter().cycle() {
        if at == data.len() {
            break;
        }
        let end = data.len().min(at + size);
        chunks.push(data[at..end].to_vec());
        at = end;
    }
    let conn = TcpStream::connect(proxy.addr()).await.unwrap();
    let got = send_and_collect(conn, chunks).await;
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the echoed bytes differ from those sent");
}

/// 100 numbered messages written back to back, each the moment the last was written,
/// come back complete and in the order they were sent.
#[tokio::test]
async fn pipelined_chunks_keep_their_order() {
    let proxy = DelayProxy::start(echo_server().await, Duration::from_millis(10)).unwrap();
    let messages: Vec<Vec<u8>> = (0..100u32)
        .map(|i| format!("message {i:03};").into_bytes())
        .collect();
    let conn = TcpStream::connect(proxy.addr()).await.unwrap();
    conn.set_nodelay(true).unwrap();
    let got = send_and_collect(conn, messages.clone()).await;
    assert_eq!(
        String::from_utf8(got).unwrap(),
        String::from_utf8(messages.concat()).unwrap()
    );
}

/// A request and its response each wait out the delay: with 20 ms each way, a round trip
/// through the proxy takes 40 ms at least, and so does every one after it.
#[tokio::test]
async fn a_round_trip_takes_the_delay_both_ways() {
    let one_way = Duration::from_millis(20);
    let proxy = DelayProxy::start(echo_server().await, one_way).unwrap();
    assert_eq!(proxy.one_way(), one_way);
    let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
    conn.set_nodelay(true).unwrap();
    for round in 0..3u8 {
        let started = Instant::now();
        conn.write_all(&[round]).await.unwrap();
        let mut reply = [0u8; 1];
        conn.read_exact(&mut reply).await.unwrap();
        let took = started.elapsed();
        assert_eq!(reply, [round]);
        assert!(took >= 2 * one_way, "round {round} took {took:?}");
    }
}

/// Dropping the proxy closes the connections it forwards and stops accepting new ones.
#[tokio::test]
async fn dropping_the_proxy_closes_its_connections() {
    let proxy = DelayProxy::start(echo_server().await, Duration::from_millis(1)).unwrap();
    let addr = proxy.addr();
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"ping").await.unwrap();
    let mut reply = [0u8; 4];
    conn.read_exact(&mut reply).await.unwrap();
    drop(proxy);
    let mut rest = Vec::new();
    // The end of the stream, or a reset: either way, closed.
    let closed = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut rest))
        .await
        .expect("the connection is closed, not left hanging");
    assert!(closed.map_or(true, |n| n == 0), "{rest:?}");
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
}

/// A connection whose upstream cannot be reached is closed at once, not left open.
#[tokio::test]
async fn an_unreachable_upstream_closes_the_connection() {
    // A port that was just free, its listener gone.
    let gone = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = DelayProxy::start(gone, Duration::from_millis(1)).unwrap();
    let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut rest))
        .await
        .expect("closed, not left hanging");
    assert!(read.map_or(true, |n| n == 0));
}

/// PostgreSQL through the proxy: sqlx connects to the rewritten URL and `SELECT 1` comes
/// back, a round trip taking both delays at least.
#[tokio::test]
async fn postgres_answers_through_the_proxy() {
    use sqlx::Connection;
    let server = std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let one_way = Duration::from_millis(5);
    let proxy = DelayProxy::start(upstream_of(&server).unwrap(), one_way).unwrap();
    let url = proxy.url(&server).unwrap();
    assert!(url.contains(&format!(":{}/", proxy.addr().port())), "{url}");
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let started = Instant::now();
    let (one,): (i32,) = sqlx::query_as("SELECT 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(one, 1);
    assert!(took >= 2 * one_way, "SELECT 1 took {took:?}");
    conn.close().await.unwrap();
}
