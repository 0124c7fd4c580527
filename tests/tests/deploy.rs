//! `deploy/`, checked without a container engine or a cluster: each file by
//! the validator of its kind (promtool, kubernetes-validate and the
//! Prometheus Operator's ServiceMonitor schema, docker-compose, systemd),
//! its cross-references by hand (selectors, ports, mounts, the jobcast
//! configuration it carries), and every metric name the dashboard and the
//! alert rules use against a real `/metrics` scrape of `jobcast demo`.
//! `scripts/setup.sh` installs every validator; a test that finds one
//! missing says so and skips.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use jobcast_scheduler_feed::config::{HttpToken, ServeConfig};
use jobcast_tests::{jobcast_bin, repo};
use serde_json::Value;

fn deploy(path: &str) -> PathBuf {
    repo().join("deploy").join(path)
}

/// `program` from PATH, if there.
fn find_tool(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// `program` from PATH; the test fails without it, naming what installs it.
fn tool(program: &str) -> PathBuf {
    find_tool(program)
        .unwrap_or_else(|| panic!("`{program}` not found (scripts/setup.sh installs it)"))
}

/// Where scripts/setup.sh installs the Kubernetes validators.
fn validators() -> PathBuf {
    std::env::var_os("JOBCAST_VALIDATORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/jobcast/validators")
        })
}

/// A file the validators' installation provides; the test fails without
/// it, naming what installs it.
fn validator(relative: &str) -> PathBuf {
    let path = validators().join(relative);
    assert!(
        path.exists(),
        "{} not found (JOBCAST_SETUP_TESTS=1 scripts/setup.sh installs it)",
        path.display()
    );
    path
}

/// Run `command`, insisting that it succeeds; its output.
fn run_ok(command: &mut Command) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every YAML document of `path` as JSON, parsed by PyYAML from the
/// validators' venv (kubernetes-validate depends on it).
fn yaml_documents(python: &Path, path: &Path) -> Vec<Value> {
    let out = run_ok(
        Command::new(python)
            .arg("-c")
            .arg(
                "import sys, json, yaml\n\
         print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))",
            )
            .arg(path),
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: not JSON from PyYAML: {e}", path.display()))
}

fn yaml_document(python: &Path, path: &Path) -> Value {
    let mut docs = yaml_documents(python, path);
    assert_eq!(docs.len(), 1, "{}: one document expected", path.display());
    docs.remove(0)
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {value}"))
}

/// A jobcast configuration file as `jobcast serve --config` reads it,
/// with the HTTP token its deployment gives by `JOBCAST_HTTP_TOKEN`, if
/// any, validated as `serve` validates it.
fn serve_config(toml: &str, token: Option<&str>) -> ServeConfig {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobcast.toml");
    std::fs::write(&path, toml).expect("writes");
    let mut config = ServeConfig::from_file(&path).expect("the configuration loads");
    config.http.token = token.map(HttpToken::new);
    config.validate().expect("the configuration is valid");
    config
}

#[test]
fn prometheus_config_and_rules_pass_promtool_and_their_unit_tests() {
    let promtool = tool("promtool");
    let config = run_ok(
        Command::new(&promtool)
            .args(["check", "config"])
            .arg(deploy("prometheus/prometheus.yml")),
    );
    // The config's rule_files glob finds the rules.
    assert!(
        String::from_utf8_lossy(&config.stdout).contains("SUCCESS: 1 rule files found"),
        "{}",
        String::from_utf8_lossy(&config.stdout)
    );
    run_ok(
        Command::new(&promtool)
            .args(["check", "rules"])
            .arg(deploy("prometheus/rules/jobcast.yml")),
    );
    run_ok(
        Command::new(&promtool)
            .args(["test", "rules"])
            .arg(deploy("prometheus/tests/jobcast.test.yml")),
    );
}

/// Each alert the operations guide promises has a rule and a unit test.
#[test]
fn every_alert_has_a_unit_test() {
    let rules = std::fs::read_to_string(deploy("prometheus/rules/jobcast.yml")).expect("reads");
    let tests =
        std::fs::read_to_string(deploy("prometheus/tests/jobcast.test.yml")).expect("reads");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    for expected in [
        "JobcastConsumerLagGrowing",
        "JobcastDeadLetterRate",
        "JobcastPredictionErrorDrift",
        "JobcastNoDecisionsPublished",
        "JobcastCommitsStalled",
        "JobcastRocksDBWriteStall",
    ] {
        assert!(alerts.contains(&expected), "no alert {expected}");
    }
    for alert in alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has no promtool unit test"
        );
    }
}

