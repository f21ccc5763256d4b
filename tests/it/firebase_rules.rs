//! Firebase rules that read data, under concurrent writers (issue 36,
//! defect 8): each write must be judged against the data exactly as it is
//! when the write is committed, as one Firebase database (which evaluates
//! and commits under one lock) would. Three properties, over real HTTP
//! against a real `tern dev`:
//!
//! - **claims** (`!data.exists()`): of many writers racing for one name,
//!   exactly one wins and its value stays;
//! - **counters** (`newData.val() == data.val() + 1`): every accepted write
//!   adds one, so the final value is the number of accepted writes, and no
//!   two accepted writes wrote the same number;
//! - **capacity** (`data.parent().numChildren() < 3`): a room never holds
//!   more than three members, and with every joiner decided, exactly three.
//!
//! Before the fix (rules checked against the holder's view, then the write
//! appended with nothing re-checked at apply), each of these broke.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::Tern;

/// `/{path}.json?ns=rulesrace`.
fn fb(t: &Tern, path: &str) -> String {
    format!("{}{path}.json?ns=rulesrace", t.url)
}

async fn set_rules(t: &Tern, rules: Value) {
    let response = t.client.put(fb(t, "/.settings/rules")).bearer_auth("owner").body(rules.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

async fn read(t: &Tern, path: &str) -> Value {
    t.client.get(fb(t, path)).send().await.unwrap().json().await.unwrap()
}

/// PUTs `body` at `path` as an unauthenticated user (rules apply): the status.
async fn put(t: &Tern, path: &str, body: String) -> u16 {
    let response = t.client.put(fb(t, path)).body(body).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert!(status == 200 || status == 401, "a write is accepted or denied, got {status}: {text}");
    status
}

const WRITERS_PER_NAME: usize = 8;
const NAMES: usize = 20;

#[tokio::test]
async fn of_writers_racing_for_a_name_exactly_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    set_rules(&t, json!({"rules": {".read": true, "names": {"$name": {".write": "!data.exists()"}}}})).await;
    let mut tasks = tokio::task::JoinSet::new();
    for name in 0..NAMES {
        for writer in 0..WRITERS_PER_NAME {
            let (client, url) = (t.client.clone(), fb(&t, &format!("/names/n{name}")));
            tasks.spawn(async move {
                let response = client.put(url).body(json!({"by": writer}).to_string()).send().await.unwrap();
                (name, writer, response.status().as_u16())
            });
        }
    }
    let mut winners = vec![Vec::new(); NAMES];
    while let Some(joined) = tasks.join_next().await {
        let (name, writer, status) = joined.unwrap();
        assert!(status == 200 || status == 401, "a claim is accepted or denied, got {status}");
        if status == 200 {
            winners[name].push(writer);
        }
    }
    let names = read(&t, "/names").await;
    for (name, won) in winners.iter().enumerate() {
        assert_eq!(won.len(), 1, "name n{name} was claimed by writers {won:?}");
        assert_eq!(names[format!("n{name}")], json!({"by": won[0]}), "the winner's value stays");
    }
}

#[tokio::test]
async fn a_counter_whose_rule_reads_it_counts_every_accepted_write_once() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    set_rules(
        &t,
        json!({"rules": {".read": true, "counter": {".write": "newData.isNumber() && newData.val() == (data.exists() ? data.val() : 0) + 1"}}}),
    )
    .await;
    const WRITERS: usize = 8;
    const ATTEMPTS: usize = 15;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WRITERS {
        let (client, url) = (t.client.clone(), fb(&t, "/counter"));
        tasks.spawn(async move {
            let mut accepted = Vec::new();
            for _ in 0..ATTEMPTS {
                let current: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
                let next = current.as_i64().unwrap_or(0) + 1;
                let status = client.put(&url).body(next.to_string()).send().await.unwrap().status().as_u16();
                assert!(status == 200 || status == 401, "an increment is accepted or denied, got {status}");
                if status == 200 {
                    accepted.push(next);
                }
            }
            accepted
        });
    }
    let mut accepted = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        accepted.extend(joined.unwrap());
    }
    let distinct: BTreeSet<i64> = accepted.iter().copied().collect();
    assert_eq!(distinct.len(), accepted.len(), "two accepted writes wrote the same number: {accepted:?}");
    assert_eq!(read(&t, "/counter").await, json!(accepted.len()), "every accepted increment counted once");
    assert_eq!(distinct, (1..=accepted.len() as i64).collect(), "the accepted writes are 1..=n");
}

