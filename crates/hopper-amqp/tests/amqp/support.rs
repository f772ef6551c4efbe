//! Per-test setup: a broker, a queue name of its own, and a guard that deletes the queue
//! and every queue derived from it (dead letters, retry buckets, its pause flag) when the
//! test ends.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_amqp::topology::{RETRY_BUCKETS_MS, dead_queue, paused_queue, retry_queue};
use hopper_amqp::{AmqpBroker, AmqpOptions};
use hopper_core::{Broker, FetchRequest, Job, JobId, NewJob, Worker, WorkerStats};
use hopper_testkit::unique_name;

/// The server the tests use.
pub fn url() -> String {
    hopper_testkit::helpers::amqp_url()
}

/// Deletes its queues when dropped, on a thread and runtime of its own (the test's
/// runtime may be gone or panicking).
pub struct Cleanup {
    queues: Vec<String>,
}

impl Cleanup {
    pub fn for_queue(queue: &str) -> Self {
        let mut queues = vec![queue.to_owned(), dead_queue(queue), paused_queue(queue)];
        queues.extend(RETRY_BUCKETS_MS.iter().map(|&ms| retry_queue(queue, ms)));
        Cleanup { queues }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let queues = std::mem::take(&mut self.queues);
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for cleanup");
            rt.block_on(async {
                match AmqpBroker::connect(&url()).await {
                    Ok(b) => {
                        if let Err(e) = b.delete_queues(&queues).await {
                            eprintln!("cleanup: deleting {queues:?} failed: {e}");
                        }
                        b.close().await;
                    }
                    Err(e) => eprintln!("cleanup: cannot connect: {e}"),
                }
            });
        })
        .join();
    }
}

/// What a test works with.
pub struct Setup {
    pub broker: Arc<AmqpBroker>,
    pub queue: String,
    pub _cleanup: Cleanup,
}

impl Setup {
    pub fn dyn_broker(&self) -> Arc<dyn Broker> {
        self.broker.clone()
    }
}

/// A broker on `options` (topology declared unless the options say otherwise) and a
/// fresh queue, declared by the first enqueue or subscription.
pub async fn setup_with(prefix: &str, options: AmqpOptions) -> Setup {
    setup_with_queue(unique_name(prefix), options).await
}

/// [`setup_with`] on a queue named already (for options that name it).
pub async fn setup_with_queue(queue: String, options: AmqpOptions) -> Setup {
    let cleanup = Cleanup::for_queue(&queue);
    let broker = AmqpBroker::connect_with(&url(), options)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to RabbitMQ at {}: {e}", url()));
    Setup {
        broker: Arc::new(broker),
        queue,
        _cleanup: cleanup,
    }
}

/// [`setup_with`] declaring topology.
pub async fn setup(prefix: &str) -> Setup {
    setup_with(prefix, AmqpOptions::new().declare(true)).await
}

/// A second broker (another connection: as another process would) on the same server.
pub async fn another(options: AmqpOptions) -> Arc<AmqpBroker> {
    Arc::new(
        AmqpBroker::connect_with(&url(), options)
            .await
            .expect("connect"),
    )
}

/// `n` jobs whose payload is their index.
pub async fn enqueue_n(broker: &AmqpBroker, queue: &str, n: usize) -> Vec<JobId> {
    let jobs: Vec<NewJob> = (0..n).map(|i| NewJob::json(queue, &i).unwrap()).collect();
    broker.enqueue(jobs).await.expect("enqueue")
}

