//! Spec 01, The Target Context: `ctxTarget` refuses a context that serves no other, and the
//! middleware's own context is its private workspace.

use serde_json::json;

use super::{get, mw_yaml, no_opts, recorder, spy};
use crate::support::common::{Project, Seen, native};

#[tokio::test]
async fn ctx_target_throws_when_not_middleware() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(recorder("t", &["m"], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, m) = (seen.get("t"), seen.get("m"));
    assert!(t.ctx_target().is_err(), "t's target is itself");
    assert!(m.ctx_target().is_ok_and(|x| x.same(&t)));
}

#[tokio::test]
async fn middleware_own_context_is_a_private_workspace() {
    let p = Project::new();
    let seen = Seen::default();
    let mw = {
        let seen = seen.clone();
        native(&mw_yaml("m"), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("m", &ctx);
                let target = ctx.ctx_target()?;
                ctx.set("locals.scratch", json!("private"))?;
                target.set("locals.shared", json!("public"))?;
                target.next().await?;
                Ok(None)
            }
        })
    };
    let kernel = p
        .builder()
        .native(mw)
        .native(recorder("t", &["m"], &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, m) = (seen.get("t"), seen.get("m"));
    assert_eq!(get(&t, "locals.shared"), Some(json!("public")));
    assert_eq!(get(&t, "locals.scratch"), None);
    assert_eq!(get(&m, "locals.scratch"), Some(json!("private")));
    assert_eq!(get(&m, "locals.shared"), None);
}
