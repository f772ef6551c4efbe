//! Payloads and headers: a producer's `NewJob` with fuzzed queue, payload, priority,
//! attempts, run time and header map through `NewJob::validate`; headers to JSON and back
//! (`headers_json`, `headers_from_json`, `headers_for_record`); `Job::decode` of the
//! payload; the inline and outline `JobCopy` of a held job; and a round trip through the
//! in-process broker (enqueue, fetch) of every job that validates.

#![no_main]

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use arbitrary::Arbitrary;
use futures_util::FutureExt;
use hopper_core::job::{MAX_DELAY, MAX_RUN_AT, headers_for_record, headers_from_json};
use hopper_core::{
    Broker, Error, FetchRequest, Job, JobCopy, JobId, LeaseId, MemoryBroker, NewJob, RunAt,
};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum When {
    Now,
    /// Seconds and nanoseconds after the epoch (`None`: before it, by as much).
    At(u64, u32, bool),
    After(u64, u32),
    /// Near the limit the validation draws, where an off-by-one would show.
    AfterNearMax(i16),
}

#[derive(Debug, Arbitrary)]
enum Queue {
    Fixed,
    Any(String),
}

#[derive(Debug, Arbitrary)]
struct Input {
    queue: Queue,
    payload: Vec<u8>,
    /// A JSON payload instead: a header map (keys and values as a producer would send).
    json_payload: Option<BTreeMap<String, String>>,
    priority: i32,
    max_attempts: u32,
    when: When,
    headers: Vec<(String, String)>,
    /// Header text as another program may have stored it.
    stored_headers: Option<String>,
    id: i64,
    lease: i64,
    attempt: u32,
    run_at: i64,
    created_at: i64,
    /// The broker clock, in ms.
    now: i64,
}

/// A payload type with a little structure, so `decode` does more than `Value`.
#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Email {
    to: String,
    cc: Option<Vec<String>>,
    n: u32,
}

fn new_job(input: &Input) -> NewJob {
    let queue = match &input.queue {
        Queue::Fixed => "emails".to_owned(),
        Queue::Any(q) => q.clone(),
    };
    let mut job = match &input.json_payload {
        Some(map) => NewJob::json(queue, map).expect("a map of strings serialises"),
        None => NewJob::new(queue, input.payload.clone()),
    };
    job = job
        .priority(input.priority)
        .max_attempts(input.max_attempts);
    match input.when {
        When::Now => {}
        When::At(secs, nanos, after) => {
            let d = Duration::new(secs, nanos % 1_000_000_000);
            let at = if after {
                SystemTime::UNIX_EPOCH.checked_add(d)
            } else {
                SystemTime::UNIX_EPOCH.checked_sub(d)
            };
            if let Some(at) = at {
                job = job.run_at(at);
            }
        }
        When::After(secs, nanos) => job = job.delay(Duration::new(secs, nanos % 1_000_000_000)),
        When::AfterNearMax(off) => {
            let ms = MAX_DELAY.as_millis() as i128 + i128::from(off);
            job = job.delay(Duration::from_millis(ms.max(0) as u64));
        }
    }
    for (k, v) in &input.headers {
        job = job.header(k.clone(), v.clone());
    }
    job
}

