//! The HTML pages over real HTTP: what they show equals what the broker holds, payloads are
//! escaped, read-only pages offer no action, and a token sends a browser to the login form.

use hopper::NewJob;

use super::support::{call, get, sqlite, start};

#[tokio::test]
async fn pages_show_what_the_broker_holds_and_escape_payloads() {
    let (broker, dir) = sqlite("pages").await;
    let ids = broker
        .enqueue(vec![
            NewJob::new("emails", "<script>alert(1)</script>"),
            NewJob::new("emails", "two"),
            NewJob::new("emails", "three"),
        ])
        .await
        .unwrap();
    broker.set_paused("reports", true).await.unwrap();
    let limit = hopper::RateLimit::new(20, std::time::Duration::from_secs(60)).unwrap();
    broker.set_rate_limit("emails", Some(limit)).await.unwrap();
    let server = start(broker.clone(), None, false).await;

    let overview = get(&server, "/", &[]).await;
    assert_eq!(overview.status, 200);
    assert_eq!(
        overview.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let html = &overview.body;
    assert!(html.contains(r#"<tr data-queue="emails">"#), "{html}");
    assert!(
        html.contains(r#"<td class="num pending">3</td>"#),
        "3 pending: {html}"
    );
    assert!(
        html.contains(r#"<span class="badge paused">paused</span>"#),
        "{html}"
    );
    assert!(html.contains("No live workers."), "{html}");

    let queue = get(&server, "/queues/emails", &[]).await;
    assert_eq!(queue.status, 200);
    for id in &ids {
        assert!(
            queue.body.contains(&format!(r#"<tr data-id="{}">"#, id.0)),
            "job {id} listed"
        );
    }
    assert!(
        queue.body.contains(r#"<b id="pending">3</b>"#),
        "{}",
        queue.body
    );
    assert!(queue.body.contains(r#"id="pause""#), "a pause button");
    assert!(queue.body.contains("limit 20/1m</span>"), "{}", queue.body);

    let job = get(&server, &format!("/jobs/{}", ids[0].0), &[]).await;
    assert_eq!(job.status, 200);
    assert!(
        job.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        job.body
    );
    assert!(
        !job.body.contains("<script>alert"),
        "the payload ran as a script"
    );
    assert!(
        job.body.contains(r#"id="cancel""#),
        "a pending job can be cancelled"
    );

    let missing = get(&server, "/jobs/999999", &[]).await;
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("no job 999999"), "{}", missing.body);
    let bad = get(&server, "/queues/emails?state=gone", &[]).await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("state"), "{}", bad.body);
    let css = get(&server, "/assets/app.css", &[]).await;
    assert_eq!(
        (css.status, css.header("content-type")),
        (200, Some("text/css; charset=utf-8"))
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn read_only_pages_offer_no_action() {
    let (broker, dir) = sqlite("pages-ro").await;
    let ids = broker.enqueue(vec![NewJob::new("q", "x")]).await.unwrap();
    let server = start(broker, None, true).await;
    for path in ["/", "/queues/q", &format!("/jobs/{}", ids[0].0)] {
        let page = get(&server, path, &[]).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(!page.body.contains("data-post"), "{path} offers an action");
        assert!(
            page.body.contains("read-only"),
            "{path} says it is read-only"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn with_a_token_a_browser_is_sent_to_the_login_form() {
    let (broker, dir) = sqlite("pages-token").await;
    let server = start(broker, Some("s3cret"), false).await;
    let page = get(&server, "/queues/q", &[]).await;
    assert_eq!(
        (page.status, page.header("location")),
        (303, Some("/login"))
    );
    let form = get(&server, "/login", &[]).await;
    assert_eq!(form.status, 200);
    assert!(form.body.contains(r#"name=token"#), "{}", form.body);
    assert_eq!(get(&server, "/assets/app.js", &[]).await.status, 200);
    let form_type = [("content-type", "application/x-www-form-urlencoded")];
    let login = call(&server, "POST", "/login", &form_type, Some("token=s3cret")).await;
    let cookie = login
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = get(&server, "/", &[("cookie", &cookie)]).await;
    assert_eq!(page.status, 200, "{page:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A queue past the count bound shows `10000+` on the pages, and the API says where its
/// counts stop: pages cost the same at a million jobs as at ten thousand.
#[tokio::test]
async fn counts_past_the_bound_show_as_at_least() {
    let (broker, dir) = sqlite("pages-bound").await;
    for chunk in 0..11 {
        let jobs = (0..1000).map(|i| NewJob::new("big", format!("{}", chunk * 1000 + i)));
        broker.enqueue(jobs.collect()).await.unwrap();
    }
    let server = start(broker.clone(), None, false).await;
    let queues = get(&server, "/api/queues", &[]).await.json();
    assert_eq!(queues[0]["bound"], 10_000, "{queues}");
    assert_eq!(
        queues[0]["pending"], 10_001,
        "more than the bound: {queues}"
    );
    let overview = get(&server, "/", &[]).await.body;
    assert!(
        overview.contains(r#"<td class="num pending">10000+</td>"#),
        "{overview}"
    );
    let queue = get(&server, "/queues/big", &[]).await.body;
    assert!(queue.contains(r#"<b id="pending">10000+</b>"#), "{queue}");
    assert_eq!(
        broker.queue_stats("big").await.unwrap().counts.pending,
        11_000,
        "exact"
    );
    let _ = std::fs::remove_dir_all(dir);
}
