//! The console over HTTP: a key logs in into a cookie that script cannot read and other sites
//! never send, and sees what that key sees through the API; without a login it is sent to the
//! login form; forms without the login's CSRF token, or from another site, are refused; what a
//! run holds is shown escaped; an admin retries a run from its page.

use std::time::Duration;

use serde_json::json;
use skillgate::events::KernelBus;

use super::support::{Visitor, csrf, location};
use crate::support::common::Project;
use crate::support::server::{TestServer, config, with_keys};

const GUARD: Duration = Duration::from_secs(30);

fn project() -> Project {
    let p = Project::new();
    p.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets.\nmetadata:\n  params: { type: object, properties: { name: { type: string } }, required: [name] }\n---\nHello, :arg[name]!",
    );
    p
}

async fn invoke_as(server: &TestServer, key: &str, name: &str) {
    let response = server
        .post_json_as(key, "/invoke/hello", &json!({ "name": name }))
        .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn the_console_asks_for_a_key_and_a_key_logged_in_sees_its_own_runs() {
    let server = TestServer::start(project(), with_keys()).await;
    invoke_as(&server, "sg_ci_key", "Cicada").await;
    invoke_as(&server, "sg_narrow_key", "Narwhal").await;
    server.kernel.bus().runs().settled_at_least(2).await;
    let mut visitor = Visitor::new(&server);
    let response = visitor.get("/console").await;
    assert_eq!(response.status(), 303);
    assert_eq!(location(&response), "/console/login");
    assert_eq!(visitor.get("/console/stream").await.status(), 401);
    let response = visitor
        .post("/console/login", &[("key", "sg_wrong")], &[])
        .await;
    assert_eq!(response.status(), 401);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("not one of this server")
    );
    let response = visitor
        .post("/console/login", &[("key", "sg_ci_key")], &[])
        .await;
    assert_eq!(response.status(), 303);
    let set = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.contains(attribute), "{set}");
    }
    let html = visitor.page("/console").await;
    assert!(html.contains("key:ci"), "{html}");
    assert!(
        !html.contains("key:narrow"),
        "another key's run is not shown: {html}"
    );
    // Dead letters are every door's payloads: admin only.
    assert_eq!(visitor.get("/console/dead").await.status(), 403);
    let mut admin = Visitor::new(&server);
    admin.log_in("sg_ops_key").await;
    let html = admin.page("/console").await;
    assert!(
        html.contains("key:ci") && html.contains("key:narrow"),
        "{html}"
    );
    assert_eq!(admin.get("/console/dead").await.status(), 200);
}

#[tokio::test]
async fn a_form_without_the_logins_csrf_token_or_from_another_site_is_refused() {
    let server = TestServer::start(project(), with_keys()).await;
    let mut admin = Visitor::new(&server);
    admin.log_in("sg_ops_key").await;
    let token = csrf(&admin.page("/console/dead").await);
    let path = "/console/dead/0123456789abcdef/replay";
    assert_eq!(admin.post(path, &[], &[]).await.status(), 403);
    assert_eq!(
        admin.post(path, &[("csrf", "00ff")], &[]).await.status(),
        403
    );
    let cross = [("sec-fetch-site", "cross-site")];
    assert_eq!(
        admin.post(path, &[("csrf", &token)], &cross).await.status(),
        403
    );
    let mut stranger = Visitor::new(&server);
    let response = stranger
        .post("/console/login", &[("key", "sg_ops_key")], &cross)
        .await;
    assert_eq!(response.status(), 403);
    assert_eq!(stranger.cookie, None);
    // With the token, from the console itself, the form goes through (to a letter that is not
    // there).
    let response = admin.post(path, &[("csrf", &token)], &[]).await;
    assert_eq!(response.status(), 404);
    // A token is its login's: another login's is refused.
    let mut other = Visitor::new(&server);
    other.log_in("sg_ops_key").await;
    assert_eq!(
        other.post(path, &[("csrf", &token)], &[]).await.status(),
        403
    );
    // After logging out the cookie is gone and the forms with it.
    let response = admin
        .post("/console/logout", &[("csrf", &token)], &[])
        .await;
    assert_eq!(response.status(), 303);
    assert!(
        admin.cookie.as_deref().unwrap().ends_with('='),
        "{:?}",
        admin.cookie
    );
}

#[tokio::test]
async fn with_keys_off_the_console_is_the_local_callers_and_shows_what_runs_hold_escaped() {
    let server = TestServer::start(project(), config()).await;
    let response = server
        .post_json(
            "/invoke/hello",
            &json!({ "name": "<script>alert(1)</script>" }),
        )
        .await;
    assert_eq!(response.status(), 200);
    server.kernel.bus().runs().settled_at_least(1).await;
    let mut local = Visitor::new(&server);
    let html = local.page("/console").await;
    assert!(
        local.cookie.is_some(),
        "the local caller gets a login without a key"
    );
    assert!(!html.contains("Log out"));
    let at = html.find("/console/runs/").unwrap() + 14;
    let id = &html[at..at + 16];
    let response = local.get(&format!("/console/runs/{id}")).await;
    assert_eq!(response.status(), 200);
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    let html = response.text().await.unwrap();
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<script>alert"), "{html}");
    // Retrying acts for another principal: not without an admin key.
    assert!(!html.contains("id=\"retry\""));
}

