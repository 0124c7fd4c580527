//! `jobcast slurm submit`: sbatch to the cluster that jobcast expects to
//! finish the job first.
//!
//! jobcast estimates jobs it has seen, so the job is first submitted held
//! to the first `--cluster` (where it waits without running), and its
//! `jobcast slurm watch` publishes it. jobcast's decision for it names its
//! completion on every cluster it knows and the earliest
//! (`recommended_cluster`). If that is the first cluster the job is
//! released there; if it is another, the held job is cancelled and the same
//! sbatch arguments submitted there. With no decision in `--timeout-secs`
//! (a service that is down, a cluster it does not watch), the job is
//! released where it waits: jobcast never keeps a job from running.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::output::{print_json, print_out};

#[derive(clap::Args)]
pub struct SubmitArgs {
    /// The jobcast service that watches every cluster (its HTTP address).
    #[arg(long, env = "JOBCAST_URL", default_value = "http://127.0.0.1:8080")]
    jobcast: String,
    /// A cluster as NAME=SLURM_CONF (the configuration its commands use),
    /// NAME being Slurm's ClusterName; once per cluster. The job waits on
    /// the first while jobcast is asked.
    #[arg(long = "cluster", value_parser = parse_cluster, required = true)]
    clusters: Vec<(String, PathBuf)>,
    /// How long to wait for jobcast's decision.
    #[arg(long, default_value_t = 30.0, value_parser = crate::simulate::parse_secs)]
    timeout_secs: f64,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    /// sbatch's arguments (after `--`).
    #[arg(last = true, required = true)]
    sbatch: Vec<String>,
}

fn parse_cluster(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, conf)) if !name.is_empty() && !conf.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(conf)))
        }
        _ => Err(format!("`{s}`: expected NAME=SLURM_CONF")),
    }
}

/// A Slurm command run with cluster `conf`'s configuration; its stdout.
fn slurm(conf: &PathBuf, program: &str, args: &[String]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .env("SLURM_CONF", conf)
        .output()
        .with_context(|| format!("running {program}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {} (SLURM_CONF={}): {}",
        args.join(" "),
        conf.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `sbatch --parsable` with `extra` first: the job ID.
fn sbatch(conf: &PathBuf, extra: &[&str], args: &[String]) -> anyhow::Result<u64> {
    let mut all: Vec<String> = ["--parsable"]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect();
    all.extend(args.iter().cloned());
    let out = slurm(conf, "sbatch", &all)?;
    let id = out.trim().split(';').next().unwrap_or_default();
    id.parse()
        .with_context(|| format!("sbatch printed `{}`, not a job ID", out.trim()))
}

/// jobcast's latest decision for `job` that compares clusters, once it
/// has one; `None` while the job is unknown or undecided.
fn decision(agent: &ureq::Agent, url: &str, job: u64) -> anyhow::Result<Option<Value>> {
    let endpoint = format!("{}/jobs/{job}", url.trim_end_matches('/'));
    let mut response = match agent.get(&endpoint).call() {
        Ok(r) => r,
        // The service may be starting, or away: asked again until the
        // timeout.
        Err(_) => return Ok(None),
    };
    if response.status() != 200 {
        return Ok(None);
    }
    let body: Value = response
        .body_mut()
        .read_json()
        .with_context(|| format!("the answer of {endpoint}"))?;
    Ok(body["decisions"]
        .as_array()
        .and_then(|d| {
            d.iter()
                .rev()
                .find(|d| d["recommended_cluster"].is_string())
        })
        .cloned())
}

pub fn run(args: SubmitArgs) -> anyhow::Result<()> {
    let (home, home_conf) = &args.clusters[0];
    let held = sbatch(home_conf, &["--hold"], &args.sbatch)?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout_secs);
    let found = loop {
        if let Some(d) = decision(&agent, &args.jobcast, held)? {
            break Some(d);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let completions: Vec<(String, u64)> = found
        .as_ref()
        .and_then(|d| d["clusters"].as_array())
        .map(|all| {
            all.iter()
                .filter_map(|c| {
                    Some((
                        c["cluster"].as_str()?.to_owned(),
                        c["eta"]["p50_us"].as_u64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let recommended = found
        .as_ref()
        .and_then(|d| d["recommended_cluster"].as_str())
        .map(str::to_owned);
    let target = recommended
        .as_ref()
        .and_then(|r| args.clusters.iter().find(|(name, _)| name == r));
    let (cluster, job, why) = match (target, &recommended) {
        (Some((name, conf)), _) if name != home => {
            slurm(home_conf, "scancel", &[held.to_string()])?;
            let job = sbatch(conf, &[], &args.sbatch)?;
            (
                name.clone(),
                job,
                format!("jobcast expects it to finish first on {name}"),
            )
        }
        (Some(_), _) => {
            slurm(home_conf, "scontrol", &["release".into(), held.to_string()])?;
            (
                home.clone(),
                held,
                format!("jobcast expects it to finish first on {home}"),
            )
        }
        (None, Some(r)) => {
            slurm(home_conf, "scontrol", &["release".into(), held.to_string()])?;
            (
                home.clone(),
                held,
                format!("jobcast recommends {r}, which is not a --cluster"),
            )
        }
        (None, None) => {
            slurm(home_conf, "scontrol", &["release".into(), held.to_string()])?;
            (
                home.clone(),
                held,
                format!(
                    "no decision comparing clusters from {} in {} s",
                    args.jobcast, args.timeout_secs
                ),
            )
        }
    };
    let at = |us: u64| {
        chrono::DateTime::from_timestamp_micros(us as i64)
            .map_or_else(|| us.to_string(), |t| t.format("%H:%M:%S").to_string())
    };
    if args.json {
        return print_json(&json!({
            "cluster": cluster,
            "job_id": job,
            "held_job_id": held,
            "why": why,
            "completions": completions
                .iter()
                .map(|(c, us)| json!({"cluster": c, "p50_us": us}))
                .collect::<Vec<_>>(),
        }));
    }
    let mut out = format!("submitted job {job} to {cluster}: {why}\n");
    for (c, us) in &completions {
        out.push_str(&format!("  {c}: median completion {}\n", at(*us)));
    }
    print_out(&out)
}
