//! `GET /openapi.json`: the project's own OpenAPI document, built for the caller: one
//! `POST /invoke/<skill>` per skill its key may invoke, with the skill's `params` as the request
//! body and its `returns` as the result, so schema-driven tools (`openapi-generator`,
//! schemathesis) make typed clients. The rest of each operation (headers, the event stream,
//! every problem answer) and the components come from the checked-in `openapi.yaml`.

use axum::Json;
use axum::extract::{Extension, State};
use serde_json::{Map, Value, json};

use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;
use crate::skills::tool::Tool;

/// The project document for a caller that may invoke `tools`.
pub fn document<'a>(tools: impl Iterator<Item = &'a Tool>) -> Value {
    let base = super::openapi::parsed();
    let template = &base["paths"]["/invoke/{skill}"]["post"];
    let mut paths = Map::new();
    for tool in tools.filter(|t| !needs_a_conversation(t)) {
        paths.insert(
            format!("/invoke/{}", tool.name),
            json!({ "post": operation(template, tool) }),
        );
    }
    let mut doc = Map::new();
    doc.insert("openapi".into(), base["openapi"].clone());
    doc.insert(
        "info".into(),
        json!({
            "title": "skillgate project",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The skills this caller may invoke, one operation each. The gateway's own routes, and the `Idempotency-Key` and `Last-Event-ID` headers every invoke also takes, are in /openapi.yaml.",
        }),
    );
    if let Some(security) = base.get("security") {
        doc.insert("security".into(), security.clone());
    }
    doc.insert("paths".into(), Value::Object(paths));
    doc.insert("components".into(), base["components"].clone());
    Value::Object(doc)
}

/// The built-ins a skill calls from inside a door's conversation, which have no operation of
/// their own: `gateway-receive` waits for the WebSocket client's next message and
/// `session-clear` forgets the caller's session (a plain `POST /invoke` has neither, so they
/// could only answer 422 saying so); `web-send` writes the raw HTTP response of a web route
/// (any status, headers and body: no shape a document could promise).
const IN_CONVERSATION_ONLY: [&str; 3] = ["gateway-receive", "session-clear", "web-send"];

fn needs_a_conversation(tool: &Tool) -> bool {
    matches!(tool.source, crate::skills::tool::Source::Native)
        && IN_CONVERSATION_ONLY.contains(&tool.name.as_str())
}

/// `/invoke/{skill}`'s operation for `tool`: its name as the operation id, its params as the
/// body, its returns as the result.
fn operation(template: &Value, tool: &Tool) -> Value {
    let mut op = template.clone();
    op["operationId"] = json!(tool.name);
    op["summary"] = json!(if tool.description.is_empty() {
        format!("Invoke `{}`.", tool.name)
    } else {
        tool.description.clone()
    });
    if let Some(Value::Array(parameters)) = op.get_mut("parameters") {
        // The skill is in the path itself. `Idempotency-Key` (and resuming a stream with
        // `Last-Event-ID`, valid only with the key of an earlier streamed request) are for
        // clients that follow `/openapi.yaml`: a key's answer depends on the requests sent
        // before it (the same key with another body is refused), which a document of each
        // skill's args cannot say, so generated clients and schema-driven tests leave it out.
        parameters.retain(|p| {
            p.get("$ref") != Some(&json!("#/components/parameters/skill"))
                && !matches!(
                    p.get("name").and_then(Value::as_str),
                    Some("Last-Event-ID" | "Idempotency-Key")
                )
        });
    }
    let params = tool
        .params()
        .cloned()
        .unwrap_or_else(|| json!({ "type": "object" }));
    // A skill with required params cannot be invoked without a body.
    let needs_body = params
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    op["requestBody"] = json!({
        "required": needs_body,
        "content": { "application/json": { "schema": params } },
    });
    let returns = tool
        .metadata
        .get("returns")
        .filter(|r| !r.is_null())
        .cloned()
        .unwrap_or_else(
            || json!({ "description": "The skill's result; null when it returned nothing." }),
        );
    op["responses"]["200"]["content"]["application/json"]["schema"] = json!({
        "type": "object",
        "required": ["result"],
        "properties": {
            "result": returns,
            "messages": { "$ref": "#/components/schemas/InvokeResult/properties/messages" },
        },
    });
    op
}

/// `GET /openapi.json`, under the same keys as `/skills`: what this caller may invoke.
pub async fn serve(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Json<Value> {
    let caller = caller.map(|Extension(caller)| caller);
    let scope = Caller::scope(caller.as_ref());
    let admin = Caller::principal(caller.as_ref()).admin();
    let index = state.gateway.kernel.registry().current();
    let tools = state.policy.listing(&index, scope, admin);
    Json(document(tools.into_iter().map(|t| t.as_ref())))
}
