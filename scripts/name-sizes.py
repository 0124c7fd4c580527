#!/usr/bin/env python3
"""How well can a Google 2011 job's size be told at submission from what
its trace records then? (docs/reproduction.md, "When will my job finish?")

Each job whose every task ran once and finished is sized (its mean task
runtime) from the jobs that finished before it was submitted, grouped by a
key (the logical name, with the width, the user or the CPU request) and
summarised by a statistic (the median of all, of the last few, the last,
the mean). Printed: the P50 error of each over the second half of the
jobs, by submission, and how many have a peer. Given the JSON of
`jobcast simulate --json`, it also sets the policy's own estimate beside
the name's median on the one-task jobs both size.

    python3 scripts/name-sizes.py ../shared/data/google-clusterdata-2011-2 [simulate.json]

Standard library only; seconds on the shared window.
"""
import csv
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST = 0, 1, 2, 3, 4, 5, 6


def rows(directory):
    for part in sorted(Path(directory).glob("*.csv.gz")):
        with gzip.open(part, "rt") as f:
            yield from csv.reader(f)


def load(trace):
    jobs = {}  # job id -> (submit time, user, logical name)
    for r in rows(Path(trace, "job_events")):
        job = int(r[2])
        if int(r[3]) == SUBMIT and job not in jobs:
            jobs[job] = (int(r[0]), r[4], r[7])
    started, runtimes, tasks, cpu, spoilt = {}, defaultdict(list), defaultdict(set), {}, set()
    for r in rows(Path(trace, "task_events")):
        time, job, task, kind = int(r[0]), int(r[2]), int(r[3]), int(r[5])
        tasks[job].add(task)
        cpu.setdefault(job, r[9])
        if kind == SCHEDULE:
            started[(job, task)] = time
        elif kind == FINISH and (job, task) in started:
            runtimes[job].append(time - started.pop((job, task)))
        elif kind in (EVICT, FAIL, KILL, LOST):
            spoilt.add(job)
    finished = {}
    for job, runs in runtimes.items():
        if job in jobs and job not in spoilt and len(runs) == len(tasks[job]):
            submit, user, name = jobs[job]
            finished[job] = {
                "submit": submit,
                "end": submit + max(runs),
                "size": statistics.mean(runs),
                "name": name,
                "user": user,
                "width": len(runs),
                "cpu": cpu.get(job),
            }
    return finished


KEYS = {
    "name": lambda j: j["name"],
    "name + width": lambda j: (j["name"], j["width"]),
    "user + name": lambda j: (j["user"], j["name"]),
    "name + CPU request": lambda j: (j["name"], j["cpu"]),
}
STATISTICS = {
    "median of all": statistics.median,
    "mean of all": statistics.mean,
    "median of the last 5": lambda h: statistics.median(h[-5:]),
    "median of the last 3": lambda h: statistics.median(h[-3:]),
    "the last": lambda h: h[-1],
}


def peers_before(finished, at_times, key):
    """For each time in `at_times` (ascending), the sizes by `key` of the
    jobs ended by then, in the order they ended (a generator of one dict
    that grows)."""
    ended = sorted(finished.values(), key=lambda j: j["end"])
    seen, k = defaultdict(list), 0
    for t in at_times:
        while k < len(ended) and ended[k]["end"] <= t:
            seen[key(ended[k])].append(ended[k]["size"])
            k += 1
        yield seen


def error(predicted, truth):
    return abs(predicted - truth) / truth * 100


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: name-sizes.py GOOGLE2011_TRACE_DIR [SIMULATE_JSON]")
    trace = sys.argv[1]
    for table in ("job_events", "task_events"):
        if not any(Path(trace, table).glob("*.csv.gz")):
            sys.exit(f"name-sizes.py: {Path(trace, table)}: no *.csv.gz parts (a Google 2011 trace directory?)")
    finished = load(trace)
    if len(finished) < 2:
        sys.exit(f"name-sizes.py: {trace}: no job whose every task finished")
    order = sorted(finished, key=lambda j: finished[j]["submit"])
    second = order[len(order) // 2 :]
    times = [finished[j]["submit"] for j in second]
    print(f"{len(finished)} jobs finished whole; sized: the {len(second)} of the second half")
    print(f"{'key':20s} {'statistic':22s} {'with peers':>10s} {'P50 error %':>11s}")
    for key_name, key in KEYS.items():
        errors = {s: [] for s in STATISTICS}
        covered = 0
        for job, seen in zip(second, peers_before(finished, times, key)):
            history = seen.get(key(finished[job]))
            if not history:
                continue
            covered += 1
            for s, f in STATISTICS.items():
                errors[s].append(error(f(history), finished[job]["size"]))
        for s, e in errors.items():
            print(f"{key_name:20s} {s:22s} {covered:10d} {statistics.median(e):11.2f}")

    if len(sys.argv) > 2:
        simulated = json.load(open(sys.argv[2]))
        one_task = sorted(
            (j for j in simulated["jobs"] if j["width"] == 1 and j.get("error_pct") is not None),
            key=lambda j: j["arrival_us"],
        )
        by_name, policy = [], []
        seen_at = peers_before(finished, [j["arrival_us"] for j in one_task], KEYS["name"])
        for job, seen in zip(one_task, seen_at):
            own = finished.get(job["job_id"])
            history = own and seen.get(own["name"])
            if history:
                by_name.append(error(statistics.median(history), job["true_mean_task_runtime_us"]))
                policy.append(job["error_pct"])
        print(
            f"{simulated['policy']}: {len(one_task)} one-task jobs, {len(by_name)} with a named peer: "
            f"P50 error {statistics.median(policy):.2f} % (the policy) against "
            f"{statistics.median(by_name):.2f} % (the name's median)"
        )


if __name__ == "__main__":
    main()
