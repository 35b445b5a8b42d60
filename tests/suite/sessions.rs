//! Sessions end to end: the web session cookie across two replicas on one store, a WebSocket
//! connection's conversation, and an agent that sees its earlier turns and whose trace is kept.
//! (The store contract and the middleware across replicas are in `events`.)

use serde_json::{Value, json};
use skillgate::InvokeOptions;
use skillgate::events::{KernelBus, Limits};

use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::stores::Backend;
use crate::support::ws_client::WsClient;

/// `turns`: answers with the session id the handler got and the history it sees.
const TURNS: &str = "export const frontmatter = { metadata: { session: true, web: { route: 'GET /turns' } } };\n\
export default async (ctx, args) => ({ sessionId: args.sessionId ?? null, seen: ctx.locals.session.history.length });\n";

pub(crate) fn turns_project() -> Project {
    let p = Project::new();
    p.skill("turns.skill.js", TURNS);
    p
}

pub(crate) fn cookie_of(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_session_cookie_carries_a_conversation_across_replicas() {
    let backend = Backend::postgres().or_else(Backend::sqlite).unwrap();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let bus = backend
            .bus(Limits::default(), std::time::Duration::from_secs(30))
            .await;
        replicas.push(
            TestServer::start_with(turns_project(), config(), move |b| {
                skillgate::events::WithBus::bus(b, bus)
            })
            .await,
        );
    }
    let (a, b) = (&replicas[0], &replicas[1]);

    // A first visit: a new session, its cookie set, nothing seen yet.
    let first = a.get("/turns").await;
    let set = cookie_of(&first).expect("a new session sets its cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Lax") && set.contains("Path=/"),
        "{set}"
    );
    let cookie = set
        .strip_prefix("skillgate_session=")
        .and_then(|rest| rest.split(';').next())
        .unwrap()
        .to_string();
    // `<id>.<period>.<signature>`: the server's signature over the id it issued.
    let id = cookie.split('.').next().unwrap().to_string();
    let body: Value = first.json().await.unwrap();
    assert_eq!(body, json!({ "sessionId": id, "seen": 0 }));

    // The same browser on the other replica continues it (the secret is shared through the
    // store); no new cookie.
    let again = b
        .client
        .get(b.url("/turns"))
        .header("cookie", format!("skillgate_session={cookie}"))
        .send()
        .await
        .unwrap();
    assert!(cookie_of(&again).is_none());
    assert_eq!(
        again.json::<Value>().await.unwrap(),
        json!({ "sessionId": id, "seen": 1 })
    );

    // A cookie skillgate did not give (a guessable name) is replaced, not used.
    let forged = a
        .client
        .get(a.url("/turns"))
        .header("cookie", "skillgate_session=slack:T1:C1:1.0")
        .send()
        .await
        .unwrap();
    assert!(cookie_of(&forged).is_some());
    let body: Value = forged.json().await.unwrap();
    assert_eq!(body["seen"], 0);
    assert_ne!(body["sessionId"], json!("slack:T1:C1:1.0"));
    // Nor is the bare id of someone else's session (fixation): it needs the server's signature.
    let fixed = b
        .client
        .get(b.url("/turns"))
        .header("cookie", format!("skillgate_session={id}"))
        .send()
        .await
        .unwrap();
    assert!(cookie_of(&fixed).is_some());
    let body: Value = fixed.json().await.unwrap();
    assert_ne!(body["sessionId"], json!(id));
    assert_eq!(body["seen"], 0);
    for mut server in replicas {
        server.finish().await;
    }
    backend.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_connection_is_one_conversation() {
    let mut server = TestServer::start(turns_project(), config()).await;
    let seen = |frames: Vec<Value>| frames.last().unwrap()["value"]["seen"].clone();
    let (mut one, _) = WsClient::connect(server.addr, None).await;
    for (n, id) in ["a", "b", "c"].iter().enumerate() {
        one.send(json!({ "type": "invoke", "id": id, "skill": "turns" }))
            .await;
        assert_eq!(seen(one.answer(id).await), json!(n));
    }
    let (mut two, _) = WsClient::connect(server.addr, None).await;
    two.send(json!({ "type": "invoke", "id": "x", "skill": "turns" }))
        .await;
    assert_eq!(
        seen(two.answer("x").await),
        json!(0),
        "another connection starts afresh"
    );
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_sees_its_earlier_turns_and_the_session_keeps_its_trace() {
    use crate::agent::{agent_skill, text_turn};
    use crate::support::model_fake::ModelFake;
    let fake = ModelFake::start(vec![
        text_turn("Paris."),
        text_turn("About two million."),
        text_turn("Hello."),
    ])
    .await;
    let p = Project::new();
    p.skill(
        "chat.skill.md",
        &agent_skill(
            "chat",
            &fake,
            "  session: { key: \"${args.thread}\" }\n",
            "",
        ),
    );
    let kernel = p.kernel();
    let ask = |thread: &str| {
        let kernel = kernel.clone();
        let args = json!({ "who": "Ada", "thread": thread });
        async move {
            kernel
                .invoke("chat", args, InvokeOptions::default())
                .await
                .unwrap()
        }
    };
    ask("t1").await;
    ask("t1").await;
    ask("t2").await;
    let requests = fake.requests();
    let system = |n: usize| {
        requests[n].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        !system(0).contains("Earlier in this conversation"),
        "{}",
        system(0)
    );
    let second = system(1);
    assert!(second.starts_with("Do the task for Ada."), "{second}");
    assert!(
        second.contains("## Earlier in this conversation"),
        "{second}"
    );
    assert!(second.contains("you answered: Paris."), "{second}");
    assert!(
        !system(2).contains("Earlier in this conversation"),
        "t2 is another conversation"
    );

    let entries = kernel
        .bus()
        .store()
        .session_entries("chat/t1", 10)
        .await
        .unwrap();
    assert_eq!(entries.len(), 2);
    let first: Value = serde_json::from_str(&entries[0].entry).unwrap();
    assert_eq!(first["args"]["thread"], "t1");
    assert_eq!(first["result"], "Paris.");
    let kinds: Vec<&str> = first["agent"]
        .as_array()
        .expect("the agent trace ($agent) is captured")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert!(
        kinds.contains(&"turn-start") && kinds.contains(&"turn-end"),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn session_clear_forgets_the_conversation_it_is_called_in_and_its_own_turn() {
    let p = Project::new();
    p.skill(
        "chat.skill.js",
        "export const frontmatter = { metadata: { session: { key: '${args.thread}' } } };\n\
         export default async (ctx, args) => args.text === '/reset'\n\
           ? ctx.manager.invoke('session-clear', {})\n\
           : ctx.locals.session.history.map((e) => e.args.text);\n",
    );
    let kernel = p.kernel();
    let say = |thread: &str, text: &str| {
        let kernel = kernel.clone();
        let args = json!({ "thread": thread, "text": text });
        async move {
            kernel
                .invoke("chat", args, InvokeOptions::default())
                .await
                .map(|out| out.map(|v| (*v).clone()).unwrap_or(Value::Null))
        }
    };
    say("t1", "a").await.unwrap();
    say("t1", "b").await.unwrap();
    say("t2", "other").await.unwrap();
    assert_eq!(say("t1", "c").await.unwrap(), json!(["a", "b"]));
    assert_eq!(
        say("t1", "/reset").await.unwrap(),
        json!({ "skill": "chat", "cleared": 3 })
    );
    assert_eq!(
        say("t1", "d").await.unwrap(),
        json!([]),
        "nothing before the reset, nor the reset itself"
    );
    assert_eq!(
        say("t2", "more").await.unwrap(),
        json!(["other"]),
        "another conversation keeps its history"
    );
    let err = kernel
        .invoke("session-clear", json!({}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert!(
        err.message().contains("not invoked inside a conversation"),
        "{err}"
    );
}
