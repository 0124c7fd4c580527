#!/usr/bin/env bash
# jobcast's offline tools on the bundled Google 2011 excerpt: conversion to
# Parquet, SQL over it, and every prediction policy through the trace-driven
# scheduler simulator, on the excerpt and on a synthetic workload.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

# The same build as scripts/test.sh, so the two share every artifact.
cargo build --release --locked --workspace --all-targets
jobcast="$CARGO_TARGET_DIR/release/jobcast"
out="${JOBCAST_DEMO_DIR:-$CARGO_TARGET_DIR/demo}"

"$jobcast" convert --format google2011 --input tests/data/google2011-excerpt --output "$out/google2011"
echo
echo "== job runtime percentiles by scheduling class (finished jobs, seconds)"
"$jobcast" sql --data "$out/google2011" "
  SELECT scheduling_class, count(*) AS jobs,
         round(approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY runtime_us) / 1e6, 1) AS p50_s,
         round(approx_percentile_cont(0.9) WITHIN GROUP (ORDER BY runtime_us) / 1e6, 1) AS p90_s
  FROM jobs WHERE finished AND runtime_us IS NOT NULL
  GROUP BY scheduling_class ORDER BY scheduling_class"
echo
echo "== tasks per job"
"$jobcast" sql --data "$out/google2011" "
  SELECT CASE WHEN width = 1 THEN '1' WHEN width <= 10 THEN '2-10'
              WHEN width <= 100 THEN '11-100' ELSE '>100' END AS tasks,
         count(*) AS jobs
  FROM jobs GROUP BY 1 ORDER BY min(width)"
echo
echo "== runtime predictions on the excerpt (every policy, simulated GS scheduler)"
"$jobcast" evaluate --trace tests/data/google2011-excerpt --format google2011
echo
echo "== runtime predictions on a synthetic workload (recurring jobs, large job-wise variance)"
"$jobcast" generate --seed 1 --jobs 3000 --thin-fraction 0.3 --dag-fraction 0.1 --min-width 10 \
    --max-width 150 --job-cv 1.0 --task-cv 0.1 --output "$out/synthetic.jsonl"
"$jobcast" evaluate --trace "$out/synthetic.jsonl" --format jsonl --plots "$out/plots"
echo "plots: $out/plots"
