//! A real broker for end-to-end tests: tansu, a Kafka-compatible broker,
//! started by the test itself on a free loopback port with in-memory
//! storage, and killed when dropped. `scripts/test.sh` builds tansu and
//! names its binary in `JOBCAST_TEST_TANSU`; without it the tests that need
//! a real broker fail, saying so.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{excerpt_events, jobcast_ok, repo};

pub struct Tansu {
    child: Child,
    binary: PathBuf,
    pub brokers: String,
}

impl Tansu {
    /// Start a broker from the binary `JOBCAST_TEST_TANSU` names. Without
    /// one the test fails: it never passes without its broker.
    pub fn start() -> Tansu {
        Tansu::start_with(&[])
    }

    /// [`Tansu::start`] with more `tansu broker` flags (`--authentication`:
    /// clients must authenticate with SASL SCRAM).
    pub fn start_with(flags: &[&str]) -> Tansu {
        let binary = std::env::var_os("JOBCAST_TEST_TANSU")
            .map(PathBuf::from)
            .expect(
                "JOBCAST_TEST_TANSU names no tansu binary: run scripts/test.sh, \
                 or source scripts/tansu.sh first",
            );
        let port = crate::serve::free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(&binary)
            .args(["broker", "--storage-engine", "memory://tansu/"])
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let brokers = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&brokers).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu is not listening on {brokers}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Tansu {
            child,
            binary,
            brokers,
        }
    }

    /// Replay the bundled Google 2011 excerpt into `topic` with `jobcast
    /// replay`, one record per batch: tansu 0.6.0 answers a fetch that
    /// starts inside a record batch with the *next* batch, so a consumer
    /// resuming mid-batch (after a restart, or a paused partition) would
    /// silently skip records (docs/kafka.md). Returns the messages written.
    pub fn replay_excerpt(&self, topic: &str) -> u64 {
        let excerpt = repo().join("tests/data/google2011-excerpt");
        let summary = jobcast_ok(&[
            "replay",
            "--trace",
            excerpt.to_str().unwrap(),
            "--format",
            "google2011",
            "--topic",
            topic,
            "--brokers",
            &self.brokers,
            "-X",
            "batch.num.messages=1",
            "--json",
        ]);
        let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
        let delivered = summary["delivered"].as_u64().unwrap();
        assert_eq!(delivered, excerpt_events().len() as u64);
        delivered
    }

    /// `tansu topic create NAME --partitions N`.
    pub fn create_topic(&self, name: &str, partitions: i32) {
        let out = Command::new(&self.binary)
            .args([
                "topic",
                "create",
                name,
                "--partitions",
                &partitions.to_string(),
            ])
            .args(["--broker", &format!("tcp://{}", self.brokers)])
            .output()
            .expect("tansu topic create runs");
        assert!(
            out.status.success(),
            "tansu topic create {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
