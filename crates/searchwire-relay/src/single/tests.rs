use super::*;

fn parse(route: Route, q: &[(&str, &str)]) -> Result<Params, Answer> {
    Params::parse(
        &route,
        "/i/_doc/1",
        q.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

fn body(a: &Answer) -> Value {
    serde_json::from_slice(&a.body).unwrap()
}

#[test]
fn parameters_become_metadata_or_bulk_parameters() {
    let p = parse(
        Route::Write { create: false },
        &[
            ("routing", "r"),
            ("pipeline", "p"),
            ("if_seq_no", "5"),
            ("if_primary_term", "1"),
            ("version", "7"),
            ("version_type", "external"),
            ("require_alias", "true"),
            ("refresh", "wait_for"),
            ("timeout", "1m"),
            ("wait_for_active_shards", "all"),
            ("filter_path", "result"),
            ("pretty", ""),
        ],
    )
    .unwrap();
    assert_eq!(
        Value::Object(p.meta),
        json!({"routing":"r","pipeline":"p","if_seq_no":5,"if_primary_term":1,
               "version":7,"version_type":"external","require_alias":true})
    );
    assert_eq!(
        p.query,
        vec![
            ("refresh".to_owned(), "wait_for".to_owned()),
            ("timeout".to_owned(), "1m".to_owned()),
            ("wait_for_active_shards".to_owned(), "all".to_owned())
        ]
    );
    assert!(p.filter.is_some());
    let p = parse(
        Route::Write { create: false },
        &[("op_type", "create"), ("refresh", "false")],
    )
    .unwrap();
    assert!(p.op_create);
    assert!(p.query.is_empty(), "refresh=false is the default");
    let p = parse(
        Route::Update,
        &[("retry_on_conflict", "3"), ("_source", "a,b")],
    )
    .unwrap();
    assert_eq!(
        Value::Object(p.meta),
        json!({"retry_on_conflict":3,"_source":["a","b"]})
    );
}

#[test]
fn unknown_and_bad_parameters_are_opensearchs_400() {
    let a = parse(Route::Write { create: false }, &[("bogus", "1")]).unwrap_err();
    assert_eq!(a.status, 400);
    assert_eq!(
        body(&a)["error"]["reason"],
        "request [/i/_doc/1] contains unrecognized parameter: [bogus]"
    );
    // A parameter of another route is unknown here, as on the cluster.
    let a = parse(Route::Delete, &[("retry_on_conflict", "1")]).unwrap_err();
    assert!(body(&a)["error"]["reason"]
        .as_str()
        .unwrap()
        .contains("[retry_on_conflict]"));
    let a = parse(Route::Write { create: false }, &[("op_type", "bogus")]).unwrap_err();
    assert_eq!(
        body(&a)["error"]["reason"],
        "opType must be 'create' or 'index', found: [bogus]"
    );
    let a = parse(Route::Write { create: false }, &[("if_seq_no", "x")]).unwrap_err();
    assert!(body(&a)["error"]["reason"]
        .as_str()
        .unwrap()
        .contains("[if_seq_no]"));
}

fn item(route: Route, p: &Params, id: Option<&str>, body: &'static [u8]) -> Item {
    build_item(&route, p, "i", id, &Bytes::from_static(body)).unwrap()
}

#[test]
fn the_item_is_the_bulk_item_of_the_request() {
    let w = || Route::Write { create: false };
    let p = parse(w(), &[("routing", "r")]).unwrap();
    let it = item(w(), &p, Some("1"), b"{\n  \"a\": \"x\\ny\"\n}\n");
    assert_eq!(it.op, Op::Index);
    assert_eq!(
        String::from_utf8(it.encode()).unwrap(),
        "{\"index\":{\"_id\":\"1\",\"_index\":\"i\",\"routing\":\"r\"}}\n{   \"a\": \"x\\ny\" } \n"
    );
    assert!(!it.id_assigned);
    // The relay's id: a UUIDv7, marked as assigned (a 409 for it is our own write).
    let it = item(w(), &Params::default(), None, b"{}");
    assert!(it.id_assigned);
    assert_eq!(uuid::Uuid::parse_str(it.id()).unwrap().get_version_num(), 7);
    let p = parse(w(), &[("op_type", "create")]).unwrap();
    assert_eq!(item(w(), &p, Some("1"), b"{}").op, Op::Create);
    let it = item(Route::Delete, &Params::default(), Some("1"), b"");
    assert_eq!(it.op, Op::Delete);
    assert_eq!(it.source, None);
}

#[test]
fn bad_bodies_are_refused_as_opensearch_does() {
    let w = Route::Write { create: false };
    let e = |r: &Route, b: &'static [u8]| {
        let a = build_item(
            r,
            &Params::default(),
            "i",
            Some("1"),
            &Bytes::from_static(b),
        )
        .unwrap_err();
        (a.status.as_u16(), body(&a))
    };
    let (s, b) = e(&w, b"");
    assert_eq!(
        (s, b["error"]["reason"].as_str()),
        (400, Some("request body is required"))
    );
    let (s, b) = e(&w, b"not json");
    assert_eq!(s, 400);
    assert_eq!(b["error"]["type"], "mapper_parsing_exception");
    assert_eq!(
        b["error"]["root_cause"][0]["type"],
        "mapper_parsing_exception"
    );
    assert_eq!(e(&w, b"[1]").0, 400);
    assert_eq!(e(&w, b"{} {}").0, 400, "one object, nothing after it");
    let long = "x".repeat(513);
    let a = build_item(
        &w,
        &Params::default(),
        "i",
        Some(&long),
        &Bytes::from_static(b"{}"),
    )
    .unwrap_err();
    assert!(body(&a)["error"]["reason"]
        .as_str()
        .unwrap()
        .ends_with("must be no longer than 512 bytes but was: 513;"));
    assert!(build_item(
        &Route::Delete,
        &Params::default(),
        "i",
        Some(&long),
        &Bytes::new()
    )
    .is_ok());
    let (_, b) = e(&Route::Update, b"{}");
    assert_eq!(
        b["error"]["reason"],
        "Validation Failed: 1: script or doc is missing;"
    );
    let (_, b) = e(&Route::Update, b"{\"doc\":{},\"bogus\":1}");
    assert_eq!(b["error"]["type"], "x_content_parse_exception");
    assert!(build_item(
        &Route::Update,
        &Params::default(),
        "i",
        Some("1"),
        &Bytes::from_static(b"{\"doc\":{\"a\":1},\"upsert\":{\"a\":0}}")
    )
    .is_ok());
    assert!(is_scripted(&Bytes::from_static(
        b"{\"script\":{\"source\":\"x\"}}"
    )));
    assert!(!is_scripted(&Bytes::from_static(b"{\"doc\":{}}")));
}

#[test]
fn answers_have_the_clusters_single_document_shape() {
    let t = |status: u16, body: Value| Taken {
        status,
        body: body.as_object().unwrap().clone(),
    };
    let a = answer(
        t(
            201,
            json!({"_index":"i","_id":"1","_version":1,"result":"created","status":201,
                      "_shards":{"total":2,"successful":1,"failed":0},"_seq_no":0,"_primary_term":1}),
        ),
        None,
    );
    assert_eq!(a.status, 201);
    assert_eq!(
        body(&a),
        json!({"_index":"i","_id":"1","_version":1,"result":"created",
               "_shards":{"total":2,"successful":1,"failed":0},"_seq_no":0,"_primary_term":1})
    );
    let a = answer(
        t(
            200,
            json!({"_index":"i","_id":"1","_version":2,"result":"noop","status":200,
                      "_shards":{"total":2,"successful":2,"failed":0},"_seq_no":1,"_primary_term":1}),
        ),
        None,
    );
    assert_eq!(
        (a.status.as_u16(), &body(&a)["_shards"]),
        (200, &json!({"total":0,"successful":0,"failed":0})),
        "a noop touched no shard"
    );
    let a = answer(
        t(
            404,
            json!({"_index":"i","_id":"1","_version":1,"result":"not_found","status":404}),
        ),
        FilterPath::parse("result").as_ref(),
    );
    assert_eq!(
        (a.status.as_u16(), body(&a)),
        (404, json!({"result":"not_found"}))
    );
    let a = answer(
        t(
            409,
            json!({"_index":"i","_id":"1","status":409,
            "error":{"type":"version_conflict_engine_exception","reason":"r","index":"i","shard":"0","index_uuid":"u"}}),
        ),
        FilterPath::parse("result").as_ref(),
    );
    assert_eq!(a.status, 409);
    let e = json!({"type":"version_conflict_engine_exception","reason":"r","index":"i","shard":"0","index_uuid":"u"});
    let mut full = e.clone();
    full["root_cause"] = json!([e]);
    assert_eq!(
        body(&a),
        json!({"error": full, "status": 409}),
        "errors are not filtered"
    );
    let a = answer(
        t(
            200,
            json!({"_index":"i","_id":"1","result":"queued","status":200}),
        ),
        None,
    );
    assert_eq!(
        (a.status, body(&a)),
        (
            QUEUED_STATUS,
            json!({"_index":"i","_id":"1","result":"queued"})
        )
    );
    // `caused_by` stays on the error, not in the root cause.
    let v = error_object(
        json!({"type":"a","reason":"b","caused_by":{"type":"c","reason":"d"}}),
        400,
    );
    assert_eq!(v["error"]["root_cause"], json!([{"type":"a","reason":"b"}]));
    assert_eq!(v["error"]["caused_by"]["type"], "c");
}

#[test]
fn index_names_follow_opensearchs_rules() {
    assert!(valid_index("logs-2026.12.01").is_ok());
    assert!(valid_index(".kibana").is_ok());
    assert_eq!(
        valid_index("BAD").unwrap_err(),
        "Invalid index name [BAD], must be lowercase"
    );
    assert_eq!(
        valid_index("_doc").unwrap_err(),
        "Invalid index name [_doc], must not start with '_', '-', or '+'"
    );
    assert_eq!(
        valid_index("a*b").unwrap_err(),
        "Invalid index name [a*b], must not contain the following characters \
         [ , \", *, \\, <, |, ,, >, /, ?]"
    );
    assert_eq!(
        valid_index("a#b").unwrap_err(),
        "Invalid index name [a#b], must not contain '#'"
    );
    assert_eq!(
        valid_index("a:b").unwrap_err(),
        "Invalid index name [a:b], must not contain ':'"
    );
    assert!(valid_index("a b").is_err());
    assert!(valid_index("").is_err());
    assert!(valid_index("..").is_err());
}
