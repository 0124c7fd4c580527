//! A throwaway single-node Slurm cluster for a test (`scripts/slurm.sh`):
//! started in its own directory, stopped (only the processes it started)
//! when dropped. A test's clusters (one, or a federation of two on other
//! ports) hold an exclusive lock on one file, so one test's run at a time,
//! whether the tests share a process (`cargo test`) or not (`cargo
//! nextest`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::repo;

pub struct Slurm {
    dir: tempfile::TempDir,
    /// The cluster's name, ports and job IDs (`scripts/slurm.sh`'s
    /// variables), for every call of the script.
    env: Vec<(&'static str, String)>,
    /// Locked while the test's clusters run; unlocked when the last closes.
    _one: Arc<std::fs::File>,
}

/// The lock every Slurm test holds while its clusters run.
fn lock() -> Arc<std::fs::File> {
    let one = std::fs::File::create(std::env::temp_dir().join("jobcast-slurm-tests.lock"))
        .expect("the Slurm tests' lock file");
    one.lock().expect("the Slurm tests' lock");
    Arc::new(one)
}

impl Slurm {
    /// Start a cluster (`scripts/slurm.sh up`), named `jobcast`, failing
    /// the test with the script's output if it cannot: `scripts/test.sh`
    /// installs Slurm.
    pub fn up() -> Slurm {
        Slurm::start(lock(), Vec::new())
    }

    /// [`Slurm::up`] keeping accounting (slurmdbd over a MariaDB of its
    /// own, `JOBCAST_SLURM_ACCOUNTING=1`), for `sacct`, its finished jobs
    /// listed for `min_job_age` seconds (Slurm lets them go at its next
    /// purge, up to a minute later).
    pub fn with_accounting(min_job_age: u32) -> Slurm {
        Slurm::start(
            lock(),
            vec![
                ("JOBCAST_SLURM_ACCOUNTING", "1".into()),
                ("JOBCAST_SLURM_MIN_JOB_AGE", min_job_age.to_string()),
            ],
        )
    }

    /// Two clusters side by side: `east` (ports 6817–6818, job IDs from 1)
    /// and `west` (ports 6827–6828, job IDs from 1,000,000, so that the
    /// two never name one job alike), both keeping their accounting in
    /// east's slurmdbd (port 6819), as `sbatch -M` needs. Dropped in
    /// reverse, west first: east's slurmdbd outlives it.
    pub fn federation() -> (Slurm, Slurm) {
        Slurm::pair(true)
    }

    /// [`Slurm::federation`]'s two clusters without accounting: each
    /// alone, which `sbatch -M` cannot span.
    pub fn federation_apart() -> (Slurm, Slurm) {
        Slurm::pair(false)
    }

    fn pair(shared: bool) -> (Slurm, Slurm) {
        let one = lock();
        let mut east = vec![("JOBCAST_SLURM_CLUSTER", "east".into())];
        let mut west = vec![
            ("JOBCAST_SLURM_CLUSTER", "west".into()),
            ("JOBCAST_SLURM_PORT", "6827".into()),
            ("JOBCAST_SLURM_FIRST_JOB_ID", "1000000".into()),
        ];
        if shared {
            east.push(("JOBCAST_SLURM_ACCOUNTING", "1".into()));
            west.push(("JOBCAST_SLURM_DBD_PORT", "6819".into()));
        }
        let east = Slurm::start(one.clone(), east);
        let west = Slurm::start(one, west);
        (east, west)
    }

    fn start(one: Arc<std::fs::File>, env: Vec<(&'static str, String)>) -> Slurm {
        let dir = tempfile::tempdir().expect("temporary directory");
        let slurm = Slurm {
            dir,
            env,
            _one: one,
        };
        let out = slurm.script("up");
        assert!(
            out.status.success(),
            "scripts/slurm.sh up failed (Slurm is installed by scripts/slurm.sh install, which scripts/test.sh runs):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        slurm
    }

    /// Stop the controller (SIGTERM: it saves its state and exits) and
    /// wait until it has gone; slurmd and the jobs it runs go on.
    pub fn stop_controller(&self) {
        let pid_file = self.dir.path().join("slurmctld.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
        let proc = PathBuf::from(format!("/proc/{}", pid.trim()));
        let stopped = Command::new("kill").arg(pid.trim()).status().unwrap();
        assert!(stopped.success(), "kill {pid}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while proc.exists() {
            assert!(Instant::now() < deadline, "slurmctld {pid} ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Start the controller again from its saved state (`scripts/slurm.sh
    /// up` starts only the daemons that are not running), once the node
    /// answers.
    pub fn start_controller(&self) {
        let out = self.script("up");
        assert!(
            out.status.success(),
            "scripts/slurm.sh up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn script(&self, command: &str) -> Output {
        Command::new("bash")
            .arg(repo().join("scripts/slurm.sh"))
            .arg(command)
            .arg(self.dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("bash runs")
    }

    /// The configuration every Slurm command needs (`SLURM_CONF`).
    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// A Slurm client command (`sbatch`, `squeue`, ...) with `args`, which
    /// must succeed; its stdout.
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        let out = Command::new(program)
            .args(args)
            .env("SLURM_CONF", self.conf())
            .output()
            .unwrap_or_else(|e| panic!("{program} runs: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `sbatch --parsable ARGS`: the job's id (an array's). Jobs run in the
    /// cluster's directory, so their `slurm-*.out` files go with it.
    pub fn sbatch(&self, args: &[&str]) -> u64 {
        let dir = self.dir.path().to_str().expect("a UTF-8 temporary path");
        let mut all = vec!["--parsable", "--chdir", dir];
        all.extend(args);
        let out = self.run("sbatch", &all);
        out.trim()
            .split(';')
            .next()
            .unwrap_or_default()
            .parse()
            .expect("a job id")
    }
}

/// One task as `squeue --json` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmTask {
    pub state: String,
    pub priority: u64,
    /// Epoch seconds: its (last) submission, which a requeue moves to the
    /// requeue's time.
    pub submit: u64,
    /// Epoch seconds (a pending task's are forecasts).
    pub start: u64,
    pub end: u64,
}

impl Slurm {
    /// Every task Slurm lists: (job, array index; 0 for a plain job) → how
    /// it stands. A job is keyed by its array's id; a pending array's
    /// remaining tasks each get its record.
    pub fn tasks(&self) -> BTreeMap<(u64, u32), SlurmTask> {
        let squeue: serde_json::Value =
            serde_json::from_str(&self.run("squeue", &["--json"])).expect("squeue --json");
        let mut tasks = BTreeMap::new();
        for record in squeue["jobs"].as_array().expect("jobs") {
            let number = |key: &str| record[key].as_u64().unwrap_or_default();
            let array_id = number("array_job_id");
            let job = if array_id != 0 {
                array_id
            } else {
                number("job_id")
            };
            let indices: Vec<u32> = match record["array_task_id"].as_u64() {
                Some(index) => vec![index as u32],
                None if array_id == 0 => vec![0],
                None => jobcast_connectors::slurm::array_indices(
                    record["array_task_string"].as_str().unwrap_or_default(),
                )
                .expect("an index list")
                .into_iter()
                .collect(),
            };
            let task = SlurmTask {
                state: record["job_state"].as_str().unwrap_or_default().to_owned(),
                priority: number("priority"),
                submit: number("submit_time"),
                start: number("start_time"),
                end: number("end_time"),
            };
            for index in indices {
                tasks.insert((job, index), task.clone());
            }
        }
        tasks
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let out = self.script("down");
        if !out.status.success() {
            eprintln!(
                "scripts/slurm.sh down: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
