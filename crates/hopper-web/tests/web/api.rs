//! The API's reads and actions against an SQLite broker holding jobs in several states,
//! and its answers to bad input.

use std::sync::Arc;
use std::time::Duration;

use hopper::broker::{FetchRequest, Outcome, Settlement};
use hopper::{Broker, JobId, NewJob};

use super::support::{dead_letter, get, post, sqlite, start};

/// Queue `emails`: 3 pending (one with an HTML payload) and 2 dead, limited to 50 starts a
/// second; queue `reports` paused and empty. Returns the pending ids and the dead ids.
async fn fill(broker: &Arc<dyn Broker>) -> (Vec<JobId>, Vec<JobId>) {
    let pending = broker
        .enqueue(vec![
            NewJob::new("emails", "<script>alert(1)</script>"),
            NewJob::new("emails", r#"{"to":"a@example.com"}"#),
            NewJob::new("emails", vec![0xff, 0x00, 0x10]),
        ])
        .await
        .unwrap();
    let dead = broker
        .enqueue(vec![
            NewJob::new("emails", "d1"),
            NewJob::new("emails", "d2"),
        ])
        .await
        .unwrap();
    // The two enqueued last are fetched after the three before them: fetch all five,
    // dead-letter those two, and release the rest unharmed.
    let fetched = broker
        .fetch(FetchRequest::one("emails", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(fetched.jobs.len(), 5);
    let settlements = fetched
        .jobs
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: fetched.lease,
            outcome: match dead.contains(&j.id) {
                true => Outcome::DeadLetter {
                    error: format!("boom {}", j.id),
                },
                false => Outcome::Release,
            },
        })
        .collect();
    broker.settle(settlements).await.unwrap();
    broker.set_paused("reports", true).await.unwrap();
    let limit = hopper::RateLimit::new(50, Duration::from_secs(1)).unwrap();
    broker.set_rate_limit("emails", Some(limit)).await.unwrap();
    (pending, dead)
}

#[tokio::test]
async fn reads_answer_what_the_broker_holds() {
    let (broker, dir) = sqlite("reads").await;
    let (pending, dead) = fill(&broker).await;
    let server = start(broker.clone(), None, false).await;

    let session = get(&server, "/api/session", &[]).await.json();
    assert_eq!(session["broker"], "sqlite");
    assert_eq!(session["csrf"].as_str().unwrap().len(), 64);
    assert_eq!(
        (session["list"].as_bool(), session["workers"].as_bool()),
        (Some(true), Some(true))
    );

    let queues = get(&server, "/api/queues", &[]).await.json();
    let names: Vec<&str> = queues
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["emails", "reports"]);
    let emails = &queues[0];
    assert_eq!(
        (emails["pending"].as_u64(), emails["dead"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(emails["consumers"], 0, "no worker runs");
    assert_eq!(queues[1]["paused"], true);
    assert_eq!(
        (
            emails["rate_limit"].clone(),
            queues[1]["rate_limit"].clone()
        ),
        (
            serde_json::json!({"max": 50, "per_ms": 1000, "per_key": false}),
            serde_json::Value::Null
        )
    );

    let detail = get(&server, "/api/queues/emails", &[]).await.json();
    assert_eq!(detail["pending"], 3);
    assert_eq!(
        detail["throughput"],
        serde_json::json!([]),
        "no worker reported"
    );

    let first = get(
        &server,
        "/api/queues/emails/jobs?state=pending&limit=2",
        &[],
    )
    .await;
    assert_eq!(first.status, 200, "{first:?}");
    let first = first.json();
    let ids = |page: &serde_json::Value| -> Vec<i64> {
        page["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(&first), [pending[0].0, pending[1].0]);
    let next = first["next"].as_str().expect("a full page has a next");
    let second = get(
        &server,
        &format!("/api/queues/emails/jobs?limit=2&after={next}"),
        &[],
    )
    .await
    .json();
    assert_eq!(ids(&second), [pending[2].0]);
    assert_eq!(second["next"], serde_json::Value::Null);
    let newest = get(
        &server,
        "/api/queues/emails/jobs?state=dead&newest=true",
        &[],
    )
    .await
    .json();
    assert_eq!(ids(&newest), [dead[1].0, dead[0].0], "newest first");

    let html = get(&server, &format!("/api/jobs/{}", pending[0].0), &[])
        .await
        .json();
    assert_eq!(html["payload_text"], "<script>alert(1)</script>");
    assert_eq!(html["state"], "pending");
    let json = get(&server, &format!("/api/jobs/{}", pending[1].0), &[])
        .await
        .json();
    assert_eq!(json["payload_json"]["to"], "a@example.com");
    let bytes = get(&server, &format!("/api/jobs/{}", pending[2].0), &[])
        .await
        .json();
    assert_eq!(
        (
            bytes["payload_hex"].as_str(),
            bytes["payload_bytes"].as_u64()
        ),
        (Some("ff0010"), Some(3))
    );
    let died = get(&server, &format!("/api/jobs/{}", dead[0].0), &[])
        .await
        .json();
    assert_eq!(died["state"], "dead");
    assert_eq!(died["errors"][0]["error"], format!("boom {}", dead[0]));
    assert_eq!(died["unique_key"], serde_json::Value::Null);
    let keyed = hopper::NewJob::new("reports", b"{}".to_vec()).unique_key("weekly");
    let keyed = broker.enqueue(vec![keyed]).await.unwrap()[0];
    let keyed = get(&server, &format!("/api/jobs/{}", keyed.0), &[])
        .await
        .json();
    assert_eq!(keyed["unique_key"], "weekly");
    let ordered: Vec<_> = ["first", "second"]
        .map(|n| hopper::NewJob::new("reports", n.as_bytes().to_vec()).ordering_key("acct-9"))
        .into();
    let ordered = broker.enqueue(ordered).await.unwrap();
    let first = get(&server, &format!("/api/jobs/{}", ordered[0].0), &[])
        .await
        .json();
    let second = get(&server, &format!("/api/jobs/{}", ordered[1].0), &[])
        .await
        .json();
    assert_eq!(
        (
            &first["ordering_key"],
            &first["blocked"],
            &second["blocked"]
        ),
        (
            &serde_json::json!("acct-9"),
            &serde_json::json!(false),
            &serde_json::json!(true)
        ),
        "the second job of the key waits for the first"
    );
    let rated = hopper::NewJob::new("reports", b"r".to_vec()).rate_key("tenant-3");
    let rated = broker.enqueue(vec![rated]).await.unwrap();
    let shown = get(&server, &format!("/api/jobs/{}", rated[0].0), &[])
        .await
        .json();
    assert_eq!(shown["rate_key"], "tenant-3");
    assert_eq!(first["rate_key"], serde_json::Value::Null);
    assert_eq!(
        get(&server, "/api/workers", &[]).await.json(),
        serde_json::json!([])
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn bad_input_is_refused_by_name_and_changes_nothing() {
    let (broker, dir) = sqlite("bad").await;
    let (pending, _) = fill(&broker).await;
    let server = start(broker.clone(), None, false).await;
    let before = broker.queue_stats("emails").await.unwrap().counts;
    let p = pending[0].0;
    let ids_body = format!("{{\"ids\":[{p}]}}");
    let cases: Vec<(&str, String, Option<&str>, u16, &str)> = vec![
        (
            "GET",
            "/api/queues/nothing".into(),
            None,
            404,
            "no queue named nothing",
        ),
        ("GET", "/api/queues/bad%20name".into(), None, 400, "queue"),
        ("GET", "/api/jobs/abc".into(), None, 400, "invalid job id"),
        ("GET", "/api/jobs/0".into(), None, 400, "invalid job id"),
        ("GET", "/api/jobs/999999".into(), None, 404, "no job 999999"),
        (
            "GET",
            "/api/queues/emails/jobs?after=1.2".into(),
            None,
            400,
            "cursor",
        ),
        (
            "GET",
            "/api/queues/emails/jobs?limit=5000".into(),
            None,
            400,
            "limit",
        ),
        (
            "GET",
            "/api/queues/emails/jobs?state=gone".into(),
            None,
            400,
            "state",
        ),
        (
            "POST",
            format!("/api/jobs/{p}/retry"),
            None,
            409,
            "not dead",
        ),
        (
            "POST",
            format!("/api/jobs/{p}/discard"),
            None,
            409,
            "not dead",
        ),
        (
            "POST",
            "/api/jobs/999999/cancel".into(),
            None,
            404,
            "no job",
        ),
        (
            "POST",
            "/api/queues/emails/dead/retry".into(),
            Some("{}"),
            400,
            "selection",
        ),
        (
            "POST",
            "/api/queues/emails/dead/retry".into(),
            Some(&ids_body),
            409,
            "not dead",
        ),
        (
            "POST",
            "/api/queues/emails/purge".into(),
            None,
            400,
            "confirm",
        ),
        (
            "POST",
            "/api/queues/emails/purge?confirm=other".into(),
            None,
            400,
            "confirm",
        ),
    ];
    for (method, path, body, status, says) in cases {
        let answer = match method {
            "GET" => get(&server, &path, &[]).await,
            _ => post(&server, &path, body).await,
        };
        assert_eq!(answer.status, status, "{method} {path}: {answer:?}");
        assert!(answer.error().contains(says), "{method} {path}: {answer:?}");
    }
    assert_eq!(
        broker.queue_stats("emails").await.unwrap().counts,
        before,
        "nothing changed"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn actions_change_what_the_broker_holds() {
    let (broker, dir) = sqlite("actions").await;
    let (pending, dead) = fill(&broker).await;
    let server = start(broker.clone(), None, false).await;
    let changed = |a: super::support::Answer| {
        assert_eq!(a.status, 200, "{a:?}");
        a.json()["changed"].as_u64().unwrap()
    };
    let counts = async || broker.queue_stats("emails").await.unwrap().counts;

    assert_eq!(
        changed(post(&server, &format!("/api/jobs/{}/retry", dead[0]), None).await),
        1
    );
    assert_eq!((counts().await.pending, counts().await.dead), (4, 1));
    assert_eq!(
        changed(post(&server, &format!("/api/jobs/{}/cancel", pending[0]), None).await),
        1
    );
    assert_eq!(counts().await.pending, 3);
    let again = post(&server, &format!("/api/jobs/{}/cancel", pending[0]), None).await;
    assert_eq!(
        (again.status, again.error().contains("cancelled")),
        (409, true),
        "{again:?}"
    );

    assert_eq!(
        changed(post(&server, "/api/queues/emails/pause", None).await),
        1
    );
    assert_eq!(
        changed(post(&server, "/api/queues/emails/pause", None).await),
        0,
        "already"
    );
    assert!(broker.queue_stats("emails").await.unwrap().paused);
    assert_eq!(
        changed(post(&server, "/api/queues/emails/resume", None).await),
        1
    );
    assert!(!broker.queue_stats("emails").await.unwrap().paused);

    let body = format!("{{\"ids\":[{}]}}", dead[1]);
    let took = post(&server, "/api/queues/emails/dead/discard", Some(&body)).await;
    assert_eq!(changed(took), 1);
    assert_eq!(counts().await.dead, 0);
    assert!(broker.job(dead[1]).await.unwrap().is_none(), "discarded");

    // What is pending now (two of the first jobs and the retried one) dies, to be
    // re-driven as a whole queue.
    dead_letter(&broker, "emails", 10, |_| "x".into()).await;
    let dead_now = counts().await.dead;
    assert_eq!(dead_now, 3);
    let all = post(
        &server,
        "/api/queues/emails/dead/retry",
        Some(r#"{"all":true}"#),
    )
    .await;
    assert_eq!(changed(all), 3);
    assert_eq!((counts().await.pending, counts().await.dead), (3, 0));

    let purged = post(&server, "/api/queues/emails/purge?confirm=emails", None).await;
    assert_eq!(changed(purged), 4, "the 3 pending and the cancelled one");
    assert_eq!(counts().await, Default::default());
    let _ = std::fs::remove_dir_all(dir);
}

/// Every API route the server answers is in the OpenAPI document, and the document parses.
#[tokio::test]
async fn the_openapi_document_lists_every_route() {
    let (broker, dir) = sqlite("openapi").await;
    let server = start(broker, None, false).await;
    let doc = get(&server, "/api/openapi.json", &[]).await;
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    let mut paths: Vec<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "/api/groups/{group}",
            "/api/jobs/{id}",
            "/api/jobs/{id}/cancel",
            "/api/jobs/{id}/discard",
            "/api/jobs/{id}/retry",
            "/api/queues",
            "/api/queues/{queue}",
            "/api/queues/{queue}/dead/discard",
            "/api/queues/{queue}/dead/retry",
            "/api/queues/{queue}/fetching",
            "/api/queues/{queue}/jobs",
            "/api/queues/{queue}/pause",
            "/api/queues/{queue}/purge",
            "/api/queues/{queue}/resume",
            "/api/session",
            "/api/workers",
        ]
    );
    assert!(doc["components"]["schemas"]["JobView"].is_object());
    assert!(doc["components"]["schemas"]["GroupView"].is_object());
    let _ = std::fs::remove_dir_all(dir);
}
