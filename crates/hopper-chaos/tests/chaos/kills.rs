//! Worker processes SIGKILLed at random moments while they drain a backlog, with one and
//! with three workers on each broker. Each killed worker is restarted; at the end the
//! backlog must drain with no job lost, and jobs run twice only within what the killed
//! workers held (measured at each kill: see `hopper_chaos::checker`).

use std::time::{Duration, Instant};

use hopper_chaos::checker::check;
use hopper_chaos::fleet::Fleet;

use super::support::{Kind, Target, distinct, fault_points, pick, wait_runs};

const CONCURRENCY: usize = 8;

async fn kill_mid_drain(kind: Kind, workers: usize) {
    let jobs: u64 = pick(3_000, 5_000);
    // Full form: 20 kills for each worker count, 40 per broker.
    let kills: u32 = pick(if workers == 1 { 2 } else { 3 }, 20);
    let target = Target::new(kind).await;
    target.enqueue(&target.connect().await, 0..jobs).await;
    let mut fleet = Fleet::start(target.spec(CONCURRENCY, 4), workers, &target.dir);
    let deadline = Instant::now() + Duration::from_secs(pick(120, 600));
    let mut recovery: Option<Duration> = None;
    let mut bound = 0;
    for point in fault_points(jobs, kills, 70) {
        wait_runs(&mut fleet, point, deadline, "the next kill point").await;
        // A random moment: not always right on a log line.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..30))).await;
        let victim = fastrand::usize(..workers);
        fleet.kill(victim);
        let killed = Instant::now();
        // Read after the kill: the dead worker settles nothing more.
        bound += target.held(1, 0, CONCURRENCY).await;
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..200))).await;
        fleet.restart(victim);
        // Recovery: until the restarted process runs a job (it may find none left when
        // the others drained the backlog first).
        if first_run_of(&mut fleet, victim, jobs as usize).await {
            recovery = recovery.max(Some(killed.elapsed()));
        }
    }
    target
        .wait_drained(&mut fleet, jobs, Duration::from_secs(pick(120, 600)))
        .await;
    fleet.stop(Duration::from_secs(5));
    let mut report = check(
        format!("SIGKILL, {workers} worker(s)"),
        kind.name(),
        jobs,
        &fleet.runs(),
        &target.end().await,
        kills,
        bound,
    );
    report.recovery = recovery;
    report.print();
    report.assert_sound();
}

/// Waits until slot `i`'s current process has run a job: `true`; `false` when every job
/// ran before it did.
async fn first_run_of(fleet: &mut Fleet, i: usize, jobs: usize) -> bool {
    let limit = Duration::from_secs(30);
    loop {
        if !fleet.runs_of(i).is_empty() {
            return true;
        }
        if distinct(&fleet.runs()) >= jobs {
            return false;
        }
        let since = fleet.started(i).elapsed();
        assert!(
            since < limit,
            "worker {i} ran nothing in the {limit:?} after its restart"
        );
        fleet.assert_alive();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_one_worker_killed() {
    kill_mid_drain(Kind::Sqlite, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_three_workers_killed() {
    kill_mid_drain(Kind::Sqlite, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_worker_killed() {
    kill_mid_drain(Kind::Postgres, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_three_workers_killed() {
    kill_mid_drain(Kind::Postgres, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_one_worker_killed() {
    kill_mid_drain(Kind::Mysql, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_three_workers_killed() {
    kill_mid_drain(Kind::Mysql, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_one_worker_killed() {
    kill_mid_drain(Kind::Amqp, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_three_workers_killed() {
    kill_mid_drain(Kind::Amqp, 3).await;
}