#[tokio::test]
async fn a_room_with_room_for_three_never_holds_a_fourth() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let member = json!({".write": "!data.exists() && data.parent().numChildren() < 3"});
    set_rules(&t, json!({"rules": {".read": true, "rooms": {"$room": {"members": {"$member": member}}}}})).await;
    const ROOMS: usize = 10;
    const JOINERS: usize = 10;
    let mut tasks = tokio::task::JoinSet::new();
    for room in 0..ROOMS {
        for joiner in 0..JOINERS {
            let (client, url) = (t.client.clone(), fb(&t, &format!("/rooms/r{room}/members/m{joiner}")));
            tasks.spawn(async move { (room, client.put(url).body("true").send().await.unwrap().status().as_u16()) });
        }
    }
    let mut joined = [0usize; ROOMS];
    while let Some(done) = tasks.join_next().await {
        let (room, status) = done.unwrap();
        assert!(status == 200 || status == 401, "a join is accepted or denied, got {status}");
        joined[room] += usize::from(status == 200);
    }
    let rooms = read(&t, "/rooms").await;
    for (room, accepted) in joined.iter().enumerate() {
        let members = rooms[format!("r{room}")]["members"].as_object().map_or(0, |m| m.len());
        assert_eq!((*accepted, members), (3, 3), "room r{room}: accepted joins and members");
    }
    // Sequential writes still see each other (the bound is the rule's, not a race's).
    assert_eq!(put(&t, "/rooms/solo/members/a", "true".into()).await, 200);
    assert_eq!(put(&t, "/rooms/solo/members/a", "true".into()).await, 401, "a member joins once");
}

/// A write retried with its `Idempotency-Key` (its answer was lost) is
/// answered as it was applied, not judged again: under `!data.exists()`
/// the retry would otherwise be denied by the claim it made itself.
#[tokio::test]
async fn a_retried_claim_is_answered_as_applied_not_judged_again() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    set_rules(&t, json!({"rules": {".read": true, "names": {"$name": {".write": "!data.exists()"}}}})).await;
    let claim = |key: &'static str, by: &'static str| {
        t.client.put(fb(&t, "/names/ann")).header("Idempotency-Key", key).body(json!({"by": by}).to_string()).send()
    };
    let first = claim("claim-1", "a").await.unwrap();
    assert_eq!(first.status(), 200);
    let retried = claim("claim-1", "a").await.unwrap();
    assert_eq!(retried.status(), 200, "the retry of an applied claim: {}", retried.text().await.unwrap());
    assert_eq!(claim("claim-2", "b").await.unwrap().status(), 401, "another claim is judged, and denied");
    assert_eq!(claim("claim-1", "b").await.unwrap().status(), 409, "the same key for another write is refused as reused");
    assert_eq!(read(&t, "/names/ann").await, json!({"by": "a"}));
}

