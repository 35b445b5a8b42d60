//! Spec 02, Dynamic Injection and Directive Ordering.

use skillgate::Kernel;
use skillgate::cascade::Entry;

use super::{entry, injector, run_s};
use crate::support::common::{Project, Trace, passing, skill, with_args};

fn inject_kernel(trace: &Trace, make: fn() -> Vec<Entry>) -> Kernel {
    let p = Project::new();
    p.builder()
        .native(injector(trace, make))
        .native(passing("first", trace))
        .native(passing("later", trace))
        .native(passing("px", trace))
        .native(passing("py", trace))
        .native(skill(
            "s",
            "  first: true\n  inj: true\n  later: true\n",
            trace,
        ))
        .build()
}

#[tokio::test]
async fn injected_entries_are_inserted_right_after_the_current_position() {
    let trace = Trace::default();
    run_s(&inject_kernel(&trace, || vec![entry("px", &[], &[])])).await;
    assert_eq!(trace.take(), ["first", "inj", "px", "later", "s"]);
}

#[tokio::test]
async fn injected_middleware_only_runs_downstream() {
    let trace = Trace::default();
    // Asking to run before an entry that already ran cannot move it upstream.
    run_s(&inject_kernel(&trace, || {
        vec![entry("px", &[], &["first"])]
    }))
    .await;
    assert_eq!(trace.take(), ["first", "inj", "px", "later", "s"]);
}

#[tokio::test]
async fn injected_constraints_naming_executed_middleware_are_stripped_silently() {
    let trace = Trace::default();
    // `before: [inj]` names the running entry; `after: [later]` still applies.
    run_s(&inject_kernel(&trace, || {
        vec![entry("px", &["later"], &["inj"])]
    }))
    .await;
    assert_eq!(trace.take(), ["first", "inj", "later", "px", "s"]);
}

#[tokio::test]
async fn injected_entries_with_constraints_resort_the_rest_of_the_chain() {
    let trace = Trace::default();
    run_s(&inject_kernel(&trace, || {
        vec![entry("px", &[], &[]), entry("py", &[], &["px"])]
    }))
    .await;
    assert_eq!(trace.take(), ["first", "inj", "py", "px", "later", "s"]);
}

#[tokio::test]
async fn injected_entries_without_constraints_keep_the_order_given() {
    let trace = Trace::default();
    run_s(&inject_kernel(&trace, || {
        vec![entry("py", &[], &[]), entry("px", &[], &[])]
    }))
    .await;
    assert_eq!(trace.take(), ["first", "inj", "py", "px", "later", "s"]);
}

#[tokio::test]
async fn directive_middleware_runs_after_all_metadata_middleware_in_document_order() {
    let p = Project::new();
    p.skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  meta-a: true\n  meta-b: true\n  meta-c: true\n  $order:\n    meta-b: { after: [$post-configure], before: [$pre-execute] }\n    meta-c: { after: [$pre-execute], before: [$execute] }\n---\nFirst :dir-two[x], then :dir-one[y].",
    );
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("meta-a", &trace))
        .native(passing("meta-b", &trace))
        .native(passing("meta-c", &trace))
        .native(with_args("dir-one", &trace))
        .native(with_args("dir-two", &trace))
        .build();
    run_s(&kernel).await;
    let seen = trace.take();
    let names: Vec<&str> = seen
        .iter()
        .map(|s| s.split('=').next().unwrap_or(s))
        .collect();
    assert_eq!(names, ["meta-a", "meta-b", "meta-c", "dir-two", "dir-one"]);
    // A directive `:name[label]` triggers the tool `name` with its label.
    assert!(seen[3].contains(r#""label":"x""#), "{seen:?}");
    assert!(seen[4].contains(r#""label":"y""#), "{seen:?}");
}
