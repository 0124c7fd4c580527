//! Credentials stay secret: with SASL and SSL secrets configured (passed
//! through to librdkafka) and every log level on, no secret appears in the
//! service's log, in `/metrics`, or in the dead-letter topic; and the HTTP
//! API binds to loopback unless configured otherwise, wants its token when
//! one is set, and speaks only HTTPS when given a certificate, to clients
//! and to the other instances it sends a request on to.

use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::Topics;
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_tests::kafka::{Cluster, messages};
use jobcast_tests::serve::{SHORT_SESSION, Serve, free_port, free_ports, metric_sum};
use jobcast_tests::{excerpt_events, jobcast};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const SECRETS: [(&str, &str); 3] = [
    ("sasl.password", "s3cr3t-sasl-Pa55"),
    ("ssl.key.password", "s3cr3t-key-Pa55"),
    ("ssl.keystore.password", "s3cr3t-store-Pa55"),
];

#[test]
fn secrets_never_reach_logs_metrics_or_dead_letters() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, 2);
    let mut input = messages(&excerpt_events()[..5_000]);
    // Undecodable input goes to the dead-letter topic with the error.
    input.insert(
        100,
        ("1".into(), b"{\"v\":1,\"type\":\"job_ended\"".to_vec()),
    );
    input.insert(2_000, ("2".into(), b"not json".to_vec()));
    cluster.produce(&topics.events, &input);

    let mut flags = vec!["-X".to_owned(), "sasl.username=jobcast".to_owned()];
    for (key, secret) in SECRETS {
        flags.push("-X".into());
        flags.push(format!("{key}={secret}"));
    }
    // librdkafka's own configuration and protocol debug output too.
    flags.extend(["-X".into(), "debug=conf,generic,broker".into()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let data = tempfile::tempdir().unwrap();
    let mut serve = Serve::start_logging(
        &cluster.brokers(),
        &data.path().join("state"),
        &flags,
        "trace",
    );
    serve.wait_consumed(input.len() as u64, Duration::from_secs(120));
    let (_, metrics) = serve.get("/metrics");
    let (_, ready) = serve.get("/readyz");
    let log = serve.terminate();

    let dead = cluster.read_all(&topics.dead_letter, 1);
    assert_eq!(dead.len(), 2);
    for (key, secret) in SECRETS {
        assert!(!metrics.contains(secret), "{key} in /metrics");
        assert!(!ready.contains(secret), "{key} in /readyz");
        for line in &log {
            assert!(!line.contains(secret), "{key} logged: {line}");
        }
        for letter in &dead {
            for (name, value) in &letter.headers {
                assert!(
                    !value.contains(secret),
                    "{key} in dead-letter header {name}"
                );
            }
            assert!(!String::from_utf8_lossy(&letter.payload).contains(secret));
        }
    }
    assert!(
        log.len() > 50,
        "trace logging produced only {} lines",
        log.len()
    );

    let default = ServeConfig::default();
    assert!(
        default.http.address.ip().is_loopback(),
        "{}",
        default.http.address
    );
}

#[test]
fn a_refused_secret_property_is_not_echoed() {
    let data = tempfile::tempdir().unwrap();
    // librdkafka refuses an unknown property, quoting its value.
    let out = jobcast(&[
        "serve",
        "--brokers",
        "127.0.0.1:9",
        "--http",
        "127.0.0.1:0",
        "--data-dir",
        data.path().join("state").to_str().unwrap(),
        "-X",
        "no.such.password=s3cr3t-typo-Pa55",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no.such.password"), "{stderr}");
    assert!(!stderr.contains("s3cr3t-typo-Pa55"), "{stderr}");
}

#[test]
fn with_a_token_set_every_route_but_the_probes_wants_it() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, 2);
    let events = excerpt_events();
    // The excerpt opens with its machines; then come jobs.
    let input = &events[..20_000];
    cluster.produce(&topics.events, &messages(input));
    let data = tempfile::tempdir().unwrap();
    let token = "t0k3n-5f8a0c2e9d";
    let mut serve =
        Serve::start_with_token(&cluster.brokers(), &data.path().join("state"), &[], token);
    // The job is read from the store: wait for the state, not the consumer.
    serve.wait_stored_offsets(input.len() as u64, Duration::from_secs(120));

    let job_id = input.iter().find_map(|e| e.job_id()).expect("a job");
    let job = format!("/jobs/{job_id}");
    let bearer = format!("Bearer {token}");
    let refused = [
        None,
        Some("Bearer wrong-token-5f8a0c2e9d"),
        Some(token),
        Some("Basic dDBrM24="),
    ];
    for path in [job.as_str(), "/policies", "/metrics", "/machines/1"] {
        for authorization in refused {
            let (status, body) = serve.get_authorized(path, authorization);
            assert_eq!(status, 401, "{path} with {authorization:?}: {body}");
            assert!(!body.contains(token), "{body}");
        }
        let (status, body) = serve.get_authorized(path, Some(&bearer));
        assert_ne!(status, 401, "{path} with the token: {body}");
    }
    // The POST routes too: a backup is asked for only with the token
    // (this instance has no backup directory: 404 once past the token).
    for authorization in refused {
        let (status, body) = serve.post_authorized("/admin/backup", authorization);
        assert_eq!(
            status, 401,
            "POST /admin/backup with {authorization:?}: {body}"
        );
    }
    let (status, body) = serve.post_authorized("/admin/backup", Some(&bearer));
    assert_eq!(status, 404, "POST /admin/backup with the token: {body}");
    let (status, body) = serve.get_authorized(&job, Some(&bearer));
    assert_eq!(status, 200, "{body}");
    let lower = format!("bearer {token}");
    assert_eq!(serve.get_authorized(&job, Some(&lower)).0, 200);
    // Probes carry no credentials.
    for probe in ["/healthz", "/readyz"] {
        let (status, body) = serve.get_authorized(probe, None);
        assert_eq!(status, 200, "{probe}: {body}");
    }
    assert_eq!(
        serve.metric("jobcast_http_unauthorized_total"),
        5.0 * refused.len() as f64
    );
    let log = serve.terminate();
    assert!(!log.iter().any(|line| line.contains(token)));
}

/// With `http.tls` set, the API answers over HTTPS with that certificate
/// (curl verifies it against the self-signed certificate itself) and not
/// over plain HTTP; a key file that does not exist stops the service
/// before it listens, naming the file.
#[test]
fn with_a_certificate_configured_the_api_speaks_https_only() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, 1);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs (scripts/setup.sh installs it)");
    assert!(made.status.success(), "{made:?}");
    let config = dir.path().join("jobcast.toml");
    let tls = |key: &std::path::Path| {
        std::fs::write(
            &config,
            format!("[http.tls]\ncert = {cert:?}\nkey = {key:?}\n"),
        )
        .unwrap();
    };
    tls(&key);
    let config_arg = config.to_str().unwrap();
    let serve = Serve::start(
        &cluster.brokers(),
        &dir.path().join("state"),
        &["--config", config_arg],
    );
    let https = serve.http.clone();
    assert!(https.starts_with("https://"), "{https}");
    let curl = |args: &[&str]| -> Output {
        Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "10",
            ])
            .args(args)
            .output()
            .expect("curl runs (scripts/setup.sh installs it)")
    };
    let verified = curl(&[
        "--cacert",
        cert.to_str().unwrap(),
        &format!("{https}/healthz"),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&verified.stdout),
        "200",
        "{verified:?}"
    );
    // Not trusted without the certificate: curl's "peer certificate cannot
    // be authenticated".
    assert_eq!(curl(&[&format!("{https}/healthz")]).status.code(), Some(60));
    let plain = https.replacen("https://", "http://", 1);
    let answered = curl(&[&format!("{plain}/healthz")]);
    assert_ne!(
        String::from_utf8_lossy(&answered.stdout),
        "200",
        "{answered:?}"
    );
    serve.terminate();

    let missing = dir.path().join("missing-key.pem");
    tls(&missing);
    let refused = jobcast(&[
        "serve",
        "--brokers",
        &cluster.brokers(),
        "--http",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().join("state").to_str().unwrap(),
        "--config",
        config_arg,
    ]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("http.tls") && stderr.contains("missing-key.pem"),
        "{stderr}"
    );
    assert!(!stderr.contains("HTTP on"), "{stderr}");
}

