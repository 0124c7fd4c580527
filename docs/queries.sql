-- Questions over the Google 2011 trace, answered with `jobcast sql`.
-- Convert the shared data first:
--   jobcast convert --format google2011 --input ../shared/data/google-clusterdata-2011-2 --output data/g11
-- then run one query at a time, e.g.
--   jobcast sql --data data/g11 "$(sed -n '/^-- Q1/,/;$/p' docs/queries.sql)"
-- The answers on the shared data are recorded in docs/queries.md.

-- Q1: job runtime percentiles (seconds) by scheduling class, finished jobs
-- scheduled inside the window.
SELECT scheduling_class,
       count(*) AS jobs,
       round(approx_percentile_cont(0.1) WITHIN GROUP (ORDER BY runtime_us) / 1e6, 1) AS p10_s,
       round(approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY runtime_us) / 1e6, 1) AS p50_s,
       round(approx_percentile_cont(0.9) WITHIN GROUP (ORDER BY runtime_us) / 1e6, 1) AS p90_s
FROM jobs
WHERE finished AND runtime_us IS NOT NULL
GROUP BY scheduling_class
ORDER BY scheduling_class;

-- Q2: tasks-per-job distribution (all jobs, by width).
SELECT CASE WHEN width <= 1 THEN '1'
            WHEN width <= 2 THEN '2'
            WHEN width <= 10 THEN '3-10'
            WHEN width <= 100 THEN '11-100'
            WHEN width <= 1000 THEN '101-1000'
            ELSE '>1000' END AS tasks_per_job,
       count(*) AS jobs,
       round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS pct
FROM jobs
GROUP BY 1
ORDER BY min(width);

-- Q3: variation "across space" (SLearn §3, Table 4): per job with at least
-- 2 finished tasks, the CoV of its task runtimes, and the CoV of a
-- prediction from sampling 3% of its tasks, sigma / (sqrt(0.03 n) mu) as
-- the paper plots it.
WITH per_job AS (
  SELECT t.job_id,
         stddev_pop(t.runtime_us) / avg(t.runtime_us) AS cov,
         stddev_pop(t.runtime_us) / (sqrt(0.03 * max(j.width)) * avg(t.runtime_us)) AS cov_3pct
  FROM tasks t JOIN jobs j ON t.job_id = j.job_id
  WHERE t.runtime_us > 0
  GROUP BY t.job_id
  HAVING count(*) >= 2
)
SELECT count(*) AS jobs,
       round(approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY cov), 2) AS p50_cov,
       round(approx_percentile_cont(0.9) WITHIN GROUP (ORDER BY cov), 2) AS p90_cov,
       round(approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY cov_3pct), 2) AS p50_cov_3pct,
       round(approx_percentile_cont(0.9) WITHIN GROUP (ORDER BY cov_3pct), 2) AS p90_cov_3pct
FROM per_job;

-- Q4: variation "across time" (SLearn §3, Table 4): for each finished job,
-- the jobs that share its user, job name or logical name and finished in
-- the 3 days before it was submitted are its history; per feature, the CoV
-- of those jobs' mean task runtimes (at least 2 of them); the job's CoV is
-- that of its best (lowest-CoV) feature, as 3Sigma would pick.
WITH job_means AS (
  SELECT j.job_id, j.submit_time_us, j.end_time_us, j.user, j.job_name, j.logical_name,
         avg(t.runtime_us) AS mean_rt
  FROM jobs j JOIN tasks t ON t.job_id = j.job_id
  WHERE j.finished AND t.runtime_us > 0
  GROUP BY j.job_id, j.submit_time_us, j.end_time_us, j.user, j.job_name, j.logical_name
),
history AS (
  SELECT a.job_id, 'user' AS feature, b.mean_rt
  FROM job_means a JOIN job_means b ON a.user = b.user
  WHERE b.end_time_us < a.submit_time_us AND b.end_time_us >= a.submit_time_us - 259200000000
  UNION ALL
  SELECT a.job_id, 'job_name', b.mean_rt
  FROM job_means a JOIN job_means b ON a.job_name = b.job_name
  WHERE a.job_name <> '' AND b.end_time_us < a.submit_time_us AND b.end_time_us >= a.submit_time_us - 259200000000
  UNION ALL
  SELECT a.job_id, 'logical_name', b.mean_rt
  FROM job_means a JOIN job_means b ON a.logical_name = b.logical_name
  WHERE a.logical_name <> '' AND b.end_time_us < a.submit_time_us AND b.end_time_us >= a.submit_time_us - 259200000000
),
per_feature AS (
  SELECT job_id, feature, stddev_pop(mean_rt) / avg(mean_rt) AS cov
  FROM history GROUP BY job_id, feature HAVING count(*) >= 2
),
best AS (SELECT job_id, min(cov) AS cov FROM per_feature GROUP BY job_id)
SELECT count(*) AS jobs,
       round(approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY cov), 2) AS p50_cov,
       round(approx_percentile_cont(0.9) WITHIN GROUP (ORDER BY cov), 2) AS p90_cov
FROM best;

-- Q5: why tasks end: terminal events by kind, and how often tasks are
-- evicted and rescheduled.
SELECT coalesce(last_end, 'running (censored)') AS last_end,
       count(*) AS tasks,
       sum(evictions) AS evictions,
       round(avg(attempts), 2) AS mean_attempts
FROM tasks
GROUP BY 1
ORDER BY tasks DESC;