/// The dashboard's PromQL, with Grafana's variables given values.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(deploy("grafana/dashboards/jobcast.json")).expect("reads");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for target in targets {
            queries.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            queries.push(query.to_owned());
        }
    }
    queries
}

/// The PromQL expressions of the alert and recording rules, and the names
/// the recording rules define.
fn rule_queries(python: &Path) -> (Vec<String>, BTreeSet<String>) {
    let rules = yaml_document(python, &deploy("prometheus/rules/jobcast.yml"));
    let mut exprs = Vec::new();
    let mut recorded = BTreeSet::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            exprs.push(str_at(rule, "/expr").to_owned());
            if let Some(name) = rule["record"].as_str() {
                recorded.insert(name.to_owned());
            }
        }
    }
    (exprs, recorded)
}

/// Identifiers in a PromQL expression that name jobcast series
/// (`jobcast_…` exported, `jobcast:…` recorded). Quoted label values
/// are skipped.
fn jobcast_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut token = String::new();
    let mut quoted = false;
    for c in expr.chars().chain([' ']) {
        if c == '"' {
            quoted = !quoted;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            token.push(c);
            continue;
        }
        if token.starts_with("jobcast_") || token.starts_with("jobcast:") {
            names.insert(std::mem::take(&mut token));
        }
        token.clear();
    }
    names
}

#[test]
fn dashboard_queries_are_valid_promql() {
    let promtool = tool("promtool");
    // promtool parses PromQL in recording rules: one per dashboard query.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, query) in dashboard_queries().iter().enumerate() {
        let query = query
            .replace("$__rate_interval", "5m")
            .replace("$job", ".*")
            .replace("$instance", ".*");
        if query.starts_with("label_values(") {
            continue;
        }
        rules.push_str(&format!(
            "      - record: dashboard:query{i}\n        expr: '{}'\n",
            query.replace('\'', "''")
        ));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("dashboard.yml");
    std::fs::write(&path, rules).expect("writes");
    run_ok(Command::new(&promtool).args(["check", "rules"]).arg(&path));
}

/// Metric names in a Prometheus text exposition.
fn exposed_names(text: &str) -> impl Iterator<Item = String> + '_ {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(str::to_owned))
}

/// Run `jobcast demo ARGS`, scraping `/metrics` until every name in
/// `wanted` has been seen or the demo ends; the names seen.
fn demo_metric_names(args: &[&str], wanted: &BTreeSet<String>) -> BTreeSet<String> {
    let mut child = Command::new(jobcast_bin())
        .arg("demo")
        .args(args)
        .args(["--http", "127.0.0.1:0"])
        .env("JOBCAST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jobcast demo starts");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            // The demo's header: `  HTTP API     http://ADDRESS`.
            if let Some(addr) = line.trim().strip_prefix("HTTP API") {
                let _ = tx.send(addr.trim().to_owned());
            }
        }
    });
    let http = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("jobcast demo printed its HTTP address");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        // The server stops before the process exits: a refused scrape at
        // the end is expected.
        if let Ok(mut response) = agent.get(format!("{http}/metrics")).call() {
            let text = response.body_mut().read_to_string().expect("body");
            seen.extend(exposed_names(&text));
        }
        if wanted.is_subset(&seen) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait().expect("wait").is_none() {
        // SIGTERM: the demo stops cleanly and removes its temporary state.
        // It may have ended on its own meanwhile; its exit status is
        // checked below either way.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
    }
    let status = child.wait().expect("reaped");
    reader.join().expect("the log reader does not panic");
    assert!(
        status.success(),
        "jobcast demo {args:?} exited with {status}"
    );
    seen
}