/// Run `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let made = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs (scripts/setup.sh installs it)");
    assert!(made.status.success(), "{made:?}");
}

/// Two instances over HTTPS, each with a certificate for 127.0.0.1 signed
/// by one CA (`http.tls.ca`): asked for a job the other holds, an instance
/// asks it over TLS, verifying its certificate, and redirects there.
#[test]
fn over_tls_a_request_for_another_instances_job_is_redirected_to_it() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, 4);
    let events = excerpt_events();
    cluster.produce(&topics.events, &messages(&events));
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path();
    openssl(
        tls,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=jobcast test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        tls,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "key.pem",
            "-out",
            "cert.csr",
        ],
    );
    std::fs::write(
        tls.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        tls,
        &[
            "x509",
            "-req",
            "-in",
            "cert.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
            "-out",
            "cert.pem",
        ],
    );
    let ca = tls.join("ca.pem");
    let urls: Vec<String> = free_ports(2)
        .into_iter()
        .map(|port| format!("https://127.0.0.1:{port}"))
        .collect();
    let pair: Vec<Serve> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| {
            let config = tls.join(format!("jobcast-{i}.toml"));
            std::fs::write(
                &config,
                format!(
                    "[http]\nadvertised_url = {url:?}\n[http.tls]\ncert = {:?}\nkey = {:?}\nca = {ca:?}\n",
                    tls.join("cert.pem"),
                    tls.join("key.pem"),
                ),
            )
            .unwrap();
            // `--set` wins over the `--http` flag `Serve` gives.
            let address = format!("http.address={}", url.trim_start_matches("https://"));
            let mut flags = vec!["--config", config.to_str().unwrap(), "--group", "tls"];
            flags.extend(["--set", &address]);
            flags.extend(SHORT_SESSION);
            let serve = Serve::start(&cluster.brokers(), &tls.join(format!("state-{i}")), &flags);
            assert_eq!(&serve.http, url, "it listens where it advertises");
            serve
        })
        .collect();
    let curl = |url: &str| -> String {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{redirect_url}",
            ])
            .args(["--max-time", "10", "--cacert", ca.to_str().unwrap(), url])
            .output()
            .expect("curl runs (scripts/setup.sh installs it)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Asked over HTTPS with curl: `Serve`'s own client speaks HTTP only.
    let body = |url: String| -> String {
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "--cacert",
                ca.to_str().unwrap(),
                &url,
            ])
            .output()
            .expect("curl runs");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let settled = |url: &String| {
        let readyz: serde_json::Value =
            serde_json::from_str(&body(format!("{url}/readyz"))).unwrap_or_default();
        let metrics = body(format!("{url}/metrics"));
        let stored = metric_sum(&metrics, "jobcast_input_committed_offset");
        readyz["owned_partitions"].as_array().map(Vec::len) == Some(2)
            && stored >= events.len() as f64
    };
    // Every event applied by both, the partitions shared, and the owners
    // known (a job no one holds is then 404, not 503).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(urls.iter().all(settled)
        && curl(&format!("{}/jobs/18446744073709551615", urls[0])).starts_with("404"))
    {
        assert!(
            Instant::now() < deadline,
            "never settled: {:?}, {}",
            urls.iter()
                .map(|url| body(format!("{url}/readyz")))
                .collect::<Vec<_>>(),
            body(format!("{}/jobs/18446744073709551615", urls[0]))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut redirected = 0;
    for job in events.iter().filter_map(|e| match e {
        Event::JobSubmitted(job) => Some(job.job_id),
        _ => None,
    }) {
        let answer = curl(&format!("{}/jobs/{job}", urls[0]));
        if answer.starts_with("307") {
            assert_eq!(answer, format!("307 {}/jobs/{job}", urls[1]));
            assert!(curl(&format!("{}/jobs/{job}", urls[1])).starts_with("200 "));
            redirected += 1;
        } else {
            assert!(answer.starts_with("200 "), "job {job}: {answer}");
        }
    }
    assert!(redirected > 0, "no job of the second instance's");
    for serve in pair {
        serve.terminate();
    }
}

/// A rogue member of the group: it joins, takes partitions, and commits
/// offsets whose metadata names its own URL (a listener that answers 200
/// to anything and records what it is sent). The instance does not
/// believe an owner URL its deployment's token did not sign: asked for a
/// job it does not hold, it answers 503 (the rogue's partitions have no
/// owner that answers) instead of sending the client to the rogue, and
/// the rogue never hears from it, let alone a credential.
#[test]
fn a_rogue_group_member_neither_receives_a_token_nor_redirects_clients() {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};

    let topics = Topics::default();
    let cluster = Cluster::new(&topics, 4);
    cluster.produce(&topics.events, &messages(&excerpt_events()[..2_000]));

    let rogue_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rogue_url = format!("http://{}", rogue_listener.local_addr().unwrap());
    let heard = Arc::new(Mutex::new(Vec::<String>::new()));
    let recorded = heard.clone();
    std::thread::spawn(move || {
        for stream in rogue_listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut request = [0u8; 4096];
            let n = stream.read(&mut request).unwrap_or(0);
            recorded
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&request[..n]).into_owned());
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        }
    });

    let data = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", free_port());
    let address = format!("http.address={}", url.trim_start_matches("http://"));
    let advertised = format!("http.advertised_url={url}");
    let mut flags = vec![
        "--group",
        "rogue-test",
        "--set",
        &address,
        "--set",
        &advertised,
    ];
    flags.extend(SHORT_SESSION);
    let token = "deployment-token-42";
    let mut serve = Serve::start_with_token(
        &cluster.brokers(),
        &data.path().join("state"),
        &flags,
        token,
    );
    serve.wait_stored_offsets(2_000, Duration::from_secs(120));

    let rogue: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", cluster.brokers())
        .set("group.id", "rogue-test")
        // The group's protocol, as any member must speak it.
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .create()
        .unwrap();
    rogue.subscribe(&[&topics.events]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let taken: Vec<i32> = loop {
        rogue.poll(Duration::from_millis(100));
        let assigned = rogue.assignment().unwrap();
        let taken: Vec<i32> = assigned.elements().iter().map(|e| e.partition()).collect();
        if !taken.is_empty() {
            break taken;
        }
        assert!(Instant::now() < deadline, "the rogue never got a partition");
    };
    let mut commits = TopicPartitionList::new();
    for &partition in &taken {
        commits
            .add_partition_offset(&topics.events, partition, Offset::Offset(0))
            .unwrap();
        commits
            .find_partition(&topics.events, partition)
            .unwrap()
            .set_metadata(rogue_url.as_str());
    }
    rogue.commit(&commits, CommitMode::Sync).unwrap();

    // The instance reads the group's commits every 2 s; it gave the
    // rogue's partitions up. Ask it, with the token, for a job nobody
    // holds, until it has read the rogue's commits (its answer is then
    // settled), keeping the rogue in the group meanwhile.
    let answer = loop {
        rogue.poll(Duration::from_millis(100));
        let (status, headers, body) =
            serve.get_headers("/jobs/18446744073709551615", &[], &["location"]);
        let owned = serve.owned_partitions();
        let settled = taken.iter().all(|p| !owned.contains(&i64::from(*p)))
            && serve.metric("jobcast_http_peers_refused_total") > 0.0;
        if settled || Instant::now() > deadline {
            break (status, headers, body);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(answer.0, 503, "{answer:?}");
    assert!(answer.2.contains("no owner that answers"), "{answer:?}");
    assert_eq!(answer.1[0], None, "no redirect: {answer:?}");
    assert!(
        heard.lock().unwrap().is_empty(),
        "the rogue heard: {:?}",
        heard.lock().unwrap()
    );
    drop(rogue);
    serve.terminate();
}
