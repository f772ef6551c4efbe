//! A group over HTTP: its counts and dead members in the API and on its page, and the
//! completion job's page linking back to it.

use std::time::Duration;

use hopper::broker::{FetchRequest, Outcome, Settlement};
use hopper::{JobId, NewJob};

use super::support::{get, sqlite, start};

#[tokio::test]
async fn a_group_is_shown_with_its_dead_and_its_completion() {
    let (broker, dir) = sqlite("groups").await;
    let rows = vec![NewJob::new("rows", "1"), NewJob::new("rows", "2")];
    let report = NewJob::new("report", "r");
    let sealed = broker
        .enqueue_group("import 7/b", rows, report)
        .await
        .unwrap();
    assert_eq!(sealed.members, 2);
    let held = broker
        .fetch(FetchRequest::one("rows", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    let (ok, dies) = (held.jobs[0].id, held.jobs[1].id);
    let settle = |job: JobId, outcome| Settlement {
        job,
        lease: held.lease,
        outcome,
    };
    let dead = Outcome::DeadLetter {
        error: "malformed".into(),
    };
    broker
        .settle(vec![settle(ok, Outcome::Ack), settle(dies, dead)])
        .await
        .unwrap();
    let server = start(broker.clone(), None, false).await;

    let api = get(&server, "/api/groups/import%207%2Fb", &[]).await;
    assert_eq!(api.status, 200, "{api:?}");
    let v = api.json();
    assert_eq!(
        (
            v["members"].as_u64(),
            v["succeeded"].as_u64(),
            v["unsettled"].as_u64()
        ),
        (Some(2), Some(1), Some(0))
    );
    assert_eq!(v["dead"], serde_json::json!([dies.0]));
    let completion = v["completion"].as_i64().expect("the completion job's id");

    let page = get(&server, "/groups/import%207%2Fb", &[]).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains(&format!(r#"href="/jobs/{}" data-id="{}""#, dies.0, dies.0)),
        "the dead member linked: {}",
        page.body
    );
    assert!(page.body.contains(&format!(r#"href="/jobs/{completion}""#)));
    let job = get(&server, &format!("/jobs/{completion}"), &[]).await;
    assert!(
        job.body
            .contains(r#"<a id="group" href="/groups/import%207%2Fb">"#),
        "the completion job links its group: {}",
        job.body
    );

    assert_eq!(get(&server, "/api/groups/none", &[]).await.status, 404);
    assert_eq!(get(&server, "/api/groups/a%00b", &[]).await.status, 400);
    assert_eq!(get(&server, "/groups/none", &[]).await.status, 404);
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}