/// The sum of a metric's samples on the node's `/metrics` (every label).
async fn metric_sum(t: &Tern, name: &str) -> f64 {
    let text = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// A conditional write's answer tells nothing the rules hide: a caller the
/// rules deny gets 401 whatever its `if-match`, and a caller that may write
/// but not read learns only that the ETag failed, not the value. (Review
/// of the fix: checking the client's condition before the rules answered
/// 412 with the secret's value and ETag to anyone.)
#[tokio::test]
async fn a_failed_if_match_never_shows_what_the_rules_hide() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    set_rules(&t, json!({"rules": {"secret": {".read": false, ".write": false}, "drop": {".read": false, ".write": true}}})).await;
    for path in ["/secret", "/drop"] {
        let response = t.client.put(fb(&t, path)).bearer_auth("owner").body(r#""hunter2""#).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let conditional = |path: &str| t.client.put(fb(&t, path)).header("if-match", "not-the-etag").body("1").send();
    let denied = conditional("/secret").await.unwrap();
    assert_eq!(denied.status(), 401);
    assert!(denied.headers().get("etag").is_none());
    assert!(!denied.text().await.unwrap().contains("hunter2"));
    let blind = conditional("/drop").await.unwrap();
    assert_eq!(blind.status(), 412);
    assert!(blind.headers().get("etag").is_none(), "no ETag of a value the caller may not read");
    assert!(!blind.text().await.unwrap().contains("hunter2"));
    // The owner (who may read) gets the value and its ETag, as Firebase answers.
    let owner = t.client.put(fb(&t, "/drop")).bearer_auth("owner").header("if-match", "not-the-etag").body("1").send().await.unwrap();
    assert_eq!(owner.status(), 412);
    assert!(owner.headers().get("etag").is_some());
    assert_eq!(owner.text().await.unwrap(), r#""hunter2""#);
}

/// A conditional write retried with its `Idempotency-Key` after it applied
/// is answered as applied, not 412 against the value it wrote itself.
#[tokio::test]
async fn a_retried_conditional_write_is_answered_as_applied() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    set_rules(&t, json!({"rules": {".read": true, ".write": true}})).await;
    assert_eq!(put(&t, "/doc", "1".into()).await, 200);
    let tag = t.client.get(fb(&t, "/doc")).header("X-Firebase-ETag", "true").send().await.unwrap().headers()["etag"].clone();
    let write = || t.client.put(fb(&t, "/doc")).header("if-match", tag.clone()).header("Idempotency-Key", "cas-1").body("2").send();
    assert_eq!(write().await.unwrap().status(), 200);
    assert_eq!(write().await.unwrap().status(), 200, "the retry of an applied conditional write");
    assert_eq!(read(&t, "/doc").await, json!(2));
}

/// Increments whose rules never look at the new data do not contend: none
/// is refused at apply, and each counts once.
#[tokio::test]
async fn increments_under_rules_that_do_not_read_them_never_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    set_rules(&t, json!({"rules": {".read": true, "likes": {".write": "data.parent().child('open').val() == true"}, "open": {".write": true}}}))
        .await;
    assert_eq!(put(&t, "/open", "true".into()).await, 200);
    const WRITERS: usize = 40;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WRITERS {
        let (client, url) = (t.client.clone(), fb(&t, "/likes"));
        tasks.spawn(async move { client.put(url).body(r#"{".sv": {"increment": 1}}"#).send().await.unwrap().status().as_u16() });
    }
    while let Some(done) = tasks.join_next().await {
        assert_eq!(done.unwrap(), 200);
    }
    assert_eq!(read(&t, "/likes").await, json!(WRITERS));
    assert_eq!(metric_sum(&t, "tern_apply_condition_failed_total").await, 0.0, "no increment was refused at apply");
}

/// A rule that reads a location no key can name (a path built from the
/// written value, longer than a sort key may be) records nothing there:
/// the entry stays well formed and applies (it holds nothing, ever).
/// (Review of the fix: the read went into the entry, and every replica
/// skipped the entry as malformed.)
#[tokio::test]
async fn a_rule_reading_a_path_no_key_can_name_still_writes() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let unique = "!root.child('taken/' + newData.child('name').val()).exists()";
    set_rules(&t, json!({"rules": {".read": true, "users": {"$user": {".write": unique}}}})).await;
    let long_name = "a/".repeat(700) + "a";
    assert_eq!(put(&t, "/users/u1", json!({"name": long_name}).to_string()).await, 200);
    assert_eq!(read(&t, "/users/u1/name").await, json!(long_name));
    assert_eq!(metric_sum(&t, "tern_apply_skipped_entries_total").await, 0.0, "no entry was malformed");
}

/// Joiners racing for a room of three, each with an `Idempotency-Key`: a
/// join that applied on a later attempt (an earlier one met a changed
/// room) is reported applied by `GET /v1/writes/{key}`, which follows the
/// request's attempts.
#[tokio::test]
async fn the_write_status_of_a_join_made_on_a_later_attempt_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let member = json!({".write": "!data.exists() && data.parent().numChildren() < 3"});
    set_rules(&t, json!({"rules": {".read": true, "rooms": {"$room": {"members": {"$member": member}}}}})).await;
    const ROOMS: usize = 6;
    const JOINERS: usize = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for room in 0..ROOMS {
        for joiner in 0..JOINERS {
            let (client, url) = (t.client.clone(), fb(&t, &format!("/rooms/r{room}/members/m{joiner}")));
            let key = format!("join-{room}-{joiner}");
            tasks.spawn(async move {
                let status = client.put(url).header("Idempotency-Key", &key).body("true").send().await.unwrap().status().as_u16();
                (key, status)
            });
        }
    }
    let mut joined = 0;
    while let Some(done) = tasks.join_next().await {
        let (key, status) = done.unwrap();
        assert!(status == 200 || status == 401, "{key}: {status}");
        if status == 200 {
            joined += 1;
            let (_, body) = t.get_json(&format!("/v1/writes/{key}")).await;
            assert_eq!((body["state"].as_str(), &body["outcome"]), (Some("applied"), &json!({"result": "applied"})), "{key}: {body}");
        }
    }
    assert_eq!(joined, ROOMS * 3);
}
