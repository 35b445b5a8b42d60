//! The runs record's store contract, on the memory, SQLite and Postgres stores: filters,
//! newest-first pages with a cursor, text search, pruning by age and count.

use skillgate::events::records::{NewRun, RunFilter, StoredRun};
use skillgate::events::{Limits, Records};

use crate::support::stores::Backend;

macro_rules! contract {
    ($($rule:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test]
            async fn $rule() {
                if let Some(b) = super::Backend::memory() { super::$rule(&b).await; b.cleanup().await; }
            })*
        }
        mod sqlite {
            $(#[tokio::test]
            async fn $rule() {
                if let Some(b) = super::Backend::sqlite() { super::$rule(&b).await; b.cleanup().await; }
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $rule() {
                if let Some(b) = super::Backend::postgres() { super::$rule(&b).await; b.cleanup().await; }
            })*
        }
    };
}

contract!(
    runs_are_listed_newest_first_and_paged_by_cursor,
    every_filter_narrows_the_listing,
    text_is_found_in_args_or_result_in_any_case_and_taken_literally,
    a_run_is_read_whole_by_id,
    a_large_batch_is_kept_whole_field_by_field_in_its_order,
    pruning_drops_runs_past_the_age_and_all_but_the_newest_count,
    pages_run_through_plain_and_other_runs_of_many_batches_in_order,
    pruning_takes_runs_out_of_the_middle_of_a_batch_by_age_and_count,
    the_newest_runs_pruning_keeps_are_counted_among_those_young_enough,
);

fn run(id: &str, started_ms: i64) -> StoredRun {
    StoredRun {
        seq: 0,
        id: id.into(),
        door: "http".into(),
        principal: "local".into(),
        skill: "hello".into(),
        started_ms,
        duration_us: 1500,
        status: "ok".into(),
        problem: None,
        parent: None,
        args: r#"{"name":"Ada"}"#.into(),
        result: Some(r#""Hello, Ada!""#.into()),
        detail: "{}".into(),
    }
}

/// `runs` as they are written.
fn new(runs: &[StoredRun]) -> Vec<NewRun<'_>> {
    runs.iter().map(StoredRun::as_new).collect()
}

fn ids(runs: &[StoredRun]) -> Vec<&str> {
    runs.iter().map(|r| r.id.as_str()).collect()
}

fn all() -> RunFilter {
    RunFilter {
        limit: 100,
        ..RunFilter::default()
    }
}

async fn runs_are_listed_newest_first_and_paged_by_cursor(b: &Backend) {
    let store = b.open(Limits::default()).await;
    let batch: Vec<_> = (1..=5).map(|n| run(&format!("r{n}"), 1000 + n)).collect();
    store.put_runs(&new(&batch)).await.unwrap();
    let first = store.runs(&RunFilter { limit: 2, ..all() }).await.unwrap();
    assert_eq!(ids(&first), ["r5", "r4"]);
    let next = RunFilter {
        limit: 2,
        before: Some(first[1].seq),
        ..all()
    };
    let second = store.runs(&next).await.unwrap();
    assert_eq!(ids(&second), ["r3", "r2"]);
    let last = RunFilter {
        before: Some(second[1].seq),
        ..next
    };
    assert_eq!(ids(&store.runs(&last).await.unwrap()), ["r1"]);
}

