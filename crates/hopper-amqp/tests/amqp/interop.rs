//! Another client speaks the wire format: a message published by Python's `pika` is run by
//! a Hopper worker, and a Hopper-published job is read by `pika`.

use std::process::Command;
use std::sync::{Arc, Mutex};

use hopper_core::{Broker, JobContext, NewJob, QueueOptions, Worker};

use super::support::{setup, wait_for};

/// Whether `pika` can be imported, installing it with pip when it is missing.
fn pika_available() -> Result<(), String> {
    let import = || {
        Command::new("python3")
            .args(["-c", "import pika"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if import() {
        return Ok(());
    }
    let pip = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "pika"])
        .output()
        .map_err(|e| format!("python3 not runnable: {e}"))?;
    if import() {
        return Ok(());
    }
    Err(format!(
        "pip install pika failed: {}",
        String::from_utf8_lossy(&pip.stderr).trim()
    ))
}

fn python(script: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const CONNECT: &str = "import json, pika\n\
conn = pika.BlockingConnection(pika.ConnectionParameters('127.0.0.1', 5672, '/', pika.PlainCredentials('guest', 'guest')))\n\
ch = conn.channel()\n";

#[tokio::test]
async fn pika_and_hopper_read_each_others_messages() {
    if let Err(why) = pika_available() {
        eprintln!("skipped: pika_and_hopper_read_each_others_messages: {why}");
        return;
    }
    let s = setup("interop").await;
    // Declared by Hopper (topology on), published to by pika.
    s.broker.subscribe(&s.queue, Some(10)).await.unwrap();
    s.broker.unsubscribe(&s.queue).await.unwrap();
    python(&format!(
        "{CONNECT}ch.basic_publish('', '{q}', json.dumps({{'n': 7, 'who': 'pika'}}),\n\
         pika.BasicProperties(content_type='application/json', delivery_mode=2, headers={{'tenant': 't1'}}))\n\
         conn.close()\n",
        q = s.queue
    ));
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Msg {
        n: u64,
        who: String,
    }
    type Got = Vec<(Msg, Option<String>, u32, u32)>;
    let got: Arc<Mutex<Got>> = Arc::default();
    let g = got.clone();
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new(),
            move |job: JobContext<Msg>| {
                let tenant = job.job.headers.get("tenant").cloned();
                g.lock().unwrap().push((
                    job.payload,
                    tenant,
                    job.job.attempt,
                    job.job.max_attempts,
                ));
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 10, "pika's message", |s| s.completed == 1).await;
    worker.shutdown().await;
    let first = got.lock().unwrap().remove(0);
    assert_eq!(
        first,
        (
            Msg {
                n: 7,
                who: "pika".into()
            },
            Some("t1".into()),
            1,
            hopper_core::job::DEFAULT_MAX_ATTEMPTS
        ),
        "payload, header, attempt 1 and the default max attempts"
    );

    // The other way: a Hopper job read by pika.
    let ids = s
        .broker
        .enqueue(vec![
            NewJob::json(&s.queue, &serde_json::json!({"n": 8}))
                .unwrap()
                .header("trace", "abc")
                .max_attempts(3),
        ])
        .await
        .unwrap();
    let out = python(&format!(
        "{CONNECT}m, p, body = ch.basic_get('{q}', auto_ack=True)\n\
         h = {{k: (v.decode() if isinstance(v, bytes) else v) for k, v in (p.headers or {{}}).items()}}\n\
         print(json.dumps({{'body': json.loads(body), 'content_type': p.content_type, 'delivery_mode': p.delivery_mode, 'message_id': p.message_id, 'headers': h}}))\n\
         conn.close()\n",
        q = s.queue
    ));
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("pika printed JSON");
    assert_eq!(v["body"], serde_json::json!({"n": 8}));
    assert_eq!(v["content_type"], "application/json");
    assert_eq!(v["delivery_mode"], 2);
    assert_eq!(v["message_id"], ids[0].0.to_string());
    assert_eq!(v["headers"]["trace"], "abc");
    // A first attempt goes without `x-hopper-attempt` (absent means 0); the limit, not the
    // default, goes.
    assert!(v["headers"].get("x-hopper-attempt").is_none(), "{v}");
    assert_eq!(v["headers"]["x-hopper-max-attempts"], 3);
    assert!(
        v["headers"]["x-hopper-created-at"].as_i64().is_some(),
        "{v}"
    );
}

/// Hopper asks RabbitMQ for frames of 32 KiB (lapin keeps 32 of them per direction and
/// connection): a job of 200 KiB crosses in several body frames each way and arrives
/// whole, character for character.
#[tokio::test]
async fn a_payload_larger_than_a_frame_arrives_whole() {
    let s = setup("bigframe").await;
    let text: String = (0..200 * 1024u32)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    s.broker
        .enqueue(vec![NewJob::json(&s.queue, &text).unwrap()])
        .await
        .unwrap();
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let g = got.clone();
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new(),
            move |job: JobContext<String>| {
                g.lock().unwrap().push(job.payload);
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, 10, "the large job", |s| s.completed == 1).await;
    worker.shutdown().await;
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].len(), 200 * 1024);
    assert!(got[0] == text, "the payload changed on the way");
}
