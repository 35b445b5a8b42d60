//! The project the rules run over: a throwaway folder with the skills they call, and the native
//! tools that report what the gateway filled in, fail, stream or wait.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::contract::Held;
use crate::kernel::KernelBuilder;
use crate::middleware::native;
use crate::{Context, Kernel, SkillError};

/// A project folder (with `skills/`) that lives as long as the value.
#[derive(Debug)]
pub struct Project {
    pub dir: tempfile::TempDir,
}

impl Project {
    pub fn new() -> Project {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("skills")).expect("skills dir");
        Project { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `skills/<rel>` (folders created as needed).
    pub fn skill(&self, rel: &str, text: &str) -> &Project {
        self.write(&format!("skills/{rel}"), text)
    }

    /// Writes any file below the project folder.
    pub fn write(&self, rel: &str, text: &str) -> &Project {
        let path: PathBuf = self.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write skill");
        self
    }

    /// A kernel builder over the project, with every built-in.
    pub fn builder(&self) -> KernelBuilder {
        crate::builtins::builder(self.path())
    }

    pub fn kernel(&self) -> Kernel {
        self.builder().build()
    }
}

impl Default for Project {
    fn default() -> Project {
        Project::new()
    }
}

/// The skills every rule uses. Native tools report what they saw.
pub fn project() -> Project {
    let project = Project::new();
    project
        .skill(
            "hello.skill.md",
            "---\nname: hello\ndescription: Greets.\nmetadata:\n  params:\n    type: object\n    properties:\n      name: { type: string }\n    required: [name]\n---\nHello, :arg[name]!\n",
        )
        .skill(
            "vault.skill.md",
            "---\nname: vault\ndescription: Hidden.\nmetadata:\n  visibility: hidden\n---\nVAULT\n",
        )
        .skill(
            "wrap.skill.md",
            "---\nname: wrap\ndescription: A middleware.\nmetadata:\n  role: middleware\n---\nWRAP\n",
        )
        .skill(
            "tick.skill.md",
            "---\nname: tick\ndescription: Something to schedule.\n---\ntick\n",
        );
    project
}

/// Natives the rules need: `where` (what the gateway filled in), `broken` (fails with an
/// internal detail), `talk` (sends messages, then answers), `held` (waits for a release).
pub fn natives(held: &Held) -> Vec<crate::skills::Tool> {
    let Held { started, release } = held.clone();
    vec![
        native(
            "name: where\ndescription: Reports the gateway's view.\n",
            |ctx: Context, _| async move {
                Ok(Some(json!({
                    "transport": ctx.get("nonlocals.gateway.transport")?,
                    "requestId": ctx.get("nonlocals.request.id")?,
                    "gatewayRequestId": ctx.get("nonlocals.gateway.requestId")?,
                    "root": ctx.root_id(),
                })))
            },
        ),
        native(
            "name: broken\ndescription: Fails.\n",
            |_ctx: Context, _| async move {
                Err(SkillError::failed(
                    "connection to db-internal-7.corp:5432 refused (password=hunter2)",
                ))
            },
        ),
        native(
            "name: talk\ndescription: Sends two messages, then answers.\n",
            |ctx: Context, _| async move {
                for n in 1..=2 {
                    ctx.invoke(
                        "gateway-send",
                        json!({ "message": format!("part {n}") }),
                        Default::default(),
                    )
                    .await?;
                }
                Ok(Some(json!("done")))
            },
        ),
        // Project code that passes the caller's data on to the control plane, as a public skill
        // "remind me" might: what it stores is the caller's, checked against the caller.
        native(
            "name: relay\ndescription: Schedules what the caller asks.\n",
            |ctx: Context, args| async move {
                let mut asked = json!({ "name": "relayed", "ref": args["ref"], "every": "1h" });
                if let Some(stored) = args.get("args") {
                    asked["args"] = stored.clone();
                }
                let out = ctx
                    .invoke("schedule-create", asked, Default::default())
                    .await?;
                Ok(out.map(|v| (*v).clone()))
            },
        ),
        native(
            "name: held\ndescription: Answers once released.\n",
            move |_ctx: Context, _| {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    started.notify_one();
                    release.notified().await;
                    Ok(Some(json!("released")))
                }
            },
        ),
    ]
}