/// Waits (polling every 10 ms, up to `secs`) until `f` holds for the worker's stats.
pub async fn wait_for(
    worker: &Worker,
    secs: u64,
    what: &str,
    f: impl Fn(&WorkerStats) -> bool,
) -> WorkerStats {
    let started = Instant::now();
    loop {
        let s = worker.stats();
        if f(&s) {
            return s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(secs),
            "waited {secs} s for {what}; stats: completed {} retried {} dead {} released {}",
            s.completed,
            s.retried,
            s.dead,
            s.released
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `f` returns true, polling every 10 ms, up to `secs`.
pub async fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(
            started.elapsed() < Duration::from_secs(secs),
            "waited {secs} s for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A set of indexes seen by handlers, and how many times in all.
#[derive(Default)]
pub struct Seen {
    pub inner: Mutex<(BTreeSet<u64>, u64)>,
}

impl Seen {
    pub fn record(&self, i: u64) {
        let mut g = self.inner.lock().unwrap();
        g.0.insert(i);
        g.1 += 1;
    }
    pub fn distinct(&self) -> usize {
        self.inner.lock().unwrap().0.len()
    }
    pub fn total(&self) -> u64 {
        self.inner.lock().unwrap().1
    }
}

/// Runs `rabbitmqctl` with `args`, returning its standard output.
pub fn rabbitmqctl(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .map_err(|e| format!("rabbitmqctl not runnable: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `(ready, unacknowledged)` of `queue` as the server's management tool reports them.
pub fn queue_figures(queue: &str) -> Option<(u64, u64)> {
    let out = rabbitmqctl(&[
        "list_queues",
        "-q",
        "--no-table-headers",
        "name",
        "messages_ready",
        "messages_unacknowledged",
    ])
    .ok()?;
    out.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 3 && f[0] == queue {
            Some((f[1].parse().ok()?, f[2].parse().ok()?))
        } else {
            None
        }
    })
}

/// Fetches from `queue` until `n` jobs arrived (or `secs` passed) and returns them.
pub async fn fetch_until(broker: &Arc<dyn Broker>, queue: &str, n: usize, secs: u64) -> Vec<Job> {
    let started = Instant::now();
    let mut got = Vec::new();
    while got.len() < n && started.elapsed() < Duration::from_secs(secs) {
        let f = broker
            .fetch(FetchRequest::one(
                queue,
                n - got.len(),
                Duration::from_secs(30),
            ))
            .await
            .expect("fetch");
        got.extend(f.jobs);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    got
}

/// Everything this process has received for `queue` after `settle_ms` of quiet.
pub async fn held_after(
    broker: &Arc<dyn Broker>,
    queue: &str,
    settle_ms: u64,
) -> Vec<hopper_core::Job> {
    tokio::time::sleep(Duration::from_millis(settle_ms)).await;
    broker
        .fetch(FetchRequest::one(queue, 100_000, Duration::from_secs(30)))
        .await
        .expect("fetch")
        .jobs
}

/// A TCP proxy to the test server that can be frozen: from then on it moves no byte either
/// way but keeps both sockets open, as a network that silently drops everything would.
/// Dropping it closes every connection through it.
pub struct FreezingProxy {
    pub port: u16,
    frozen: tokio::sync::watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
    pumps: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl FreezingProxy {
    pub async fn start() -> FreezingProxy {
        let server = server_addr();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (frozen, _) = tokio::sync::watch::channel(false);
        let pumps = Arc::new(Mutex::new(Vec::new()));
        let (on, all) = (frozen.clone(), pumps.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::TcpStream::connect(&server).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (ur, uw) = upstream.into_split();
                let mut g = all.lock().unwrap();
                g.push(tokio::spawn(pump(cr, uw, on.subscribe())));
                g.push(tokio::spawn(pump(ur, cw, on.subscribe())));
            }
        });
        FreezingProxy {
            port,
            frozen,
            accept,
            pumps,
        }
    }

    /// The test server's URL, through this proxy.
    pub fn url(&self) -> String {
        let mut uri = server_uri();
        uri.authority.host = "127.0.0.1".into();
        uri.authority.port = self.port;
        uri.to_string()
    }

    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for p in self.pumps.lock().unwrap().drain(..) {
            p.abort();
        }
    }
}

/// The test server's URL, parsed as lapin parses it.
fn server_uri() -> lapin::uri::AMQPUri {
    url().parse().expect("the test server's URL is an AMQP URI")
}

/// `host:port` of the test server.
fn server_addr() -> String {
    let uri = server_uri();
    format!("{}:{}", uri.authority.host, uri.authority.port)
}

/// Copies `from` to `to` until either closes or the proxy is frozen; frozen, it holds both
/// open and moves nothing more.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = frozen.wait_for(|f| *f) => break,
        };
        if *frozen.borrow() || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    // Frozen: keep the sockets until the proxy is dropped.
    std::future::pending::<()>().await;
    drop((from, to));
}