#[test]
fn dashboard_and_alerts_use_only_metrics_jobcast_exports() {
    let python = validator("venv/bin/python");
    let (rule_exprs, recorded) = rule_queries(&python);
    let dashboard = dashboard_queries();
    let used: BTreeSet<String> = rule_exprs
        .iter()
        .chain(&dashboard)
        .flat_map(|e| jobcast_names(e))
        .collect();
    // Recorded series are defined by the rules themselves.
    for name in used.iter().filter(|n| n.contains(':')) {
        assert!(recorded.contains(name), "{name} is used but never recorded");
    }
    let (watcher, wanted): (BTreeSet<String>, BTreeSet<String>) = used
        .into_iter()
        .filter(|n| !n.contains(':'))
        .partition(|n| n.starts_with("jobcast_slurm_"));
    // `jobcast slurm watch` and `apply` export these, not the demo;
    // tests/tests/slurm.rs scrapes them from both on a real Slurm cluster.
    for name in &watcher {
        assert!(
            jobcast_connectors::slurm::metrics::WATCH_METRICS
                .iter()
                .chain(&jobcast_connectors::slurm::metrics::APPLY_METRICS)
                .any(|m| m == name),
            "{name} is used but not exported by jobcast slurm watch or apply"
        );
    }
    // The dashboard covers what the operations guide says it shows.
    let dashboard_names: BTreeSet<String> =
        dashboard.iter().flat_map(|e| jobcast_names(e)).collect();
    for name in [
        "jobcast_events_consumed_total",
        "jobcast_consumer_lag_events",
        "jobcast_event_to_decision_seconds_bucket",
        "jobcast_prediction_error_ratio_bucket",
        "jobcast_decisions_total",
        "jobcast_risk_preemption_probability_bucket",
        "jobcast_events_dead_lettered_total",
    ] {
        assert!(dashboard_names.contains(name), "the dashboard lacks {name}");
    }

    // The bundled excerpt exercises everything but risk scores (it has a
    // dead letter); the hand-made trace adds them.
    let mut seen = demo_metric_names(&[], &wanted);
    if !wanted.is_subset(&seen) {
        let dir = tempfile::tempdir().expect("temp dir");
        let trace = dir.path().join("risk.jsonl");
        jobcast_tests::risk_trace(&trace);
        let trace = trace.to_str().expect("UTF-8 path");
        let missing: BTreeSet<String> = wanted.difference(&seen).cloned().collect();
        // Up until every name is seen (then SIGTERM), not only until the
        // trace is done: so short a trace ends before a scrape sees it.
        seen.extend(demo_metric_names(
            &["--trace", trace, "--format", "jsonl", "--duration", "120"],
            &missing,
        ));
    }
    let missing: Vec<&String> = wanted.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "used by the dashboard or the alert rules but not exported by jobcast: {missing:?}\nexported: {seen:?}"
    );
}