fuzz_target!(|input: Input| {
    let job = new_job(&input);
    let valid = job.validate();

    // The headers as brokers store them come back whole.
    let text = job.headers_json();
    assert_eq!(text.is_none(), job.headers.is_empty());
    let back = headers_from_json(text.as_deref()).expect("stored headers read back");
    assert_eq!(back, job.headers);
    assert_eq!(headers_for_record(text.as_deref()), job.headers);

    // Headers another program stored: read, or shown whole under the unreadable key.
    let stored = input.stored_headers.as_deref();
    let record = headers_for_record(stored);
    match headers_from_json(stored) {
        Ok(map) => assert_eq!(record, map),
        Err(_) => {
            assert_eq!(record.len(), 1);
            assert_eq!(
                record
                    .get(hopper_core::job::UNREADABLE_HEADERS)
                    .map(String::as_str),
                stored
            );
        }
    }

    match &valid {
        Ok(()) => {
            // What validation promises the brokers.
            assert!((1..=hopper_core::job::MAX_ATTEMPTS).contains(&job.max_attempts));
            assert!(
                job.headers
                    .keys()
                    .all(|k| !k.is_empty() && k.len() <= hopper_core::job::MAX_HEADER_NAME)
            );
            // Run times for a clock a broker may have: never a panic, never before now
            // for a delay, never past the documented bound.
            let now = input.now.rem_euclid(MAX_RUN_AT + 1);
            let at = job.run_at_millis(now);
            match job.run_at {
                RunAt::Now => assert_eq!(at, now),
                RunAt::After(_) => assert!(at >= now),
                RunAt::At(_) => assert!(at <= MAX_RUN_AT),
            }
            let (absolute, delay) = job.run_at_parts(None);
            assert!(delay >= 0 && delay as u128 <= MAX_DELAY.as_millis());
            assert!(absolute.is_none_or(|a| a <= MAX_RUN_AT));
            assert_eq!(job.run_at_parts(Some(now)), (Some(at), 0));
            memory_round_trip(&job);
        }
        Err(Error::Config(c)) => {
            // A refusal names a setting and shows a value; it must display.
            assert!(!c.setting.is_empty());
            let _ = valid.as_ref().unwrap_err().to_string();
        }
        Err(other) => panic!("validation failed with a non-config error: {other:?}"),
    }

    // A held job: decode its payload, and copy it (inline up to JobCopy::INLINE bytes).
    let held = Job {
        id: JobId(input.id),
        queue: job.queue.clone(),
        payload: job.payload.clone(),
        priority: job.priority,
        run_at: input.run_at,
        attempt: input.attempt,
        max_attempts: job.max_attempts,
        headers: job.headers.clone(),
        created_at: input.created_at,
        lease: LeaseId(input.lease),
    };
    let as_value = held.decode::<serde_json::Value>();
    assert_eq!(
        as_value.is_ok(),
        serde_json::from_slice::<serde_json::Value>(&held.payload).is_ok()
    );
    if let Err(e) = &as_value {
        assert!(matches!(e, Error::Decode { job, .. } if *job == held.id));
        let _ = e.to_string();
    }
    let _ = held.decode::<Email>().map_err(|e| e.to_string());
    let _ = held.decode::<BTreeMap<String, String>>();
    if input.json_payload.is_some() {
        let map: BTreeMap<String, String> = held.decode().expect("a JSON payload decodes");
        assert_eq!(Some(&map), input.json_payload.as_ref());
    }
    let _ = held.is_last_attempt();

    let copy = JobCopy::new(&held);
    assert_eq!(copy.payload(), &held.payload[..]);
    assert_eq!(
        (copy.id(), copy.lease(), copy.priority()),
        (held.id, held.lease, held.priority)
    );
    assert_eq!(copy.to_job(&held.queue), held);
    let other_queue = format!("{}.x", held.queue);
    let moved = copy.clone().into_job(&other_queue);
    assert_eq!(moved.queue, other_queue);
    assert_eq!(moved.payload, held.payload);
    assert_eq!(moved.headers, held.headers);
    assert_eq!(copy.into_job(&held.queue), held);
});

/// Enqueues a valid job on the in-process broker and fetches it: what comes back is what
/// went in. Only jobs due now are fetched (a delayed one is not due yet). The broker does
/// no I/O, so its futures finish on their first poll.
fn memory_round_trip(job: &NewJob) {
    let broker = MemoryBroker::new();
    let Some(ids) = broker.enqueue(vec![job.clone()]).now_or_never() else {
        return;
    };
    let ids = ids.expect("the in-process broker accepts a job that validates");
    assert_eq!(ids.len(), 1);
    let due = match job.run_at {
        RunAt::Now => true,
        RunAt::After(d) => d.is_zero(),
        RunAt::At(_) => false,
    };
    if !due {
        return;
    }
    let request = FetchRequest::one(job.queue.clone(), 10, Duration::from_secs(30));
    let Some(fetched) = broker.fetch(request).now_or_never() else {
        return;
    };
    let fetched = fetched.expect("fetch from the in-process broker");
    assert_eq!(fetched.jobs.len(), 1, "{job:?}");
    let got = &fetched.jobs[0];
    assert_eq!(got.id, ids[0]);
    assert_eq!(got.queue, job.queue);
    assert_eq!(got.payload, job.payload);
    assert_eq!(got.priority, job.priority);
    assert_eq!(got.max_attempts, job.max_attempts);
    assert_eq!(got.headers, job.headers);
    assert_eq!(got.attempt, 1);
    assert_eq!(got.lease, fetched.lease);
}
