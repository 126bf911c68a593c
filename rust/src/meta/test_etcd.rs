//! A real etcd for tests: a child process on free loopback ports with a data directory of its
//! own, killed when dropped. Needs the `etcd` binary (Debian's etcd-server; tests/run.sh
//! installs it).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(super) struct TestEtcd {
    pub endpoint: String,
    peer: String,
    dir: tempfile::TempDir,
    child: Child,
}

/// A loopback port nothing listens on (right now).
pub(super) fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().unwrap().port()
}

impl TestEtcd {
    pub(super) async fn start() -> TestEtcd {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("http://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let child = spawn(dir.path(), &endpoint, &peer);
        let etcd = TestEtcd {
            endpoint,
            peer,
            dir,
            child,
        };
        etcd.wait_ready().await;
        etcd
    }

    pub(super) fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint.clone()]
    }

    /// A plain client, to act behind the store's back.
    pub(super) async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([&self.endpoint], None)
            .await
            .unwrap()
    }

    /// Freezes the process (SIGSTOP): connections stay open but nothing answers. Returns once
    /// every thread has stopped: kill(2) returns before they all have, and a request arriving
    /// in between could still be answered.
    pub(super) fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.stopped() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether /proc shows every thread of the process stopped.
    fn stopped(&self) -> bool {
        let Ok(threads) = std::fs::read_dir(format!("/proc/{}/task", self.child.id())) else {
            return false;
        };
        threads.flatten().all(|thread| {
            let stat = std::fs::read_to_string(thread.path().join("stat")).unwrap_or_default();
            // The state follows the command name, which is in parentheses and may hold spaces.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    }

    pub(super) fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Kills etcd (connections close at once).
    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a killed etcd again on the same data directory and ports.
    pub(super) async fn start_again(&mut self) {
        self.child = spawn(self.dir.path(), &self.endpoint, &self.peer);
        self.wait_ready().await;
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        let done = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(done, 0, "signal {signal} to etcd");
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let probe = async {
                let mut client = etcd_client::Client::connect([&self.endpoint], None).await?;
                client.get("probe", None).await
            };
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), probe).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not start; see {}",
                self.dir.path().join("etcd.log").display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(dir: &std::path::Path, endpoint: &str, peer: &str) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("etcd.log"))
        .unwrap();
    Command::new("etcd")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--listen-client-urls", endpoint])
        .args(["--advertise-client-urls", endpoint])
        .args(["--listen-peer-urls", peer])
        .args(["--initial-advertise-peer-urls", peer])
        .args(["--initial-cluster", &format!("default={peer}")])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("cannot run etcd: install etcd-server (tests/run.sh does)")
}