#[test]
fn kubernetes_manifests_match_the_api_schemas() {
    let kubernetes_validate = validator("venv/bin/kubernetes-validate");
    let modules = validator("npm/node_modules");
    let node = tool("node");
    let manifests: Vec<PathBuf> = ["configmap", "statefulset", "service", "poddisruptionbudget"]
        .iter()
        .map(|name| deploy(&format!("k8s/{name}.yaml")))
        .collect();
    let out = run_ok(
        Command::new(&kubernetes_validate)
            .args(["--strict"])
            .args(&manifests),
    );
    let report =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // kubernetes-validate only warns about kinds it has no schema for.
    assert!(!report.contains("WARN"), "{report}");
    assert_eq!(
        report.matches(" passed for resource ").count(),
        5,
        "{report}"
    );

    // The ServiceMonitor against the Prometheus Operator's CRD schema.
    let python = validators().join("venv/bin/python");
    let monitors = yaml_documents(&python, &deploy("k8s/servicemonitor.yaml"));
    let mut child = Command::new(node)
        .arg(deploy("validate/servicemonitor.mjs"))
        .arg(&modules)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node starts");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(serde_json::to_string(&monitors).expect("JSON").as_bytes())
        .expect("writes");
    let out = child.wait_with_output().expect("node runs");
    assert!(
        out.status.success(),
        "ServiceMonitor schema: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kubernetes_manifests_fit_together() {
    let python = validator("venv/bin/python");
    let k8s = |name: &str| yaml_documents(&python, &deploy(&format!("k8s/{name}.yaml")));
    let set = k8s("statefulset").remove(0);
    let pod = &set["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(set["spec"]["selector"]["matchLabels"], *labels);
    assert_eq!(
        set["spec"]["replicas"], 2,
        "two instances in one group: one takes over when the other stops"
    );
    let container = &pod["spec"]["containers"][0];
    assert_eq!(str_at(container, "/readinessProbe/httpGet/path"), "/readyz");
    assert_eq!(str_at(container, "/livenessProbe/httpGet/path"), "/healthz");
    assert!(container["resources"]["requests"]["cpu"].is_string());
    assert!(container["resources"]["requests"]["memory"].is_string());
    assert!(
        pod["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("grace")
            >= 30
    );
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    let port = &container["ports"][0];
    assert_eq!(port["name"], "http");

    // The configuration the ConfigMap carries loads, listens on the
    // container port beyond loopback, and keeps its state on the pod's
    // own volume.
    let config_map = k8s("configmap").remove(0);
    // Beyond loopback, with a token: from a Secret the pod needs (it does
    // not start without), which the ServiceMonitor scrapes with.
    let env = container["env"].as_array().expect("env");
    let token = env
        .iter()
        .find(|v| v["name"] == "JOBCAST_HTTP_TOKEN")
        .expect("JOBCAST_HTTP_TOKEN is set");
    let secret = &token["valueFrom"]["secretKeyRef"];
    assert_ne!(secret["optional"], true, "the token's Secret is required");
    let config = serve_config(
        str_at(&config_map, "/data/jobcast.toml"),
        Some("from-the-secret"),
    );
    assert!(!config.http.address.ip().is_loopback());
    assert_eq!(
        u64::from(config.http.address.port()),
        port["containerPort"].as_u64().expect("port")
    );
    let claim = &set["spec"]["volumeClaimTemplates"][0];
    let mounts = container["volumeMounts"].as_array().expect("mounts");
    let mount_of = |volume: &str| {
        mounts
            .iter()
            .find(|m| m["name"] == volume)
            .map(|m| str_at(m, "/mountPath").to_owned())
            .unwrap_or_else(|| panic!("{volume} is not mounted"))
    };
    assert!(
        config
            .storage
            .path
            .starts_with(mount_of(str_at(claim, "/metadata/name"))),
        "storage.path {} is not on the persistent volume",
        config.storage.path.display()
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string"))
        .collect();
    let config_file = Path::new(
        args[args
            .iter()
            .position(|&a| a == "--config")
            .expect("--config")
            + 1],
    );
    assert_eq!(
        config_file.parent().expect("a directory").to_str(),
        Some(mount_of("config").as_str())
    );
    assert_eq!(
        config_file.file_name().and_then(|f| f.to_str()),
        Some("jobcast.toml")
    );

    // Services, the budget and the monitor select the pods; the monitor
    // scrapes a port the selected Service has.
    let selects = |selector: &Value, target: &Value| {
        selector
            .as_object()
            .expect("selector")
            .iter()
            .all(|(k, v)| target[k] == *v)
    };
    let services = k8s("service");
    for service in &services {
        assert!(selects(&service["spec"]["selector"], labels), "{service}");
        assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    }
    assert!(
        services
            .iter()
            .any(|s| s["metadata"]["name"] == set["spec"]["serviceName"]
                && s["spec"]["clusterIP"] == "None"),
        "the StatefulSet's headless Service is missing"
    );
    let budget = k8s("poddisruptionbudget").remove(0);
    assert!(selects(&budget["spec"]["selector"]["matchLabels"], labels));
    let monitor = k8s("servicemonitor").remove(0);
    let monitored: Vec<&Value> = services
        .iter()
        .filter(|s| {
            selects(
                &monitor["spec"]["selector"]["matchLabels"],
                &s["metadata"]["labels"],
            )
        })
        .collect();
    assert_eq!(monitored.len(), 1, "the ServiceMonitor selects one Service");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let credentials = &endpoint["authorization"]["credentials"];
    assert_eq!(
        credentials["name"], secret["name"],
        "scraped with the token"
    );
    assert_eq!(credentials["key"], secret["key"]);
    assert_eq!(monitored[0]["spec"]["ports"][0]["name"], endpoint["port"]);
}

#[test]
fn compose_stack_is_valid_and_wired() {
    let python = validator("venv/bin/python");
    let file = deploy("compose/docker-compose.yml");
    // `docker compose config` needs the compose plugin, absent here;
    // docker-compose (v1, Debian) validates the file against the compose
    // schema without an engine.
    if let Some(compose) = find_tool("docker-compose") {
        run_ok(
            Command::new(compose)
                .arg("-f")
                .arg(&file)
                .args(["config", "-q"]),
        );
    }
    let stack = yaml_document(&python, &file);
    let services = stack["services"].as_object().expect("services");
    let names: BTreeSet<&str> = services.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["kafka", "jobcast", "replay", "prometheus", "grafana"])
    );
    let env = |service: &str, key: &str| {
        str_at(&services[service], &format!("/environment/{key}")).to_owned()
    };
    // Kafka in KRaft mode: its own controller, no ZooKeeper.
    assert_eq!(env("kafka", "KAFKA_PROCESS_ROLES"), "broker,controller");
    assert!(env("kafka", "KAFKA_ADVERTISED_LISTENERS").contains("PLAINTEXT://kafka:9092"));

    let ports = |service: &str| -> Vec<String> {
        services[service]["ports"]
            .as_array()
            .map(|p| {
                p.iter()
                    .map(|p| p.as_str().expect("short syntax").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // The API is published on the host's loopback only: the compose
    // stack serves it without a token, and says so.
    assert_eq!(ports("jobcast"), ["127.0.0.1:8080:8080"]);
    assert_eq!(ports("prometheus"), ["9090:9090"]);
    assert_eq!(ports("grafana"), ["3000:3000"]);

    // Every bind mount's source exists; every named volume is declared.
    let compose_dir = file.parent().expect("a directory");
    let declared = stack["volumes"].as_object().expect("volumes");
    let mut binds = Vec::new();
    for (name, service) in services {
        for volume in service["volumes"].as_array().into_iter().flatten() {
            let spec = volume.as_str().expect("short syntax");
            let (source, rest) = spec.split_once(':').expect("source:target");
            let target = rest.split(':').next().expect("target");
            if source.starts_with('.') {
                let path = compose_dir.join(source);
                assert!(
                    path.exists(),
                    "{name}: {spec}: {} is missing",
                    path.display()
                );
                binds.push((name.as_str(), path, target.to_owned()));
            } else {
                assert!(
                    declared.contains_key(source),
                    "{name}: volume {source} is not declared"
                );
            }
        }
    }
    let bind = |service: &str, target: &str| {
        binds
            .iter()
            .find(|(s, _, t)| *s == service && t == target)
            .map(|(_, p, _)| p.clone())
            .unwrap_or_else(|| panic!("{service} mounts nothing at {target}"))
    };

    // jobcast reads the mounted configuration: the compose Kafka, beyond
    // loopback, state on its volume.
    let command: Vec<&str> = services["jobcast"]["command"]
        .as_array()
        .expect("command")
        .iter()
        .map(|a| a.as_str().expect("string"))
        .collect();
    let config_path = command[command
        .iter()
        .position(|&a| a == "--config")
        .expect("--config")
        + 1];
    let config = serve_config(
        &std::fs::read_to_string(bind("jobcast", config_path)).expect("reads"),
        None,
    );
    assert!(config.http.allow_without_token);
    assert_eq!(config.kafka.brokers, "kafka:9092");
    assert_eq!(config.http.address.to_string(), "0.0.0.0:8080");
    assert!(config.storage.path.starts_with("/var/lib/jobcast"));

    // The replay feeds the jobcast input topic from the bundled excerpt.
    let replay: Vec<&str> = services["replay"]["command"]
        .as_array()
        .expect("command")
        .iter()
        .map(|a| a.as_str().expect("string"))
        .collect();
    let flag = |name: &str| {
        replay[replay
            .iter()
            .position(|&a| a == name)
            .unwrap_or_else(|| panic!("no {name}"))
            + 1]
    };
    assert_eq!(flag("--brokers"), config.kafka.brokers);
    assert_eq!(
        bind("replay", flag("--trace"))
            .canonicalize()
            .expect("exists"),
        repo()
            .join("tests/data/google2011-excerpt")
            .canonicalize()
            .expect("exists")
    );

    // Prometheus scrapes jobcast's HTTP port and loads the rules.
    let prometheus = yaml_document(
        &python,
        &bind("prometheus", "/etc/prometheus/prometheus.yml"),
    );
    let targets = &prometheus["scrape_configs"][0]["static_configs"][0]["targets"];
    assert_eq!(targets[0], "jobcast:8080");
    bind("prometheus", "/etc/prometheus/rules");

    // Grafana's provisioning points at the mounted dashboards and the
    // Prometheus service.
    let provisioning = bind("grafana", "/etc/grafana/provisioning");
    let datasource = yaml_document(&python, &provisioning.join("datasources/prometheus.yml"));
    assert_eq!(
        datasource["datasources"][0]["url"],
        "http://prometheus:9090"
    );
    let provider = yaml_document(&python, &provisioning.join("dashboards/jobcast.yml"));
    let dashboards = str_at(&provider, "/providers/0/options/path");
    assert!(bind("grafana", dashboards).join("jobcast.json").is_file());
}

#[test]
fn systemd_unit_verifies_and_is_hardened() {
    let analyze = tool("systemd-analyze");
    // verify checks that ExecStart's binary exists: point it at the built one.
    let unit = std::fs::read_to_string(deploy("systemd/jobcast.service")).expect("reads");
    assert!(unit.contains("ExecStart=/usr/local/bin/jobcast serve "));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobcast.service");
    std::fs::write(
        &path,
        unit.replace(
            "ExecStart=/usr/local/bin/jobcast",
            &format!("ExecStart={}", jobcast_bin().display()),
        ),
    )
    .expect("writes");
    run_ok(Command::new(&analyze).arg("verify").arg(&path));
    // systemd's own exposure score, 0 (locked down) to 10: at most 2.
    run_ok(
        Command::new(&analyze)
            .args(["security", "--offline=true", "--threshold=20"])
            .arg(&path),
    );
    for directive in [
        "DynamicUser=yes",
        "KillSignal=SIGTERM",
        "StateDirectory=jobcast",
    ] {
        assert!(unit.contains(directive), "no {directive}");
    }
}

#[test]
fn dockerfile_builds_in_stages_and_runs_serve_unprivileged() {
    // No engine runs here to build it: its structure is checked instead.
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("reads");
    let instructions: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let stages: Vec<usize> = instructions
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("FROM "))
        .map(|(i, _)| i)
        .collect();
    assert!(stages.len() >= 2, "a multi-stage build");
    let last = &instructions[*stages.last().expect("a stage")..];
    assert!(
        last.iter().any(|l| l.starts_with("COPY --from=build ")),
        "the final stage copies only the built binary"
    );
    let user = last
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the final stage sets USER");
    let uid = user.split(':').next().expect("uid");
    assert!(uid != "0" && uid != "root", "runs as root: {user}");
    assert!(last.contains(&r#"ENTRYPOINT ["/usr/local/bin/jobcast"]"#));
    assert!(last.contains(&r#"CMD ["serve"]"#));
    assert!(last.iter().any(|l| l.contains("JOBCAST_HTTP=0.0.0.0:8080")));
    // The build compiles the workspace's lock file as it is.
    assert!(text.contains("cargo build --release --locked"));
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).expect("reads");
    assert!(
        ignore.lines().any(|l| l == "target"),
        "the build context excludes target/"
    );
}

/// `jobcast serve --print-config` shows the effective configuration, each
/// value with the layer that set it: the default, a variable, a named
/// flag, `--set`; the token is shown as set, never by value.
#[test]
fn print_config_names_the_layer_of_every_value() {
    let out = std::process::Command::new(jobcast_tests::jobcast_bin())
        .args([
            "serve",
            "--print-config",
            "--group",
            "g1",
            "--set",
            "engine.policy=bayes",
        ])
        .env("JOBCAST_ENGINE__MIN_REPUBLISH_MS", "5")
        .env("JOBCAST_HTTP_TOKEN", "s3cret-token-value")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "engine.policy = \"bayes\"  # flag --set",
        "consumer.group = \"g1\"  # a flag of serve",
        "engine.min_republish_ms = 5  # an environment variable",
        "storage.sync = true  # default",
        "http.token = \"<set, not shown>\"  # an environment variable",
    ] {
        assert!(shown.contains(line), "no {line:?} in\n{shown}");
    }
    assert!(!shown.contains("s3cret"));
}

/// `jobcast serve --help` shows each named flag's default, the value the
/// configuration's defaults hold (so the two cannot drift apart).
#[test]
fn serve_help_shows_the_configurations_defaults() {
    let out = Command::new(jobcast_bin())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    // clap folds long lines: compare with the whitespace squeezed.
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let defaults = ServeConfig::default();
    for value in [
        defaults.consumer.group.clone(),
        defaults.storage.path.display().to_string(),
        defaults.http.address.to_string(),
        defaults.engine.policy.name().to_owned(),
        defaults.topics.events.clone(),
        defaults.topics.decisions.clone(),
        defaults.topics.risk.clone(),
        defaults.topics.capacity.clone(),
        defaults.topics.dead_letter.clone(),
    ] {
        assert!(
            help.contains(&format!("[default: {value}]")),
            "no [default: {value}] in\n{help}"
        );
    }
}

/// `docs/configuration.md` names every setting `serve --print-config`
/// shows, each with its default: in a row of its own, or by its last name
/// in a row of its section (`engine.policies.*`); and every row of its own
/// is a setting there is (unset ones aside, which print nothing).
#[test]
fn the_configuration_doc_names_every_setting_with_its_default() {
    let printed = jobcast_tests::jobcast_ok(&["serve", "--print-config"]);
    let settings: Vec<(String, String)> = printed
        .lines()
        .filter_map(|line| {
            let (key, rest) = line.split_once(" = ")?;
            let value = rest.rsplit_once("  #").map_or(rest, |(v, _)| v);
            Some((key.to_owned(), value.trim_matches('"').to_owned()))
        })
        .collect();
    assert!(settings.len() > 50, "{printed}");
    let doc = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    // Each table row: the keys of its first cell, its default, the row.
    let rows: Vec<(Vec<String>, String, String)> = doc
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let cells: Vec<&str> = row.split(" | ").collect();
            let keys = cells[0]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            (keys, cells[1].to_owned(), row.to_owned())
        })
        .collect();
    let mut missing = Vec::new();
    for (key, value) in &settings {
        // A table of settings (`kafka.client`) has its section's row.
        let own = rows
            .iter()
            .find(|(keys, _, _)| keys.contains(key) || keys.contains(&format!("{key}.*")));
        match own {
            Some((_, default, _)) => {
                let shown = default.replace(['`', ','], "");
                let plain = value.replace(['"', ','], "");
                let named = plain == "[]" && shown.contains("none")
                    || plain == "{}"
                    || key == "engine.shadow";
                if !named && !shown.contains(&plain) {
                    missing.push(format!("{key}: default {value}, the doc says {default}"));
                }
            }
            None => {
                let last = key.rsplit('.').next().unwrap();
                let in_section = rows.iter().any(|(keys, _, row)| {
                    keys.iter().any(|k| {
                        k.strip_suffix('*')
                            .is_some_and(|section| key.starts_with(section))
                    }) && row.contains(&format!("`{last}`"))
                });
                if !in_section {
                    missing.push(format!("{key} ({value}) is not in the doc"));
                }
            }
        }
    }
    let known: BTreeSet<&str> = settings.iter().map(|(k, _)| k.as_str()).collect();
    for (keys, default, _) in &rows {
        for key in keys.iter().filter(|k| !k.ends_with('*') && k.contains('.')) {
            let unset = default.contains("unset") || default.contains("certificates of");
            if !known.contains(key.as_str()) && !unset {
                missing.push(format!("{key}: in the doc, not a setting"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md:\n{}",
        missing.join("\n")
    );
}
