//! A server on 127.0.0.1 over a broker, and a plain HTTP/1.1 client written for the tests,
//! so that every request goes through a real socket with exactly the headers a test sets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hopper::Broker;
use hopper_web::ServeOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// A running server; stopped when dropped.
pub struct Server {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// Serves `broker` on a free port of 127.0.0.1 with `token` and `read_only`.
pub async fn start(broker: Arc<dyn Broker>, token: Option<&str>, read_only: bool) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = ServeOptions {
        bind: addr,
        token: token.map(str::to_owned),
        read_only,
        metrics: None,
        follow_every: std::time::Duration::from_millis(100),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let stop = async move {
            let _ = stopped.await;
        };
        hopper_web::serve_on(listener, broker, options, stop)
            .await
            .unwrap();
    });
    Server { addr, _stop: stop }
}

/// An SQLite broker in a file of the test's own.
pub async fn sqlite(name: &str) -> (Arc<dyn Broker>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("hopper-web-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}/hopper.db", dir.display());
    (hopper::connect(&url).await.unwrap(), dir)
}

/// An answer: status, headers (names lower-cased) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `error` of a JSON error body.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
}

/// One request: `method path`, with `headers` and a body; `Host` is the server's address
/// unless `headers` sets one.
pub async fn call(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {}\r\n", server.addr));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.unwrap_or("");
    if method == "POST" || !body.is_empty() {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).expect("a UTF-8 answer");
    let (head, rest) = text.split_once("\r\n\r\n").expect("a head and a body");
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        unchunk(rest)
    } else {
        rest.to_owned()
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// The body of a chunked answer.
fn unchunk(mut rest: &str) -> String {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("a chunk size");
        let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

/// GET, with headers.
pub async fn get(server: &Server, path: &str, headers: &[(&str, &str)]) -> Answer {
    call(server, "GET", path, headers, None).await
}

/// The session's CSRF token.
pub async fn csrf(server: &Server, headers: &[(&str, &str)]) -> String {
    let session = get(server, "/api/session", headers).await;
    assert_eq!(session.status, 200, "{session:?}");
    session.json()["csrf"].as_str().unwrap().to_owned()
}

/// POST with the session's CSRF token and a JSON body.
pub async fn post(server: &Server, path: &str, body: Option<&str>) -> Answer {
    let token = csrf(server, &[]).await;
    let headers = [
        ("x-hopper-csrf", token.as_str()),
        ("content-type", "application/json"),
    ];
    call(server, "POST", path, &headers, body).await
}

/// Takes up to `n` due jobs of `queue` and dead-letters them, each with the error `why`
/// gives its id; returns how many died.
pub async fn dead_letter(
    broker: &Arc<dyn Broker>,
    queue: &str,
    n: usize,
    why: impl Fn(hopper::JobId) -> String,
) -> usize {
    use hopper::broker::{FetchRequest, Outcome, Settlement};
    let fetched = broker
        .fetch(FetchRequest::one(
            queue,
            n,
            std::time::Duration::from_secs(60),
        ))
        .await
        .unwrap();
    let settlements: Vec<Settlement> = fetched
        .jobs
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: fetched.lease,
            outcome: Outcome::DeadLetter { error: why(j.id) },
        })
        .collect();
    let died = settlements.len();
    broker.settle(settlements).await.unwrap();
    died
}
