//! Who may call: tokens, the login cookie, CSRF, read-only mode, host names and binds.

use std::net::SocketAddr;

use hopper_web::ServeOptions;

use super::support::{call, csrf, get, sqlite, start};

#[tokio::test]
async fn a_token_guards_every_call() {
    let (broker, dir) = sqlite("token").await;
    broker.set_paused("q", true).await.unwrap();
    let server = start(broker.clone(), Some("s3cret"), false).await;
    for path in [
        "/api/session",
        "/api/queues",
        "/api/openapi.json",
        "/api/jobs/1",
    ] {
        let none = get(&server, path, &[]).await;
        assert_eq!(none.status, 401, "{path}: {none:?}");
        assert_eq!(none.header("www-authenticate"), Some("Bearer"), "{path}");
        let wrong = get(&server, path, &[("authorization", "Bearer nope")]).await;
        assert_eq!(wrong.status, 401, "{path}: {wrong:?}");
    }
    let bearer = [("authorization", "Bearer s3cret")];
    assert_eq!(get(&server, "/api/queues", &bearer).await.status, 200);
    // A bearer token is never sent by a browser on its own: it stands for the CSRF token.
    let resumed = call(&server, "POST", "/api/queues/q/resume", &bearer, None).await;
    assert_eq!(
        (resumed.status, resumed.json()["changed"].as_u64()),
        (200, Some(1))
    );

    let wrong = call(
        &server,
        "POST",
        "/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        Some("token=nope"),
    )
    .await;
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let login = call(
        &server,
        "POST",
        "/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        Some("token=s3cret"),
    )
    .await;
    assert_eq!(login.status, 303, "{login:?}");
    let cookie = login
        .header("set-cookie")
        .expect("a session cookie")
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();
    let with_cookie = [("cookie", session.as_str())];
    assert_eq!(get(&server, "/api/queues", &with_cookie).await.status, 200);
    // A cookie is sent by the browser on its own: a POST needs the CSRF token too.
    let forged = call(&server, "POST", "/api/queues/q/pause", &with_cookie, None).await;
    assert_eq!(forged.status, 403, "{forged:?}");
    assert!(forged.error().contains("x-hopper-csrf"), "{forged:?}");
    assert!(
        !broker.queue_stats("q").await.unwrap().paused,
        "the forged pause did nothing"
    );
    let token = csrf(&server, &with_cookie).await;
    let headers = [
        ("cookie", session.as_str()),
        ("x-hopper-csrf", token.as_str()),
    ];
    let paused = call(&server, "POST", "/api/queues/q/pause", &headers, None).await;
    assert_eq!(paused.status, 200, "{paused:?}");
    assert!(broker.queue_stats("q").await.unwrap().paused);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn read_only_refuses_every_action() {
    let (broker, dir) = sqlite("read-only").await;
    broker
        .enqueue(vec![hopper::NewJob::new("q", "x")])
        .await
        .unwrap();
    let server = start(broker.clone(), None, true).await;
    let session = get(&server, "/api/session", &[]).await.json();
    assert_eq!(session["read_only"], true);
    let token = csrf(&server, &[]).await;
    let headers = [("x-hopper-csrf", token.as_str())];
    for path in [
        "/api/queues/q/pause",
        "/api/queues/q/purge?confirm=q",
        "/api/jobs/1/cancel",
    ] {
        let refused = call(&server, "POST", path, &headers, None).await;
        assert_eq!(refused.status, 403, "{path}: {refused:?}");
        assert!(refused.error().contains("read-only"), "{path}: {refused:?}");
    }
    let status = broker.queue_stats("q").await.unwrap();
    assert_eq!(
        (status.counts.pending, status.paused),
        (1, false),
        "nothing changed"
    );
    assert_eq!(
        get(&server, "/api/queues", &[]).await.status,
        200,
        "reads still work"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn without_a_token_only_loopback_names_and_csrf_posts_are_served() {
    let (broker, dir) = sqlite("loopback").await;
    let server = start(broker.clone(), None, false).await;
    let rebound = get(&server, "/api/queues", &[("host", "evil.example:8080")]).await;
    assert_eq!(rebound.status, 403, "{rebound:?}");
    assert_eq!(
        get(&server, "/api/queues", &[("host", "localhost:8080")])
            .await
            .status,
        200
    );
    let forged = call(&server, "POST", "/api/queues/q/pause", &[], None).await;
    assert_eq!(forged.status, 403, "{forged:?}");
    let wrong = call(
        &server,
        "POST",
        "/api/queues/q/pause",
        &[("x-hopper-csrf", "0")],
        None,
    )
    .await;
    assert_eq!(wrong.status, 403, "{wrong:?}");
    assert!(
        broker.queues().await.unwrap().is_empty(),
        "nothing was paused"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_bind_beyond_loopback_needs_a_token() {
    let options = |bind: &str, token: Option<&str>| ServeOptions {
        bind: bind.parse::<SocketAddr>().unwrap(),
        token: token.map(str::to_owned),
        read_only: false,
        metrics: None,
        follow_every: std::time::Duration::from_millis(100),
    };
    let err = options("0.0.0.0:8080", None)
        .check()
        .unwrap_err()
        .to_string();
    assert!(err.contains("--bind") && err.contains("--token"), "{err}");
    assert!(options("192.168.1.5:8080", None).check().is_err());
    options("0.0.0.0:8080", Some("t")).check().unwrap();
    options("127.0.0.1:8080", None).check().unwrap();
    options("[::1]:8080", None).check().unwrap();
    let err = options("127.0.0.1:8080", Some(""))
        .check()
        .unwrap_err()
        .to_string();
    assert!(err.contains("--token"), "{err}");
}
