//! Sandbox sessions: one QuickJS runtime kept across calls (the agent's turns), with a `memory`
//! global seeded from a JSON object (`Object.assign`) that holds any JavaScript value between
//! calls. Limits are applied per call; a session runs one call at a time.
//!
//! Work a call leaves running (promises it did not await) goes on during the next calls. A call
//! stopped by a limit or an abort is different: its code was cut midway, so the work it queued is
//! run out under the stopped meter; if some is still queued after that (an endless chain of
//! microtasks, a bridge call in flight), the session's sandbox is reset and `memory` starts again
//! from its seed, which the error says.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::Mutex;

use crate::error::{Result, SkillError};
use crate::sandbox::engine::{Call, Engine};

/// A sandbox that outlives one call. Cheap to clone (clones share the sandbox).
#[derive(Clone)]
pub struct Session(Arc<Inner>);

struct Inner {
    seed: Map<String, Value>,
    /// Created by the first call.
    engine: Mutex<Option<Engine>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("seed", &self.0.seed)
            .finish_non_exhaustive()
    }
}

impl Default for Session {
    fn default() -> Self {
        Session::new(Map::new())
    }
}

impl Session {
    /// A session whose `memory` global starts as a copy of `memory`.
    pub fn new(memory: Map<String, Value>) -> Session {
        Session(Arc::new(Inner {
            seed: memory,
            engine: Mutex::new(None),
        }))
    }

    /// A session seeded from a JSON value: an object, or null for an empty `memory`.
    pub fn seeded(memory: &Value) -> Result<Session> {
        match memory {
            Value::Null => Ok(Session::default()),
            Value::Object(map) => Ok(Session::new(map.clone())),
            other => Err(SkillError::failed(format!(
                "a sandbox session's memory must be an object, got {other}"
            ))),
        }
    }

    /// Runs one call in this session's sandbox. A call made while another one runs (such as
    /// code that reaches its own session again through a tool) is refused, not queued, since
    /// waiting for itself would never end.
    pub(crate) async fn run(&self, call: Call) -> Result<Option<Value>> {
        let mut engine = self.0.engine.try_lock().map_err(|_| {
            SkillError::failed(
                "this sandbox session is already running a call; a session runs one call at a time",
            )
        })?;
        let ran = match engine.as_ref() {
            Some(e) => e.run(call).await,
            None => {
                let fresh = Engine::new(Some(&self.0.seed)).await?;
                engine.insert(fresh).run(call).await
            }
        };
        if !ran.stopped {
            return ran.result;
        }
        // Code stopped midway may have left work queued that would run on in the next call.
        let clean = match engine.as_ref() {
            Some(e) => e.drain().await,
            None => true,
        };
        if clean {
            return ran.result;
        }
        *engine = None;
        ran.result.map_err(|e| {
            let reset = SkillError::new(
                e.kind(),
                format!(
                    "{}; the session's sandbox was reset (the stopped code had work queued), so `memory` starts again from its seed",
                    e.message()
                ),
            );
            match e.data() {
                Some(data) => reset.with_data(data.clone()),
                None => reset,
            }
        })
    }
}
