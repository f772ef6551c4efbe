//! A network partition: the worker runs in a network namespace of the test's own, joined
//! to the host by a veth pair, and reaches the shared PostgreSQL server (which listens on
//! 127.0.0.1 only) through a forwarder on the host's end of the pair. Setting that end down
//! cuts the worker off for a few seconds without closing anything; once it is up again the
//! worker must carry on by itself, with no job lost. Without the rights to make a
//! namespace (not root, no `ip`), the test says so and skips.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use hopper_chaos::checker::{check, overlaps};
use hopper_chaos::fleet::Fleet;
use hopper_chaos::forward::Forwarder;

use super::support::{Kind, Target, authority, distinct, next_run, pick, wait_runs};

const CONCURRENCY: usize = 8;

/// Runs `ip` with `args`; the error names the command and what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A namespace and the veth pair into it; deleting the namespace deletes the pair.
struct Netns {
    name: String,
    host_if: String,
    host: Ipv4Addr,
}

impl Netns {
    /// A namespace `hc<random>` with the pair's inner end at `10.a.b.2/30`, the host's at
    /// `.1`; the subnet is random so that concurrent runs do not collide.
    fn create() -> Result<Netns, String> {
        let id = format!("{:06x}", fastrand::u32(..0xff_ffff));
        let name = format!("hc{id}");
        ip(&["netns", "add", &name])?;
        let ns = Netns {
            name: name.clone(),
            host_if: format!("hc{id}h"),
            host: Ipv4Addr::new(10, fastrand::u8(64..250), fastrand::u8(..), 1),
        };
        let inner_if = format!("hc{id}n");
        let o = ns.host.octets();
        let inner = format!("{}.{}.{}.2/30", o[0], o[1], o[2]);
        let host = format!("{}/30", ns.host);
        ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &inner_if,
        ])?;
        ip(&["link", "set", &inner_if, "netns", &name])?;
        ip(&["addr", "add", &host, "dev", &ns.host_if])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        ip(&["-n", &name, "addr", "add", &inner, "dev", &inner_if])?;
        ip(&["-n", &name, "link", "set", &inner_if, "up"])?;
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn set_link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        ip(&["link", "set", &self.host_if, state]).expect("setting the host's veth end");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A namespace, a PostgreSQL target, and a forwarder into it from the namespace; the URL a
/// worker inside uses. `None` (the test skips, saying why) without the rights to make one.
async fn cut_off(test: &str) -> Option<(Netns, Target, Forwarder, String)> {
    let ns = match Netns::create() {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("skipped: {test}: no namespace: {e}");
            return None;
        }
    };
    let target = Target::new(Kind::Postgres).await;
    let upstream: SocketAddr = authority(&target.base)
        .replace("localhost", "127.0.0.1")
        .parse()
        .expect("the PostgreSQL test server's address as ip:port");
    let forwarder = Forwarder::start(SocketAddr::from((ns.host, 0)), upstream)
        .expect("a forwarder on the host's veth end");
    let worker_url =
        target
            .worker_url
            .replacen(&authority(&target.base), &forwarder.addr().to_string(), 1);
    Some((ns, target, forwarder, worker_url))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_worker_partitioned_and_healed() {
    let Some((ns, target, forwarder, worker_url)) =
        cut_off("postgres_worker_partitioned_and_healed").await
    else {
        return;
    };

    let jobs: u64 = pick(3_000, 5_000);
    let partitions: u32 = pick(1, 3);
    let cut = Duration::from_secs(pick(6, 10));
    target.enqueue(&target.connect().await, 0..jobs).await;
    let mut spec = target.spec(CONCURRENCY, 10);
    spec.broker = worker_url;
    spec.netns = Some(ns.name.clone());
    let mut fleet = Fleet::start(spec, 1, &target.dir);
    let deadline = Instant::now() + Duration::from_secs(pick(120, 600));
    let mut bound = 0;
    let mut recovery: Option<Duration> = None;
    let mut points: Vec<usize> = (1..=partitions)
        .map(|k| (jobs as usize) * k as usize / (partitions as usize + 2))
        .collect();
    points.sort_unstable();
    for point in points {
        wait_runs(&mut fleet, point, deadline, "the partition point").await;
        let held = target.held(1, 1, CONCURRENCY).await;
        bound += held;
        ns.set_link(false);
        let at_cut = fleet.runs().len();
        assert!(
            distinct(&fleet.runs()) < jobs as usize,
            "the backlog was gone before the partition; give it more jobs"
        );
        tokio::time::sleep(cut).await;
        let during = fleet.runs().len() - at_cut;
        ns.set_link(true);
        let healed = Instant::now();
        // Cut off, the worker can only run what it held already.
        assert!(
            during as u64 <= held,
            "{during} jobs ran while partitioned; the worker held at most {held}"
        );
        let limit = Duration::from_secs(120);
        match next_run(&mut fleet, at_cut + during, jobs as usize, limit).await {
            Some(at) => recovery = recovery.max(Some(at - healed)),
            None => assert!(
                distinct(&fleet.runs()) >= jobs as usize,
                "the worker ran nothing in the {limit:?} after the partition healed"
            ),
        }
    }
    target
        .wait_drained(&mut fleet, jobs, Duration::from_secs(pick(180, 600)))
        .await;
    fleet.stop(Duration::from_secs(5));
    let mut report = check(
        format!("partition {} s (veth down)", cut.as_secs()),
        Kind::Postgres.name(),
        jobs,
        &fleet.runs(),
        &target.end().await,
        partitions,
        bound,
    );
    report.recovery = recovery;
    report.print();
    report.assert_sound();
    drop(fleet);
    drop(forwarder);
}

