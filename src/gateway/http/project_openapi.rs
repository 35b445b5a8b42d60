//! `GET /openapi.json`: the project's own OpenAPI document, built for the caller: one
//! `POST /invoke/<skill>` per skill its key may invoke, with the skill's `params` as the request
//! body and its `returns` as the result, so schema-driven tools (`openapi-generator`,
//! schemathesis) make typed clients. The rest of each operation (headers, the event stream,
//! every problem answer) and the components come from the checked-in `openapi.yaml`.

use axum::Json;
use axum::extract::{Extension, State};
use serde_json::{Map, Value, json};

use crate::gateway::http::auth::Caller;
use crate::gateway::http::state::AppState;
use crate::skills::tool::Tool;

/// The project document for a caller that may invoke `tools`.
pub fn document<'a>(tools: impl Iterator<Item = &'a Tool>) -> Value {
    let base = super::openapi::parsed();
    let template = &base["paths"]["/invoke/{skill}"]["post"];
    let mut paths = Map::new();
    for tool in tools {
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
            "description": "The skills this caller may invoke, one operation each. The gateway's own routes are in /openapi.yaml.",
        }),
    );
    if let Some(security) = base.get("security") {
        doc.insert("security".into(), security.clone());
    }
    doc.insert("paths".into(), Value::Object(paths));
    doc.insert("components".into(), base["components"].clone());
    Value::Object(doc)
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
        // The skill is in the path itself; resuming a stream (`Last-Event-ID`, valid only with
        // the `Idempotency-Key` of an earlier streamed request) is for clients that follow
        // `/openapi.yaml`, not for generated ones.
        parameters.retain(|p| {
            p.get("$ref") != Some(&json!("#/components/parameters/skill"))
                && p.get("name") != Some(&json!("Last-Event-ID"))
        });
    }
    let params = tool
        .params()
        .cloned()
        .unwrap_or_else(|| json!({ "type": "object" }));
    op["requestBody"] = json!({
        "required": false,
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
