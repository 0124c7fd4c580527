//! `jobcast slurm submit`: sbatch to the cluster that jobcast expects to
//! finish the job first.
//!
//! jobcast estimates jobs it has seen, so the job is first submitted held
//! to the first `--cluster` (where it waits without running), and its
//! `jobcast slurm watch` publishes it. jobcast's decision for it names its
//! completion on every cluster it knows and the earliest
//! (`recommended_cluster`). If that is the first cluster the job is
//! released there; if it is another, the same sbatch arguments are
//! submitted there and then the held job cancelled (if the other cluster
//! refuses it, it is released where it waits). With no decision in `--timeout-secs`
//! (a service that is down, a cluster it does not watch), the job is
//! released where it waits: jobcast never keeps a job from running.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jobcast_connectors::slurm::{check_cluster_files, parse_cluster};
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

/// Where a job held on the first of `clusters` goes.
#[derive(Debug, PartialEq)]
enum Choice {
    /// Released where it waits; why (`None`: no decision came).
    Stay { why: Option<String> },
    /// Moved to `clusters[to]`.
    Move { to: usize, why: Option<String> },
}

/// The choice `decision` (jobcast's, if one came) makes.
fn choose(clusters: &[(String, PathBuf)], decision: Option<&Value>) -> Choice {
    let Some(recommended) = decision.and_then(|d| d["recommended_cluster"].as_str()) else {
        return Choice::Stay { why: None };
    };
    let why = Some(format!(
        "jobcast expects it to finish first on {recommended}"
    ));
    match clusters.iter().position(|(name, _)| name == recommended) {
        Some(0) => Choice::Stay { why },
        Some(to) => Choice::Move { to, why },
        None => Choice::Stay {
            why: Some(format!(
                "jobcast recommends {recommended}, which is not a --cluster"
            )),
        },
    }
}

pub fn run(args: SubmitArgs) -> anyhow::Result<()> {
    check_cluster_files(&args.clusters).map_err(anyhow::Error::msg)?;
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
    let (cluster, job, why) = match choose(&args.clusters, found.as_ref()) {
        Choice::Move { to, why } => {
            // Submitted there before it is cancelled here: a refusal
            // there leaves it where it waits, never nowhere.
            let (name, conf) = &args.clusters[to];
            match sbatch(conf, &[], &args.sbatch) {
                Ok(job) => {
                    slurm(home_conf, "scancel", &[held.to_string()])?;
                    (name.clone(), job, why)
                }
                Err(e) => {
                    slurm(home_conf, "scontrol", &["release".into(), held.to_string()])?;
                    let why = why.unwrap_or_default();
                    (
                        home.clone(),
                        held,
                        Some(format!(
                            "{why}, but sbatch there failed ({e:#}): left on {home}"
                        )),
                    )
                }
            }
        }
        Choice::Stay { why } => {
            slurm(home_conf, "scontrol", &["release".into(), held.to_string()])?;
            (home.clone(), held, why)
        }
    };
    let why = why.unwrap_or_else(|| {
        format!(
            "no decision comparing clusters from {} in {} s",
            args.jobcast, args.timeout_secs
        )
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_moves_only_to_another_cluster_it_was_given() {
        let clusters: Vec<(String, PathBuf)> = ["east", "west"]
            .iter()
            .map(|n| ((*n).to_owned(), PathBuf::from(format!("/{n}.conf"))))
            .collect();
        let to = |c: &str| json!({"recommended_cluster": c, "clusters": []});
        assert_eq!(
            choose(&clusters, Some(&to("west"))),
            Choice::Move {
                to: 1,
                why: Some("jobcast expects it to finish first on west".into())
            }
        );
        assert_eq!(
            choose(&clusters, Some(&to("east"))),
            Choice::Stay {
                why: Some("jobcast expects it to finish first on east".into())
            }
        );
        assert_eq!(
            choose(&clusters, Some(&to("north"))),
            Choice::Stay {
                why: Some("jobcast recommends north, which is not a --cluster".into())
            }
        );
        assert_eq!(choose(&clusters, None), Choice::Stay { why: None });
        assert!(parse_cluster("east").is_err());
        assert_eq!(
            parse_cluster("east=/e.conf").unwrap(),
            ("east".to_owned(), PathBuf::from("/e.conf"))
        );
    }
}
