use super::*;
use crate::nodes::pool::{Pool, Transition};
use crate::policy::schedule::ResurrectionConfig;
use serde_json::json;

fn reply(nodes: serde_json::Value) -> Vec<u8> {
    json!({
        "_nodes": {"total": 3, "successful": 3, "failed": 0},
        "cluster_name": "c",
        "nodes": nodes,
    })
    .to_string()
    .into_bytes()
}

fn node(addr: &str, roles: Option<&[&str]>, cores: u32) -> serde_json::Value {
    let mut v = json!({
        "name": format!("n-{addr}"),
        "http": {"publish_address": addr},
        "os": {"allocated_processors": cores, "available_processors": cores * 2},
    });
    if let Some(r) = roles {
        v["roles"] = json!(r);
    }
    v
}

const DATA: Option<&[&str]> = Some(&["data", "ingest", "cluster_manager"]);

#[test]
fn parses_plain_and_host_slash_ip_addresses_with_seed_scheme_and_prefix() {
    let body = reply(json!({
        "a": node("10.0.0.1:9200", DATA, 8),
        "b": node("es-b.example/10.0.0.2:9201", DATA, 16),
        "c": node("/10.0.0.3:9202", DATA, 0),
    }));
    let n = parse_nodes(&body, "https", "/es").unwrap();
    let urls: Vec<&str> = n.iter().map(|n| n.addr.as_str()).collect();
    assert_eq!(
        urls,
        [
            "https://10.0.0.1:9200/es",
            "https://es-b.example:9201/es",
            "https://10.0.0.3:9202/es"
        ]
    );
    assert_eq!(n[0].id, "a");
    assert_eq!(n[0].name, "n-10.0.0.1:9200");
    assert_eq!(n.iter().map(|n| n.cores).collect::<Vec<_>>(), [8, 16, 0]);
    assert!(n.iter().all(|n| n.routable));
}

#[test]
fn parses_ipv6_in_both_forms() {
    let body = reply(json!({
        "a": node("[::1]:9200", DATA, 4),
        "b": node("localhost/[0:0:0:0:0:0:0:1]:9201", DATA, 4),
        "c": node("/[fe80:0:0:0:0:0:0:1]:9202", DATA, 4),
        "d": node("::1/[::1]:9203", DATA, 4),
    }));
    let n = parse_nodes(&body, "http", "").unwrap();
    let urls: Vec<&str> = n.iter().map(|n| n.addr.as_str()).collect();
    assert_eq!(
        urls,
        [
            "http://[::1]:9200",
            "http://localhost:9201",
            "http://[fe80::1]:9202",
            "http://[::1]:9203"
        ]
    );
    // Same spelling as a seed URL, so a reported seed is recognised.
    let (seed, _) = NodeAddr::parse("http://[::1]:9200").unwrap();
    assert_eq!(n[0].addr, seed);
}

#[test]
fn host_names_are_normalized_like_seed_urls() {
    let body = reply(json!({"a": node("ES-A.Example/10.0.0.1:9200", DATA, 8)}));
    let n = parse_nodes(&body, "http", "").unwrap();
    let (seed, _) = NodeAddr::parse("http://es-a.example:9200").unwrap();
    assert_eq!(n[0].addr, seed);
}

#[test]
fn dedicated_cluster_managers_are_not_routable_and_nodes_without_roles_are() {
    let body = reply(json!({
        "cm": node("10.0.0.1:9200", Some(&["cluster_manager"]), 8),
        "old": node("10.0.0.2:9200", Some(&["master", "remote_cluster_client"]), 8),
        "hot": node("10.0.0.3:9200", Some(&["master", "data_hot"]), 8),
        "ing": node("10.0.0.4:9200", Some(&["cluster_manager", "ingest"]), 8),
        "coord": node("10.0.0.5:9200", Some(&[]), 8),
        "noroles": node("10.0.0.6:9200", None, 8),
    }));
    let n = parse_nodes(&body, "http", "").unwrap();
    let routable: Vec<(&str, bool)> = n.iter().map(|n| (n.id.as_str(), n.routable)).collect();
    assert_eq!(
        routable,
        [
            ("cm", false),
            ("coord", true),
            ("hot", true),
            ("ing", true),
            ("noroles", true),
            ("old", false)
        ]
    );
}

