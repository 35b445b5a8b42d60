//! Shared test helpers: a throwaway project folder with skill files, kernels over it, native
//! test tools and a trace recorder.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use skillgate::kernel::KernelBuilder;
use skillgate::{Kernel, middleware};

/// A project folder that lives as long as the value.
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

    pub fn builder(&self) -> KernelBuilder {
        skillgate::builtins::builder(self.path())
    }

    pub fn kernel(&self) -> Kernel {
        self.builder().build()
    }
}

/// A list of strings that tools append to, to check what ran and in which order.
#[derive(Clone, Default)]
pub struct Trace(pub Arc<Mutex<Vec<String>>>);

impl Trace {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().push(s.into());
    }

    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// A native tool from YAML frontmatter and an async closure (re-export for brevity).
pub use middleware::native;

/// The result of an invocation as plain JSON (`undefined` as `None`).
pub fn plain(out: Option<Arc<Value>>) -> Option<Value> {
    out.map(|v| (*v).clone())
}