/// Jobs longer than the lease, one worker cut off and one idle: the cut-off worker cannot
/// renew, the broker's leases run out and the other worker takes the jobs. The cut-off
/// worker must have stopped them first (it gives a lease up at nine tenths of its time),
/// so no job runs in two live workers at once, and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_worker_stops_before_another_takes_its_jobs() {
    let Some((ns, target, forwarder, worker_url)) =
        cut_off("partitioned_worker_stops_before_another_takes_its_jobs").await
    else {
        return;
    };
    // As many jobs as the worker inside holds, so that the one outside is idle and takes
    // each the moment its lease runs out; 4 s jobs under 2 s leases (renewed every
    // 0.67 s while the network holds).
    let jobs = CONCURRENCY as u64;
    target.enqueue(&target.connect().await, 0..jobs).await;
    let mut inside = target.spec(CONCURRENCY, 4_000);
    inside.broker = worker_url;
    inside.netns = Some(ns.name.clone());
    let (inside_dir, outside_dir) = (target.dir.join("inside"), target.dir.join("outside"));
    std::fs::create_dir_all(&inside_dir).unwrap();
    std::fs::create_dir_all(&outside_dir).unwrap();
    let mut cut_off = Fleet::start(inside, 1, &inside_dir);
    let deadline = Instant::now() + Duration::from_secs(120);
    wait_runs(&mut cut_off, CONCURRENCY, deadline, "the first jobs inside").await;
    let held = target.held(1, 1, CONCURRENCY).await;
    ns.set_link(false);
    let mut other = Fleet::start(target.spec(CONCURRENCY, 4_000), 1, &outside_dir);
    tokio::time::sleep(Duration::from_secs(8)).await;
    ns.set_link(true);
    let both = |a: &Fleet, b: &Fleet| [a.runs(), b.runs()].concat();
    while distinct(&both(&cut_off, &other)) < jobs as usize {
        assert!(Instant::now() < deadline, "the jobs did not all run");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    target
        .wait_drained(&mut other, 0, Duration::from_secs(60))
        .await;
    cut_off.stop(Duration::from_secs(5));
    other.stop(Duration::from_secs(5));
    let per_process = [cut_off.ends_per_process(), other.ends_per_process()].concat();
    let at_once = overlaps(&per_process);
    let report = check(
        "partition 8 s, 4 s jobs, 2 workers",
        Kind::Postgres.name(),
        jobs,
        &both(&cut_off, &other),
        &target.end().await,
        1,
        held,
    );
    report.print();
    report.assert_sound();
    assert!(
        at_once.is_empty(),
        "jobs ran in two live workers at once (id, µs intervals): {at_once:?}"
    );
    drop(forwarder);
}