#[test]
fn malformed_replies_are_errors_naming_the_problem() {
    let e = parse_nodes(b"<html>bad gateway</html>", "http", "").unwrap_err();
    assert!(e.contains("not a nodes-info document"), "{e}");
    let e = parse_nodes(br#"{"cluster_name":"c"}"#, "http", "").unwrap_err();
    assert!(e.contains("no \"nodes\" object"), "{e}");
    let e = parse_nodes(&reply(json!({"x": node("10.0.0.1", DATA, 8)})), "http", "").unwrap_err();
    assert!(e.contains("node x") && e.contains("no port"), "{e}");
    let e = parse_nodes(&reply(json!({"x": node("::1:9200", DATA, 8)})), "http", "").unwrap_err();
    assert!(e.contains("brackets"), "{e}");
    let e = parse_nodes(&reply(json!({"x": node("h:99999", DATA, 8)})), "http", "").unwrap_err();
    assert!(e.contains("port"), "{e}");
    let e = parse_nodes(
        &reply(json!({"x": node("bad host/1.2.3.4:9200", DATA, 8)})),
        "http",
        "",
    )
    .unwrap_err();
    assert!(e.contains("bad host"), "{e}");
}

#[test]
fn partial_and_empty_replies_are_errors() {
    let body = json!({
        "_nodes": {"total": 3, "successful": 2, "failed": 1,
            "failures": [{"type": "failed_node_exception", "reason": "Failed node [x]",
                "caused_by": {"reason": "node x timed out"}}]},
        "nodes": {"a": node("10.0.0.1:9200", DATA, 8)},
    });
    let e = parse_nodes(body.to_string().as_bytes(), "http", "").unwrap_err();
    assert!(
        e.contains("1 of 3 nodes failed") && e.contains("node x timed out"),
        "{e}"
    );
    let e = parse_nodes(&reply(json!({})), "http", "").unwrap_err();
    assert!(e.contains("no node that can take requests"), "{e}");
    let only_cm = reply(json!({"cm": node("10.0.0.1:9200", Some(&["cluster_manager"]), 8)}));
    assert!(parse_nodes(&only_cm, "http", "").is_err());
    // A node with HTTP disabled is skipped, not an error.
    let body = reply(json!({"a": node("10.0.0.1:9200", DATA, 8), "nohttp": {"name": "x"}}));
    assert_eq!(parse_nodes(&body, "http", "").unwrap().len(), 1);
}

fn addr(port: u16) -> NodeAddr {
    NodeAddr::from_parts("http", "10.0.0.1", port, "")
}

fn member(port: u16, id: &str, cores: u32) -> Member {
    Member {
        addr: addr(port),
        id: id.to_string(),
        cores,
    }
}

fn seeded_pool(ports: &[u16]) -> Pool {
    let nodes = ports
        .iter()
        .map(|&p| Arc::new(PoolNode::new(addr(p), String::new(), true, 0)))
        .collect();
    let cfg = ResurrectionConfig {
        jitter_scale: 0.0,
        ..ResurrectionConfig::default()
    };
    Pool::new(nodes, cfg, 0, 7)
}

fn ports(pool: &Pool) -> Vec<u16> {
    pool.topology()
        .nodes
        .iter()
        .map(|n| n.addr.port())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn merge_keeps_state_of_unchanged_nodes_and_never_drops_seeds() {
    let pool = seeded_pool(&[1, 2]);
    let seeds = [addr(1), addr(2)];
    let seed1 = Arc::clone(&pool.topology().nodes[0]);
    pool.mark_failed(&seed1, Instant::now(), "refused");

    // Seed 1 reported: it learns its id and cores and stays the same (dead) node.
    // Seed 2 not reported: it stays. Node 3 is new.
    let out = pool.merge(&[member(1, "a", 8), member(3, "c", 16)], &seeds, &[]);
    assert_eq!(ports(&pool), [1, 2, 3]);
    assert_eq!(out.added.len(), 1);
    assert!(out.removed.is_empty());
    let t = pool.topology();
    assert!(Arc::ptr_eq(&t.nodes[0], &seed1));
    assert_eq!(seed1.id(), "a");
    assert_eq!(seed1.cores.load(Ordering::Relaxed), 8);
    assert!(!seed1.is_alive());
    assert_eq!(seed1.health().failures, 1);
    let third = Arc::clone(&t.nodes[2]);
    assert!(!third.seed);

    // Same again: every node is the same Arc; node 3 keeps its state too.
    pool.merge(&[member(1, "a", 8), member(3, "c", 16)], &seeds, &[]);
    let t2 = pool.topology();
    assert!(t
        .nodes
        .iter()
        .zip(&t2.nodes)
        .all(|(a, b)| Arc::ptr_eq(a, b)));

    // Node 3 vanishes: it leaves; the unreported seed 2 still stays.
    let out = pool.merge(&[member(1, "a", 8)], &seeds, &[]);
    assert_eq!(ports(&pool), [1, 2]);
    assert!(Arc::ptr_eq(&out.removed[0], &third));
    assert!(!pool.contains(&third));
}

#[tokio::test(start_paused = true)]
async fn a_url_with_a_new_id_is_a_new_node() {
    let pool = seeded_pool(&[1]);
    let seeds = [addr(1)];
    pool.merge(&[member(1, "a", 8), member(2, "b", 8)], &seeds, &[]);
    let old2 = Arc::clone(&pool.topology().nodes[1]);
    pool.mark_answered(&old2, None);
    let old1 = Arc::clone(&pool.topology().nodes[0]);

    let out = pool.merge(&[member(1, "a2", 8), member(2, "b2", 8)], &seeds, &[]);
    assert_eq!(out.removed.len(), 2);
    assert_eq!(out.added.len(), 2);
    let t = pool.topology();
    assert!(!Arc::ptr_eq(&t.nodes[0], &old1));
    assert!(!Arc::ptr_eq(&t.nodes[1], &old2));
    assert_eq!(t.nodes[0].id(), "a2");
    // The replacement at a seed URL is still a seed, but has to prove itself.
    assert!(t.nodes[0].seed);
    assert!(!t.nodes[1].seed);
    assert!(t.nodes.iter().all(|n| !n.is_alive() && !n.health().viable));
}

#[tokio::test(start_paused = true)]
async fn new_nodes_get_no_traffic_until_they_answer() {
    let pool = seeded_pool(&[1]);
    pool.merge(&[member(1, "a", 8), member(2, "b", 8)], &[addr(1)], &[]);
    let new = Arc::clone(&pool.topology().nodes[1]);
    assert!(!new.is_alive());
    assert!(!new.health().viable);
    for _ in 0..20 {
        assert_eq!(pool.select(&[]).unwrap().addr.port(), 1);
    }
    // Even with the seed dead, a never-answered node is no fallback.
    let seed = Arc::clone(&pool.topology().nodes[0]);
    pool.mark_failed(&seed, Instant::now(), "refused");
    assert_eq!(pool.select(&[]).unwrap().addr.port(), 1);
    assert_eq!(pool.mark_answered(&new, None), Transition::Revived);
    assert_eq!(pool.select(&[]).unwrap().addr.port(), 2);
}

#[tokio::test(start_paused = true)]
async fn merge_recomputes_weights_and_capacity_from_cores() {
    let pool = seeded_pool(&[1, 2, 3]);
    let seeds = [addr(1), addr(2), addr(3)];
    pool.merge(
        &[member(1, "a", 8), member(2, "b", 16), member(3, "c", 24)],
        &seeds,
        &[],
    );
    let mut counts = [0usize; 3];
    for _ in 0..600 {
        counts[(pool.select(&[]).unwrap().addr.port() - 1) as usize] += 1;
    }
    assert_eq!(counts, [100, 200, 300]);
    assert_eq!(pool.capacity(), crate::Capacity::from_cores(8));
    // Cores not reported (0) keep what the node had.
    pool.merge(&[member(1, "a", 0)], &seeds, &[]);
    assert_eq!(pool.topology().nodes[0].cores.load(Ordering::Relaxed), 8);
}

#[tokio::test(start_paused = true)]
async fn a_seed_reported_as_dedicated_cluster_manager_leaves_user_traffic() {
    let pool = seeded_pool(&[1, 2]);
    let seeds = [addr(1), addr(2)];
    let out = pool.merge(&[member(2, "b", 8), member(3, "c", 8)], &seeds, &[addr(1)]);
    assert_eq!(ports(&pool), [2, 3]);
    assert_eq!(out.removed[0].addr.port(), 1);
}

#[tokio::test(start_paused = true)]
async fn failure_triggered_rounds_are_rate_limited() {
    let mut last = None;
    let t0 = Instant::now();
    assert!(admit_trigger(&mut last, t0));
    assert!(!admit_trigger(&mut last, t0 + Duration::from_secs(9)));
    assert!(admit_trigger(&mut last, t0 + Duration::from_secs(10)));
    assert!(!admit_trigger(&mut last, t0 + Duration::from_secs(19)));
}

#[test]
fn a_credential_shaped_publish_address_is_not_echoed() {
    let e = super::parse_publish_address("u:hunter2@h/1.2.3.4").unwrap_err();
    assert!(!e.contains("hunter2"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_huge_reply_is_capped_with_a_warning_and_new_nodes_are_checked_8_at_a_time() {
    use crate::testing::{client, Scripted, Step, Warnings};
    let c = Scripted::default();
    let mut nodes = serde_json::Map::new();
    for p in 1..=30u16 {
        nodes.insert(
            format!("id{p:02}"),
            node(&format!("node/10.0.0.1:{p}"), DATA, 8),
        );
        c.on_path(
            p,
            "/",
            Step::After(Duration::from_secs(1), Box::new(Step::Root)),
        );
    }
    let body = String::from_utf8(reply(serde_json::Value::Object(nodes))).unwrap();
    c.on_path(1, NODES_PATH, Step::Body(200, body.clone()));
    c.on_path(30, NODES_PATH, Step::Body(200, body));
    let warnings = Warnings::default();
    let _guard = warnings.install();
    // The seed is the last node of the reply's order, so keeping it shows known nodes
    // come first.
    let cl = client(1, &c, |b| {
        b.nodes(["http://node:30"]).discover_max_nodes(17)
    });
    let t0 = Instant::now();
    let report = cl.discover_now().await.unwrap();
    assert_eq!(report.nodes, 17);
    let ports: Vec<u16> = cl
        .nodes()
        .iter()
        .map(|n| n.url.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    assert!(ports.contains(&1) && ports.contains(&30), "{ports:?}");
    assert_eq!(warnings.count("more nodes than discover_max_nodes"), 1);
    // 15 new nodes, each answering after 1 s, at most 8 at a time: 2 s, not 1 s.
    assert_eq!(Instant::now() - t0, Duration::from_secs(2));
    assert!(cl.nodes().iter().all(|n| n.alive));
    // At the cap or below: no warning.
    let cl = client(1, &c, |b| b.discover_max_nodes(30));
    cl.discover_now().await.unwrap();
    assert_eq!(warnings.count("more nodes than discover_max_nodes"), 1);
    assert_eq!(cl.nodes().len(), 30);
    // Zero is a configuration error.
    let e = crate::Client::builder()
        .node("http://node:1")
        .discover_max_nodes(0)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("discover_max_nodes"), "{e}");
}
