#!/usr/bin/env bash
# Times every query of docs/queries.sql in `jobcast sql` (DataFusion) and in
# DuckDB over the same Parquet tables, and prints each query's median time in
# both and the ratio. jobcast is timed two ways: warm, in one process running
# the query repeatedly (`jobcast sql --timing`), as DuckDB is timed in one
# open connection; and as a whole `jobcast sql` process per run, start-up
# included, which is what a user running one query waits for. A benchmark,
# not a test: it is not part of scripts/test.sh, and its figures belong in
# docs/performance.md.
#
# Usage: scripts/bench-sql.sh [RUNS]        (RUNS per query, default 5)
# Environment:
#   JOBCAST      the jobcast binary (default: $CARGO_TARGET_DIR/release/jobcast,
#                else /root/.cache/jobcast/target/release/jobcast)
#   BENCH_DIR    where the converted tables go (default ~/.cache/jobcast/bench/g11);
#                conversion is skipped when the directory already holds them
#   TRACE        the Google 2011 trace (default ../shared/data/google-clusterdata-2011-2)
#   QUERIES      the SQL file (default docs/queries.sql)
#
# DuckDB is installed from PyPI at a pinned version into a venv under
# ~/.cache/jobcast/ (once; later runs reuse it).
set -euo pipefail

cd "$(dirname "$0")/.."
RUNS="${1:-5}"
DUCKDB_VERSION=1.5.6
VENV="$HOME/.cache/jobcast/duckdb-$DUCKDB_VERSION-venv"
JOBCAST="${JOBCAST:-${CARGO_TARGET_DIR:-/root/.cache/jobcast/target}/release/jobcast}"
BENCH_DIR="${BENCH_DIR:-$HOME/.cache/jobcast/bench/g11}"
TRACE="${TRACE:-../shared/data/google-clusterdata-2011-2}"
QUERIES="${QUERIES:-docs/queries.sql}"

[[ -x "$JOBCAST" ]] || { echo "bench-sql: no jobcast binary at $JOBCAST (build it, or set JOBCAST)" >&2; exit 1; }

if ! "$VENV/bin/python" -c "import duckdb, sys; sys.exit(duckdb.__version__ != '$DUCKDB_VERSION')" 2>/dev/null; then
  echo "bench-sql: installing duckdb==$DUCKDB_VERSION into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "duckdb==$DUCKDB_VERSION"
fi

if [[ -f "$BENCH_DIR/jobs.parquet" && -f "$BENCH_DIR/tasks.parquet" && -f "$BENCH_DIR/events.parquet" && -f "$BENCH_DIR/machines.parquet" ]]; then
  echo "bench-sql: reusing the tables in $BENCH_DIR" >&2
else
  echo "bench-sql: converting $TRACE into $BENCH_DIR" >&2
  "$JOBCAST" convert --format google2011 --input "$TRACE" --output "$BENCH_DIR" >&2
fi

echo "bench-sql: $(uptime)" >&2
exec "$VENV/bin/python" - "$JOBCAST" "$BENCH_DIR" "$QUERIES" "$RUNS" <<'PY'
"""Splits the query file, then times each statement in both engines."""
import re
import statistics
import subprocess
import sys
import tempfile
import time

import duckdb

jobcast, data, queries_path, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
TABLES = ("events", "jobs", "tasks", "machines")


def split_statements(text):
    """Returns (label, statement) pairs: statements end at a `;` outside quotes and
    comments; the label is the last `-- Qn` comment before a statement."""
    label, current, i, n = None, [], 0, len(text)
    statements = []
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            m = re.match(r"--\s*(Q\d+)\b", text[i:end])
            if m and not "".join(current).strip():
                label = m.group(1)
            i = end
        elif c in "'\"":
            end = text.find(c, i + 1)
            while end >= 0 and text.startswith(c * 2, end):
                end = text.find(c, end + 2)
            if end < 0:
                sys.exit(f"bench-sql: {queries_path}: unterminated {c} string")
            current.append(text[i : end + 1])
            i = end + 1
        elif c == ";":
            stmt = "".join(current).strip()
            if stmt:
                statements.append((label or f"#{len(statements) + 1}", stmt))
            label, current = None, []
            i += 1
        else:
            current.append(c)
            i += 1
    if "".join(current).strip():
        sys.exit(f"bench-sql: {queries_path}: the last statement has no `;`")
    return statements


# DuckDB has no approx_percentile_cont; its approximate (t-digest) quantile
# is approx_quantile(x, p). This is the one dialect rewrite, and the report
# marks every query it touched.
APPROX = re.compile(
    r"approx_percentile_cont\(\s*([^)]*?)\s*\)\s*WITHIN\s+GROUP\s*\(\s*ORDER\s+BY\s+([^)]*?)\s*\)",
    re.IGNORECASE,
)


