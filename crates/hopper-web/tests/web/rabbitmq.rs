//! On RabbitMQ, which holds messages rather than records, the pages show what the broker
//! can say (depths, consumers, dead letters) and say plainly what it cannot.

use std::process::Command;

use hopper::NewJob;

use super::support::{get, start};

/// Deletes a RabbitMQ vhost when dropped.
struct DropVhost(String);

impl Drop for DropVhost {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(["delete_vhost", &self.0])
            .output();
    }
}

fn rabbitmqctl(args: &[&str]) {
    let out = Command::new("rabbitmqctl").args(args).output().unwrap();
    assert!(out.status.success(), "rabbitmqctl {args:?}: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_pages_show_what_the_broker_can_say() {
    let vhost = format!("hopper_web_{}", std::process::id());
    rabbitmqctl(&["add_vhost", &vhost]);
    let _drop = DropVhost(vhost.clone());
    rabbitmqctl(&["set_permissions", "-p", &vhost, "guest", ".*", ".*", ".*"]);
    let base = std::env::var("HOPPER_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let server = &base[..base.rfind('/').unwrap()];
    let broker = hopper::connect(&format!("{server}/{vhost}?declare=true"))
        .await
        .unwrap();
    broker
        .enqueue(
            (0..3)
                .map(|i| NewJob::new("mailq", format!("{i}")))
                .collect(),
        )
        .await
        .unwrap();
    let web = start(broker, None, false).await;

    let overview = get(&web, "/", &[]).await;
    assert_eq!(overview.status, 200);
    assert!(
        overview.body.contains("cannot list its queues"),
        "{}",
        overview.body
    );
    assert!(
        overview.body.contains(r#"id="open-queue""#),
        "a way to open a queue by name"
    );

    let queue = get(&web, "/queues/mailq", &[]).await;
    assert_eq!(queue.status, 200, "{queue:?}");
    assert!(
        queue.body.contains(r#"<b id="pending">3</b>"#),
        "{}",
        queue.body
    );
    assert!(
        queue.body.contains("holds messages, not records"),
        "{}",
        queue.body
    );
    assert!(!queue.body.contains(r#"id="jobs""#), "no job listing");

    let listing = get(&web, "/api/queues", &[]).await;
    assert_eq!(listing.status, 404);
    assert!(
        listing.error().contains("does not support listing queues"),
        "{listing:?}"
    );
    let detail = get(&web, "/api/queues/mailq", &[]).await.json();
    assert_eq!(
        (detail["pending"].as_u64(), detail["consumers"].as_u64()),
        (Some(3), Some(0))
    );
    let session = get(&web, "/api/session", &[]).await.json();
    assert_eq!(
        (session["list"].as_bool(), session["redrive"].as_bool()),
        (Some(false), Some(true))
    );
}