#[tokio::test]
async fn an_admin_retries_a_run_from_its_page_and_is_shown_the_new_run() {
    let server = TestServer::start(project(), with_keys()).await;
    invoke_as(&server, "sg_ci_key", "Ada").await;
    server.kernel.bus().runs().settled_at_least(1).await;
    let mut admin = Visitor::new(&server);
    admin.log_in("sg_ops_key").await;
    let html = admin.page("/console").await;
    let at = html.find("/console/runs/").unwrap() + 14;
    let old = html[at..at + 16].to_string();
    let page = admin.page(&format!("/console/runs/{old}")).await;
    assert!(page.contains("id=\"retry\""), "{page}");
    let response = admin
        .post(
            &format!("/console/runs/{old}/retry"),
            &[("csrf", &csrf(&page))],
            &[],
        )
        .await;
    assert_eq!(response.status(), 303);
    let new = location(&response);
    assert!(
        new.starts_with("/console/runs/") && !new.ends_with(&old),
        "{new}"
    );
    tokio::time::timeout(GUARD, server.kernel.bus().runs().settled_at_least(2))
        .await
        .unwrap();
    let html = admin.page(&new).await;
    assert!(html.contains("retry of"), "{html}");
    assert!(html.contains(&format!("/console/runs/{old}")), "{html}");
    assert!(html.contains("Hello, Ada!"), "{html}");
}

#[tokio::test]
async fn a_skill_is_tried_from_its_console_page_as_the_login_and_its_run_recorded() {
    let project = project();
    project.skill(
        "secret.skill.md",
        "---\nname: secret\ndescription: Not for narrow keys.\n---\nsecret",
    );
    let server = TestServer::start(project, with_keys()).await;
    let mut narrow = Visitor::new(&server);
    narrow.log_in("sg_narrow_key").await;
    let list = narrow.page("/console/skills").await;
    assert!(list.contains("/console/skills/hello"), "{list}");
    assert!(
        !list.contains("/console/skills/secret"),
        "outside the key's scope: {list}"
    );
    assert_eq!(narrow.get("/console/skills/secret").await.status(), 404);
    let form = narrow.page("/console/skills/hello").await;
    assert!(
        form.contains("<code>name</code>"),
        "the params are listed: {form}"
    );
    let token = csrf(&form);
    let response = narrow
        .post(
            "/console/skills/hello/try",
            &[("csrf", &token), ("args", r#"{"name": "Ada"}"#)],
            &[],
        )
        .await;
    assert_eq!(response.status(), 200);
    let answered = response.text().await.unwrap();
    assert!(answered.contains("Hello, Ada!"), "{answered}");
    let response = narrow
        .post(
            "/console/skills/hello/try",
            &[("csrf", &token), ("args", "{name")],
            &[],
        )
        .await;
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("not JSON"));
    let response = narrow
        .post(
            "/console/skills/secret/try",
            &[("csrf", &token), ("args", "{}")],
            &[],
        )
        .await;
    assert_eq!(response.status(), 404);
    let response = narrow
        .post(
            "/console/skills/hello/try",
            &[("args", r#"{"name": "Ada"}"#)],
            &[],
        )
        .await;
    assert_eq!(response.status(), 403, "no CSRF token, no run");
    server.kernel.bus().runs().settled_at_least(1).await;
    let page: serde_json::Value = server
        .get_as("sg_ops_key", "/runs?door=console")
        .await
        .json()
        .await
        .unwrap();
    let runs = page["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{page}");
    assert_eq!(
        (&runs[0]["principal"], &runs[0]["skill"], &runs[0]["status"]),
        (&json!("key:narrow"), &json!("hello"), &json!("ok"))
    );
}

#[tokio::test]
async fn an_admin_sees_each_doors_health_the_schedules_and_the_subscriptions() {
    let server = TestServer::start(project(), with_keys()).await;
    server
        .kernel
        .invoke(
            "schedule-create",
            json!({ "name": "nightly", "ref": "hello", "every": "1h", "args": { "name": "Night" } }),
            skillgate::InvokeOptions::default(),
        )
        .await
        .unwrap();
    // A subscription `event-subscribe` keeps.
    server
        .kernel
        .bus()
        .store()
        .put_subscription("deploys", "handler:hello", r#"{"ref":"hello","args":null}"#)
        .await
        .unwrap();
    let mut admin = Visitor::new(&server);
    admin.log_in("sg_ops_key").await;
    let html = admin.page("/console/status").await;
    assert!(
        html.contains("class=\"door-ready\"><td>http</td>"),
        "{html}"
    );
    assert!(html.contains("<td>nightly</td><td>hello</td>"), "{html}");
    assert!(
        html.contains("<td>deploys</td><td>handler:hello</td><td>hello</td>"),
        "{html}"
    );
    let mut ci = Visitor::new(&server);
    ci.log_in("sg_ci_key").await;
    assert_eq!(ci.get("/console/status").await.status(), 403);
}