def duckdb_dialect(sql):
    return APPROX.subn(lambda m: f"approx_quantile({m.group(2)}, {m.group(1)})", sql)


def run_jobcast(sql):
    """Wall time of one `jobcast sql` process, and its output rows (or the
    error)."""
    start = time.perf_counter()
    out = subprocess.run(
        [jobcast, "sql", "--data", data, "--format", "csv", sql],
        capture_output=True, text=True,
    )
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        return None, f"jobcast failed: {' '.join(out.stderr.split())[:300]}"
    return elapsed, max(len(out.stdout.splitlines()) - 1, 0)


def jobcast_in_process(sql):
    """The query run `runs` + 1 times in one `jobcast sql --timing` process,
    as DuckDB runs it in one connection: the times `--timing` reports for
    all but the first run (which, like DuckDB's first, warms up)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(f"{sql};\n" * (runs + 1))
        script.flush()
        out = subprocess.run(
            [jobcast, "sql", "--data", data, "--format", "csv", "--timing", "--file", script.name],
            capture_output=True, text=True,
        )
    if out.returncode != 0:
        return None
    times = [float(m) / 1000 for m in re.findall(r"^Time: ([0-9.]+) ms$", out.stderr, re.M)]
    return statistics.median(times[1:]) if len(times) == runs + 1 else None


def run_duckdb(con, sql):
    """Wall time of executing and fetching in the open connection, and the
    rows (or the error)."""
    start = time.perf_counter()
    try:
        rows = len(con.execute(sql).fetchall())
    except duckdb.Error as e:
        return None, f"DuckDB rejects it: {' '.join(str(e).split())[:300]}"
    return time.perf_counter() - start, rows


def bench(con, sql, duck_sql):
    """Medians of start-up, the jobcast process, DuckDB, and jobcast in one
    process, for one query. Each run times the first three back to back, so
    a load spike from the (shared) machine hits all of them; the first run
    is untimed: it warms the page cache, and DuckDB's Parquet metadata
    cache, as a `jobcast sql` process reads the metadata in its start-up."""
    startups, times = [], {"jobcast": [], "duckdb": []}
    results = {"jobcast": None, "duckdb": None}  # rows, or the error
    engines = {"jobcast": lambda: run_jobcast(sql), "duckdb": lambda: run_duckdb(con, duck_sql)}
    for run in range(runs + 1):
        up, _ = run_jobcast("SELECT 1")
        if run > 0:
            startups.append(up)
        for name, engine in engines.items():
            if isinstance(results[name], str):
                continue  # failed once: the error is the result
            elapsed, results[name] = engine()
            if elapsed is not None and run > 0:
                times[name].append(elapsed)
    median = lambda name: statistics.median(times[name]) if isinstance(results[name], int) else None
    in_process = jobcast_in_process(sql) if isinstance(results["jobcast"], int) else None
    return (
        statistics.median(startups),
        (median("jobcast"), results["jobcast"]),
        (median("duckdb"), results["duckdb"]),
        in_process,
    )


with open(queries_path, encoding="utf-8") as f:
    statements = split_statements(f.read())

con = duckdb.connect()
for table in TABLES:
    con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{data}/{table}.parquet')")

print(f"duckdb {duckdb.__version__}, {runs} runs per query, medians; data {data}")
print("in process: `jobcast sql --timing` over the query repeated in one process, first run not counted (as DuckDB's)")
print("start-up: a `jobcast sql ... 'SELECT 1'` process, timed in the same runs as the query process")
print()
print("| query | jobcast ms (in process) | DuckDB ms | ratio (in process) | jobcast ms (process) | start-up ms | ratio (process) | rows jobcast/DuckDB | note |")
print("|---|---:|---:|---:|---:|---:|---:|---|---|")
fmt = lambda s: "-" if s is None else f"{s * 1000:.1f}"
ratio = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}"
for label, sql in statements:
    duck_sql, rewrites = duckdb_dialect(sql)
    startup, (jc, jc_rows), (dk, dk_rows), warm = bench(con, sql, duck_sql)
    notes = []
    if rewrites:
        notes.append(f"DuckDB ran it with approx_quantile in place of approx_percentile_cont ({rewrites}x)")
    if jc is None:
        notes.append(jc_rows)
    if dk is None:
        notes.append(dk_rows)
    rows = f"{jc_rows if jc is not None else '-'}/{dk_rows if dk is not None else '-'}"
    print(f"| {label} | {fmt(warm)} | {fmt(dk)} | {ratio(warm, dk)} | {fmt(jc)} | {fmt(startup)} | {ratio(jc, dk)} | {rows} | {'; '.join(notes)} |")
PY
