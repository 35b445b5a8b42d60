//! `session-clear`: forgets the history of the conversation its caller is in (a chat's
//! "/reset"): the nearest caller the `session` middleware serves, with a key. The turn that
//! clears is not recorded either, so the next turn starts afresh.

use serde_json::{Value, json};

use crate::error::{ErrorKind, SkillError};
use crate::events::KernelBus;
use crate::skills::native::native;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    native(
        r#"
name: session-clear
description: Forget the earlier turns of the conversation you are in; the next turn starts afresh.
metadata:
  tags: [session]
  params: { type: object, properties: {} }
"#,
        |ctx, _args| async move {
            let mut at = ctx.parent();
            while let Some(caller) = at {
                let key = caller
                    .get("locals.session.key")?
                    .and_then(|v| v.as_str().map(str::to_string));
                if let Some(key) = key {
                    let skill = caller.tool_name().to_string();
                    let stored_key =
                        crate::session::stored_key(&skill, &caller.authority().principal, &key);
                    let store = caller.kernel().bus().store().clone();
                    let cleared = store.session_clear(&stored_key).await.map_err(|e| {
                        SkillError::internal(format!("the session store failed: {e}"))
                    })?;
                    caller.set("locals.session.history", json!([]))?;
                    caller.set("locals.session.cleared", Value::Bool(true))?;
                    return Ok(Some(json!({ "skill": skill, "cleared": cleared })));
                }
                at = caller.parent();
            }
            // The caller's mistake (nothing to clear), not the server's.
            Err(SkillError::new(
                ErrorKind::InvalidArgs,
                "`session-clear` was not invoked inside a conversation: no caller keeps a session with a key (`metadata.session`)",
            ))
        },
    )
}
