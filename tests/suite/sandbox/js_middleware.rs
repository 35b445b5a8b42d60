//! `.skill.js` middleware: wrapping and recovering around the served skill's `next()`.

use serde_json::json;

use super::{js_project, kernel, run};
use crate::support::common::Seen;

#[tokio::test]
async fn js_middleware_wraps_the_served_skill_around_next() {
    let p = js_project(&[
        (
            "loud.skill.js",
            r#"export const frontmatter = { name: 'loud', metadata: { role: 'middleware' } };
               export default async function (ctx) {
                 const target = ctxTarget(ctx);
                 target.locals.before = 'yes';
                 const out = await target.manager.next();
                 return out.toUpperCase() + '!';
               }"#,
        ),
        (
            "served.skill.md",
            "---\nname: served\nmetadata:\n  loud: true\n---\nhi :arg[who]",
        ),
    ]);
    let k = kernel(&p, None, Seen::default());
    assert_eq!(
        run(&k, "served", json!({"who": "ada"})).await.unwrap(),
        Some(json!("HI ADA!"))
    );
}

#[tokio::test]
async fn js_middleware_catches_the_served_skills_error_and_recovers() {
    let p = js_project(&[
        (
            "rescue.skill.js",
            r#"export const frontmatter = { name: 'rescue', metadata: { role: 'middleware' } };
               export default async function (ctx) {
                 const target = ctxTarget(ctx);
                 try {
                   await target.manager.next();
                 } catch (err) {
                   target.locals.result = 'recovered from ' + err.message;
                 }
               }"#,
        ),
        (
            "fragile.skill.js",
            r#"export const frontmatter = {
                 name: 'fragile',
                 metadata: { rescue: true, $order: { rescue: { after: ['$pre-execute'], before: ['execute'] } } },
               };
               export default async () => { throw new Error('crash'); };"#,
        ),
    ]);
    let k = kernel(&p, None, Seen::default());
    assert_eq!(
        run(&k, "fragile", json!({})).await.unwrap(),
        Some(json!("recovered from crash"))
    );
}

#[tokio::test]
async fn ctx_target_throws_when_the_skill_is_not_middleware() {
    let p = js_project(&[(
        "alone.skill.js",
        "export default async (ctx) => { try { ctxTarget(ctx); return 'no throw'; } catch (e) { return e.message; } }",
    )]);
    let k = kernel(&p, None, Seen::default());
    let out = run(&k, "alone", json!({})).await.unwrap().unwrap();
    assert!(
        out.as_str().unwrap().contains("not invoked as middleware"),
        "{out}"
    );
}
