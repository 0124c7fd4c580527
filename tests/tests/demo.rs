//! `jobcast demo`, the README's run command: the service on the embedded
//! Kafka with the bundled excerpt replayed into it, start to summary.

use jobcast_tests::{excerpt_events, jobcast_ok};

fn figure(summary: &str, label: &str) -> u64 {
    summary
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` in the summary:\n{summary}"))
}

#[test]
fn the_demo_replays_the_bundled_excerpt_through_the_service() {
    let summary = jobcast_ok(&["demo", "--http", "127.0.0.1:0"]);
    let events = excerpt_events().len() as u64;
    assert_eq!(figure(&summary, "events replayed"), events);
    let applied = figure(&summary, "events applied");
    let dead = figure(&summary, "dead-lettered");
    assert_eq!(applied + dead, events, "{summary}");
    assert!(applied > events / 2, "{summary}");
    assert!(figure(&summary, "decisions") > 0);
    // Every shadow policy has been scored on finished jobs.
    for policy in ["slearn", "3sigma", "bayes"] {
        let row = summary
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{policy} ")))
            .unwrap_or_else(|| panic!("no {policy} row:\n{summary}"));
        let jobs: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(jobs > 0, "{row}");
        // Its quantiles' coverage: four shares that rise with the level.
        let shares: Vec<f64> = row
            .split_whitespace()
            .filter_map(|w| w.strip_suffix('%'))
            .skip(2)
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(shares.len(), 4, "{row}");
        assert!(shares.windows(2).all(|w| w[0] <= w[1]), "{row}");
    }
    // The ETAs' errors and interval, over finished jobs.
    let eta = summary
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("ETA at a job's first decision, over ")
        })
        .unwrap_or_else(|| panic!("no ETA line:\n{summary}"));
    let words: Vec<&str> = eta.split_whitespace().collect();
    let jobs: f64 = words[words.iter().position(|&w| w == "over").unwrap() + 1]
        .parse()
        .unwrap();
    let shares: Vec<f64> = words
        .iter()
        .filter_map(|w| w.trim_end_matches(',').strip_suffix('%'))
        .map(|v| v.parse().unwrap())
        .collect();
    // P50 and P90 errors, the share within, the interval's 80.
    let [p50, p90, within, eighty] = shares[..] else {
        panic!("{eta}");
    };
    assert!(
        jobs > 0.0 && p50 <= p90 && (0.0..=100.0).contains(&within),
        "{eta}"
    );
    assert_eq!(eighty, 80.0, "{eta}");
}