async fn every_filter_narrows_the_listing(b: &Backend) {
    let store = b.open(Limits::default()).await;
    let mut failed = run("failed", 2000);
    failed.status = "failed".into();
    failed.problem = Some("internal".into());
    let mut slack = run("slack", 3000);
    slack.door = "slack".into();
    slack.principal = "slack:T1:U1".into();
    let mut other = run("other", 4000);
    other.skill = "other".into();
    store
        .put_runs(&new(&[run("plain", 1000), failed, slack, other]))
        .await
        .unwrap();
    let found = |filter: RunFilter| {
        let store = store.clone();
        async move {
            ids(&store.runs(&filter).await.unwrap())
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        found(RunFilter {
            status: Some("failed".into()),
            ..all()
        })
        .await,
        ["failed"]
    );
    assert_eq!(
        found(RunFilter {
            door: Some("slack".into()),
            ..all()
        })
        .await,
        ["slack"]
    );
    assert_eq!(
        found(RunFilter {
            principal: Some("slack:T1:U1".into()),
            ..all()
        })
        .await,
        ["slack"]
    );
    assert_eq!(
        found(RunFilter {
            skill: Some("other".into()),
            ..all()
        })
        .await,
        ["other"]
    );
    assert_eq!(
        found(RunFilter {
            since_ms: Some(2000),
            until_ms: Some(4000),
            ..all()
        })
        .await,
        ["slack", "failed"]
    );
}

async fn text_is_found_in_args_or_result_in_any_case_and_taken_literally(b: &Backend) {
    let store = b.open(Limits::default()).await;
    let mut percent = run("percent", 1000);
    percent.args = r#"{"rate":"100%"}"#.into();
    let mut answer = run("answer", 2000);
    answer.result = Some(r#""Paris, France""#.into());
    store
        .put_runs(&new(&[run("plain", 500), percent, answer]))
        .await
        .unwrap();
    let text = |t: &str| RunFilter {
        text: Some(t.into()),
        ..all()
    };
    assert_eq!(ids(&store.runs(&text("FRANCE")).await.unwrap()), ["answer"]);
    assert_eq!(ids(&store.runs(&text("0%")).await.unwrap()), ["percent"]);
    // `%` and `_` are themselves, not patterns.
    assert!(store.runs(&text("%")).await.unwrap().len() == 1);
    assert!(store.runs(&text("a_a")).await.unwrap().is_empty());
}

async fn a_run_is_read_whole_by_id(b: &Backend) {
    let store = b.open(Limits::default()).await;
    let mut first = run("same", 1000);
    first.detail = r#"{"error":"boom"}"#.into();
    first.status = "failed".into();
    first.problem = Some("internal".into());
    store
        .put_runs(&new(&[
            run("before", 500),
            first.clone(),
            run("after", 2000),
        ]))
        .await
        .unwrap();
    let got = store.run("same").await.unwrap().expect("recorded");
    assert_eq!(StoredRun { seq: 0, ..got }, first);
    // A run that ended well, written with the other plain runs of its batch.
    let plain = store.run("after").await.unwrap().expect("recorded");
    assert_eq!(
        StoredRun {
            seq: 0,
            ..plain.clone()
        },
        run("after", 2000)
    );
    let listed = store.runs(&all()).await.unwrap();
    assert_eq!(
        listed[0], plain,
        "the same run, at the same place, as a listing gives"
    );
    assert_eq!(store.run("missing").await.unwrap(), None);
}

async fn a_large_batch_is_kept_whole_field_by_field_in_its_order(b: &Backend) {
    let store = b.open(Limits::default()).await;
    // Text a store could mangle on its way in: quotes, backslashes, escapes, JSON-looking
    // strings, non-ASCII; numbers past 32 bits; absent fields beside present ones. 1,300 runs:
    // more than a full batch. Plain runs (ended well, nothing in their detail, no parent) among
    // others, and a stretch of 200 plain ones: a store may write the two kinds in statements
    // of their own, of every size.
    let batch: Vec<_> = (0..1300i64)
        .map(|n| {
            let mut r = run(&format!("r{n}"), 1_700_000_000_000 + n);
            r.duration_us = n * 1_000_003;
            r.principal = format!("key:\"ops\" \\ {n} — é\n");
            r.args = format!(r#"{{"n":{n},"text":"a \"quoted\" \\ b\u0001"}}"#);
            if (1000..1200).contains(&n) {
                return r;
            }
            if n % 7 == 0 {
                r.detail = format!(r#"{{"trace":"t{n}"}}"#);
            }
            if n % 3 == 0 {
                r.result = None;
                r.status = "failed".into();
                r.problem = Some("internal".into());
                r.detail = r#"{"error":"null"}"#.into();
            }
            if n % 5 == 0 {
                r.parent = Some(format!("r{}", n / 5));
                r.result = Some("null".into());
            }
            r
        })
        .collect();
    store.put_runs(&new(&batch)).await.unwrap();
    let mut got = store
        .runs(&RunFilter {
            limit: 2000,
            ..all()
        })
        .await
        .unwrap();
    got.reverse();
    let got: Vec<_> = got.into_iter().map(|r| StoredRun { seq: 0, ..r }).collect();
    assert_eq!(got.len(), batch.len());
    for (got, sent) in got.iter().zip(&batch) {
        assert_eq!(got, sent);
    }
}

async fn pruning_drops_runs_past_the_age_and_all_but_the_newest_count(b: &Backend) {
    let store = b.open(Limits::default()).await;
    let batch: Vec<_> = (1..=6).map(|n| run(&format!("r{n}"), n * 1000)).collect();
    store.put_runs(&new(&batch)).await.unwrap();
    // Older than 2000 ms: r1.
    assert_eq!(store.prune_runs(2000, 100).await.unwrap(), 1);
    // Keep the newest 3: r2 and r3 go.
    assert_eq!(store.prune_runs(0, 3).await.unwrap(), 2);
    assert_eq!(ids(&store.runs(&all()).await.unwrap()), ["r6", "r5", "r4"]);
    assert_eq!(store.prune_runs(0, 3).await.unwrap(), 0);
}

/// `n` runs from `from`, every `failed_every`th one failed (a run of a row of its own).
fn mixed(prefix: &str, from: i64, n: i64, failed_every: i64) -> Vec<StoredRun> {
    (0..n)
        .map(|k| {
            let mut r = run(&format!("{prefix}{k}"), from + k);
            if failed_every > 0 && k % failed_every == failed_every - 1 {
                r.status = "failed".into();
                r.problem = Some("internal".into());
            }
            r
        })
        .collect()
}

async fn pages_run_through_plain_and_other_runs_of_many_batches_in_order(b: &Backend) {
    let store = b.open(Limits::default()).await;
    let batches = [
        mixed("a", 1000, 5, 0),
        mixed("b", 2000, 9, 4),
        mixed("c", 3000, 1, 0),
        mixed("d", 4000, 3, 1),
    ];
    for batch in &batches {
        store.put_runs(&new(batch)).await.unwrap();
    }
    let mut want: Vec<String> = batches.iter().flatten().map(|r| r.id.clone()).collect();
    want.reverse();
    for limit in [1, 2, 3, 7, 100] {
        let mut seen = Vec::new();
        let mut before = None;
        loop {
            let page = store
                .runs(&RunFilter {
                    limit,
                    before,
                    ..all()
                })
                .await
                .unwrap();
            seen.extend(page.iter().map(|r| r.id.clone()));
            if page.len() < limit {
                break;
            }
            before = Some(page[limit - 1].seq);
        }
        assert_eq!(seen, want, "pages of {limit}");
    }
    // A filter a block's runs are read for, and one that passes blocks over.
    let found = store
        .runs(&RunFilter {
            status: Some("ok".into()),
            since_ms: Some(2002),
            until_ms: Some(4000),
            limit: 3,
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(ids(&found), ["c0", "b8", "b6"]);
    let failed = store
        .runs(&RunFilter {
            status: Some("failed".into()),
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(ids(&failed), ["d2", "d1", "d0", "b7", "b3"]);
}

async fn pruning_takes_runs_out_of_the_middle_of_a_batch_by_age_and_count(b: &Backend) {
    let store = b.open(Limits::default()).await;
    // Written in the order they ended, so a batch's starts are not in order.
    let mut batch = mixed("r", 1000, 12, 5);
    for (r, started) in batch
        .iter_mut()
        .zip([5, 1, 9, 2, 8, 3, 7, 4, 6, 10, 11, 12])
    {
        r.started_ms = started * 1000;
    }
    store.put_runs(&new(&batch)).await.unwrap();
    store
        .put_runs(&new(&mixed("n", 20_000, 4, 0)))
        .await
        .unwrap();
    // Started before 4000: r1 (at 1000), r3 (2000), r5 (3000).
    assert_eq!(store.prune_runs(4000, 100).await.unwrap(), 3);
    let left: Vec<String> = ids(&store.runs(&all()).await.unwrap())
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        left,
        [
            "n3", "n2", "n1", "n0", "r11", "r10", "r9", "r8", "r7", "r6", "r4", "r2", "r0"
        ]
    );
    // The newest 7: the 4 of the later batch and r11, r10, r9.
    assert_eq!(store.prune_runs(0, 7).await.unwrap(), 6);
    assert_eq!(
        ids(&store.runs(&all()).await.unwrap()),
        ["n3", "n2", "n1", "n0", "r11", "r10", "r9"]
    );
    let r9 = store.run("r9").await.unwrap().expect("kept");
    assert_eq!(r9.status, "failed");
    assert_eq!(store.run("r8").await.unwrap(), None);
    assert_eq!(store.prune_runs(0, 7).await.unwrap(), 0);
}

async fn the_newest_runs_pruning_keeps_are_counted_among_those_young_enough(b: &Backend) {
    let store = b.open(Limits::default()).await;
    store
        .put_runs(&new(&mixed("a", 10_000, 4, 0)))
        .await
        .unwrap();
    // The newest batch: two runs that started long ago (ended late), two recent ones, and a
    // failed old one (a row of its own).
    let mut late = mixed("b", 20_000, 5, 0);
    late[0].started_ms = 1000;
    late[1].started_ms = 2000;
    late[4].started_ms = 3000;
    late[4].status = "failed".into();
    store.put_runs(&new(&late)).await.unwrap();
    // Before 5000 goes: b0, b1, b4. Of the rest, the newest 4: b3, b2, a3, a2.
    assert_eq!(store.prune_runs(5000, 4).await.unwrap(), 5);
    assert_eq!(
        ids(&store.runs(&all()).await.unwrap()),
        ["b3", "b2", "a3", "a2"]
    );
}

/// The SQLite store writes the record on a connection of its own (`events::sqlite_runs`): a
/// batch it cannot write leaves none of its runs, says why, and the next batch is written.
#[tokio::test]
async fn a_batch_the_sqlite_store_cannot_write_keeps_none_of_its_runs_and_the_next_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.db");
    let store = skillgate::events::sqlite::SqliteStore::open(&file, Limits::default(), false)
        .await
        .unwrap();
    store.put_runs(&new(&[run("before", 1)])).await.unwrap();
    // Another connection to the file refuses one run of the next batch.
    let other = sqlx::SqlitePool::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse BEFORE INSERT ON sg_runs WHEN NEW.id = 'poison'
         BEGIN SELECT RAISE(ABORT, 'this run is refused'); END",
    )
    .execute(&other)
    .await
    .unwrap();
    // The refused run did not end well: a row of its own (plain runs are written in blocks,
    // and the runs before it in the batch, in one, are in the same transaction).
    let batch: Vec<_> = (0..100)
        .map(|n| {
            let mut r = run(if n == 70 { "poison" } else { "kept?" }, 10 + n);
            if n == 70 {
                r.status = "failed".into();
                r.problem = Some("internal".into());
            }
            r
        })
        .collect();
    let err = store.put_runs(&new(&batch)).await.unwrap_err();
    assert!(err.to_string().contains("this run is refused"), "{err}");
    let listed = store.runs(&all()).await.unwrap();
    assert_eq!(
        ids(&listed),
        ["before"],
        "nothing of the refused batch is kept"
    );

    sqlx::query("DROP TRIGGER refuse")
        .execute(&other)
        .await
        .unwrap();
    let after: Vec<_> = (0..70)
        .map(|n| run(&format!("after{n}"), 200 + n))
        .collect();
    store.put_runs(&new(&after)).await.unwrap();
    let listed = store.runs(&all()).await.unwrap();
    assert_eq!(listed.len(), 71);
    assert_eq!(listed[0].id, "after69");
    assert_eq!(listed[70].id, "before");
}
