//! A plain TCP forwarder on a thread of its own: connections to its listening address are
//! joined to new connections to an upstream server. The partition scenario needs it
//! because the shared servers listen on 127.0.0.1 only, which a worker inside another
//! network namespace cannot reach; it listens on the host's end of the veth pair instead.

use std::io;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A running forwarder; dropping it stops accepting and closes every forwarded connection.
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Listens on `listen` (port 0: any) and forwards each connection to `upstream`.
    ///
    /// # Errors
    /// The address cannot be bound, or no runtime could be built.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> io::Result<Forwarder> {
        // Bound here, not on the thread, so that a failure is returned; std's listener,
        // because the caller may be inside a runtime, where no other can block.
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                let accept = async {
                    while let Ok((client, _)) = listener.accept().await {
                        tokio::spawn(join(client, upstream));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime here drops every forwarding task and its sockets.
        });
        Ok(Forwarder {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where the forwarder listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn join(mut client: TcpStream, upstream: SocketAddr) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
