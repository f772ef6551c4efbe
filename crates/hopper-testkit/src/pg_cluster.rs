//! A private PostgreSQL cluster on a port of its own, for tests that crash or restart the
//! server: the shared server on 5432 is never stopped. Built with the server's own
//! `initdb` and `pg_ctl` (found through `pg_config --bindir`); as root, they run as the
//! `postgres` user.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::unique_name;

#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl Cluster {
    /// Creates and starts a cluster in a fresh directory under the system's temp dir.
    pub fn start() -> Cluster {
        let bindir = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .expect("pg_config (PostgreSQL's server package) to find initdb and pg_ctl");
        let bin = PathBuf::from(String::from_utf8_lossy(&bindir.stdout).trim());
        let uid = run(Command::new("id").arg("-u"));
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        let dir = std::env::temp_dir().join(unique_name("hopper_pg_cluster"));
        std::fs::create_dir_all(&dir).expect("the cluster's directory");
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(&dir));
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let cluster = Cluster {
            bin,
            dir,
            port,
            as_postgres,
        };
        let data = cluster.data();
        let init = ["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"];
        cluster.pg("initdb", &init);
        cluster.pg_ctl("start");
        cluster
    }

    /// The URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl restart -m immediate`: the server stops as in a power cut (no checkpoint,
    /// every connection cut) and starts again, replaying its WAL.
    pub fn restart_immediate(&self) {
        self.pg_ctl("restart");
    }

    fn pg_ctl(&self, action: &str) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log").display().to_string();
        let data = self.data();
        let args = [
            "-D",
            &data,
            "-o",
            &options,
            "-l",
            &log,
            "-m",
            "immediate",
            "-w",
            action,
        ];
        self.pg("pg_ctl", &args);
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn pg(&self, program: &str, args: &[&str]) -> Output {
        run(&mut self.command(program, args))
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let path = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        cmd.args(args).current_dir(Path::new("/"));
        cmd
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stop = ["-D", &self.data(), "-m", "immediate", "stop"];
        let _ = self.command("pg_ctl", &stop).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
