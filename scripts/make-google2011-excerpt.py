#!/usr/bin/env python3
"""Cut the bundled Google 2011 excerpt (tests/data/google2011-excerpt) out of
the shared clusterdata-2011-2 files: every job submitted in the first 30
minutes of the trace plus 20 small jobs that began before it (time 0), all
of their job and task events from the shared parts, and the machine events
(up to the last task event) of the machines their tasks ran on. Rows are copied unchanged."""
import collections, glob, gzip, os, sys

src = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/google-clusterdata-2011-2"
dst = sys.argv[2] if len(sys.argv) > 2 else "tests/data/google2011-excerpt"
START, WINDOW = 600_000_000, 1_800_000_000

def rows(table):
    for path in sorted(glob.glob(f"{src}/{table}/part-*.csv.gz")):
        with gzip.open(path, "rt") as f:
            for line in f:
                yield path, line

task_rows = collections.Counter()
for _, line in rows("task_events"):
    task_rows[line.split(",", 3)[2]] += 1
early, before = set(), []
for _, line in rows("job_events"):
    t, _, job, kind = line.split(",", 4)[:4]
    if kind != "0" or job not in task_rows:
        continue
    if START <= int(t) < START + WINDOW:
        early.add(job)
    elif t == "0":
        before.append((task_rows[job], job))
jobs = early | {j for _, j in sorted(before)[:20]}

machines = set()
out = {}
last_task_time = 0
for table in ("job_events", "task_events"):
    for path, line in rows(table):
        f = line.split(",")
        if f[2] in jobs:
            out.setdefault(f"{table}/{os.path.basename(path)}", []).append(line)
            if table == "task_events":
                last_task_time = max(last_task_time, int(f[0]))
                if f[4]:
                    machines.add(f[4])
for path, line in rows("machine_events"):
    f = line.split(",")
    # Machine events after the task window would be dropped by the adapter.
    if f[1] in machines and int(f[0]) <= last_task_time:
        out.setdefault(f"machine_events/{os.path.basename(path)}", []).append(line)
for name, lines in out.items():
    os.makedirs(os.path.dirname(f"{dst}/{name}"), exist_ok=True)
    with gzip.open(f"{dst}/{name}", "wt") as f:
        f.writelines(lines)
print(f"{len(jobs)} jobs, {len(machines)} machines, "
      + ", ".join(f"{k}: {len(v)}" for k, v in sorted(out.items())))
