//! Spec 01, The Manager: `get(path)` and `set(path, value)` by dotted path.

use serde_json::json;

use super::{mw_yaml, no_opts, skill_yaml};
use crate::support::common::{Project, Trace, native};

#[tokio::test]
async fn get_and_set_by_dotted_path() {
    let p = Project::new();
    let trace = Trace::default();
    let writer = native(&mw_yaml("m"), |ctx, _args| async move {
        let target = ctx.ctx_target()?;
        target.set("locals.from-m.note", json!("hi"))?;
        target.next().await?;
        Ok(None)
    });
    let body = {
        let trace = trace.clone();
        native(&skill_yaml("t", &["m"]), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let show = |path: &str| -> skillgate::Result<()> {
                    trace.push(format!(
                        "{path} = {}",
                        ctx.get(path)?.unwrap_or(json!("<none>"))
                    ));
                    Ok(())
                };
                show("args.who")?;
                show("args.items.1.x")?;
                show("locals.from-m")?;
                show("run.tool.name")?;
                show("locals.missing.deep")?;
                ctx.set("locals.a.b.c", json!(1))?;
                show("locals.a")?;
                show("locals.a.b.c")?;
                ctx.set("locals.list", json!([1, 2]))?;
                ctx.set("locals.list.2", json!(3))?;
                show("locals.list")?;
                ctx.set("nonlocals.gateway.port", json!(8080))?;
                show("nonlocals.gateway")?;
                ctx.set("globals.cache.k", json!("v"))?;
                show("globals.cache.k")?;
                ctx.set("locals.config.model", json!("m-1"))?;
                show("locals.config.model")?;
                show("envelope.hasOtherTarget")?;
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(writer).native(body).build();
    kernel
        .invoke(
            "t",
            json!({"who": "Ada", "items": [1, {"x": 2}]}),
            no_opts(),
        )
        .await
        .unwrap();

    assert_eq!(
        trace.take(),
        [
            r#"args.who = "Ada""#,
            "args.items.1.x = 2",
            r#"locals.from-m = {"note":"hi"}"#,
            r#"run.tool.name = "t""#,
            r#"locals.missing.deep = "<none>""#,
            r#"locals.a = {"b":{"c":1}}"#,
            "locals.a.b.c = 1",
            "locals.list = [1,2,3]",
            r#"nonlocals.gateway = {"port":8080}"#,
            r#"globals.cache.k = "v""#,
            r#"locals.config.model = "m-1""#,
            "envelope.hasOtherTarget = false",
        ]
    );
}
