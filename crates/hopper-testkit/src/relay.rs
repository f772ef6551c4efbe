//! [`Relay`]: a network partition between a broker and its server, for tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP relay to a server that can be cut: every connection open at the cut
/// stays open but carries nothing, ever again (as when a partition outlives the
/// connection's state in a firewall); connections opened later carry as usual.
#[derive(Debug)]
pub struct Relay {
    /// The port to connect to instead of the server's.
    pub port: u16,
    /// Connections opened before this number of cuts are dead.
    cuts: Arc<AtomicU64>,
}

impl Relay {
    /// Relays a port of its own to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Relay {
        let upstream = upstream.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cuts = Arc::new(AtomicU64::new(0));
        let shared = cuts.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (born, cuts) = (shared.load(Ordering::SeqCst), shared.clone());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let alive = Arc::new(AtomicBool::new(true));
                for (mut from, mut to) in [
                    (
                        Box::new(cr) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                        Box::new(sw) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                    ),
                    (Box::new(sr), Box::new(cw)),
                ] {
                    let (cuts, alive) = (cuts.clone(), alive.clone());
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = from.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            if cuts.load(Ordering::SeqCst) > born || !alive.load(Ordering::SeqCst) {
                                // Swallowed: the bytes never arrive, and the socket stays
                                // open.
                                alive.store(false, Ordering::SeqCst);
                                continue;
                            }
                            if to.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        std::future::pending::<()>().await;
                    });
                }
            }
        });
        Relay { port, cuts }
    }

    /// Cuts every connection open now, for good.
    pub fn cut(&self) {
        self.cuts.fetch_add(1, Ordering::SeqCst);
    }
}
