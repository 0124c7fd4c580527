//! `jobcast bench deadlines` end to end: Teylo et al.'s maps of the Google
//! 2011 window's bags of tasks, drawn from jobcast's estimates and run
//! against the truth, with one spot VM hibernating (§IV-A) and with spot
//! VMs hibernating through SkyPilot's measured outages (§IV-B).

use jobcast_tests::{jobcast, jobcast_ok, shared_data};
use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn teylo_strategies_on_google_bags_with_measured_outages() {
    let trace = shared_data("google-clusterdata-2011-2");
    let availability = shared_data("spot-traces/skypilot/availability");
    let plots = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "deadlines",
        "--json",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "google2011",
        "--availability",
        availability.to_str().unwrap(),
        "--availability-runs",
        "3",
    ];
    let out = jobcast_ok(&args);
    // The trade-off drawn: both lines, every quantile labelled.
    let mut drawn = args.to_vec();
    drawn.extend(["--plots", plots.path().to_str().unwrap()]);
    assert_eq!(jobcast_ok(&drawn), out);
    let svg = std::fs::read_to_string(plots.path().join("deadline_tradeoff.svg")).unwrap();
    for label in [
        "p50",
        "p90",
        "p99",
        "true",
        "one hibernation",
        "measured outages",
        "dispatched",
        "elastic",
    ] {
        assert!(svg.contains(label), "{label} not drawn");
    }
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let bags = v["bags"].as_array().unwrap();
    assert!(bags.len() >= 5, "{} bags", bags.len());
    for b in bags {
        assert!(f(b, "tasks") >= 20.0, "{b}");
        // The shortest valid deadline on hour steps, and the maps hold
        // spot VMs.
        assert_eq!(f(b, "deadline_h").fract(), 0.0, "{b}");
        assert!(f(b, "deadline_h") >= 1.0, "{b}");
        assert!(f(b, "spot_vms") >= 1.0, "{b}");
        // Planned at the highest quantile up to p90 whose maps are valid,
        // else the median.
        let at = b["planned_quantile"].as_str().unwrap();
        assert!(["p50", "p90"].contains(&at), "{b}");
        assert!(b["planned_valid"] == true || at == "p50", "{b}");
    }
    let s = &v["strategies"];
    let names: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "immediate_migration",
            "no_hibernation",
            "on_demand",
            "proposal",
            "proposal_migration",
            "proposal_true_runtimes"
        ]
    );
    let n = bags.len() as f64;
    for (name, x) in s.as_object().unwrap() {
        assert_eq!(f(x, "runs"), n, "{name}");
        assert!(
            f(x, "cost_usd") > 0.0 && f(x, "makespan_s") > 0.0,
            "{name}: {x}"
        );
    }
    assert_eq!(f(&s["no_hibernation"], "hibernations"), 0.0);
    assert_eq!(f(&s["on_demand"], "hibernations"), 0.0);
    // One VM per bag hibernates: a 1,000-h hibernation migrates wherever
    // Immediate Migration does (the VM had work left).
    let migrations = f(&s["immediate_migration"], "migrations");
    assert!(migrations > 0.0);
    assert_eq!(f(&s["proposal_migration"], "migrations"), migrations);
    // On the true runtimes the paper's guarantee holds: a hibernation is
    // waited out or migrated in time.
    assert_eq!(f(&s["proposal_true_runtimes"], "deadline_misses"), 0.0);
    // Migration costs the backups on top; spot is cheaper than on demand;
    // waiting out a 3-h hibernation costs less than migrating at once.
    let cost = |name: &str| f(&s[name], "cost_usd");
    assert!(cost("proposal_migration") > cost("no_hibernation"));
    assert!(cost("on_demand") > cost("no_hibernation"));
    assert!(cost("immediate_migration") >= cost("proposal"));
    let rel = &v["relative"];
    let pct = (cost("proposal_migration") / cost("no_hibernation") - 1.0) * 100.0;
    assert!((f(rel, "proposal_migration_cost_over_no_hibernation") - pct).abs() < 1e-6);

    // Misses against cost across the quantiles, then every task at the
    // true mean, then the true runtimes.
    let t = v["tradeoff"].as_array().unwrap();
    let levels: Vec<&str> = t.iter().map(|x| x["quantile"].as_str().unwrap()).collect();
    assert_eq!(levels, ["p50", "p90", "p95", "p99", "true_mean", "true"]);
    assert_eq!(t[5]["proposal"], s["proposal_true_runtimes"]);
    assert_eq!(f(&t[5], "cost_vs_true_pct"), 0.0);
    // Carried out by dispatch, the true mean's maps pack as the truth
    // unfolds: cheaper than in their own order, and in time.
    assert!(
        f(&t[4]["dispatched"], "cost_usd") < f(&t[4]["proposal"], "cost_usd"),
        "{}",
        t[4]
    );
    assert_eq!(f(&t[4]["dispatched"], "deadline_misses"), 0.0, "{}", t[4]);
    assert_eq!(f(&t[4]["proposal"], "runs"), n);
    // Elastic from a pilot fleet at p90, through the same hibernation:
    // in time, and cheaper than both the map's own order and dispatch on
    // the p90 maps; it bought and drained VMs on the way.
    let e = &t[1]["elastic"];
    assert_eq!(f(e, "runs"), n);
    assert_eq!(f(e, "deadline_misses"), 0.0, "{}", t[1]);
    assert!(
        f(e, "cost_usd") < f(&t[1]["dispatched"], "cost_usd"),
        "{}",
        t[1]
    );
    assert!(
        f(e, "cost_usd") < f(&t[1]["proposal"], "cost_usd"),
        "{}",
        t[1]
    );
    assert!(f(e, "vms_added") > 0.0 && f(e, "vms_drained") > 0.0, "{e}");
    assert!(f(e, "hibernations") > 0.0, "{e}");
    assert_eq!(
        t[1]["proposal"], s["proposal"],
        "p90 is the default quantile"
    );
    // Planning higher never misses more.
    let misses = |i: usize| f(&t[i]["proposal"], "deadline_misses");
    assert!(misses(3) <= misses(0), "{t:?}");

    // §IV-B: every bag run three times in measured markets.
    let a = &v["availability"];
    for name in ["proposal", "immediate_migration", "on_demand"] {
        assert_eq!(f(&a[name], "runs"), 3.0 * n, "{name}");
    }
    assert!(f(&a["proposal"], "hibernations") > 0.0, "{a}");
    assert_eq!(f(&a["on_demand"], "hibernations"), 0.0);
    assert!(f(&a["immediate_migration"], "migrations") >= f(&a["proposal"], "migrations"));
    assert!(t[5]["availability"].is_object());
    // Through the measured outages the elastic fleet misses fewer
    // deadlines than the proposal, which waits for VMs that stay out.
    assert_eq!(f(&a["elastic"], "runs"), 3.0 * n);
    assert!(
        f(&a["elastic"], "deadline_misses") < f(&a["proposal"], "deadline_misses"),
        "{a}"
    );
    assert!(t[1]["elastic_availability"].is_object());

    // The same flags give the same report.
    assert_eq!(jobcast_ok(&args), out);

    // Priced by AWS's measured spot prices of one zone instead of Table
    // VI's: the types the history has are named, and the spot maps cost
    // what those prices say (on-demand prices stay).
    let prices = shared_data("spot-traces/aws-spot-price-history/2022-05.tsv.zst");
    let mut priced = args.to_vec();
    priced.extend([
        "--spot-prices",
        prices.to_str().unwrap(),
        "--spot-zone",
        "use1-az2",
    ]);
    let p: Value = serde_json::from_str(&jobcast_ok(&priced)).unwrap();
    let types: Vec<&str> = p["spot_prices"]["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        types.contains(&"c4.2xlarge") && !types.contains(&"c4.large"),
        "{types:?}"
    );
    assert!(
        f(&p["spot_prices"], "start_us") >= 1.654e15,
        "{}",
        p["spot_prices"]
    );
    let cost = |v: &Value, s: &str| f(&v["strategies"][s], "cost_usd");
    assert_ne!(cost(&p, "proposal"), cost(&v, "proposal"));
    assert_eq!(cost(&p, "on_demand"), cost(&v, "on_demand"));
    priced.pop();
    priced.push("use1-az99");
    let out = jobcast(&priced);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no `Linux/UNIX` spot price in zone `use1-az99`"),
        "{stderr}"
    );
}

/// A bad flag is refused by name and value before any trace is read; a
/// missing trace is named.
#[test]
fn bench_deadlines_refuses_bad_flags_by_name() {
    let cases = [
        ("--time-scale", "0", "--time-scale 0: must be positive"),
        (
            "--memory-gb-per-unit",
            "0",
            "--memory-gb-per-unit 0: must be positive",
        ),
        ("--time-limit", "1.5", "--time-limit 1.5: must be in (0, 1]"),
        (
            "--deadline-slack",
            "NaN",
            "--deadline-slack NaN: must be a share",
        ),
        (
            "--hibernate-for",
            "0",
            "--hibernate-for 0: must be positive",
        ),
        (
            "--elastic-start",
            "0",
            "--elastic-start 0: must be positive",
        ),
        (
            "--quantile",
            "p80",
            "`p80`: expected one of p50, p90, p95, p99",
        ),
        ("--seed", "1", "none.jsonl"),
    ];
    for (flag, value, expected) in cases {
        let out = jobcast(&[
            "bench",
            "deadlines",
            "--trace",
            "none.jsonl",
            "--format",
            "jsonl",
            flag,
            value,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value} was taken");
        assert!(stderr.contains(expected), "{flag} {value}: {stderr}");
    }
}
