//! A private PostgreSQL cluster on a port of its own, for tests that crash the server. The
//! shared server on 5432 is never touched. Built with the server's own `initdb` and
//! `pg_ctl` (found through `pg_config --bindir`); as root, they run as the `postgres` user.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hopper_testkit::unique_name;

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
        let as_postgres =
            String::from_utf8_lossy(&run(Command::new("id").arg("-u")).stdout).trim() == "0";
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
        cluster.pg(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        cluster.up();
        cluster
    }

    /// The URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server the way a power cut would (`-m immediate`: no checkpoint, commits
    /// made with `synchronous_commit = off` and not yet flushed are lost), then starts it.
    pub fn crash_and_restart(&self) {
        self.pg(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
        self.up();
    }

    fn up(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log");
        self.pg(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log.display().to_string(),
                "-w",
                "start",
            ],
        );
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
