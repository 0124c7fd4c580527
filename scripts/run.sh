#!/usr/bin/env bash
# jobcast's main job on the embedded default: no broker or database to
# install. Until the streaming service lands this converts the bundled
# Google 2011 excerpt to Parquet and answers questions over it with SQL.
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
